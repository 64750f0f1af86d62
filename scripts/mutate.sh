#!/usr/bin/env bash
# Mutation testing by a fixed catalogue: does the quick tier catch realistic bugs in emulator/design/,
# tiers/fileops.py, tiers/safepath.py and emulator/results/? (docs/testing.md)
#   bash scripts/mutate.sh [--list] [--jobs N] [--baseline] [ID ...]
# Prints each mutation killed or survived, the survivors and the score; exit 1 if one survived.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 tests/support/mutate.py "$@"

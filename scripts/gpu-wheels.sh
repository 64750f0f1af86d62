#!/bin/sh
# Wheels for a GPU machine that has no package index (issue 16; docs/performance.md, "State on a GPU").
#
# That machine has torch with CUDA, numpy, pyyaml, rich, matplotlib, aiofiles, pytest and
# hypothesis; it lacks boto3 (botocore, s3transfer, jmespath and their dependencies),
# prometheus-client and crc32c. This downloads CPython 3.12 manylinux x86_64 wheels of those,
# pinned by constraints.txt, into an ignored folder (default: wheels/) to carry along. There:
#
#   pip install --no-index --find-links wheels boto3 prometheus-client crc32c pytest-timeout
#   PYTHONPATH=$PWD python3 -m pytest -q -m gpu        # or: pip install --no-deps -e .
#   PYTHONPATH=$PWD python3 -m bench.gpu
#
# --tests also fetches what the S3 tests need (moto, flask, flask-cors and their dependencies).
# DEST is made (mode 0755) or must be a folder of yours that nobody else may write: pip writes the
# wheels there by name (scripts/private-folder.sh; docs/security.md).
set -eu
cd "$(dirname "$0")/.."
. scripts/private-folder.sh
dest=wheels
extra=""
for arg in "$@"; do
    case "$arg" in
        --tests) extra="moto[s3,server] flask flask-cors" ;;
        -*) echo "usage: scripts/gpu-wheels.sh [--tests] [DEST]" >&2; exit 2 ;;
        *) dest=$arg ;;
    esac
done
dest=$(own_folder "$dest") || exit 1  # it said why, in one line
# shellcheck disable=SC2086  # $extra is a list of requirements
python3 -m pip download --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    --platform any -c constraints.txt -d "$dest" \
    boto3 botocore s3transfer jmespath prometheus-client crc32c pytest-timeout $extra
echo "wheels in $dest/: $(ls "$dest" | wc -l) files"

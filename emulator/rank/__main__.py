"""``python -m emulator.rank``: the rank process torchrun starts (emulator/rank/run.py)."""
import sys

from emulator.rank.run import main

sys.exit(main())

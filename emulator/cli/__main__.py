"""``python -m emulator.cli``: the same as ``ckpt-emu``."""
import sys

from emulator.cli import main

sys.exit(main())

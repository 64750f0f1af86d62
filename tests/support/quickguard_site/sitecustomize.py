"""On the PYTHONPATH of the processes a quick test starts (quickguard.py): they may not start
torchrun, a run or a server either."""
import os
import sys

if os.environ.get("CKPT_EMU_TEST_QUICK_GUARD"):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import quickguard
    quickguard.install_in_child()
    del sys.path[0]

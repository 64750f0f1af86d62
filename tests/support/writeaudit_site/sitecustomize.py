"""On the PYTHONPATH of the processes a test audits (writeaudit.py ``child_env``): each stray write
under the audited folders is a line in the log the environment names."""
import os
import sys

if os.environ.get("CKPT_EMU_WRITE_AUDIT"):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import writeaudit
    writeaudit.install_in_child()
    del sys.path[0]

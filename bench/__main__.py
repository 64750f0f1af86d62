"""``python -m bench``: see bench/suite.py."""
import sys

from .suite import main

sys.exit(main())

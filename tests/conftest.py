import sys
from pathlib import Path

# tests import the contract suite and helpers as plain modules
sys.path.insert(0, str(Path(__file__).parent))

"""The rung kinds of the tier ladder, one module each (registered in emulator/design/ladder.py)."""

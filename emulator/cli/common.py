"""What the subcommands share: the config arguments and loading the config they name."""
from __future__ import annotations

import argparse
import math

from emulator.errors import UserError, shown


class Parser(argparse.ArgumentParser):
    """argparse's own errors as one UserError line (exit 2), like every other bad input."""

    def error(self, message):
        raise UserError(message)


def number(text: str) -> float:
    """An argparse type: a finite number (``nan`` and ``inf`` are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {shown(text)}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {shown(text)}")
    return value


def add_config_args(p) -> None:
    """The config, ``--set`` and ``--scale``: every subcommand that reads a config takes them."""
    p.add_argument("config", nargs="?", default=None,
                   help="preset name (e.g. llama3-8b-subset) or YAML file; default: the embedded default")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override any config key")
    p.add_argument("--scale", type=number, help="shrink every tensor by this factor (0 < F <= 1)")


#: flag -> config key it overrides, for the flags that are shortcuts for ``--set``
_SHORTCUTS = (("scale", "run.scale"), ("out", "run.out"), ("metrics_port", "metrics.port"),
              ("metrics_addr", "metrics.addr"), ("phase", "checkpoint.phase"),
              ("lose_local_after", "failures.lose_local_after"))


def load(args):
    """The validated config named by ``args``, with ``--set`` and the shortcut flags applied."""
    from emulator.config import \
        load_config  # yaml and the tier registry, only for commands that need a config
    overrides = list(args.set or [])
    for flag, key in _SHORTCUTS:
        value = getattr(args, flag, None)
        if value is not None and value != "":
            overrides.append(f"{key}={value}")
    return load_config(args.config, overrides)

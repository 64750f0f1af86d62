"""What the subcommands share: the parser (one-line errors, examples at the end of --help), the
config arguments and loading the config they name."""
from __future__ import annotations

import argparse
import math
import sys

from emulator.errors import EXIT_MISSED, EXIT_OK, UserError, shown


class Parser(argparse.ArgumentParser):
    """argparse's own errors as one UserError line (exit 2), like every other bad input, naming
    the help to read; ``examples`` (command lines) close the command's --help."""

    def __init__(self, *args, examples: tuple[str, ...] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.examples = tuple(examples)

    def error(self, message):
        raise UserError(f"{message} (see {self.prog} --help)")

    def format_help(self) -> str:
        text = super().format_help()
        if not self.examples:
            return text
        return text + ("\nexample:\n" if len(self.examples) == 1 else "\nexamples:\n") + \
            "".join(f"  {line}\n" for line in self.examples)


def config_completer(prefix: str, **_) -> list[str]:
    """Shell completion of a CONFIG argument: the presets, then YAML files and folders."""
    from argcomplete.completers import FilesCompleter

    from emulator.config import preset_names
    return [p for p in preset_names() if p.startswith(prefix)] + \
        list(FilesCompleter(allowednames=("yaml", "yml"))(prefix))


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
                   help="preset name (e.g. llama3-8b-subset) or YAML file; default: the embedded default"
                   ).completer = config_completer
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override any config key")
    p.add_argument("--scale", type=number, help="shrink every tensor by this factor (0 < F <= 1)")


#: flag -> config key it overrides, for the flags that are shortcuts for ``--set``
_SHORTCUTS = (("scale", "run.scale"), ("out", "run.out"), ("metrics_port", "metrics.port"),
              ("metrics_addr", "metrics.addr"), ("phase", "checkpoint.phase"),
              ("lose_local_after", "failures.lose_local_after"), ("fail_on_miss", "run.fail_on_miss"),
              ("keep_tiers", "run.keep_tiers"))


def add_fail_on_miss(p) -> None:
    p.add_argument("--fail-on-miss", action="store_const", const="true",
                   help="exit 1 when the design missed its goals (run.fail_on_miss; exit statuses: README)")


def report_misses(missed: list[str], gate: bool) -> int:
    """Say what the design missed (stderr) and return the exit status: 1 under the gate, else 0."""
    if not missed:
        return EXIT_OK
    tail = "" if gate else " (exit status 0; --fail-on-miss makes it 1)"
    print(f"ckpt-emu: the design missed its goals: {'; '.join(missed)}{tail}", file=sys.stderr)
    return EXIT_MISSED if gate else EXIT_OK


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

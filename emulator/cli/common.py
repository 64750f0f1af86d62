"""What the subcommands share: the parser (one-line errors, examples at the end of --help), the
config arguments and loading the config they name."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

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


#: shortcut flags whose value is text (a path, an address): passed as a YAML string, so ``--out 'a: b'``
#: is that folder, not a mapping
_TEXT_FLAGS = ("out", "metrics_addr")


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
        if value is None:
            continue
        if flag in _TEXT_FLAGS:  # a path or an address as given (a quoted YAML string), never parsed as YAML
            value = json.dumps(str(value))
        overrides.append(f"{key}={value}")  # an empty --out is refused by the key's own check, never dropped
    return load_config(args.config, overrides)


def check_output_path(path, flag: str, *, folder: bool) -> Path:
    """An output the user named (``folder``: a folder the command writes its files in, else one file):
    a path with no control character and no name too long, whose folders are safe to reach and
    writable (tiers.safepath), checked before any work and without making anything. The folder of a
    file may be shared (root's, sticky): the file is renamed into it, never opened there by name."""
    from tiers.base import TierError
    from tiers.safepath import check_reach, path_problem
    text = str(path)
    where = f"{flag} {shown(text, 200, quote=False)}"
    problem = path_problem(text)
    if problem is not None:
        raise UserError(f"{where}: {problem}")
    target = Path(os.path.abspath(os.path.expanduser(text)))
    try:
        there, missing = check_reach(target if folder else target.parent, what=where, owned=folder)
    except NotADirectoryError as exc:
        raise UserError(f"{where}: cannot write: {exc.filename} is not a directory") from None
    except TierError as exc:
        raise UserError(str(exc)) from None
    if not folder and (there / target.name).is_dir() and not missing:
        raise UserError(f"{where}: is a folder; give the file's name")
    if not os.access(there, os.W_OK | os.X_OK):
        raise UserError(f"{where}: cannot write: {there} is not writable")
    return target

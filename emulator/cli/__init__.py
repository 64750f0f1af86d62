# PYTHON_ARGCOMPLETE_OK  (argcomplete's global completion looks for this line)
"""``ckpt-emu``: the command line, one module per subcommand.

Every failure the user can cause ends as one line ``ckpt-emu: error: ...``
and exit status 2; nothing is written before the config and the tiers have
been checked. The other exit statuses (a design that missed its goals, a run
that could not finish) are listed in emulator/errors.py. Nothing imports this package: it is the top of the layering
(docs/architecture.md). Each subcommand imports its heavy stack (torch, the
run's launcher) only when it runs, so ``sizes`` and ``plan`` start fast.

- ``run``      one emulated run, or a soak (run.py)
- ``sizes``    checkpoint sizes of a preset (sizes.py)
- ``plan``     intervals from the failure model (plan.py)
- ``simulate`` the whole cluster by discrete-event simulation (simulate.py)
- ``tune``     measure, plan, confirm (tune.py)
- ``compare``  runs side by side, ours and DLIO's (compare.py)
"""
from __future__ import annotations

import os
import sys
import traceback
from importlib import metadata

from emulator.cli.common import Parser
from emulator.cli.compare import add_compare_parser
from emulator.cli.plan import add_plan_parser
from emulator.cli.run import add_run_parser
from emulator.cli.simulate import add_simulate_parser
from emulator.cli.sizes import add_sizes_parser
from emulator.cli.tune import add_tune_parser
from emulator.errors import EXIT_FAILED, EXIT_INTERRUPTED, UserError, one_line

__all__ = ["build_parser", "main"]


def _version() -> str:
    try:
        return metadata.version("ckpt-emu")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def build_parser() -> Parser:
    ap = Parser(prog="ckpt-emu", description="Tiered checkpoint emulator for LLM training storage.",
                examples=("ckpt-emu run  # the embedded default: one node's NVMe and PFS share, about a minute",
                          "ckpt-emu run --help"))
    ap.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = ap.add_subparsers(dest="command", title="commands", metavar="COMMAND", parser_class=Parser)
    for add in (add_run_parser, add_sizes_parser, add_compare_parser, add_plan_parser, add_simulate_parser,
                add_tune_parser):
        add(sub)
    return ap


def _command_parser(parser: Parser, command: str | None) -> Parser:
    if command is None:
        return parser
    return next(a for a in parser._actions if a.dest == "command").choices[command]


def main(argv=None) -> int:
    try:
        parser = build_parser()
        if "_ARGCOMPLETE" in os.environ:  # the shell's tab key (docs: README, shell completion)
            import argcomplete
            argcomplete.autocomplete(parser)
        args, extra = parser.parse_known_args(argv)
        if extra:  # named by the command's parser, so the error says which --help to read
            _command_parser(parser, args.command).error(f"unrecognized arguments: {' '.join(extra)}")
        if args.command is None:  # no command: what there is to run
            parser.print_help(sys.stderr)
            return 2
        return args.func(args)
    except UserError as exc:
        print(f"ckpt-emu: error: {one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("ckpt-emu: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `ckpt-emu sizes ... | head`: the reader left, nothing to report
        sys.stderr.close()
        return 0
    except Exception:  # noqa: BLE001 - a bug: its traceback, and "failed to run" rather than Python's 1
        traceback.print_exc()
        print("ckpt-emu: error: internal error (the traceback above); please report it", file=sys.stderr)
        return EXIT_FAILED

"""``ckpt-emu``: the command line, one module per subcommand.

Every failure the user can cause ends as one line ``ckpt-emu: error: ...``
and exit status 2; nothing is written before the config and the tiers have
been checked. Nothing imports this package: it is the top of the layering
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

import sys

from emulator.cli.common import Parser
from emulator.cli.compare import add_compare_parser
from emulator.cli.plan import add_plan_parser
from emulator.cli.run import add_run_parser
from emulator.cli.simulate import add_simulate_parser
from emulator.cli.sizes import add_sizes_parser
from emulator.cli.tune import add_tune_parser
from emulator.errors import UserError, one_line

__all__ = ["build_parser", "main"]


def build_parser() -> Parser:
    ap = Parser(prog="ckpt-emu", description="Tiered checkpoint emulator for LLM training storage.")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=Parser)
    for add in (add_run_parser, add_sizes_parser, add_compare_parser, add_plan_parser, add_simulate_parser,
                add_tune_parser):
        add(sub)
    return ap


def main(argv=None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except UserError as exc:
        print(f"ckpt-emu: error: {one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("ckpt-emu: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `ckpt-emu sizes ... | head`: the reader left, nothing to report
        sys.stderr.close()
        return 0

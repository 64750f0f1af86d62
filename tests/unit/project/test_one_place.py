"""One place each, checked on the source (AST and the import graph), beside
tests/unit/design/test_one_model.py (link limits and the failure model):

- ladder: outside emulator/design/ladder.py and its rung kinds (emulator/design/rungs/), no module
  lists tier names (a tuple, list or set of two or more of the rung kinds' names): every module asks
  the ladder which tiers hold files, survive a class or come first, so a new rung kind is one module
  plus one registry line. The config's own keys are its dataclass fields, in the ladder's order.
- a node's rate: outside emulator/design/, no module takes the slowest of two or more rates (a drain
  capped by its source's read: emulator/design/links.py decides; tiers/ only paces what it is given).
- a recovery: outside emulator/design/, no module adds a failure class's detection and restart or
  reads their sum (emulator/design/costs.py ``recovery_seconds``), and none branches on a failure
  class by name (which tiers a class reads: ``Design.restore_order``, ``Design.survives``).
- a checkpoint's bytes: outside emulator/design/ and emulator/sizing.py, no module sums a node's
  bytes (``node_bytes``: emulator/design/job.py lays out every node of the job).
- the run reads the design: the rank's side (emulator/rank/, checkpoint/, job/, workload/) never resolves a
  design or a tier's pacing itself (it reads design.json, emulator/design/codec.py) and never reads
  the config for pacing or the schedule (rates, step time, intervals, retention, dilation: the
  design's, and the clock's, emulator/job/clock.py).

Each exception is named in an allow-list with its reason; an entry that no longer matches fails,
so the lists only shrink.
"""
from __future__ import annotations

import ast
import functools
from dataclasses import fields

from paths import ROOT

from emulator.config import TiersConfig
from emulator.design import ladder

LADDER_HOME = ("emulator/design/ladder.py", "emulator/design/rungs/")
SOMEWHERE = "emulator/" + "results/made_up.py"  # spelt apart: no such module (tests/unit/project/test_links.py)

#: (path, the names it lists) -> why it may
TIER_LISTS_ALLOWED = {
    ("emulator/config/failures.py", ("local", "global")):
        "config/ is below the design (the layering rule): failures.corrupt.tier is checked when the "
        "YAML is read, before any design exists",
    ("emulator/metrics.py", ("memory", "peer", "local", "global")):
        "the kernel is below the design: Prometheus label values are a closed set, held equal to the "
        "ladder's kinds by tests/unit/metrics/test_metrics_tiers.py",
}


@functools.cache
def _parsed() -> tuple:
    """(path, tree) of every module of emulator/ and tiers/, parsed once for every check."""
    return tuple((str(p.relative_to(ROOT)), ast.parse(p.read_text()))
                 for d in ("emulator", "tiers") for p in sorted((ROOT / d).rglob("*.py")))


def _modules(tops=("emulator", "tiers")):
    return [(p, tree) for p, tree in _parsed() if p.startswith(tuple(f"{t}/" for t in tops))]


def tier_lists(modules) -> list:
    """(path, line, names) of every literal tuple, list or set of two or more rung kinds' names."""
    rungs = set(ladder.names())
    found = []
    for path, tree in modules:
        if path.startswith(LADDER_HOME):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Tuple, ast.List, ast.Set)) or len(node.elts) < 2:
                continue
            values = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            if len(values) == len(node.elts) and set(values) <= rungs:
                found.append((path, node.lineno, tuple(values)))
    return found


def test_no_module_lists_tier_names_but_the_ladder():
    found = tier_lists(_modules())
    wrong = [f"{p}:{line} lists {names}" for p, line, names in found if (p, names) not in TIER_LISTS_ALLOWED]
    assert wrong == [], "ask emulator/design/ladder.py instead"
    stale = set(TIER_LISTS_ALLOWED) - {(p, names) for p, _, names in found}
    assert not stale, f"allowed but no longer there (remove the entry): {stale}"


def _allowed(found: list, allowed: dict) -> tuple[list, set]:
    """(what is found and not allowed, allowed entries no longer found)."""
    keys = {(p, what) for p, _, what in found}
    return ([f"{p}:{line} {what}" for p, line, what in found if (p, what) not in allowed], set(allowed) - keys)


def _call_name(node) -> str | None:
    if isinstance(node, ast.Call):
        f = node.func
        return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    return None


# --------------------------------------------------------------------------- a node's rate

def _is_rate(node) -> bool:
    """An operand that is a rate: ``x.rate(...)``, ``x.rate``, ``*_bps``, ``*_gib_s``."""
    if isinstance(node, ast.Call):
        return _call_name(node) == "rate"
    if isinstance(node, ast.Attribute):
        return node.attr in ("rate", "rate_bps") or node.attr.endswith(("_bps", "_gib_s"))
    if isinstance(node, ast.Name):
        return node.id.endswith(("_bps", "_gib_s"))
    return False


def rate_choices(modules) -> list:
    """(path, line, "takes the slowest of rates") of every min() over two or more rates outside design/."""
    found = []
    for path, tree in modules:
        if path.startswith(("emulator/design/", "tiers/")):
            continue
        for node in ast.walk(tree):
            if _call_name(node) == "min" and isinstance(node.func, ast.Name):
                rates = [n for n in ast.walk(node) if n is not node and _is_rate(n)
                         and not (isinstance(n, ast.Attribute) and _call_name_of_parent(node, n) == "rate")]
                if len(rates) >= 2:
                    found.append((path, node.lineno, "takes the slowest of rates"))
    return found


def _call_name_of_parent(root, target) -> str | None:
    """The name of the call whose function is ``target`` (``x.rate`` of ``x.rate(...)``), if any."""
    for n in ast.walk(root):
        if isinstance(n, ast.Call) and n.func is target:
            return _call_name(n)
    return None


#: (path, what) -> why it may
RATES_ALLOWED: dict = {}


def test_only_the_design_takes_the_slowest_of_a_nodes_links():
    wrong, stale = _allowed(rate_choices(_modules(("emulator",))), RATES_ALLOWED)
    assert wrong == [], "ask emulator/design/links.py"
    assert not stale, f"allowed but no longer there (remove the entry): {stale}"


# --------------------------------------------------------------------------- a recovery

CLASSES = {"process", "node", "group"}
RECOVERY_PARTS = {"detect_s", "restart_s"}


def recoveries(modules) -> list:
    """(path, line, what) of a recovery's cost or a class's tiers decided outside design/."""
    found = []
    for path, tree in modules:
        if path.startswith("emulator/design/"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "before_restore_s":
                found.append((path, node.lineno, "reads a class's detection + restart"))
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
                parts = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)} & RECOVERY_PARTS
                if parts == RECOVERY_PARTS:
                    found.append((path, node.lineno, "adds a class's detection and restart"))
            elif isinstance(node, ast.Compare):
                names = [n.value for n in (node.left, *node.comparators) if isinstance(n, ast.Constant)]
                if set(names) & CLASSES:
                    found.append((path, node.lineno, "branches on a failure class by name"))
    return sorted(set(found))


RECOVERIES_ALLOWED = {
    ("emulator/results/levels.py", "branches on a failure class by name"):
        "the report's wording: a group loss's fetch found no peer copy",
    ("emulator/simulation/model.py", "reads a class's detection + restart"):
        "model side (h53m, issue 53): simulate's _fail owes the class's detection and restart itself, "
        "beside costs.class_restore_seconds, instead of costs.recovery_seconds",
    ("emulator/simulation/output.py", "reads a class's detection + restart"):
        "model side (h53m, issue 53): simulate's description adds the restore to the detection and "
        "restart itself instead of costs.recovery_seconds",
    ("emulator/planner/planning.py", "adds a class's detection and restart"):
        "model side (h53m, issue 53): the plan's ClassCost.recovery_s sums the parts itself instead of "
        "costs.recovery_seconds",
}


def test_only_the_design_decides_a_recovery():
    wrong, stale = _allowed(recoveries(_modules(("emulator",))), RECOVERIES_ALLOWED)
    assert wrong == [], "ask emulator/design (costs.recovery_seconds, Design.restore_order)"
    assert not stale, f"allowed but no longer there (remove the entry): {stale}"


# --------------------------------------------------------------------------- a checkpoint's bytes

def byte_sums(modules) -> list:
    found = []
    for path, tree in modules:
        if path.startswith("emulator/design/") or path == "emulator/sizing.py":
            continue
        for node in ast.walk(tree):
            f = node.func if isinstance(node, ast.Call) else None
            if (isinstance(f, ast.Name) and f.id == "node_bytes") or (
                    isinstance(f, ast.Attribute) and f.attr == "node_bytes" and getattr(f.value, "id", None) == "sizing"):
                found.append((path, node.lineno, "sums a node's checkpoint bytes"))
    return found


BYTES_ALLOWED = {
    ("emulator/cli/sizes.py", "sums a node's checkpoint bytes"):
        "model side (h53m, issue 53): `sizes` lays out its nodes itself, not through the design's job "
        "(reproduction 1: --nodes drops shard_group and writers)",
}


def test_only_the_design_lays_out_a_nodes_bytes():
    wrong, stale = _allowed(byte_sums(_modules(("emulator",))), BYTES_ALLOWED)
    assert wrong == [], "read the design's job (emulator/design/job.py)"
    assert not stale, f"allowed but no longer there (remove the entry): {stale}"


# --------------------------------------------------------------------------- the run reads the design

RANK_SIDE = ("emulator/rank/", "emulator/checkpoint/", "emulator/job/", "emulator/workload/")
#: what resolves a design or a tier's pacing: the launcher's, once (emulator/launch/runner.py)
RESOLVERS = {"resolve", "run_emulation", "run_peer_link", "tier_emulation", "run_peer_bps", "pacing", "paced_part",
             "node_links", "run_links", "job_of", "ladder_of", "emulation_of"}
#: the config's pacing and schedule: the design's (and the clock's) on the rank's side
PACING = ("run.dilation", "time_factor", "wall_step_seconds", "training.step_seconds", "checkpoint.interval_steps",
          "tier_every", "design", "drain.concurrency", "drain.verify", "checkpoint.async_waits_for",
          "checkpoint.keep", "tiers.memory.emulate", "tiers.local.emulate", "tiers.global_.emulate",
          "tiers.memory.keep", "tiers.local.keep", "tiers.global_.keep", "tiers.peer.keep",
          "tiers.memory.interval_steps", "tiers.local.interval_steps", "tiers.global_.interval_steps",
          "tiers.peer.interval_steps")


def _chain(node) -> tuple[str, str] | None:
    """(root, dotted rest) of an attribute chain on ``cfg`` or ``self.cfg`` (``cfg.run.dilation``)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    parts.reverse()
    if isinstance(node, ast.Name) and node.id == "cfg":
        return "cfg", ".".join(parts)
    if isinstance(node, ast.Name) and node.id == "self" and parts[:1] == ["cfg"]:
        return "cfg", ".".join(parts[1:])
    return None


def rank_reads(modules) -> list:
    found = []
    for path, tree in modules:
        if not path.startswith(RANK_SIDE):
            continue
        for node in ast.walk(tree):
            if _call_name(node) in RESOLVERS:
                found.append((path, node.lineno, f"calls {_call_name(node)}"))
            if isinstance(node, ast.Attribute):
                chain = _chain(node)
                if chain and any(chain[1] == p or chain[1].startswith(p + ".") for p in PACING):
                    if not isinstance(getattr(node, "_parent", None), ast.Attribute):
                        found.append((path, node.lineno, f"reads cfg.{chain[1]}"))
    return found


RANK_READS_ALLOWED = {
    ("emulator/rank/dilation.py", "reads cfg.run.dilation.auto"):
        "whether the ranks probe for a dilation is the clock's choice, made where the clock is",
}


def _parented(modules):
    for path, tree in modules:
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                child._parent = node
        yield path, tree


def test_the_ranks_read_the_design_not_the_config_for_pacing():
    wrong, stale = _allowed(rank_reads(_parented(_modules(("emulator",)))), RANK_READS_ALLOWED)
    assert wrong == [], "the rank's side reads the run's design (design.json) and its clock"
    assert not stale, f"allowed but no longer there (remove the entry): {stale}"


def test_the_configs_tiers_are_the_ladders_rung_kinds_in_its_order():
    assert tuple(f.name.rstrip("_") for f in fields(TiersConfig)) == ladder.names()


def test_the_checks_find_what_they_look_for():
    """Each rule catches the code issue 53 removed: the drain's own floor, the rank's own recovery
    tiers and pacing, a layout of a node's bytes beside the design's."""
    shapes = {
        "drain": "def floor(d, s, n):\n    return n / min(r for r in (d.rate('write'), s.rate('read')) if r)\n",
        "recovery": ("def tiers(failure_class, own, lone):\n    if failure_class != 'node':\n        return own\n"
                     "    return own + [lone]\n"
                     "def cost(c, restore):\n    return c.detect_s + c.restart_s + restore\n"),
        "bytes": "def sizes(m, p):\n    return node_bytes(m, p, 8)\n",
        "rank": ("class R:\n    def pace(self):\n        e = run_emulation(self.cfg, 'global')\n"
                 "        return e, self.cfg.wall_step_seconds, self.cfg.run.dilation.factor\n"),
    }
    where = "emulator/" + "rank/made_up.py"  # spelt apart: no such module (tests/unit/project/test_links.py)
    modules = {k: [(where, ast.parse(src))] for k, src in shapes.items()}
    assert [w for _, _, w in rate_choices(modules["drain"])] == ["takes the slowest of rates"]
    assert [w for _, _, w in recoveries(modules["recovery"])] == \
        ["branches on a failure class by name", "adds a class's detection and restart"]
    assert [w for _, _, w in byte_sums(modules["bytes"])] == ["sums a node's checkpoint bytes"]
    assert [w for _, _, w in rank_reads(_parented(modules["rank"]))] == \
        ["calls run_emulation", "reads cfg.wall_step_seconds", "reads cfg.run.dilation.factor"]


def test_the_tier_list_check_finds_what_it_looks_for():
    src = ('ORDER = ("memory", "peer", "local", "global")\n'
           'def f(t):\n    return t in ["local", "global"]\n'
           'OK = ("memory", "nic", "snapshot")\nSINGLE = ("global",)\n')
    assert [n for _, _, n in tier_lists([(SOMEWHERE, ast.parse(src))])] == \
        [("memory", "peer", "local", "global"), ("local", "global")]
    assert tier_lists([("emulator/design/ladder.py", ast.parse(src))]) == []

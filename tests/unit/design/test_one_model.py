"""One model of the design: only emulator/design/links.py decides a node's rate, only
emulator/design/failures.py holds the failure model (issue 32), checked on the source (AST).

Rates: outside emulator/design/ no module builds link limits (``LinkLimits``, ``TierLinks``,
``NodeLinks``: every rate an engine uses is a link the design resolved); outside links.py no module
defines a share function (``node_share``, ``node_rate``, ``fair_finish``, ``fair_share``) or does
arithmetic on a shared link's aggregate (dividing it among nodes is links.py's rule; the simulator
applies it through ``LinkLimits.node_rate``).

Failures: outside failures.py no module builds the model's types (``FailureModel``,
``FailureClass``; the design package resolves it with ``failure_model``), states a default of the
model (a module constant on MTTF, loss fractions, restart, recovery or detection), or keeps a table
keyed by the failure classes (their shares, recoveries, what survives them).

"""
from __future__ import annotations

import ast
import re
from paths import ROOT

LINK_TYPES = {"LinkLimits", "TierLinks", "NodeLinks"}
SHARE_FUNCTIONS = {"node_share", "node_rate", "fair_finish", "fair_share"}
FAILURE_TYPES = {"FailureModel", "FailureClass", "failure_model"}
CLASSES = {"process", "node", "group"}
DEFAULT_NAME = re.compile(r"MTTF|LOSS_FRACTION|RESTART|RECOVERY|DETECT")
LEGACY_PLANNERS: dict = {}


def _modules():
    for d in ("emulator", "tiers"):
        for p in sorted((ROOT / d).rglob("*.py")):
            yield str(p.relative_to(ROOT)), ast.parse(p.read_text())


def _called(node) -> str | None:
    if isinstance(node, ast.Call):
        f = node.func
        return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    return None


def _mentions_aggregate(node) -> bool:
    """Whether an arithmetic operand is (or is computed from) a link's aggregate."""
    if isinstance(node, ast.Attribute):
        return "aggregate" in node.attr
    if isinstance(node, ast.Name):
        return "aggregate" in node.id
    if isinstance(node, ast.BinOp):
        return _mentions_aggregate(node.left) or _mentions_aggregate(node.right)
    if isinstance(node, ast.UnaryOp):
        return _mentions_aggregate(node.operand)
    return False


def _has_number(node) -> bool:
    return any(isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and not isinstance(n.value, bool)
               for n in ast.walk(node))


def rate_deciders(modules) -> list:
    wrong = []
    for path, tree in modules:
        in_design, in_links = path.startswith("emulator/design/"), path == "emulator/design/links.py"
        for node in ast.walk(tree):
            if not in_design and _called(node) in LINK_TYPES:
                wrong.append(f"{path}:{node.lineno} builds {_called(node)}")
            if in_links:
                continue
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in SHARE_FUNCTIONS:
                wrong.append(f"{path}:{node.lineno} defines {node.name}")
            if isinstance(node, ast.BinOp) and not isinstance(node.op, ast.Mod) and _mentions_aggregate(node):
                wrong.append(f"{path}:{node.lineno} computes with a link's aggregate")
    return wrong


def failure_models(modules) -> list:
    wrong = []
    for path, tree in modules:
        if path == "emulator/design/failures.py" or path in LEGACY_PLANNERS:
            continue
        for node in ast.walk(tree):
            name = _called(node)
            if name in FAILURE_TYPES and not (path.startswith("emulator/design/") and name == "failure_model"):
                wrong.append(f"{path}:{node.lineno} builds {name}")
        for node in tree.body:  # module level
            if not isinstance(node, (ast.Assign, ast.AnnAssign)):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            value = node.value
            if any(DEFAULT_NAME.search(n) for n in names) and _has_number(value):
                wrong.append(f"{path}:{node.lineno} states a failure default ({', '.join(names)})")
            if isinstance(value, ast.Dict):
                keys = {k.value for k in value.keys if isinstance(k, ast.Constant)}
                if len(keys & CLASSES) >= 2:
                    wrong.append(f"{path}:{node.lineno} keeps a table by failure class ({', '.join(names)})")
    return wrong


def test_only_the_designs_links_decide_a_nodes_rate():
    assert rate_deciders(_modules()) == [], "only emulator/design/links.py decides a node's rate"


def test_only_the_designs_failure_model_holds_one():
    assert failure_models(_modules()) == [], "only emulator/design/failures.py holds the failure model"


SIM = "emulator/simulation" + "/"


def test_the_checks_find_what_they_look_for(tmp_path):
    """Each rule catches the kind of code issue 32 removed (simulation/sharing.py, design.py,
    level_design.py, arrivals.py of before)."""
    shapes = {  # paths spelt apart: this file names no such module (tests/unit/project/test_links.py)
        SIM + "x.py": "def node_share(a, nic, k):\n    return min(nic, a / k)\n",
        SIM + "y.py": "def f(lim, n):\n    return LinkLimits(lim.aggregate_bps / n)\n",
        SIM + "z.py": ("DEFAULT_NODE_LOSS_FRACTION = 0.78\n"
                                     "RECOVER = {'process': 'memory', 'node': 'peer', 'group': 'global'}\n"
                                     "def f():\n    return FailureClass('node', 1.0, 'peer')\n"),
    }
    modules = [(p, ast.parse(src)) for p, src in shapes.items()]
    assert len(rate_deciders(modules)) == 3
    assert len(failure_models(modules)) == 3

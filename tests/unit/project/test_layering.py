"""The package structure as docs/architecture.md states it: every module imports, no import circle
(imports inside functions included), and no package imports from one listed above it."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
from paths import ROOT


#: emulator's packages, top to bottom (docs/architecture.md); the kernel's modules are one level,
#: and tiers/ is below all of emulator/
LAYERS = ["cli", "launch", "rank", "mlperf", "results", "checkpoint", "workload", "job", "simulation", "planner",
          "design", "config", "kernel"]
KERNEL = {"errors", "units", "host", "sizing", "metrics", "fullsize"}

#: where a project module may be imported inside a function: the CLI process keeps torch (and with
#: it the rank's whole stack) out until a subcommand needs it (docs/architecture.md)
LAZY_PROJECT_IMPORTS_ALLOWED = ("emulator/cli/", "emulator/launch/", "emulator/checkpoint/engines.py")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for d in ("emulator", "tiers") for p in sorted((ROOT / d).rglob("*.py"))}


#: C extensions built from the tree (tiers/_copycrc.c): imported as modules, they import nothing of ours
COMPILED = {_module_name(p) for d in ("emulator", "tiers") for p in (ROOT / d).rglob("*.c")}


def _imports(name: str, path: Path, known: set) -> list[tuple[str, int, bool]]:
    """(imported project module, line, inside a function or class) for every import in ``path``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            # `from pkg import module` imports the module; `from module import name` the module
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for t in targets:
            if t in COMPILED:
                continue
            while t and t not in known:  # `import tiers.base.x` -> the longest known prefix
                t = t.rpartition(".")[0]
            if t and t != name:
                found.append((t, node.lineno, node.col_offset > 0))
    return found


def _graph() -> dict[str, list[tuple[str, int, bool]]]:
    mods = _modules()
    return {name: _imports(name, path, set(mods)) for name, path in mods.items()}


def _package(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "tiers" or len(parts) == 1:
        return parts[0]
    return "kernel" if parts[1] in KERNEL else parts[1]


def _layer(module: str) -> int:
    """Higher is further up; tiers is below the kernel."""
    parts = module.split(".")
    if parts[0] == "tiers":
        return -1
    if len(parts) == 1:
        return len(LAYERS)  # the package face `emulator` itself: nothing may import it
    inner = "kernel" if parts[1] in KERNEL else parts[1]
    return len(LAYERS) - 1 - LAYERS.index(inner)


def test_every_module_imports():
    for name in _modules():
        if name.endswith("__main__"):
            continue  # runs its command when imported
        importlib.import_module(name)


def test_layers_cover_every_package():
    packages = {p.name for p in (ROOT / "emulator").iterdir() if (p / "__init__.py").exists() and p.name != "presets"}
    kernel = {p.stem for p in (ROOT / "emulator").glob("*.py") if p.stem != "__init__"}
    assert packages == set(LAYERS) - {"kernel"}, "a package is missing from LAYERS (and docs/architecture.md)"
    assert kernel == KERNEL, "the kernel's modules changed: update KERNEL and docs/architecture.md"


def test_no_import_circle():
    graph = {m: sorted({t for t, _, _ in edges}) for m, edges in _graph().items()}
    # package faces re-export their modules: an edge into a face stands for edges into its modules
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in graph.get(m, []):
            if state.get(t) == 1:
                circle = stack[stack.index(t):] + [t]
                pytest.fail("import circle: " + " -> ".join(circle))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_no_package_imports_from_one_above_it():
    wrong = []
    for module, edges in _graph().items():
        for target, line, _ in edges:
            if _package(module) != _package(target) and _layer(target) >= _layer(module):
                wrong.append(f"{module}:{line} imports {target}")
    assert wrong == [], "imports that go up or sideways (docs/architecture.md):\n" + "\n".join(wrong)


def test_tiers_import_nothing_of_the_emulator():
    wrong = [f"{m}:{line} imports {t}" for m, edges in _graph().items() if m.startswith("tiers")
             for t, line, _ in edges if t.startswith("emulator")]
    assert wrong == []


def test_project_imports_inside_functions_only_where_documented():
    mods = _modules()
    wrong = [f"{m}:{line} imports {t} inside a function" for m, edges in _graph().items()
             for t, line, nested in edges
             if nested and not str(mods[m].relative_to(ROOT)).startswith(LAZY_PROJECT_IMPORTS_ALLOWED)
             and not mods[m].name == "__init__.py" and t.split(".")[0] in ("emulator", "tiers")]
    assert wrong == [], "\n".join(wrong)


def test_the_checker_finds_a_circle_hidden_in_a_function(tmp_path, monkeypatch):
    """The graph includes imports made inside functions (the old checkpointer <-> resume circle)."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("import b\n")
    b.write_text("def f():\n    from a import X\n")
    known = {"a", "b"}
    assert ("b", 1, False) in _imports("a", a, known)
    assert ("a", 2, True) in _imports("b", b, known)

"""What the product imports is what it declares: every third-party module imported by ``emulator``
and ``tiers`` comes from a distribution in pyproject.toml's dependencies (pinned in
constraints.txt), and ``import tiers`` needs no test tool (``tiers/testing.py`` ships in the
package but its pytest comes from the ``testing`` extra)."""
from __future__ import annotations

import ast
import importlib.metadata as md
import re
import subprocess
import sys
import tomllib
from paths import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: the one module that may import a test tool: the backend contract, for the ``testing`` extra
CONTRACT = "tiers/testing.py"


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _third_party_imports() -> dict[str, set[str]]:
    """{top-level module: files importing it} over the installed packages' sources."""
    found: dict[str, set[str]] = {}
    for path in [*ROOT.glob("emulator/**/*.py"), *ROOT.glob("tiers/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("emulator", "tiers"):
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_imported_distribution_is_declared_and_pinned():
    declared = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    pinned = {_name(line) for line in (ROOT / "constraints.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    owners = md.packages_distributions()
    missing = {}
    for module, files in _third_party_imports().items():
        if files == {CONTRACT}:
            continue
        for dist in owners.get(module, [module]):
            if _name(dist) not in declared or _name(dist) not in pinned:
                missing[dist] = sorted(files)
    assert not missing, f"imported but not declared in pyproject.toml (and pinned in constraints.txt): {missing}"


def test_the_contract_suite_declares_its_test_tool_as_an_extra():
    extra = {_name(r) for r in PYPROJECT["project"]["optional-dependencies"].get("testing", [])}
    assert extra == {_name(d) for m, files in _third_party_imports().items() if CONTRACT in files
                     for d in md.packages_distributions().get(m, [m])}


def test_import_tiers_needs_no_test_tool():
    """Every tiers module but the contract suite imports with pytest unavailable; the contract
    suite says which extra it needs instead of a bare ModuleNotFoundError."""
    code = (
        "import sys, importlib, pkgutil; sys.modules['pytest'] = None\n"
        "import tiers\n"
        "for m in pkgutil.iter_modules(tiers.__path__):\n"
        "    if m.name not in ('testing', '_copycrc'): importlib.import_module('tiers.' + m.name)\n"
        "try:\n"
        "    import tiers.testing\n"
        "except ImportError as exc:\n"
        "    print(exc)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "ckpt-emu[testing]" in proc.stdout, proc.stdout


def test_every_declared_distribution_is_imported():
    """The reverse: nothing declared that the product never imports (a dependency every user installs)."""
    imported = {_name(dist) for module in _third_party_imports()
                for dist in md.packages_distributions().get(module, [module])}
    unused = {_name(r) for r in PYPROJECT["project"]["dependencies"]} - imported
    assert not unused, f"declared in pyproject.toml but imported by no module of emulator or tiers: {unused}"

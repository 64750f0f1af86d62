"""The docs stay true to the code: every module has an owner in docs/architecture.md, every doc
the README links exists, and the README stays short enough to read."""
from __future__ import annotations

import re
from paths import ROOT



def test_every_module_is_in_the_ownership_table():
    table = (ROOT / "docs" / "architecture.md").read_text()
    owned = set(re.findall(r"`((?:tiers|emulator)/[\w/]+\.py)`", table))
    modules = {str(p.relative_to(ROOT)) for d in ("tiers", "emulator") for p in (ROOT / d).rglob("*.py")
               if p.name != "__init__.py" or p.parent == ROOT / "tiers"}
    assert modules - owned == set(), "add these modules to docs/architecture.md's table"
    assert owned - modules == set(), "docs/architecture.md names modules that do not exist"


def test_readme_links_resolve_and_it_stays_short():
    readme = (ROOT / "README.md").read_text()
    for target in re.findall(r"\]\(([^)#]+)\)", readme):
        assert (ROOT / target).exists(), target
    assert len(readme.splitlines()) <= 250


def test_the_architecture_page_draws_every_package_in_layer_order():
    """docs/architecture.md's tree lists emulator's packages top to bottom as tests/unit/project/test_layering.py
    enforces them: the picture and the rule cannot drift apart."""
    from test_layering import LAYERS
    text = (ROOT / "docs" / "architecture.md").read_text()
    tree = text[text.index("## Packages and their rule"):]
    tree = tree[tree.index("```"):tree.index("```", tree.index("```") + 3)]
    drawn = re.findall(r"^  (\w+)/", tree, flags=re.M)
    assert drawn == LAYERS[:-1], drawn  # the kernel's modules close the list on one line

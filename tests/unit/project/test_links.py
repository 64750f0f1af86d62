"""No file in the repository links to a page or a file that does not exist: every Markdown link
(and its #anchor, as GitHub makes them from headings) in every tracked file, and every path of
the repository named in one (the comments of grafana/'s files named a page that never existed)."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from paths import ROOT

#: what a path of this repository named in prose looks like: a top folder, then a file with an extension
PATH = re.compile(r"(?<![\w/.$-])((?:docs|grafana|configs|emulator|tiers|tests|bench|scripts|\.ci)/[\w./-]*?"
                  r"\.(?:md|py|yaml|yml|json|sh|c|txt|png|toml))(?![\w*{])")
LINK = re.compile(r"\]\(([^)\s]+)\)")
MISSING = "docs" + "/no-such-page.md"  # a page that does not exist (spelt apart: this file names no such page)


def _tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    out = []
    for name in names:
        path = ROOT / name
        if path.suffix in (".png", ".so") or not path.is_file():
            continue
        try:
            out.append((path, path.read_text()))
        except UnicodeDecodeError:
            continue
    return out


def _anchors(md: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    heads = re.findall(r"^#+\s+(.*?)\s*$", re.sub(r"```.*?```", "", md.read_text(), flags=re.S), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads}


def _broken() -> list[str]:
    broken = []
    for path, text in _tracked_text_files():
        where = path.relative_to(ROOT)
        if path.suffix == ".md":
            for target in LINK.findall(text):
                if re.match(r"[a-z]+:", target):
                    continue  # a web page
                file, _, anchor = target.partition("#")
                dest = (path.parent / file) if file else path
                if not dest.exists():
                    broken.append(f"{where}: link to {target}")
                elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                    broken.append(f"{where}: link to {target}: no such heading")
        for named in PATH.findall(text):
            if not (ROOT / named).exists():
                broken.append(f"{where}: names {named}")
    return broken


def test_no_file_links_to_a_page_or_file_that_does_not_exist():
    assert _broken() == []


def test_the_check_finds_a_broken_link(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("# Title\n[ok](page.md#title) [gone](nowhere.md) [bad anchor](page.md#nope)\n"
                    f"see {MISSING}\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    monkeypatch.setattr(__import__(__name__), "_tracked_text_files", lambda: [(page, page.read_text())])
    assert _broken() == ["page.md: link to nowhere.md", "page.md: link to page.md#nope: no such heading",
                         f"page.md: names {MISSING}"]

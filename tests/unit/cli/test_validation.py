"""docs/validation.md stays true: every row of its table reruns with its command, in-process, and the
figure the tool gives now is the page's within the row's tolerance; its ratio is tool / published, and a
row off by more than 15 % says why."""
from __future__ import annotations

import json
import re
import shlex

import pytest

from emulator.cli import main
from paths import ROOT

PAGE = ROOT / "docs" / "validation.md"
GIB = 1 << 30
DAYS = 54  # Llama 3's pre-training snapshot


def _restore_s(out: dict) -> float:
    """simulate's restore from the global tier, every node at once (a class that restores from it)."""
    return next(c["restore_s"] for c in out["design"]["classes"]["all"].values() if c["from"] == "global")


def _class_per_54_days(name: str):
    return lambda out: DAYS * out["classes"][name]["per_day"]


#: how each row's figure is read from its command's --json output
FIGURES = {
    **{f"mlperf-{m}": (lambda out: out["total_bytes"] / GIB) for m in ("8b", "70b", "405b", "1t")},
    **{f"mlperf-{m}-subset": (lambda out: out["run_bytes"] / GIB) for m in ("8b", "70b", "405b", "1t")},
    "llama3-interruptions": lambda out: DAYS * out["reference"]["failures_per_day"],
    "llama3-node": _class_per_54_days("node"),
    "llama3-process": _class_per_54_days("process"),
    "llama3-group": _class_per_54_days("group"),
    "vast-size": lambda out: out["total_bytes"] / 1e12,
    "vast-save": lambda out: out["modes"]["sync"]["local_write_mean_s"],
    "vast-restore": lambda out: _restore_s(out) / out["modes"]["sync"]["local_write_mean_s"],
    "gpt2-params": lambda out: out["params"] / 1e9,
    "dlrover-params": lambda out: out["params"] / 1e9,
    "dlrover-size": lambda out: out["total_bytes"] / GIB,
    "dlrover-size-distopt": lambda out: out["total_bytes"] / GIB,
    "dlrover-save": lambda out: out["modes"]["sync"]["stall_mean_s"],
    "dlrover-save-distopt": lambda out: out["modes"]["sync"]["stall_mean_s"],
    **{name: (lambda out: out["modes"]["async"]["stall_mean_s"])
       for name in ("dlrover-blocking", "dlrover-glm-blocking", "dcp-async-70b", "dcp-async-7b")},
}


def _number(cell: str) -> float | None:
    """The first number of a cell ('18 GB', '5,290 GiB', '0.977'), or None ('-')."""
    m = re.search(r"-?\d[\d,]*(\.\d+)?", cell)
    return None if m is None else float(m.group(0).replace(",", ""))


def page_rows() -> list[dict]:
    """The rows of the page's figures table: id, figure, published, command, tool, ratio, within, why."""
    lines = PAGE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| id |"))
    keys = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows.append(dict(zip(keys, cells)))
    return rows


ROWS = page_rows()


def test_the_page_and_the_test_read_the_same_rows():
    ids = [r["id"].strip("`") for r in ROWS]
    assert len(ids) == len(set(ids))
    assert sorted(ids) == sorted(FIGURES)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """Each command's --json output, run once (several rows read one command)."""
    cache: dict = {}
    out_dir = tmp_path_factory.mktemp("validation")

    def run(command: str, capsys) -> dict:
        if command not in cache:
            argv = shlex.split(command.strip("`"))
            assert argv[0] == "ckpt-emu", command
            args = argv[1:] + ["--json"] + (["--out", str(out_dir)] if argv[1] == "simulate" else [])
            capsys.readouterr()
            assert main(args) == 0, command
            cache[command] = json.loads(capsys.readouterr().out)
        return cache[command]
    return run


@pytest.mark.parametrize("row", ROWS, ids=[r["id"].strip("`") for r in ROWS])
def test_every_row_reruns_to_its_figure(row, outputs, capsys):
    figure = FIGURES[row["id"].strip("`")](outputs(row["command"], capsys))
    tool, within = _number(row["tool"]), _number(row["within"]) / 100
    assert figure == pytest.approx(tool, rel=within, abs=1e-9), f"{row['id']}: the tool now gives {figure:.6g}"
    published = _number(row["published"])
    if not published:  # nothing to divide by: the row must say why
        assert row["ratio"] in ("-", "—") and row["why"], row["id"]
        return
    assert _number(row["ratio"]) == pytest.approx(tool / published, abs=0.0015), row["id"]
    if abs(tool / published - 1) > 0.15:
        assert row["why"], f"{row['id']} is off by more than 15 % and does not say why"

"""Helpers to run the real CLI and read what a run left behind."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import torch
import yaml


def ckpt_emu(*args, cwd=None, timeout=300, check=False) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "emulator.cli", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"ckpt-emu {args} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def refused(capsys, *argv) -> str:
    """``ckpt-emu argv`` in this process (no torchrun: bad input is refused before anything starts):
    exit status 2 and one line ``ckpt-emu: error: ...`` on stderr, which it returns."""
    from emulator.cli import main
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's own errors
        rc = exc.code
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("ckpt-emu: "), (rc, err)
    return lines[0]


def simulate_json(cfg_path, *args, days: float = 0.2) -> dict:
    """``ckpt-emu simulate cfg_path --days DAYS --json args`` (it must succeed): what it printed."""
    proc = ckpt_emu("simulate", cfg_path, "--days", days, "--json", *args, check=True)
    return json.loads(proc.stdout)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def small_config(tmp: Path, *, ranks: int = 2, local: bool = True, **sections) -> Path:
    """A tiny Llama-3 8B run (a few MiB per rank) with directory tiers under ``tmp``.

    Keyword arguments are config sections merged over the defaults, e.g.
    ``checkpoint={"saves": 2}``. ``training.step_seconds`` given here is the test's wall time
    per step; the config holds the full-size time (wall / run.scale), as a user's would.
    The no-checkpoint baseline mode is off unless asked for (``checkpoint={"baseline": True}``),
    so step numbers stay those of the checkpointing modes. Tiers in host memory keep their
    checkpoints after the run (``run.keep_tiers``), so a test can look at them. No timeline.png
    (``run.timeline``: a second of CPU a run) unless asked for (``run={"timeline": True}``)."""
    from emulator.config.mapping import deep_merge
    data = {
        "extends": "llama3-8b",
        "parallelism": {"ranks": ranks},
        "run": {"scale": 0.0005, "out": str(tmp / "out"), "keep_tiers": True, "timeline": False},
        "training": {"step_seconds": 0.05},
        "checkpoint": {"interval_steps": 2, "saves": 3, "loads": 2, "keep": 2, "baseline": False},
        "tiers": {"local": {"backend": "dir", "path": str(tmp / "local" / "node{node}")} if local else None,
                  "global": {"backend": "dir", "path": str(tmp / "global")}},
    }
    data = deep_merge(data, sections)
    data["training"] = {**data["training"], "step_seconds": data["training"]["step_seconds"] / data["run"]["scale"]}
    path = tmp / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def results(out: Path) -> dict:
    return json.loads((Path(out) / "results.json").read_text())


def unflagged(res: dict) -> bool:
    """Whether a run's report says every paced phase kept to its design rate (none was this host's)."""
    return any(n.startswith("every paced phase") for n in res["notes"])


def _widest_factor(res: dict) -> float:
    """The run's dilation, or its loads' own where higher."""
    loads = res["dilation"].get("loads") or {}
    return max(res["dilation"]["factor"], loads.get("factor", 0.0))


def run_unflagged(run_in, tmp: Path, *, more_room: bool = False) -> tuple[dict, Path]:
    """``run_in(folder)``, a run's results, and once more in a fresh folder if the run itself says this
    host overran a paced phase (then no figure of it is the design's to check); a second flagged run
    fails. ``more_room``: the second is ``run_in(folder, dilation=D)`` at twice the first's factor, or
    its loads' where higher (the probe leaves the host twice each phase's rate alone, and an async
    write beside 8 ranks' training on 2 cores once needed more; at a set dilation the loads have no
    probe of their own). The results and the folder of the run kept."""
    res = run_in(tmp / "first")
    if unflagged(res):
        return res, tmp / "first"
    again = run_in(tmp / "again", dilation=2 * _widest_factor(res)) if more_room else run_in(tmp / "again")
    if unflagged(again):
        return again, tmp / "again"
    raise AssertionError("flagged twice:\n" + "\n".join(res["notes"] + again["notes"]))


def run_two_agents(cfg: Path, outs: list, rdzv_id: str, timeout: int = 300, *, nproc: int = 2,
                   args: tuple = ()) -> None:
    """``ckpt-emu run cfg [args]`` as two torchrun agents of ``nproc`` ranks on 127.0.0.1 (two
    "machines", one c10d rendezvous), each with its own results folder in ``outs``; both must succeed."""
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "emulator.cli", "run", str(cfg), "--quiet", "--out", str(o),
                               "--nnodes", "2", "--nproc-per-node", str(nproc), "--rdzv-endpoint",
                               f"127.0.0.1:{port}", "--rdzv-id", f"{rdzv_id}-{port}", *args],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for o in outs]
    for p in procs:
        _, err = p.communicate(timeout=timeout)
        assert p.returncode == 0, err


def run_yaml(cfg: dict, tmp: Path, timeout: int = 500) -> tuple[Path, dict]:
    """Write ``cfg`` to ``tmp/design.yaml``, ``ckpt-emu run`` it (it must succeed); (path, results)."""
    path = tmp / "design.yaml"
    path.write_text(yaml.safe_dump(cfg))
    ckpt_emu("run", path, "--quiet", timeout=timeout, check=True)
    return path, results(Path(cfg["run"]["out"]))


def expected_state(cfg, rank: int, step: int, first_step: int = 1):
    """Replay what a rank's live state was when checkpoint ``step`` was staged."""
    from rundesign import rank_state
    st = rank_state(cfg, rank)
    for s in range(first_step, step + 1):
        st.mutate(s)
    return st


def assert_file_holds_state(path: Path, cfg, rank: int, step: int) -> None:
    loaded = torch.load(path, weights_only=True)
    assert loaded["step"] == step and loaded["rank"] == rank
    want = expected_state(cfg, rank, step)
    for group, tensors in want.live.items():
        assert set(loaded[group]) == set(tensors)
        for name, t in tensors.items():
            # compare bits, not values: random bytes include NaN patterns
            got = loaded[group][name].contiguous().view(-1).view(torch.uint8)
            assert torch.equal(got, t.view(-1).view(torch.uint8)), f"{path}: {group}.{name} differs"

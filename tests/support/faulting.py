"""Checkpoints driven by hand for the fault tests (unit and system): the tiny one-rank config, a
Checkpointer that trains step by step (Run), the file a manifest names, tiny tmpfs mounts, a closed
port, and the one-line exit 2 of a refused command."""
from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest
from rundesign import rank_state

from emulator.checkpoint.checkpointer import Checkpointer
from emulator.checkpoint.layout import Manifest, manifest_key
from emulator.checkpoint.retry import RetryPolicy
from emulator.cli import main
from emulator.config import load_config
from emulator.rank.comm import SoloComm

MIB = 1 << 20


@pytest.fixture(scope="module")
def cfg():
    """One rank of the tiny Llama-3 8B the end-to-end tests use (~7 MiB file: two 5 MiB S3 parts)."""
    return load_config("llama3-8b", ["parallelism.ranks=1", "run.scale=0.0005"])


def meta(cfg) -> dict:
    p = cfg.parallelism
    return {"preset": cfg.model.name, "scale": cfg.run.scale, "tp": p.tp, "pp": p.pp, "dp": p.dp,
            "zero_stage": p.zero_stage}


class Run:
    """A Checkpointer on fresh state that trains (mutates) step by step, as emulator/rank/run.py does."""

    def __init__(self, cfg, local, global_, **kw):
        self.cfg, self.local, self.global_ = cfg, local, global_
        self.state = rank_state(cfg, 0)
        kw.setdefault("policy", RetryPolicy(retries=2, backoff_s=0.02))
        self.ckpt = Checkpointer(self.state, local, global_, SoloComm(), keep=2, meta=meta(cfg), **kw)
        self.step = 0

    def to(self, step: int, mode: str = "sync"):
        while self.step < step:
            self.step += 1
            self.state.mutate(self.step)
        return self.ckpt.checkpoint(step, mode)

    def close(self):
        self.ckpt.close()


def _key(root: Path, tier: str, step: int) -> str:
    m = Manifest.from_json((root / tier / manifest_key(step)).read_bytes())
    return m.files[0].key


def _can_mount_tmpfs(path: Path, size: str, opts: str = "") -> bool:
    path.mkdir(parents=True, exist_ok=True)
    rc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}{opts}", "tmpfs", str(path)],
                        capture_output=True).returncode
    return rc == 0


@pytest.fixture
def tmpfs(tmp_path):
    """Mount tiny tmpfs filesystems (unmounted after the test); None where mounting is not permitted."""
    mounted = []

    def mount(name: str, size: str, opts: str = "") -> Path | None:
        path = tmp_path / name
        if not _can_mount_tmpfs(path, size, opts):
            return None
        mounted.append(path)
        return path
    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _one_line_exit_2(capsys, argv, out: Path, message: str) -> str:
    rc = main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("ckpt-emu: error: "), err
    assert message in lines[0], lines[0]
    assert not out.exists()  # nothing written
    return lines[0]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

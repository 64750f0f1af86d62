"""Ranks whose state lives on a GPU (needs CUDA; skipped with the reason on a CPU-only machine).

The staging copies on a real device: pinned buffers, a side stream that sees every update enqueued
before the snapshot, bucketed staging over the pinned budget, restores host-to-device, content
identical on any device, and a whole run with ``state.device=cuda``.
"""
from __future__ import annotations

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason=f"no CUDA: torch {torch.__version__} "
                              f"{'sees no CUDA device' if torch.backends.cuda.is_built() else 'is built without CUDA'}"),
]

MIB = 1 << 20


def _live(sizes_mib, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randint(0, 1 << 30, (n * MIB // 4,), dtype=torch.int32, device="cuda", generator=gen)
            for n in sizes_mib]


def _stager(live, budget=None, **kw):
    from emulator.workload.staging import CudaCopier, Stager
    return Stager([t.numel() * t.element_size() for t in live], CudaCopier(live[0].device), budget, **kw)


def test_snapshot_into_pinned_buffers_sees_every_update_enqueued_before_it():
    live = _live([64, 3, 128])
    stager = _stager(live)
    host = stager.host_buffers(live)
    assert all(h.is_pinned() for h in host) and stager.pinned_bytes == stager.total
    for _ in range(20):  # queued on the training stream, likely still running when the snapshot starts
        for t in live:
            t.mul_(3).add_(1)
    timing = stager.to_host(live, host)
    torch.cuda.synchronize()
    assert all(torch.equal(h, t.cpu()) for h, t in zip(host, live))
    assert timing.device_s > 0 and timing.bytes == stager.total


def test_the_next_update_does_not_reach_the_staged_bytes():
    live = _live([128])
    stager = _stager(live)
    host = stager.host_buffers(live)
    expected = live[0].cpu()
    stager.to_host(live, host)
    for _ in range(20):  # the next training step, at once
        live[0].add_(1)
    torch.cuda.synchronize()
    assert torch.equal(host[0], expected)


def test_over_the_budget_buckets_through_pinned_slots_both_ways():
    live = _live([40, 1, 25])
    stager = _stager(live, budget=8 * MIB)
    host = stager.host_buffers(live)
    assert stager.bucketed and len(stager.buckets) == -(-stager.total // (4 * MIB))
    assert all(s.is_pinned() for s in stager.slots) and stager.pinned_bytes <= 8 * MIB
    assert not any(h.is_pinned() for h in host)
    assert all(torch.equal(h, t.cpu()) for h, t in zip(host, live))
    saved = [h.clone() for h in host]
    for t in live:
        t.zero_()
    timing = stager.to_device(host, live)
    torch.cuda.synchronize()
    assert all(torch.equal(t.cpu(), s) for t, s in zip(live, saved)) and timing.device_s > 0


def test_content_is_the_same_bytes_on_any_device():
    from emulator.config import load_config
    from rundesign import rank_state
    cfg = load_config("llama3-8b", ["run.scale=0.0002", "parallelism.ranks=1"])
    states = [rank_state(cfg, 0, device) for device in ("cpu", "cuda")]
    for state in states:
        for step in range(1, 4):
            state.mutate(step)
        timing = state.snapshot()
    assert timing.device_s > 0
    for a, b in zip(*(list(s.tensors("staging")) for s in states)):
        assert torch.equal(a.view(-1).view(torch.uint8), b.view(-1).view(torch.uint8))


def test_restore_verifies_then_copies_host_to_device(tmp_path):
    from emulator.checkpoint.checkpointer import Checkpointer
    from emulator.checkpoint.restore import Restorer
    from emulator.config import load_config
    from emulator.rank.comm import SoloComm
    from rundesign import rank_state
    from tiers.directory import DirTier
    cfg = load_config("llama3-8b", ["run.scale=0.0002", "parallelism.ranks=1"])
    state = rank_state(cfg, 0, "cuda")
    local, glob = DirTier(tmp_path / "local"), DirTier(tmp_path / "global")
    ckpt = Checkpointer(state, local, glob, SoloComm(), keep=2)
    state.mutate(1)
    rec = ckpt.checkpoint(1, "async")
    ckpt.finish()
    assert rec.global_complete and rec.d2h_s > 0 and rec.d2h_bytes == state.nbytes
    saved = [t.cpu() for t in state.tensors("live")]
    state.mutate(2)
    live_before = [t.data_ptr() for t in state.tensors("live")]
    load = Restorer(state, [("local", local), ("global", glob)], SoloComm(),
                    loop=ckpt.loop).load()
    ckpt.close()
    assert load.ok and load.step == 1 and load.h2d_s > 0
    assert [t.data_ptr() for t in state.tensors("live")] == live_before  # copied into, not swapped
    assert all(torch.equal(t.cpu(), s) for t, s in zip(state.tensors("live"), saved))


def test_a_run_on_the_gpu_reports_d2h(tmp_path):
    from emu import ckpt_emu, results, small_config
    cfg = small_config(tmp_path, ranks=2, state={"device": "cuda"})
    proc = ckpt_emu("run", cfg, "--quiet", check=True)
    res = results(tmp_path / "out")
    assert res["device"]["kind"] == "cuda" and res["device"]["gpus"] >= 1
    assert res["modes"]["async"]["d2h_mean_s"] > 0 and res["modes"]["async"]["d2h_gib_s"] > 0
    assert res["load"]["ok"] and res["load"]["h2d_gib_s"] > 0
    assert "device-to-host rate" in proc.stdout and "device: state on" in proc.stdout


def test_the_gpu_bench_runs_and_reports_its_figures(tmp_path):
    import json
    import subprocess
    import sys

    from paths import ROOT as root
    proc = subprocess.run([sys.executable, "-m", "bench.gpu", "--json", "--rank-gib", "0.05", "--pairs", "1",
                           "--warmup", "1", "--workdir", str(tmp_path / "w")], cwd=root, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(proc.stdout)
    assert set(res) == {"gpu_async_stall_vs_floor", "gpu_async_stall_vs_dcp_pinned",
                        "gpu_async_stall_vs_dcp_default", "gpu_restore_h2d_vs_floor",
                        "gpu_bucketed_snapshot_vs_floor"}
    assert res["gpu_bucketed_snapshot_vs_floor"]["staging"]["bucketed"]
    assert all(r["ratio"] > 0 and r["pairs"] == 1 for r in res.values())


def test_a_rank_gets_gpu_local_rank_modulo_the_count():
    from emulator.workload.device import place
    count = torch.cuda.device_count()
    p = place("cuda", count + 1, 2 * count)
    assert p.kind == "cuda" and p.index == 1 % count and p.device == torch.device("cuda", 1 % count)
    assert p.sharing == 2 and torch.cuda.current_device() == p.index
    assert place("auto", 0, 1).kind == "cuda" and place("cpu", 0, 1).kind == "cpu"


def test_a_run_over_the_pinned_budget_stages_in_buckets_and_says_so(tmp_path):
    from emu import ckpt_emu, results, small_config
    cfg = small_config(tmp_path, ranks=2, state={"device": "cuda", "pinned_budget_gib": 0.002},
                       checkpoint={"saves": 2, "loads": 1})
    proc = ckpt_emu("run", cfg, "--quiet", check=True)
    res = results(tmp_path / "out")
    assert res["device"]["bucketed_ranks"] == 2 and res["device"]["pinned_bytes_max"] <= 2 << 20
    assert res["load"]["ok"] and res["modes"]["async"]["incomplete"] == 0
    assert "exceeds state.pinned_budget_gib" in proc.stderr and "staged in" in proc.stdout

"""Time dilation on a rank: what this host does for each phase of this run, and the factor it needs.

With ``run.dilation: auto`` every rank, before training, runs each phase once on its bare (unpaced)
tiers at this run's real sizes, all ranks of a node at once as in a checkpoint: the write into
the nearest tier, its peer sends, the node's drain to global storage, a restore read from each,
the snapshot. A phase whose design rate is R for a node that here moved its B bytes at H, after F
seconds of software that do not grow with the bytes (the node's, first rank's start to last rank's
end), gets a paced window B x D / R that leaves the host twice its bytes' time and its software
once, D >= R x (HEADROOM x B / H + F) / B; twice both where F, counted once at full size, is a large
part of the phase's design time. D is the largest over the phases and the nodes (one all-reduce,
so every node agrees), and the phase that set it is said in the report.
The probe's files are step 0's, deleted before training (a crash leaves an incomplete step that
the next run's clean-up removes).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import torch

from emulator.checkpoint import layout
from emulator.checkpoint.rank_file import save_rank_file
from emulator.checkpoint.drainer import Drainer
from emulator.checkpoint.layout import FileEntry
from emulator.design import ladder
from emulator.design.costs import checkpoint_costs
from emulator.job.clock import Clock
from emulator.results.design_time import SOFTWARE_SHARE
from emulator.results.report import scale_fit_words
from emulator.units import GIB

#: the host must manage this many times the paced rate: pacing, not the host, then sets each phase
HEADROOM = 2.0
PROBE_STEP = 0
#: factors D is rounded up to (x 10^k): a factor that reads well and leaves a little more room
_NICE = (1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8)


@dataclass(frozen=True)
class PhaseProbe:
    """One phase on this host: the design's rate for the node, the node's byte rate here, and its
    software's seconds that do not grow with the bytes (``fixed_s``, for ``node_bytes`` at ``scale``)."""

    phase: str
    tier: str
    design_bps: float
    host_bps: float
    fixed_s: float = 0.0
    node_bytes: int = 0
    scale: float = 0.0  # the run's bytes factor; 0: unknown, the software always gets room
    #: whether this host moves the phase's bytes: a CPU state's paced snapshot swaps buffers instead
    moves_bytes: bool = True

    @property
    def software_share(self) -> float:
        """The software's seconds, counted once, over the phase's full-size design time."""
        if not self.scale or self.node_bytes <= 0:
            return math.inf if self.fixed_s else 0.0
        return self.fixed_s / (self.node_bytes / self.scale / self.design_bps)

    @property
    def needs(self) -> float:
        """The least factor that leaves this host room for the phase; 1 for one that moves no bytes here
        (its software is a cost per checkpoint, counted once at full size whatever the factor)."""
        if not self.moves_bytes:
            return 1.0
        if self.host_bps <= 0:
            return math.inf
        if self.node_bytes <= 0:
            return HEADROOM * self.design_bps / self.host_bps
        byte_s = self.node_bytes / self.host_bps
        if self.software_share <= SOFTWARE_SHARE:  # counted once at full size: room for it once
            window = HEADROOM * byte_s + self.fixed_s
        else:
            window = HEADROOM * (byte_s + self.fixed_s)
        return self.design_bps * window / self.node_bytes


def nice(factor: float) -> float:
    """The smallest of 1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8 (x 10^k) at or above ``factor``."""
    if factor <= 1:
        return 1.0
    exp = 10 ** math.floor(math.log10(factor))
    return next((n * exp for n in _NICE if n * exp >= factor * (1 - 1e-9)), 10 * exp)


def design_rate(design, comm, name: str, direction: str, *, restoring: bool = False) -> float | None:
    """Bytes/s the run's ``design`` gives this node for ``direction`` (write, read) on tier ``name``
    (``restoring``: a restore's read, every node reading what it holds); None where nothing paces it. A
    rate per rank or per stream counts once per rank of the node."""
    e = design.emulation.tier(name, comm.node, restoring=restoring)
    gib_s = getattr(e, f"{direction}_gib_s", None) if e is not None else None
    if not gib_s:
        return None
    per_node = comm.local_world_size if e.shared_by in ("none", "rank") else 1
    return gib_s * GIB * per_node


def snapshot_rate(design) -> float | None:
    """Each accelerator's copy rate to host memory in the run's design: stated, or the documented
    default (``DEFAULT_SNAPSHOT``); None without a design, where the snapshot is this host's own copy."""
    snapshot = design.emulation.snapshot
    return snapshot.rate_bps if snapshot is not None else None


class Probe:
    """Runs every phase once on the bare tiers (collective); ``phases`` what it found. ``scale``: the
    run's bytes factor (its clock's)."""

    def __init__(self, design, scale: float, comm, state, tiers: dict, loop, peer=None):
        self.design, self.scale, self.comm, self.state, self.tiers, self.loop, self.peer = \
            design, scale, comm, state, tiers, loop, peer
        self.phases: list[PhaseProbe] = []

    def _timed(self, fn) -> tuple[float, float]:
        """(seconds, wall-clock start) of ``fn`` on this rank, after a barrier."""
        self.comm.barrier()
        wall, t = time.time(), time.perf_counter()
        fn()
        return time.perf_counter() - t, wall

    def _byte_seconds(self, full: float, skeleton: float) -> float:
        """A phase's time for its bytes: the full files' less the same files' with one element per
        tensor (never below a tenth of the full time: timing noise must not make the host look infinite)."""
        return max(full - skeleton, full / 10)

    def _add(self, phase: str, tier: str, design: float | None, full: tuple[float, int, float],
             skeleton: tuple[float, int, float]) -> None:
        """One phase's probe from this rank's (seconds, bytes, wall-clock start) for its full files and
        for the same files with one element per tensor (the software's part); collective: one gather
        for the node's byte rate (its bytes over the node's byte seconds), software and bytes. The node's
        seconds run from its first rank's start to its last rank's end: ranks sharing a few cores take
        turns, and each rank's own time (the slowest's too) is then a part of the node's."""
        rows = [(f, s) for n, f, s in self.comm.all_gather((self.comm.node, full, skeleton)) if n == self.comm.node]
        moved, node_bytes = sum(f[1] - s[1] for f, s in rows), sum(f[1] for f, _ in rows)
        fixed_s = node_seconds([s for _, s in rows])
        byte_s = self._byte_seconds(node_seconds([f for f, _ in rows]), fixed_s) if moved else 0.0
        host = moved / byte_s if byte_s > 0 else math.inf
        if design:
            self.phases.append(PhaseProbe(phase, tier, design, host, fixed_s, node_bytes, self.scale))

    def run(self) -> list[PhaseProbe]:
        if snapshot_rate(self.design) is not None:
            self._snapshot()
        names = [n for n in ladder.file_tiers() if n in self.tiers]
        first = names[0]
        entries = self._write(first)
        if first == "memory" and self.peer is not None:
            self._replicate(entries)
        if first != "global":
            self._drain(first, entries)
        for name in (first, "global") if first != "global" else (first,):
            self._read(name, entries)
        self._clean(names)
        return self.phases

    def _snapshot(self) -> None:
        """Each rank's snapshot into host memory. A device's is one copy, no software to set apart. A CPU
        state's paced snapshot swaps buffers (``RankState.snapshot``): the host moves no bytes, and its
        own time (the swap) is software, once per checkpoint, that no factor shortens: it sets none."""
        if self.state.snapshot_copies:
            design = snapshot_rate(self.design) * self.comm.local_world_size
            self._add("snapshot", "host memory", design, self._copy(), (0.0, 0, 0.0))
            return
        # each accelerator's own: its rank's software against its rank's bytes at the rate per accelerator
        mine = (self.comm.node, self._swap(), self.state.nbytes)
        seconds, nbytes = max((s, b) for n, s, b in self.comm.all_gather(mine) if n == self.comm.node)
        self.phases.append(PhaseProbe("snapshot", "host memory", snapshot_rate(self.design), math.inf, seconds, nbytes,
                                      self.scale, moves_bytes=False))

    def _swap(self) -> float:
        """This rank's own seconds in a paced snapshot of its CPU state: a swap there and back (the state
        ends as it was), without the paced wait's late wake-up (the scheduler's, emulator/results/
        design_time.py ``WAKE_UP_S``): the software its full-size figure counts once."""
        seconds, _ = self._timed(lambda: (self.state.snapshot(paced=True), self.state.snapshot(paced=True)))
        return seconds

    def _copy(self) -> tuple[float, int, float]:
        """(seconds, bytes, start) of this rank's memcpy into a warm buffer as large as its state, every
        rank at once."""
        n = max(self.state.nbytes, 1 << 20)
        src, dst = torch.empty(n, dtype=torch.uint8), torch.empty(n, dtype=torch.uint8)
        src.fill_(1)
        dst.copy_(src)  # warm both
        seconds, start = self._timed(lambda: dst.copy_(src))
        return seconds, n, start

    def _write(self, name: str) -> tuple[FileEntry, FileEntry]:
        """(the skeleton's entry, the full file's): the state saved whole, then with one element per
        tensor. Whole first: a first call's costs (imports, caches, a new folder) then land in the
        bytes' time, which sets D, not in the software's, which may be counted once instead
        (skeleton first, they made a write of 10.6 GiB/s of a host that moves 1-2)."""
        entries, times = {}, {}
        for mp, state in ((0, self.state), (1, _Skeleton(self.state))):
            key = layout.rank_file_key(PROBE_STEP, self.comm.rank, self.state.coords.dp, mp)
            out = {}
            times[mp] = self._timed(lambda: out.update(zip(("size", "crc"), save_rank_file(
                state, self.tiers[name], key, PROBE_STEP))))
            entries[mp] = FileEntry(key, self.comm.rank, out["size"], out["crc"])
        self._add("write", name, design_rate(self.design, self.comm, name, "write"),
                  (times[0][0], entries[0].size, times[0][1]), (times[1][0], entries[1].size, times[1][1]))
        return entries[1], entries[0]

    def _drain(self, source: str, mine: tuple) -> None:
        gathered = self.comm.all_gather((self.comm.node, mine))
        done = [(0.0, 0, 0.0), (0.0, 0, 0.0)]  # the leader's (seconds, bytes, start): skeletons, whole files
        if self.comm.is_node_leader:
            drainer = Drainer(self.tiers[source], self.tiers["global"], concurrency=self.design.drain_concurrency,
                              verify=self.design.verify, node=self.comm.node)
            for i in (1, 0):  # whole files first, as the write
                result = self.loop.run(drainer.drain([e[i] for node, e in gathered if node == self.comm.node]))
                done[i] = (result.seconds, result.bytes, result.start)
        self._add("drain", "global", design_rate(self.design, self.comm, "global", "write"), done[1], done[0])

    def _replicate(self, entries: tuple) -> None:
        """Every rank's file sent from the memory tier to its holders' copies (the peer tier), through
        the node's fabric or NIC where the design states one: the node's sent bytes over its rate."""
        nic = self.design.emulation.node(self.comm.node).peer_bps
        sent = {}
        for i in (1, 0):  # whole files first, as the write
            out = {}
            seconds, start = self._timed(lambda: out.update(result=self.peer.transport.send_replicas(
                self.peer.layout, [entries[i]], self.tiers["memory"], self.peer.store)))
            sent[i] = (seconds, out["result"].sent_bytes, start)
        self._add("replicate", "peer", nic, sent[1], sent[0])

    def _read(self, name: str, entries: tuple) -> None:
        def read(entry):
            with self.tiers[name].open_read(entry.key) as fh:
                buf = bytearray(4 << 20)
                while fh.readinto(buf):
                    pass
        whole = self._timed(lambda: read(entries[1]))  # whole first, as the write
        skeleton = self._timed(lambda: read(entries[0]))
        self._add("restore", name, design_rate(self.design, self.comm, name, "read", restoring=True),
                  (whole[0], entries[1].size, whole[1]), (skeleton[0], entries[0].size, skeleton[1]))

    def _clean(self, names: list[str]) -> None:
        self.comm.barrier()
        for name in names:
            if (name == "global" and self.comm.rank == 0) or (name != "global" and self.comm.is_node_leader):
                self.loop.run(layout.delete_checkpoint(self.tiers[name], PROBE_STEP))
        if self.peer is not None and self.comm.is_node_leader:
            self.loop.run(layout.delete_checkpoint(self.peer.store, PROBE_STEP))
        self.comm.barrier()


class _Skeleton:
    """The state's payload with one element per tensor: the same file's structure without its bytes."""

    def __init__(self, state):
        self.state = state

    def payload(self, step: int) -> dict:
        return {k: {n: t.reshape(-1)[:1].clone() for n, t in v.items()} if isinstance(v, dict) else v
                for k, v in self.state.payload(step).items()}


def choose(phases: list[PhaseProbe], comm) -> tuple[float, PhaseProbe | None]:
    """The factor every node agrees on (the largest need of any phase on any node), rounded up to a
    nice value, and the phase on this node that needs the most."""
    worst = max(phases, key=lambda p: p.needs, default=None)
    need = comm.all_max(worst.needs if worst is not None else 1.0)
    return nice(need), worst




def restore_probe(design, comm, rec) -> PhaseProbe | None:
    """A whole restore done unpaced (``rec``, every rank's: its listing, manifest, reads, checksums and
    deserialisation) as a phase: the node's bytes read over its slowest rank's seconds, against the
    design's read rate of the tier it came from; None where a rank could not load (collective)."""
    ok = comm.all_min(1.0 if rec.ok else 0.0) == 1.0
    nbytes, slowest = node_totals(comm, rec.seconds, rec.read_bytes)
    rate = design_rate(design, comm, rec.tier, "read", restoring=True) if ok else None
    if not rate or not nbytes:
        return None
    return PhaseProbe("restore", rec.tier, rate, nbytes / slowest if slowest > 0 else math.inf, 0.0, nbytes)


def load_clock(design, clock: Clock, comm, restore, sources: list) -> tuple[Clock, list[PhaseProbe]]:
    """The loads' own clock, at least as dilated as the run's: ``restore(tiers)`` (collective) restores
    once, unpaced, from each of ``sources`` (lists of (name, bare tier), nearest first), and the
    factor is the one the slowest of them needs, as the first probe's phases (collective)."""
    phases = [p for p in (restore_probe(design, comm, restore(tiers)) for tiers in sources) if p is not None]
    factor, _ = choose(phases, comm)
    return clock.at(max(factor, clock.dilation)), phases


def node_seconds(parts: list[tuple[float, int, float]]) -> float:
    """The node's seconds for its ranks' (seconds, bytes, wall-clock start): its first start to its last
    end, of the ranks that did something (a drain is its leader's)."""
    timed = [(s, start) for s, b, start in parts if s > 0 or b > 0]
    return max(start + s for s, start in timed) - min(start for _, start in timed) if timed else 0.0


def node_totals(comm, seconds: float, nbytes: int) -> tuple[int, float]:
    """(the node's bytes, its slowest rank's seconds) (collective)."""
    mine = [(s, b) for n, s, b in comm.all_gather((comm.node, seconds, nbytes)) if n == comm.node]
    return sum(b for _, b in mine), max(s for s, _ in mine)


def decide(cfg, design, comm, state, tiers: dict, loop, duration: float | None = None,
           peer=None) -> tuple[Clock, list[PhaseProbe], "ScaleFit | None"]:
    """The run's clock (``cfg``'s run.scale and run.dilation) with its dilation decided (a probe of the
    ``design``'s phases where it is ``auto``), what the probe found (``peer``: the peer tier's
    replicas, whose sends the probe times too), and, with run.wall_target, the scale that fits it
    (:func:`fit_scale`; the clock is at that scale); a factor that makes the run too long is refused."""
    clock, target = Clock.of(cfg.run), cfg.run.wall_target_s
    if duration is not None or cfg.checkpoint.protocol == "mlperf":
        target = None  # a soak's wall time is its duration; MLPerf's protocol has its own schedule
    if cfg.checkpoint.protocol == "mlperf" or not cfg.run.dilation.auto:
        if not target:
            return clock, [], None
        stall_s = sync_stall_seconds(cfg, design)
        fit = fit_scale([], scale=clock.scale, wall=_wall(cfg, stall_s), target_s=target, factor=clock.dilation)
        replace(cfg, run=replace(cfg.run, scale=fit.scale)).check_wall(fit.factor, advice=refusal_advice(fit),
                                                                        stall_s=stall_s)
        return Clock(fit.scale, fit.factor), [], fit
    if not design.emulation.paces_anything():
        return clock.at(1.0), [], None
    phases = Probe(design, clock.scale, comm, state, tiers, loop, peer).run()
    factor, worst = choose(phases, comm)
    fit, stall_s = None, sync_stall_seconds(cfg, design)
    if target:  # every rank decides alike, from every rank's phases (choose's all_max, gathered)
        fit = fit_scale([p for ps in comm.all_gather(phases) for p in ps], scale=clock.scale,
                        wall=_wall(cfg, stall_s), target_s=target)
        clock, factor, cfg = Clock(fit.scale, fit.factor), fit.factor, replace(cfg, run=replace(cfg.run, scale=fit.scale))
    why = f" (set by the {worst.phase} on the {worst.tier} tier)" if worst is not None and factor > 1 else ""
    if duration is None and cfg.wall_seconds(clock.scale, factor, stall_s) > cfg.run.wall_limit_s:
        best = fit_scale([p for ps in comm.all_gather(phases) for p in ps], scale=clock.scale,
                         wall=_wall(cfg, stall_s), target_s=cfg.run.wall_limit_s)
        cfg.check_wall(factor, why, duration, advice=refusal_advice(best), stall_s=stall_s)
    return clock.at(factor), phases, fit


def sync_stall_seconds(cfg, design) -> float:
    """The full-size seconds a run's sync checkpoints stall its training: each one's whole pipeline
    (the design's sync stall, emulator/design/costs.py), as many as its sync mode takes."""
    if "sync" not in cfg.checkpoint.modes or design is None or design.emulation is None:
        return 0.0
    return checkpoint_costs(design).sync_stall_s * (cfg.steps_per_mode // design.interval_steps)


def _wall(cfg, stall_s: float):
    """The run's training time here at a scale and a factor (:meth:`Config.wall_seconds`)."""
    return lambda scale, factor: cfg.wall_seconds(scale, factor, stall_s)


def refusal_advice(fit: ScaleFit) -> str:
    """What helps a run too long for run.wall_limit (``fit``: the scale that fits it, or the floor
    the software sets): a lower scale where one fits, else not the scale at all."""
    if fit.floor and fit.wall_s > fit.target_s:
        return (f"no scale fits it here: this host's software in each checkpoint, given its room at every "
                f"scale, keeps the training over about {fit.wall_s / FLOOR_ROOM / 60:,.0f} min at any scale "
                "(docs/time-dilation.md); raise run.wall_limit, or take fewer or shorter checkpoints "
                "(checkpoint.saves, training.steps)")
    return (f"lower run.scale to {fit.scale:g} (x{fit.factor:g} there: {fit.wall_s / 60:,.1f} min), set "
            "run.wall_target (the run then picks the scale that fits it), or raise run.wall_limit")


#: run.wall_target: the smallest scale a fit goes to, as a share of run.scale (a smaller state is
#: mostly its files' structure, which does not shrink, and the probe's bytes no longer tell its rate)
LEAST_SHARE = 0.01
#: where the target is under every scale's time (the software's floor), the fit takes the largest
#: scale within this factor of the floor, not the smallest scale
FLOOR_ROOM = 1.25


@dataclass(frozen=True)
class ScaleFit:
    """run.wall_target's answer: the run goes at ``scale`` (at most ``asked``, run.scale) and dilation
    ``factor``; its training takes ``wall_s`` here (``asked_wall_s`` at run.scale); ``floor``: the
    target is under what any scale reaches (each phase's software gets its room at every scale)."""

    asked: float
    scale: float
    factor: float
    target_s: float
    wall_s: float
    asked_wall_s: float
    asked_factor: float = 1.0
    floor: bool = False

    @property
    def changed(self) -> bool:
        return self.scale != self.asked

    def line(self) -> str:
        return scale_fit_words(self.describe())

    def describe(self) -> dict:
        """results.json's ``scale_fit``."""
        return {"run_scale": self.asked, "scale": self.scale, "factor": self.factor, "target_s": self.target_s,
                "wall_s": self.wall_s, "run_scale_factor": self.asked_factor, "run_scale_wall_s": self.asked_wall_s,
                "floor": self.floor}


def fit_scale(phases: list[PhaseProbe], *, scale: float, wall, target_s: float,
              factor: float | None = None) -> ScaleFit:
    """The largest scale at most ``scale`` at which the run's training, ``wall(scale, factor)`` seconds
    here, fits ``target_s``, with the factor it needs there: ``factor`` where the dilation is given,
    else the one ``phases`` (every rank's, probed at ``scale``) need at that scale, their bytes
    shrunk with it and their host rates and software not (:attr:`PhaseProbe.needs`). The time falls
    with the scale towards a floor, the software's: where even ``LEAST_SHARE`` of ``scale`` does not
    fit, the largest scale within ``FLOOR_ROOM`` of the time at that share."""
    def factor_at(s: float) -> float:
        if factor is not None:
            return factor
        return nice(max((_at_scale(p, s).needs for p in phases), default=1.0))

    def time_at(s: float) -> float:
        return wall(s, factor_at(s))
    asked_wall, asked_factor = time_at(scale), factor_at(scale)
    if asked_wall <= target_s:
        return ScaleFit(scale, scale, asked_factor, target_s, asked_wall, asked_wall, asked_factor)
    low, high = scale * LEAST_SHARE, scale
    goal, floor = target_s, time_at(low) > target_s
    if floor:
        goal = FLOOR_ROOM * time_at(low)
    for _ in range(40):  # bisection: the time grows with the scale (its factor falls, but slower)
        mid = (low + high) / 2
        low, high = (mid, high) if time_at(mid) <= goal else (low, mid)
    digit = 10 ** (math.floor(math.log10(low)) - 1)
    readable = float(f"{math.floor(low / digit) * digit:.2g}")  # two digits, rounded down: it fits too
    s = readable if time_at(readable) <= goal and readable >= scale * LEAST_SHARE else low
    return ScaleFit(scale, s, factor_at(s), target_s, time_at(s), asked_wall, asked_factor, floor)


def _at_scale(p: PhaseProbe, scale: float) -> PhaseProbe:
    """Phase ``p`` as it would be probed at ``scale``: its bytes x scale / its scale, its host rate and
    software as they are."""
    return replace(p, node_bytes=int(p.node_bytes * scale / p.scale), scale=scale) if p.scale else p


def describe(phases: list[PhaseProbe], factor: float) -> dict:
    """results.json's ``dilation``: the factor and, per phase probed, what the design needs of the
    node and what this host moved."""
    worst = max(phases, key=lambda p: p.needs, default=None)
    return {"factor": factor, "auto": bool(phases),
            "set_by": None if worst is None or factor <= 1 else {"phase": worst.phase, "tier": worst.tier},
            "phases": [{"phase": p.phase, "tier": p.tier, "design_bytes_per_s": p.design_bps,
                        "host_bytes_per_s": p.host_bps if math.isfinite(p.host_bps) else None,
                        "fixed_s": p.fixed_s, "node_bytes": p.node_bytes,
                        "software_share": p.software_share if math.isfinite(p.software_share) else None, "needs": p.needs} for p in phases]}


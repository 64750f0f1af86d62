"""The rank's loads: its restorer (every rank reads, or one per data-parallel group), the loads after
training at their own dilation (a whole restore probed unpaced, then its tiers paced at the clock it
needs), the restore of the same state from each tier alone, and the page cache dropped before each.
A part of the rank's run (emulator/rank/run.py ``RankRun``), on its tiers, design and clock."""
from __future__ import annotations

import functools

from emulator import metrics
from emulator.checkpoint.broadcast_restore import make_restorer, restore_state
from emulator.checkpoint.restore import drop_cached_pages
from emulator.checkpoint.retry import RetryPolicy
from emulator.checkpoint.tally import Tally
from emulator.job.rank_tiers import pace_tier
from emulator.rank import dilation


class Loads:
    @functools.cached_property
    def _restore_state(self):
        """What this rank restores into: its state, or (ZeRO-0 DP member) a replica of its leader's."""
        return restore_state(self.cfg, self.design, self.state, self.comm.rank, self.placement.device)

    def _restorer(self, tiers=None, **kwargs):
        tiers = tiers or self.node_tiers + [("global", self.restoring_global)]
        kwargs = {"metrics": self.metrics, "tally": self.tally, "dcp": getattr(self.engine, "saver", None), **kwargs}
        return make_restorer(self.cfg, self._restore_state, tiers, self.comm, group=self.dp_group,
                             loop=self.ckpt.loop, mode=self.cfg.checkpoint.modes[-1], meta=self.meta,
                             policy=RetryPolicy.from_config(self.cfg.drain),
                             read_timeout_s=self.cfg.checkpoint.read_timeout_s, **kwargs)

    def _dilate_loads(self) -> None:
        """The loads' own factor (``auto``, docs/time-dilation.md): a whole restore from each tier they
        read, timed unpaced (its checksums and deserialisation too), then those tiers paced at it."""
        if not self.probe or not self.cfg.checkpoint.loads:  # a fixed factor, or nothing paced
            return
        bare = [(n, self.bare[n]) for n, _ in self.node_tiers] + [("global", self.bare["global"])]

        def restore(tiers):
            self._drop_page_cache()
            return self._restorer(tiers, metrics=metrics.NULL_METRICS, tally=Tally(metrics.NULL_METRICS)).load()
        sources = [[pair] for pair in bare] if self.memory is not None else [bare]
        self.load_clock, self.load_probe = dilation.load_clock(self.design, self.clock, self.comm, restore, sources)
        weight = self.bytes_weight
        self.load_tiers = {n: pace_tier(self.design, self.load_clock, self.comm, self.out.root, n, t,
                                        bytes_weight=weight, restoring=True) for n, t in bare}

    def _load_restorer(self, tiers=None):
        """The loads' restorer: on their own paced tiers where they have a factor of their own."""
        if not self.load_tiers:
            return self._restorer(tiers)
        names = [n for n, _ in tiers] if tiers else [n for n, _ in self.node_tiers] + ["global"]
        return self._restorer([(n, self.load_tiers[n]) for n in names], time_factor=self.load_clock.time_factor)

    def _tier_loads(self) -> list:
        """With a memory tier: one restore from each file tier alone, so the report sets the memory
        restore beside the NVMe and global restores of the same state."""
        if self.memory is None:
            return []
        tiers = self.node_tiers + [("global", self.restoring_global)]
        loads = []
        for pair in tiers:
            self._drop_page_cache()
            loads.append({**self._load_restorer([pair]).load().to_dict(), "from": pair[0]})
        return loads

    def run_loads(self) -> tuple[list, bool]:
        self._dilate_loads()
        restorer = self._load_restorer()
        records, dropped_all = [], True
        for _ in range(self.cfg.checkpoint.loads):
            dropped_all &= self._drop_page_cache()
            records.append(restorer.load())
        return records, dropped_all

    def _drop_page_cache(self) -> bool:
        """Before a load: node leaders drop cached pages (the page cache is per machine), by default
        only the checkpoint files' own on the tiers a load reads (checkpoint.page_cache_scope);
        whether all could."""
        dropped = True
        if self.comm.is_node_leader:
            ck = self.cfg.checkpoint
            tiers = [t for _, t in self.node_tiers] + [self.global_]
            dropped = ck.drop_page_cache and self.ckpt.loop.run(drop_cached_pages(ck.page_cache_scope, tiers))
        dropped_all = self.comm.all_min(1.0 if dropped else 0.0) == 1.0
        self.comm.barrier()
        return dropped_all

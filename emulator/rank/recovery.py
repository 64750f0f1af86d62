"""The rank's recoveries: after a torchrun restart (a crash, a replaced node) and after an injected node
loss, which nodes were lost and the failure's class, the copies their peers send back, the restore in
the order the design gives for that class (``Design.restore_order``), and the recovery's record.
A part of the rank's run (emulator/rank/run.py ``RankRun``), on its tiers, design and clock."""
from __future__ import annotations

from emulator.checkpoint.layout import list_steps
from emulator.checkpoint.node_loss import failure_class
from emulator.checkpoint.replicas import Fetched
from emulator.job.rank_tiers import build_lone_global
from emulator.rank.training import TrainedMark


class Recoveries:
    def _recover(self):
        """After a torchrun restart: restore the newest complete checkpoint and continue from it.
        The class is ``process`` when every node kept its host memory. Nodes that were replaced
        and came back with empty tiers were lost (class ``node``, or ``group`` when every holder
        of their copies went too): their surviving peers first send their copies back."""
        trained = TrainedMark.read(self.out.trained(self.comm.rank))
        failed_at = self.comm.all_max(max([trained] + [a["last_step"] for a in self._earlier_attempts()]))
        lost = self._lost_nodes()
        failure = failure_class(lost, self.comm.nodes, self._holders) if lost else "process"
        fetched = self._fetch_from_peers(lost) if lost else Fetched()
        restorer = self._restorer(self._recovery_tiers(failure))
        rec = restorer.load()
        if rec.ok and restorer.manifest is not None:
            lineage = restorer.manifest.meta.get("lineage") or []
            self.ckpt.continue_lineage(base=[[a, min(b, rec.step)] for a, b in lineage if a <= rec.step])
        self._add_recovery({**_recovery(failure, rec, max(int(failed_at), rec.step), fetched),
                            "lost_nodes": list(lost), "fetch_errors": fetched.errors[:5]})
        return rec

    def _lost_nodes(self) -> tuple:
        """Collective: the replaced nodes whose own tiers hold no checkpoint (the machine, its
        memory and NVMe are new); a replaced agent on a node that kept its tiers lost nothing."""
        empty = False
        if self.comm.node in self.membership.replaced and self.comm.is_node_leader:
            empty = not any(self.ckpt.loop.run(list_steps(tier))[1] for _, tier in self.node_tiers)
        return tuple(sorted({node for node, was_empty in self.comm.all_gather((self.comm.node, empty))
                             if was_empty}))

    def _add_recovery(self, recovery: dict) -> None:
        """Keep a recovery for the report; rank 0 publishes the slowest rank's at full size (collective)."""
        self.recoveries.append(recovery)
        clock = self.metrics.clock
        slowest = max(self.comm.all_gather(clock.fetch(recovery) + clock.load(recovery["load"])))
        if self.comm.rank == 0:
            self.metrics.observe_recovery(recovery["class"], slowest,
                                          recovery["lost_steps"] * self.design.step_seconds)

    def _lose_nodes(self, *, recover_local: bool = False) -> dict:
        """The injected node failure, then (``lose_nodes``; ``recover_local``: a local loss too) the
        recovery from what survived it."""
        loss, loop = self.node_loss, self.ckpt.loop
        if not loss.whole_node:
            failure = loss.lose_local(self.comm, self.local, loop)
            if recover_local:  # a node whose NVMe was replaced: its ranks read global storage alone
                rec = self._restorer(self._recovery_tiers("node")).load()
                self._add_recovery({**_recovery("node", rec, self.last_step, Fetched()), "lost_nodes": [loss.node]})
            return failure
        failure = loss.lose_nodes(self.comm, [t for _, t in self._host_folders], loop, holders=self._holders)
        fetched = self._fetch_from_peers(loss.nodes)
        if self.peer is not None:
            failure["fetch_errors"] = fetched.errors[:5]
        rec = self._restorer(self._recovery_tiers(failure["class"])).load()
        self._add_recovery({**_recovery(failure["class"], rec, self.last_step, fetched),
                            "lost_nodes": list(loss.nodes)})
        return failure

    def _recovery_tiers(self, failure_class: str) -> list:
        """Where a recovery from ``failure_class`` reads, nearest first, as the design orders it
        (``Design.restore_order``): a tier read ``alone`` is this node's own lone reader of it."""
        own = dict(self.node_tiers + [("global", self.restoring_global)])
        return [(name, self._lone_global() if alone else own[name])
                for name, alone in self.design.restore_order(failure_class) if own.get(name) is not None]

    def _lone_global(self):
        return build_lone_global(self.cfg, self.design, self.clock, self.comm, self.out.root,
                                 bytes_weight=self.bytes_weight)

    def _fetch_from_peers(self, lost: tuple) -> Fetched:
        """Collective: each lost node's replacement fetches its copy back from a surviving peer
        (nothing without a peer tier)."""
        if self.peer is None:
            return Fetched()
        fetched = self.ckpt.loop.run(self.peer.fetch_back(self.comm, lost, self.memory))
        if self.comm.node in lost and self.comm.is_node_leader:
            full_s = self.metrics.clock.fetch({"fetch_s": fetched.seconds, "fetch_paced_s": fetched.paced_s,
                                               "fetch_stream_s": fetched.stream_s})
            self.metrics.observe_phase("fetch", "peer", full_s, backend="gloo")
        return fetched


def _recovery(failure_class: str, rec, failed_at: int, fetched: Fetched) -> dict:
    """One rank's recovery from a failure of ``failure_class``: a peer fetch (node losses with a
    peer tier: its seconds, its streams' and its paced part), its restore, and the steps of work
    lost (trained after the restored checkpoint, before the failure)."""
    lost = max(0, failed_at - rec.step) if rec.ok else failed_at
    return {"class": failure_class, "lost_steps": lost, "failed_at": failed_at, "fetch_s": fetched.seconds,
            "fetch_stream_s": fetched.stream_s, "fetch_paced_s": fetched.paced_s,
            "seconds": fetched.seconds + rec.seconds, "load": rec.to_dict()}

"""The fixed catalogue of mutations scripts/mutate.sh tries (tests/support/mutate.py): one realistic
bug each in the modules the quick tier holds true, the design (emulator/design/), the file
primitives (tiers/fileops.py, tiers/safepath.py) and the results (emulator/results/).

Each names an exact snippet of its file, found there once (tests/unit/project/test_mutations.py
checks it, so the catalogue follows the code), what replaces it, the bug it stands for, and the
quick tests that must catch it, the likeliest first (pytest stops at the first failure).
"""
from __future__ import annotations

from dataclasses import dataclass

DESIGN = ("tests/unit/design", "tests/unit/planner", "tests/unit/simulation")
FILES = ("tests/unit/tiers", "tests/unit/checkpoint")
RESULTS = ("tests/unit/results", "tests/unit/rank", "tests/unit/cli/test_exit_status.py")


@dataclass(frozen=True)
class Mutation:
    id: str
    path: str
    old: str
    new: str
    why: str
    tests: tuple

    @property
    def area(self) -> str:
        return "emulator/design" if self.path.startswith("emulator/design/") else \
            "emulator/results" if self.path.startswith("emulator/results/") else self.path


def _m(id, path, old, new, why, tests=None, first=()) -> Mutation:
    area = DESIGN if path.startswith("emulator/design/") else \
        RESULTS if path.startswith("emulator/results/") or path == "emulator/fullsize.py" else FILES
    return Mutation(id, path, old, new, why, tuple(first) + tuple(tests or area))


COSTS, LINKS, FAILURES = "emulator/design/costs.py", "emulator/design/links.py", "emulator/design/failures.py"
JOB, MODEL, NAPKIN = "emulator/design/job.py", "emulator/design/model.py", "emulator/design/napkin.py"
FILEOPS, SAFEPATH = "tiers/fileops.py", "tiers/safepath.py"
SUMMARY, REPORT, VERDICT = "emulator/results/summary.py", "emulator/results/report.py", "emulator/results/verdict.py"
DESIGN_TIME, LEVELS = "emulator/results/design_time.py", "emulator/results/levels.py"
FULLSIZE = "emulator/fullsize.py"

MUTATIONS = (
    # ------------------------------------------------------------------ emulator/design
    _m("costs-one-replica", COSTS, "[(n, b * design.replicas) for n, b in _loads(design)]",
       "[(n, b) for n, b in _loads(design)]", "a peer copy costed at one replica whatever replicas says",
       first=["tests/unit/design/test_replicas.py"]),
    _m("costs-slowest-is-fastest", COSTS, "return max(fair_finish(limits, loads), default=0.0)",
       "return min(fair_finish(limits, loads), default=0.0)", "the job waits for its fastest node, not its slowest"),
    _m("costs-manifest-latency", COSTS, "(1 if name == \"global\" else 2) * t.latency_s",
       "(2 if name == \"global\" else 1) * t.latency_s", "a node tier's manifest latency counted on global"),
    _m("costs-drain-waves-floor", COSTS, "waves = -(-design.job.heaviest.files // design.drain_concurrency)",
       "waves = design.job.heaviest.files // design.drain_concurrency", "the drain's waves rounded down"),
    _m("costs-no-read-back", COSTS, "verify = _slowest(t.read, read_back_loads(design)) if verifies(design) else 0.0",
       "verify = 0.0", "a drain's checksum read-back costs nothing"),
    _m("costs-no-fixed-post", COSTS,
       'out["global"] += design.fixed_post_s + _latency(design, "global")',
       'out["global"] += _latency(design, "global")', "the fixed cost after a drain left out",
       first=["tests/unit/design/test_fixed_costs.py"]),
    _m("costs-lone-restore-smallest", COSTS, "[(1, max(b for _, b in loads))] if loads else []",
       "[(1, min(b for _, b in loads))] if loads else []", "a lone node's restore of the lightest node's bytes"),
    _m("costs-peer-fetch-faster", COSTS,
       "fetch = max(_slowest(t.read, own), _slowest(memory.write, own) if memory else 0.0)",
       "fetch = min(_slowest(t.read, own), _slowest(memory.write, own) if memory else 0.0)",
       "a peer fetch at the faster of the NIC and the memory write"),
    _m("costs-no-broadcast", COSTS, "read += max(b for _, b in loads) / design.links.peer_bps",
       "read += 0.0", "one reader per DP group: its broadcast to the group is free"),
    _m("costs-lost-node-alone", COSTS,
       'return max(restore_seconds(design, "global", alone=True), restore_seconds(design, others))',
       'return restore_seconds(design, "global", alone=True)', "a node loss: the survivors' restore not waited for"),
    _m("links-all-nodes-share", LINKS, "        moved, finish[i] = b, t\n        active -= nodes\n",
       "        moved, finish[i] = b, t\n", "a shared link divided over all nodes, not the active ones"),
    _m("links-rate-max", LINKS, "return min(self.node_bps, self.aggregate_bps / max(1, active_nodes))",
       "return max(self.node_bps, self.aggregate_bps / max(1, active_nodes))", "max for min: the NIC cap ignored"),
    _m("links-read-cost-inverted", LINKS, "return self.write.node_bps / self.read.node_bps",
       "return self.read.node_bps / self.write.node_bps", "a shared device's read cost upside down"),
    _m("links-no-drain-read-cap", LINKS, 'return {**tiers, "global": replace(g, drain=g.drain.capped(source.read.node_bps))}',
       "return tiers", "a drain faster than its node reads its own files"),
    _m("links-per-stream-rate", LINKS, "return LinkLimits(node_bps=rate_bps * streams)",
       "return LinkLimits(node_bps=rate_bps)", "a per-stream rate taken as the node's"),
    _m("failures-rate-in-hours", FAILURES, "return self.accelerators / (self.mttf_hours * HOUR)",
       "return self.accelerators / self.mttf_hours", "a failure rate per hour used as per second"),
    _m("failures-swapped-restart", FAILURES, "recovery[c][0], restarts.get(c, recovery[c][1])",
       "recovery[c][1], restarts.get(c, recovery[c][0])", "detection and restart swapped"),
    _m("failures-process-share", FAILURES, '"process": 1 - node - group', '"process": 1 - node',
       "the shares of the classes add up to more than 1"),
    _m("rung-node-keeps-nvme", "emulator/design/rungs/local.py", 'survives=("process",)',
       'survives=("process", "node")', "a lost node's NVMe survives it"),
    _m("job-heaviest-lightest", JOB, "return max(self.groups, key=lambda g: (g.node_bytes, g.file_bytes))",
       "return min(self.groups, key=lambda g: (g.node_bytes, g.file_bytes))", "the lightest node taken as the heaviest"),
    _m("model-recovery-farthest", MODEL, "return next(t for t in self.tiers if ladder.survives(cls, t))",
       "return [t for t in self.tiers if ladder.survives(cls, t)][-1]", "a recovery from the farthest surviving tier"),
    _m("napkin-file-floor", NAPKIN, "file_bytes = -(-checkpoint_bytes // accelerators)",
       "file_bytes = checkpoint_bytes // accelerators", "a napkin file's bytes rounded down"),
    # ------------------------------------------------------------------ tiers/fileops.py, tiers/safepath.py
    _m("publish-no-fsync", FILEOPS, "    if fd is not None:\n        os.fsync(fd)\n    os.replace(tmp, final)",
       "    os.replace(tmp, final)", "publish() renames a file whose data was never fsynced",
       first=["tests/unit/checkpoint/test_durability_order.py"]),
    _m("publish-no-dir-fsync", FILEOPS, "    os.replace(tmp, final)\n    fsync_dir(final.parent)\n",
       "    os.replace(tmp, final)\n", "publish() leaves the new name's folder entry unsynced"),
    _m("make-dirs-no-fsync", FILEOPS, "            continue  # another process made it: it fsyncs the parent\n"
       "        fsync_dir(folder.parent)\n", "            continue  # another process made it: it fsyncs the parent\n",
       "a new folder's entry never made durable"),
    _m("write-all-once", FILEOPS, "    while view:\n        n = os.write(fd, view)",
       "    if view:\n        n = os.write(fd, view)", "a short write taken as the whole",
       first=["tests/unit/tiers/test_fileops.py"]),
    _m("open-follows-links", FILEOPS, "fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=dir_fd)",
       "fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=dir_fd)",
       "a file opened through a planted link"),
    _m("open-any-kind", FILEOPS, "if not (check or (lambda s: stat.S_ISREG(s.st_mode)))(st):",
       "if not (check or (lambda s: True))(st):", "a FIFO or a device read as a file"),
    _m("copy-clones", FILEOPS, "return not all(fs_type(os.fstat(fd).st_dev) in NO_CLONE_FSTYPES for fd in (src_fd, dst_fd))",
       "return False", "a drain by copy_file_range, which clones on XFS and btrfs (system tier: file-system images)"),
    _m("subfolder-any-owner", SAFEPATH, "return Folder(_open_checked_folder(self.fd, name, shown, what, own=True), shown)",
       "return Folder(os.open(name, _DIR, dir_fd=self.fd), shown)",
       "a step folder another user made is written into", first=["tests/unit/tiers/test_shared_machine.py"]),
    _m("sticky-ignored", SAFEPATH, "    if not st.st_mode & stat.S_ISVTX:\n", "    if False:\n",
       "a folder others can write, without the sticky bit, accepted"),
    _m("others-links-followed", SAFEPATH, "                if not _trusted(st.st_uid):\n",
       "                if False:\n", "a link another user planted on the way is followed"),
    _m("root-folder-is-own", SAFEPATH, "if not (st.st_uid == os.geteuid() if own else _trusted(st.st_uid)):",
       "if not _trusted(st.st_uid):", "root's folder taken as the user's own",
       first=["tests/unit/tiers/test_safepath_folders.py"]),
    _m("group-is-others", SAFEPATH, "st.st_gid != os.getegid()", "st.st_gid == os.getegid()",
       "a folder its group may write counted by the wrong group",
       first=["tests/unit/tiers/test_safepath_folders.py"]),
    _m("replaced-folder-unseen", SAFEPATH, "        if (st.st_dev, st.st_ino) != self.ident:\n",
       "        if False:\n", "a tier folder replaced under the run goes unseen",
       first=["tests/unit/tiers/test_safepath_folders.py"]),
    _m("removes-others-files", SAFEPATH, "if not (stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()):",
       "if not stat.S_ISREG(st.st_mode):", "another user's file removed as the tool's own",
       first=["tests/unit/tiers/test_safepath_folders.py"]),
    # ------------------------------------------------------------------ emulator/results
    _m("deadline-miss-all-ranks", SUMMARY, 'sum(any(x["missed"] for x in by_step[s]) for s in steps)',
       'sum(all(x["missed"] for x in by_step[s]) for s in steps)', "a deadline miss counted when every rank missed",
       first=["tests/unit/results/test_ranks_disagree.py"]),
    _m("stall-p99-is-median", SUMMARY, '"stall_p99_s": _p(job_stall, 99)', '"stall_p99_s": _p(job_stall, 50)',
       "the stall p99 computed as the median", first=["tests/unit/results/test_ranks_disagree.py"]),
    _m("job-stall-best-rank", SUMMARY, "worst = lambda key, among=steps: [max(x[key] for x in by_step[s]) for s in among]",
       "worst = lambda key, among=steps: [min(x[key] for x in by_step[s]) for s in among]",
       "a checkpoint's stall taken from its fastest rank"),
    _m("percentile-off-by-one", SUMMARY, "return vals[max(0, math.ceil(q / 100 * len(vals)) - 1)]",
       "return vals[min(len(vals) - 1, math.ceil(q / 100 * len(vals)))]", "a percentile one rank too high"),
    _m("incomplete-any-rank", SUMMARY, 'sum(not all(x["global_complete"] for x in by_step[s]) for s in drained)',
       'sum(not any(x["global_complete"] for x in by_step[s]) for s in drained)',
       "a checkpoint incomplete only when no rank completed it"),
    _m("report-p99-row-mean", REPORT, '("stall / ckpt p99", lambda m: _dual(m, "stall_p99_s"))',
       '("stall / ckpt p99", lambda m: _dual(m, "stall_mean_s"))', "the report's p99 row shows the mean"),
    _m("verdict-ignores-at-risk", VERDICT, ',\n                ("at_risk", "checkpoint(s) not durable when training stopped"))',
       ")", "checkpoints at risk when training stopped are no miss"),
    _m("host-time-scaled", FULLSIZE, "return paced / k + (wall - paced)", "return paced / k + (wall - paced) / k",
       "this host's own time shrunk with the design's (flatters the tool)"),
    _m("waits-always-paced", FULLSIZE, 'wait = rec["wait_s"] if rec.get("missed") else 0.0',
       'wait = rec["wait_s"]', "the host's bookkeeping wait counted as paced time"),
    _m("levels-lag-fastest", LEVELS, 'lags = [max(v["lag_s"] for v in x) for x in complete]',
       'lags = [min(v["lag_s"] for v in x) for x in complete]', "a tier's lag from its fastest node",
       first=["tests/unit/results/test_ranks_disagree.py"]),
    _m("levels-nothing-at-risk", LEVELS, '"at_risk": len(steps) - len(complete)', '"at_risk": 0',
       "no checkpoint is ever at risk on a tier",
       first=["tests/unit/results/test_ranks_disagree.py"]),
)

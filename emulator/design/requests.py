"""A checkpoint's requests to an object store, and the floor the store's request ceilings put under them.

The one request model (docs/s3-requests.md works it by hand): request by request as the S3 tier
makes them, from the job's layout at full size (a run at ``run.scale`` writes smaller files, with
fewer parts):

* a file: one PUT up to one part, else CreateMultipartUpload, one UploadPart per part and
  CompleteMultipartUpload (tiers/s3_transfer.py); a drained file is then verified: ``size`` one
  HEAD, ``checksum`` a HEAD and the read-back (one GET up to ``single_get_threshold``, a ranged GET
  per part above it); a file the ranks write straight to the store is not (``verify="none"``);
* the global manifest: a HEAD of the run's lease, one PUT;
* retention in steady state (``keep`` + 1 complete checkpoints): a LIST, a GET per manifest, then
  for the oldest: a DELETE of its manifest, a LIST and a DELETE per file;
* a restore, per rank: the manifest's GET, a HEAD and the data as above (the rank's file is read
  as the run lays it out, emulator/checkpoint/file_plan.py: no ranged GETs for ``torch.load``'s
  structure); rank 0 alone lists the steps.

An object store admits so many requests a second per key prefix (AWS S3: 3,500 PUT-class, 5,500
GET and HEAD; tiers/s3_limits.py emulates it, ``tiers.global.emulate``), and a checkpoint's keys
share one prefix, its step's folder: the job's requests of one transfer take at least their count
over that ceiling (:func:`floor_seconds`), whatever the bandwidth. ``plan`` and ``simulate`` hold
every transfer of an object store to that floor; ``sizes`` prints it. A run of a design makes fewer,
smaller files' requests than the job it stands for: each of its requests is charged for the job's
requests of the same transfer and class it stands for (:func:`run_weights`), so its transfers meet
the job's floor.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace

from emulator.design.job import as_run_job
from tiers.s3_limits import AWS_GET_PER_S, AWS_PUT_PER_S, GET_CLASS, RequestWeights
from tiers.s3_limits import METHOD_OF_KIND as METHOD  # each counted kind's HTTP method, which the limits count by
from tiers.s3_transfer import upload_requests


@dataclass(frozen=True)
class Store:
    """An object store as a checkpoint's requests meet it: its part size, the size read back in one GET,
    and its requests a second per prefix (None: no limit); ``weights``: the job's requests each request
    stands for, where the requests are a run's."""

    part_bytes: int
    single_get_threshold: int
    put_per_s: float | None = AWS_PUT_PER_S
    get_per_s: float | None = AWS_GET_PER_S
    weights: RequestWeights = RequestWeights()

    @property
    def limited(self) -> bool:
        return self.put_per_s is not None or self.get_per_s is not None



def store_of(cfg) -> Store | None:
    """The global tier's store where its backend makes requests (``s3``): its part size, and the
    limits its ``emulate:`` states (AWS S3's where it states none), in requests per design second;
    None for any other backend."""
    tier = cfg.tiers.global_
    if tier.backend != "s3":
        return None
    part = tier.options.part_size_mib << 20
    e = tier.emulate
    limits = (e.put_per_s_per_prefix, e.get_per_s_per_prefix) if e is not None else (AWS_PUT_PER_S, AWS_GET_PER_S)
    return Store(part, 4 * part, *limits)


# --------------------------------------------------------------------------- counts

def _read_back(size: int, part_size: int, single_get_threshold: int) -> int:
    """GETs that read a whole object back: one up to the threshold, else one per part."""
    return 1 if size <= single_get_threshold else math.ceil(size / part_size)


def file_requests(files: int, file_bytes: int, part_size: int, verify: str, threshold: int) -> Counter:
    """The upload of ``files`` files of ``file_bytes`` each, and their verification."""
    per_file = upload_requests(file_bytes, part_size)
    if verify != "none":  # "none": written straight to the store, nothing drained to verify
        per_file["HEAD"] += 1
    if verify == "checksum":
        per_file["GET"] += _read_back(file_bytes, part_size, threshold)
    return Counter({k: v * files for k, v in per_file.items()})


def retention_requests(keep: int, files: int, *, deletes: bool = True) -> Counter:
    """A retention's requests on one tier: a LIST and ``keep`` + 1 manifest GETs; where the checkpoint
    went to it (``deletes``), the oldest's manifest DELETE, a LIST of its folder and a DELETE per file."""
    listing = Counter(LIST=1, GET=keep + 1)
    return listing + Counter(DELETE=1 + files, LIST=1) if deletes else listing


def commit_requests(files: int, keep: int) -> Counter:
    """The global manifest (after a HEAD of the run's lease: still ours?), then retention of the oldest
    of ``keep`` + 1 complete checkpoints."""
    return Counter(PUT=1, HEAD=1) + retention_requests(keep, files)


def checkpoint_requests(files: int, file_bytes: int, part_size: int, *, verify: str = "checksum",
                        keep: int = 2, single_get_threshold: int | None = None) -> dict:
    """Requests of one checkpoint of ``files`` files of ``file_bytes`` each, in steady state."""
    threshold = 4 * part_size if single_get_threshold is None else single_get_threshold
    return dict(file_requests(files, file_bytes, part_size, verify, threshold) + commit_requests(files, keep))


def restore_requests(files: int, file_bytes: int, part_size: int, *,
                     single_get_threshold: int | None = None) -> dict:
    """Requests of one restore by ``files`` ranks, each reading its own file: rank 0 alone lists the
    steps (no LIST storm); every rank GETs the manifest, HEADs and reads its file."""
    threshold = 4 * part_size if single_get_threshold is None else single_get_threshold
    per_rank = Counter(GET=1 + _read_back(file_bytes, part_size, threshold), HEAD=1)
    return {"LIST": 1, **{k: v * files for k, v in per_rank.items()}}


def job_requests(groups, part_size: int, *, verify: str, keep: int) -> tuple[dict, dict]:
    """(per checkpoint, per restore storm) of a whole job: ``groups`` of (nodes, files per node, bytes of
    the largest file), every file counted at its group's largest size."""
    ckpt, restore, files = Counter(), Counter(), 0
    for nodes, per_node, file_bytes in groups:
        n = nodes * per_node
        files += n
        ckpt += file_requests(n, file_bytes, part_size, verify, 4 * part_size)
        restore += Counter(restore_requests(n, file_bytes, part_size))
    restore["LIST"] = 1  # the job's rank 0 lists once, whatever the groups
    return dict(ckpt + commit_requests(files, keep)), dict(restore)


# --------------------------------------------------------------------------- the ceiling's floor

def limit_classes(counts: dict) -> dict:
    """{"put": n, "get": n}: requests as the store's limits count them (GET and HEAD, the rest)."""
    out = {"put": 0, "get": 0}
    for kind, n in counts.items():
        out["get" if METHOD.get(kind, "GET") in GET_CLASS else "put"] += n
    return out


def floor_seconds(counts: dict, store: Store | None, transfer: str = "", *,
                  unweighted: dict | None = None) -> float:
    """The least time ``counts`` requests of ``transfer`` (each at the store's weight for it) and
    ``unweighted`` ones to one prefix take at the store's ceilings (0: no limit)."""
    if store is None:
        return 0.0
    c, extra = limit_classes(counts), limit_classes(unweighted or {})
    n = {k: c[k] * store.weights.of(transfer, k) + extra[k] for k in c}
    return max(n["put"] / store.put_per_s if store.put_per_s else 0.0,
               n["get"] / store.get_per_s if store.get_per_s else 0.0)


def transfer_of(verify: str) -> str:
    """The transfer a copy to the store is: the drain's (verified), or the ranks' own writes (``"none"``)."""
    return "write" if verify == "none" else "drain"


def _files(groups) -> list:
    return [(g.nodes, g.files, g.file_bytes) for g in groups if g.node_bytes > 0]


def _file_counts(groups, store: Store, verify: str) -> Counter:
    counts = Counter()
    for nodes, per_node, file_bytes in _files(groups):
        counts += file_requests(nodes * per_node, file_bytes, store.part_bytes, verify, store.single_get_threshold)
    return counts


def _restore_counts(job, store: Store, readers: str, alone: bool) -> dict:
    """Every rank reads a file (its own, or with ``restore_readers: all`` the one holding its state), or
    only the writing ones with one reader per data-parallel group; each counted at the job's largest file."""
    groups = job.groups if readers == "all" else [g for g in job.groups if g.node_bytes > 0]
    ranks = max(g.files for g in groups) if alone else sum(g.nodes * g.files for g in groups)
    return restore_requests(ranks, max(g.file_bytes for g in job.groups), store.part_bytes,
                            single_get_threshold=store.single_get_threshold)


def transfer_floor_seconds(design, *, verify: str) -> float:
    """A checkpoint's copy of every node's files to the store (``verify``: its drain's check, or
    ``"none"`` where the ranks write straight to it) and its manifest: the requests' floor."""
    store = design.store
    if store is None:
        return 0.0
    return floor_seconds(_file_counts(design.job.groups, store, verify), store, transfer_of(verify),
                         unweighted=Counter(PUT=1, HEAD=1))


def restore_floor_seconds(design, *, alone: bool = False) -> float:
    """A restore from the store by every node at once (or one node ``alone``): its requests' floor."""
    store = design.store
    if store is None:
        return 0.0
    return floor_seconds(_restore_counts(design.job, store, design.restore_readers, alone), store)


# --------------------------------------------------------------------------- a run of the job

def run_weights(job, scale: float, store: Store, *, verify: str) -> RequestWeights:
    """What each request of a run of ``job`` (its emulated nodes at ``scale``) stands for: per transfer
    (the drain, the ranks' own writes straight to the store) and class, the full-size job's requests
    over the run's, both counted by this module's model. The run's requests meet the prefix its
    checkpoint's keys share with every node of the job: charged at these weights, they take the
    job's floor. A restore's requests stand for themselves (its listing and manifests are made in the
    same phase as its reads: weighed as the reads, a restore from a node tier would pay for them)."""
    run = as_run_job(job, scale)

    def ratio(verify_: str) -> tuple:
        f = limit_classes(_file_counts(job.groups, store, verify_))
        h = limit_classes(_file_counts(run.groups, store, verify_))
        return tuple(f[k] / h[k] if h[k] else 1.0 for k in ("put", "get"))
    return RequestWeights((("drain", *ratio(verify)), ("write", *ratio("none"))))


def run_store(cfg, job) -> Store | None:
    """The store a run of ``cfg`` on ``job``'s emulated nodes meets, its requests weighed as the job's
    (a run of a design; without one, each request stands for itself); None: no requests to weigh."""
    store = store_of(cfg)
    if store is None or cfg.design is None:
        return store
    return replace(store, weights=run_weights(job, cfg.run.scale, store, verify=cfg.drain.verify))

"""What a checkpoint's and a restore's S3 requests cost at the price table (docs/s3-requests.md).

A run counts its requests (tiers/s3_requests.py), but at ``run.scale`` its files are smaller and so
have fewer parts than the real job's: the full-size counts come from the one request model of the
job's layout (emulator/design/requests.py), priced here by ``cost:``; and their rates over the
simulated drains and restores.
"""
from __future__ import annotations

from emulator.design.requests import checkpoint_requests, job_requests, restore_requests
from tiers.s3_requests import PRICE_CLASS

GB = 1 << 30                  # AWS bills a GB as 2^30 bytes
DAYS_PER_MONTH = 730 / 24     # AWS's month for GB-months: 730 hours
DAY = 86400.0


def by_price_class(counts: dict) -> dict:
    """{"put": n, "get": n, "free": n} of a kind -> count mapping."""
    out = {"put": 0, "get": 0, "free": 0}
    for kind, n in counts.items():
        out[PRICE_CLASS.get(kind, "get")] += n
    return out


def requests_usd(counts: dict, cost) -> float:
    """What these requests cost at ``cost`` (a CostConfig)."""
    c = by_price_class(counts)
    return c["put"] / 1000 * cost.put_per_1000 + c["get"] / 1000 * cost.get_per_1000


def cost_figures(cost, *, checkpoint: dict, checkpoint_bytes: int, keep: int, interval_s: float,
                 restore: dict | None = None, restore_bytes: int = 0) -> dict:
    """USD per checkpoint, per day and per training run (``cost.run_days``) at ``interval_s``.

    Storage is the ``keep`` checkpoints retention holds; a day's figure is its
    checkpoints' requests plus that storage. A restore (requests and the bytes it reads
    out) is per restore: how many a run has depends on its failures, not its interval."""
    per_day = DAY / interval_s
    requests_day = requests_usd(checkpoint, cost) * per_day
    storage_day = keep * checkpoint_bytes / GB * cost.gb_month / DAYS_PER_MONTH
    out = {
        "price_list": cost.price_list, "interval_s": interval_s, "checkpoints_per_day": per_day,
        "per_checkpoint_usd": requests_usd(checkpoint, cost),
        "requests_per_day_usd": requests_day, "storage_per_day_usd": storage_day,
        "per_day_usd": requests_day + storage_day,
        "per_run_usd": (requests_day + storage_day) * cost.run_days, "run_days": cost.run_days,
    }
    if restore is not None:
        out["per_restore_usd"] = requests_usd(restore, cost) + restore_bytes / GB * cost.transfer_out_per_gb
    return out


def request_rates(requests: dict, seconds: float) -> dict:
    """Requests per second of each price class when ``requests`` are spread over ``seconds``."""
    return {k: v / seconds for k, v in by_price_class(requests).items() if k != "free"} if seconds > 0 else {}


def format_cost(figures: dict) -> str:
    """One line: per checkpoint, per day, per run (and per restore), with the price list."""
    line = (f"${figures['per_checkpoint_usd']:.4f} per checkpoint, ${figures['per_day_usd']:.2f} per day "
            f"({figures['checkpoints_per_day']:.0f} checkpoints: requests ${figures['requests_per_day_usd']:.2f}, "
            f"storage ${figures['storage_per_day_usd']:.2f}), ${figures['per_run_usd']:,.0f} per "
            f"{figures['run_days']:g}-day run")
    if "per_restore_usd" in figures:
        line += f", ${figures['per_restore_usd']:.2f} per restore"
    return line + f" [{figures['price_list']}]"


def job_figures(cfg, groups, *, interval_s: float, drain_s: float, restore_s: float) -> dict:
    """``simulate``'s S3 figures for a job of node ``groups`` (NodeGroup): requests per checkpoint
    and per restore storm (every node reading at once), computed from the layout; their rates over
    the drain's and the storm's simulated durations; the cost at ``interval_s``."""
    part = cfg.tiers.global_.options.part_size_mib * (1 << 20)
    verify = cfg.drain.verify if cfg.tiers.local is not None else "none"
    ckpt, restore = job_requests([(g.nodes, g.files, g.file_bytes) for g in groups], part,
                                 verify=verify, keep=cfg.checkpoint.keep)
    job_bytes = sum(g.nodes * g.node_bytes for g in groups)
    return {"source": "computed from the layout: files x parts + manifest + HEADs + retention",
            "checkpoint": ckpt, "restore": restore,
            "drain_per_s": request_rates(ckpt, drain_s), "restore_per_s": request_rates(restore, restore_s),
            "cost": cost_figures(cfg.cost, checkpoint=ckpt, checkpoint_bytes=job_bytes, keep=cfg.checkpoint.keep,
                                 interval_s=interval_s, restore=restore, restore_bytes=job_bytes)}


def format_job(fig: dict) -> list[str]:
    """``simulate``'s lines for ``job_figures``."""
    c, r = by_price_class(fig["checkpoint"]), by_price_class(fig["restore"])
    d, s = fig["drain_per_s"], fig["restore_per_s"]
    return [f"S3 requests, {fig['source']}: per checkpoint {c['put']:,} PUT-class, {c['get']:,} GET-class, "
            f"{d.get('put', 0):,.0f} PUT-class/s during the drain; per restore storm {r['get']:,} GET-class, "
            f"{r['put']:,} PUT-class (LIST), {s.get('get', 0):,.0f} GET-class/s",
            f"S3 cost at the simulated interval: {format_cost(fig['cost'])}"]


def plan_figures(cfg, *, job_bytes: int, files: int, interval_s: float) -> dict | None:
    """``tune``'s S3 cost: ``files`` equal files of the job's checkpoint at the recommended
    interval, from the layout; None when the global tier is not S3."""
    if cfg.tiers.global_.backend != "s3":
        return None
    part = cfg.tiers.global_.options.part_size_mib * (1 << 20)
    verify = cfg.drain.verify if cfg.tiers.local is not None else "none"
    file_bytes = -(-job_bytes // max(1, files))
    ckpt = checkpoint_requests(files, file_bytes, part, verify=verify, keep=cfg.checkpoint.keep)
    restore = restore_requests(files, file_bytes, part)
    return cost_figures(cfg.cost, checkpoint=ckpt, checkpoint_bytes=job_bytes, keep=cfg.checkpoint.keep,
                        interval_s=interval_s, restore=restore, restore_bytes=job_bytes)


__all__ = ["by_price_class", "checkpoint_requests", "cost_figures", "format_cost", "format_job", "job_figures",
           "job_requests", "plan_figures", "request_rates", "requests_usd", "restore_requests"]

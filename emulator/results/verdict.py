"""Whether a run's design met its goals: the misses that make ``--fail-on-miss`` exit 1.

A design misses when a checkpoint began before the previous one was durable (a deadline miss),
when a checkpoint never became complete on the tiers it was due on (incomplete, or still at risk
when training stopped), or when a load or a recovery failed. The exit statuses are in
emulator/errors.py.
"""
from __future__ import annotations

#: a mode's figure in results.json -> what a miss of it is called
_MODE_MISSES = (("deadline_misses", "deadline miss(es)"), ("incomplete", "incomplete checkpoint(s)"),
                ("at_risk", "checkpoint(s) not durable when training stopped"))


def misses(results: dict) -> list[str]:
    """What ``results`` (a run's results.json) shows the design missing, one phrase each; [] when it
    met its goals. An MLPerf run has no goal of its own beyond finishing: always []."""
    found = [f"{mode}: {m[key]} {word}" for mode, m in (results.get("modes") or {}).items()
             for key, word in _MODE_MISSES if m.get(key)]
    load = results.get("load") or {}
    if load_failed(results):
        found.append("a load failed: " + ((load.get("errors") or ["no complete checkpoint could be restored"])[0]))
    recovery = (results.get("faults") or {}).get("recovery")
    if recovery and not recovery.get("ok", True):
        found.append("the recovery after a restart failed")
    found += [f"the recovery after a {r['class']} failure failed" for r in results.get("recoveries") or []
              if not r.get("ok", True)]
    return found


def load_failed(results: dict) -> bool:
    """Whether the run's loads restored no checkpoint: a failed run whatever ``--fail-on-miss`` says."""
    load = results.get("load") or {}
    return bool(load.get("loads")) and not load.get("ok", True)


def tune_misses(result: dict) -> list[str]:
    """``tune``'s confirmation run: its drains must finish before the next checkpoint."""
    c = result["confirmation"]
    if c["drains_beat_next_checkpoint"] is None:
        return [f"tune's confirmation run was stopped after {c['checkpoints']} of {c['checks']} checkpoints: "
                "nothing confirmed"]
    if c["drains_beat_next_checkpoint"]:
        return []
    return [f"tune's confirmation run: {c['deadline_misses']} deadline miss(es), {c['incomplete']} incomplete "
            "checkpoint(s) at the recommended interval"]

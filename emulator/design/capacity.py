"""What a node's tiers can hold: a tier smaller than the checkpoints it keeps, met the same way everywhere.

A node tier (host memory, the NVMe) keeps its ``keep`` complete checkpoints and writes the next one
beside them: keep + 1 of the node's own, and in host memory the peer copies it holds for other
nodes too. Smaller than that, a write past its capacity fails (ENOSPC) once it holds what fits, and
every later checkpoint skips it. The emulator then writes the ranks' files straight to global
storage (``checkpoint.on_local_full: global``; the tiers that copy from the skipped one get nothing)
or skips the checkpoint (``skip``). The model engines (``plan``, ``simulate``) ask :func:`fitted`:
the tier, and the tiers that copy from it, leave the ladder (the design's notes say so), or the
design is refused (``skip``: no checkpoint would ever be taken).
"""
from __future__ import annotations

import math
from dataclasses import replace

from emulator.design import ladder
from emulator.errors import UserError
from emulator.units import DECIMAL, byte_family, fmt_bytes


def checkpoints_held(design, name: str) -> int:
    """How many of a node's checkpoints tier ``name`` holds at once: keep + 1, and in host memory with a
    peer tier, its own copy of each step it holds peer copies of and those copies (keep + 1 per node)."""
    own = design.tier(name).keep + 1
    peer = design.tier("peer")
    if name != "memory" or peer is None:
        return own
    return own + peer.keep + design.replicas * (peer.keep + 1)


def too_small(design) -> list:
    """(tier, capacity, bytes needed) of each node tier that cannot hold what it keeps."""
    out = []
    for name in design.tiers:
        cap = design.link(name).capacity_bytes if name in ladder.node_file_tiers() else None
        need = checkpoints_held(design, name) * design.job.heaviest.node_bytes if cap else 0
        if cap and need > cap:
            out.append((name, cap, need))
    return out


def fitted(design, on_local_full: str):
    """``design`` as its checkpoints can run: node tiers too small for what they keep left out with the
    tiers that copy from them (the ranks write the next tier), or refused where ``on_local_full`` is
    skip. Also refused: a tier with no rate at all (nothing to model it with)."""
    unpaced = [n for n in design.tiers if math.isinf(design.link(n).write.node_rate(1))]
    if unpaced:
        keys = " and ".join(f"{'design.global' if n == 'global' else f'design.node.{n}'} (or "
                            f"tiers.{n}.emulate.write_gib_s)" for n in unpaced)
        raise UserError(f"the {' and '.join(unpaced)} tier{'s have' if len(unpaced) > 1 else ' has'} no rate to "
                        f"model {'them' if len(unpaced) > 1 else 'it'} with: give {keys}, or --calibrate "
                        "RESULTS_JSON of a run that measured it")
    small = too_small(design)
    if not small:
        return design
    name, cap, need = small[0]
    glob = design.link("global")
    family = byte_family(glob.family if glob is not None else DECIMAL)
    said = (f"tiers.{name}: OVER CAPACITY: a capacity of {fmt_bytes(cap, family)} per node cannot hold the "
            f"{checkpoints_held(design, name)} checkpoints it keeps at once ({fmt_bytes(need, family)} on the "
            f"heaviest node)")
    if on_local_full == "skip":
        raise UserError(f"{said} and checkpoint.on_local_full is skip: no checkpoint would ever be taken")
    # the nearest file tier skipped, the ranks write the farthest: every tier before it gets nothing
    gone = set(design.tiers[:-1]) if name == ladder.nearest_file_tier(design.tiers) else {name}
    rungs = tuple(t for t in design.ladder if t.name not in gone)
    if rungs[0].every != 1:
        rungs = (replace(rungs[0], every=1),) + rungs[1:]
    note = f"{said}: every checkpoint skips it" + \
        (f" and the tiers that copy from it ({', '.join(sorted(gone - {name}))})" if gone - {name} else "") + \
        " (checkpoint.on_local_full: global)"
    return fitted(replace(design, ladder=rungs, notes=design.notes + (note,)), on_local_full)

"""run.wall_target without a run: the scale a run takes so that its training fits the target, from
what its probe found at run.scale (emulator/rank/dilation.py ``fit_scale``), and the config's key."""
from __future__ import annotations

import pytest

from emulator.config import load_config
from emulator.errors import ConfigError, UserError
from emulator.rank.dilation import PhaseProbe, fit_scale, nice

#: the peer design's training at full size: 2 modes x 320 steps of 6 s
TRAINING_S = 3840


def _wall(scale: float, factor: float) -> float:
    return TRAINING_S * scale * factor


def _peer_sends(scale: float) -> PhaseProbe:
    """Peer sends over loopback gloo: 0.5 GiB/s here against a 50 GB/s NIC, little software."""
    return PhaseProbe("replicate", "peer", 50e9, 0.5 * 2**30, 0.001, int(30e9 * scale), scale)


def test_a_run_too_long_for_its_wall_target_goes_at_the_largest_scale_that_fits():
    """x200 at scale 0.01 makes 128 min of training here; a 3-minute target takes the largest smaller
    scale at which the factor that scale needs fits it."""
    fit = fit_scale([_peer_sends(0.01)], scale=0.01, wall=_wall, target_s=180)
    assert fit.asked == 0.01 and fit.scale < 0.01
    assert fit.wall_s == pytest.approx(_wall(fit.scale, fit.factor)) and fit.wall_s <= 180
    assert fit.asked_wall_s == pytest.approx(_wall(0.01, nice(_peer_sends(0.01).needs))) and fit.asked_wall_s > 180
    assert fit.factor == nice(_peer_sends(fit.scale).needs)  # the factor of the scale it goes at
    bigger = fit.scale * 1.2
    assert _wall(bigger, nice(_peer_sends(bigger).needs)) > 180  # a fifth larger would not fit
    assert not fit.floor
    assert float(f"{fit.scale:.2g}") == fit.scale  # two digits: it reads well


def test_a_run_that_fits_keeps_its_scale():
    fit = fit_scale([_peer_sends(0.01)], scale=0.01, wall=_wall, target_s=3 * 3600)
    assert (fit.scale, fit.factor) == (0.01, nice(_peer_sends(0.01).needs)) and not fit.changed


def test_where_the_software_sets_a_floor_the_scale_stops_at_its_knee():
    """0.2 s of software a checkpoint for a 16 s write at full size: no scale makes training shorter
    than the factor that holds it needs; the fit stops within a quarter of that floor, not at the
    smallest scale, and says the target is under the floor."""
    def write(scale):
        return PhaseProbe("write", "local", 7e9, 6e9, 0.2, int(112e9 * scale), scale)
    wall = lambda s, f: 4500 * s * f  # noqa: E731
    fit = fit_scale([write(0.001)], scale=0.001, wall=wall, target_s=10)
    lowest = wall(1e-5, nice(write(1e-5).needs))
    assert 1e-5 < fit.scale < 0.001 and fit.wall_s <= 1.25 * lowest and fit.floor


def test_every_ranks_phases_decide_alike():
    slow, fast = _peer_sends(0.01), PhaseProbe("write", "memory", 20e9, 10e9, 0.0, int(30e9 * 0.01), 0.01)
    assert fit_scale([fast, slow], scale=0.01, wall=_wall, target_s=180) == \
        fit_scale([slow, fast], scale=0.01, wall=_wall, target_s=180)


def test_a_given_dilation_fits_by_its_own_factor():
    """run.dilation given: no probe, the factor is the config's at every scale."""
    fit = fit_scale([], scale=0.01, wall=_wall, target_s=180, factor=8)
    assert fit.factor == 8 and fit.wall_s <= 180 and _wall(fit.scale * 1.2, 8) > 180


def test_the_fit_reads_well_in_results_json():
    fit = fit_scale([_peer_sends(0.01)], scale=0.01, wall=_wall, target_s=180)
    d = fit.describe()
    assert d == {"run_scale": 0.01, "scale": fit.scale, "factor": fit.factor, "target_s": 180,
                 "wall_s": pytest.approx(fit.wall_s),
                 "run_scale_factor": nice(_peer_sends(0.01).needs), "run_scale_wall_s": pytest.approx(fit.asked_wall_s),
                 "floor": False}


# --------------------------------------------------------------------------- the config's key

def test_the_wall_target_is_a_time():
    assert load_config("llama3-8b").run.wall_target is None and load_config("default").run.wall_target == "45s"
    assert load_config("default", ["run.wall_target=3m"]).run.wall_target_s == 180
    with pytest.raises(ConfigError, match="^run.wall_target: 'soon' is not a time"):
        load_config("default", ["run.wall_target=soon"])


def test_the_run_refused_as_too_long_is_told_of_the_wall_target():
    cfg = load_config("default")
    with pytest.raises(UserError, match="run.wall_target"):
        cfg.check_wall(1e6)
    assert cfg.wall_seconds(cfg.run.scale, 10) == pytest.approx(
        cfg.steps_per_mode * cfg.training.step_seconds * len(cfg.run_modes) * cfg.run.scale * 10)


# --------------------------------------------------------------------------- a run refused as too long

def test_a_refusal_says_the_scale_that_would_fit():
    from emulator.rank.dilation import refusal_advice
    fit = fit_scale([_peer_sends(0.01)], scale=0.01, wall=_wall, target_s=3600)
    advice = refusal_advice(fit)
    assert advice.startswith(f"lower run.scale to {fit.scale:g}") and "run.wall_target" in advice


def test_a_refusal_at_the_software_floor_says_no_scale_helps():
    """The embedded default at 1,024 accelerators (tune's case): 0.8 MB a node at scale 0.001, this
    host's ~190 ms of software a write against the node's 126 ms at full size: no scale fits an hour."""
    from emulator.rank.dilation import refusal_advice
    write = lambda s: PhaseProbe("write", "local", 6.5 * 2**30, 0.5e9, 0.19, int(0.82 * 2**30 * s), s)  # noqa: E731
    wall = lambda s, f: 27000 * s * f  # noqa: E731 - tune's 75-minute measurement at k = 1/6
    fit = fit_scale([write(0.001)], scale=0.001, wall=wall, target_s=3600)
    assert fit.floor and fit.wall_s > 3600
    advice = refusal_advice(fit)
    assert "no scale fits" in advice and "lower run.scale" not in advice and "run.wall_limit" in advice


def test_a_given_dilation_with_a_wall_target_runs_at_the_scale_that_fits_it():
    """The launcher refuses a given factor too long at run.scale only where no wall target lowers
    the scale; the ranks then go at the scale that fits, and refuse one that still does not."""
    from emulator.launch.runner import check_given_dilation
    from emulator.rank.dilation import decide
    cfg = load_config("default", ["run.dilation=2000", "run.wall_target=2m"])
    check_given_dilation(cfg, None)  # the target lowers the scale: not refused here
    with pytest.raises(UserError, match="run.wall_limit"):
        check_given_dilation(load_config("default", ["run.dilation=2000", "run.wall_target=null"]), None)
    clock, phases, fit = decide(cfg, None, None, None, {}, None)
    assert phases == [] and fit.factor == clock.dilation == 2000 and clock.scale == fit.scale < cfg.run.scale
    assert cfg.wall_seconds(fit.scale, 2000) <= 120
    with pytest.raises(UserError, match="run.wall_limit"):  # under a hundredth of run.scale: refused
        decide(load_config("default", ["run.dilation=2000", "run.wall_target=2m", "run.scale=1"]),
               None, None, None, {}, None)


def test_sync_checkpoints_stall_the_training_and_count_in_its_wall_time():
    """A sync checkpoint stalls training for its whole pipeline (the design's sync stall at full size,
    x the time factor here): the estimate counts each, as it counts the steps."""
    from rundesign import run_design

    from emulator.design.costs import checkpoint_costs
    from emulator.rank.dilation import sync_stall_seconds
    cfg = load_config("design-llama70-128-nvme-s3")
    design = run_design(cfg)
    stalls = sync_stall_seconds(cfg, design)
    assert stalls == pytest.approx(checkpoint_costs(design).sync_stall_s * cfg.checkpoint.saves) and stalls > 0
    assert cfg.wall_seconds(0.01, 10, stalls) == pytest.approx(cfg.wall_seconds(0.01, 10) + stalls * 0.1)
    assert sync_stall_seconds(load_config("design-memory-peer-pfs"), run_design(load_config("design-memory-peer-pfs"))) == 0


def test_a_run_fitted_to_a_smaller_scale_weighs_its_requests_at_that_scale():
    """A scaled run's S3 requests each stand for the job's (emulator/design/requests.py ``run_weights``):
    at a smaller scale its files have fewer parts, each standing for more of the job's. Fitted down by
    run.wall_target, a run that kept run.scale's weights drained design-memory-nvme-s3 in 86 s at full
    size against its 107 s request floor."""
    from emulator.design import resolve
    from emulator.design.emulation import rescaled
    from emulator.design.requests import run_weights
    cfg = load_config("design-memory-nvme-s3")
    design = resolve(cfg, run=True)
    fitted = rescaled(design, cfg.run.scale / 20, cfg.run.scale)
    want = run_weights(design.job, cfg.run.scale / 20, design.store, verify=design.verify)
    assert fitted.emulation.node(0).requests == want != design.emulation.node(0).requests

"""Closed-loop regression of the slider-crank scenario ([Aghili] §8), shortened to 5.5 s (11 crossings)."""

import pytest
from plotcheck import assert_plots_ok

from cmstack.models.errors import ConfigError
from cmstack.scenarios._common import run_scenario
from cmstack.scenarios.slider_crank import NAME, run


@pytest.mark.slow
def test_slider_crank_targets(tmp_path, cmstack_baseline):
    m, out = run_scenario(NAME, run, out=tmp_path, overrides={"duration": 5.5})
    assert m["singular_crossings"] >= 10
    assert m["singular_crossings_mujoco"] >= 10
    assert m["constraint_error_max"] <= 1e-9
    assert m["energy_drift_rel"] <= 1e-4  # unforced, undamped, 10 s
    assert m["mujoco_vs_projection_max_rad"] <= 1e-3
    assert m["tracking_rmse_rad"] <= 1e-3
    assert_plots_ok(out, ["tracking", "plants_energy"])
    # the passive-joint law is unsolvable only in the rank-tolerance band around each crossing, and
    # with that band the commanded torque stays within the 50 N·m motor (no spikes)
    assert m["unsolvable_steps_mujoco"] <= 4 * m["singular_crossings_mujoco"]
    assert m["motor_saturations_mujoco"] == 0 and m["max_torque_nm"] <= 50.0
    assert m["ok"] is True
    assert (out / "log.npz").is_file() and (out / "plots" / "tracking.png").is_file()
    cmstack_baseline.check(out)  # e_theta, q, tau, loop residual and metrics: tests/baselines/<this test>/


def test_bad_config_is_refused(tmp_path):
    with pytest.raises(ConfigError):
        run_scenario(NAME, run, out=tmp_path, overrides={"controller": "nope"})
    with pytest.raises(ConfigError):
        run_scenario(NAME, run, out=tmp_path / "b", sets=["no_such_key=1"])
    with pytest.raises(ConfigError, match="track_after"):
        run_scenario(NAME, run, out=tmp_path / "c", overrides={"duration": 0.5})
    assert "track_after" in (tmp_path / "c" / "metrics.json").read_text()  # the reason is kept
    with pytest.raises(ConfigError, match="link_length"):  # the lengths are the model file's now
        run_scenario(NAME, run, out=tmp_path / "d", sets=["link_length=0.5"])
    side = tmp_path / "crank_passive.toml"  # not the paper's mechanism: refused, naming the files
    side.write_text(
        'passive = ["crank"]\n[[loop]]\nframe_a = "base"\nframe_b = "slider_point"\nkind = "plane"\n'
    )
    with pytest.raises(
        ConfigError, match="crank_passive.toml: expected .*rod passive.*passive \\['crank'\\]"
    ):
        run_scenario(NAME, run, out=tmp_path / "e", overrides={"loops": str(side)})

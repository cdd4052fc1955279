"""Closed-loop regression of DAC law (III) on the MuJoCo chain ([Eslami] §4.2), shortened.

4 s with thrusters (the first disturbance pulse, at 3 s, falls inside the averaged last half), 2 s with
joint motors on the welded chain (the initial 0.11 m offset is gone by 0.5 s; the errors are averaged over
[1, 2] s, nearer the transient than a longer run's last half, and the closest approach to the spheres is at
0.04 s), and 1.5 s without the obstacle potential to show it is what keeps the bodies out of the spheres
(they enter them at 0.14–0.34 s)."""

import numpy as np
import pytest
from plotcheck import assert_plots_ok

from cmstack.models.errors import ConfigError
from cmstack.scenarios._common import run_scenario
from cmstack.scenarios.chain_task_space import NAME, run


def test_chain_task_space_thrusters(tmp_path, cmstack_baseline):
    m, out = run_scenario(NAME, run, out=tmp_path, overrides={"duration": 4.0})
    assert m["ee_error_mean_m"] <= 1e-3
    assert m["ee_error_mean_rad"] <= 1e-3
    assert m["min_obstacle_clearance_m"] > 0
    assert np.isfinite(m["lyapunov_increase_max"])
    assert m["allocation_residual_max"] == 0.0
    assert m["ok"] is True
    log = np.load(out / "log.npz")
    assert str(log["mjcf_path"]).endswith("mjcf/chain5.xml")
    assert log["plant_qpos"].shape == (len(log["t"]), 23)
    V, t = log["V"], log["t"]
    assert V[np.searchsorted(t, 2.9)] < 1e-3 * V[0]  # V decays by orders of magnitude before the pulse
    assert (out / "plots" / "ee_tracking.png").is_file() and (out / "plots" / "trace.png").is_file()
    assert_plots_ok(out, ["ee_tracking", "trace"])
    cmstack_baseline.check(out)  # e_pos, e_att, q, tau, allocation residual: tests/baselines/<this test>/


def test_chain_task_space_joint_motors(tmp_path):
    m, _ = run_scenario(NAME, run, out=tmp_path, overrides={"duration": 2.0, "rhs": "joint"})
    assert m["ee_error_mean_m"] <= 1e-3
    assert m["ee_error_mean_rad"] <= 1e-3
    assert m["min_obstacle_clearance_m"] > 0
    assert m["allocation_residual_max"] <= 1e-8  # fixed base, 3-axis motors: fully actuated


def test_chain_task_space_motor_limits_enter_the_allocation_qp(tmp_path):
    """45 N·m per motor axis holds the cantilevered chain but not the initial transient: the QP saturates,
    the residual is reported, the limit is never exceeded, and tracking recovers."""
    m, _ = run_scenario(
        NAME, run, out=tmp_path, overrides={"duration": 2.0, "rhs": "joint", "motor_limit": 45.0}
    )
    assert m["allocation_saturated_steps"] > 0 and m["allocation_residual_max"] > 1.0
    assert m["motor_moment_max_nm"] <= 45.0 * (1 + 1e-6)
    assert m["ee_error_mean_m"] <= 1e-3 and m["ee_error_mean_rad"] <= 1e-3


def test_chain_task_space_without_potential_hits_the_spheres(tmp_path):
    m, _ = run_scenario(NAME, run, out=tmp_path, overrides={"duration": 1.5, "obstacle_gain": 0.0})
    assert m["min_obstacle_clearance_m"] < 0
    assert m["ee_error_mean_m"] <= 1e-3  # the task itself is unaffected


def test_chain_task_space_refuses_bad_config(tmp_path):
    with pytest.raises(ConfigError):
        run_scenario(NAME, run, out=tmp_path / "a", overrides={"rhs": "wheels"})
    with pytest.raises(ConfigError):
        run_scenario(NAME, run, out=tmp_path / "b", overrides={"initial_bend_rad": [0.1]})

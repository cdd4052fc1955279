"""Balloon of [Alazard] §4 (Table 1): the three engines describe one system, and the shortened scenario
meets the agreement targets (FD/ID to 1e-9, trajectory vs Pinocchio to 1e-6, 2 s vs MuJoCo to 1e-3,
energy drift with the dampers off to 1e-6).

The run is shortened to 2.5 s (the scenario's seven 20 s runs take ~20 s with the compiled TITOP sweeps,
and the suite's budget is minutes for everything).  Both windows hold the part of the motion that the targets
test: the pendulums fall
from ±170° and the largest energy error of the undamped run is reached at t = 0.82 s (over 4 s it is the
same error, and the ratio to the kinetic energy peak is 8.4e-9 at 2 s, 8.1e-9 at 4 s); the TITOP–Pinocchio
difference stays at round-off (1.5e-14 at 2.5 s, 5.4e-14 at 5 s), eight decades under its bound."""

import mujoco
import numpy as np
import pinocchio as pin
import pytest
from plotcheck import assert_plots_ok

from cmstack.models.errors import ConfigError
from cmstack.models.titop import quat_to_R
from cmstack.scenarios._common import default_config, run_scenario
from cmstack.scenarios.balloon import (
    NAME,
    Params,
    mujoco_model,
    pin_to_mujoco_qpos,
    pinocchio_fd,
    pinocchio_model,
    qdot,
    run,
    titop_fd,
    titop_system,
)


def _random_state(rng):
    quat = rng.normal(size=4)
    q = np.concatenate((rng.normal(size=3), quat / np.linalg.norm(quat), rng.normal(size=3)))
    return q, rng.normal(size=9) * 2


def test_three_engines_have_the_same_dynamics():
    """MuJoCo's qacc (world linear velocity convention) mapped to body-frame ν̇ equals Pinocchio's ABA
    and the TITOP forward dynamics, with buoyancy, spring and dampers, at random states."""
    cfg = default_config(NAME)
    P = Params(cfg)
    model, data = pinocchio_model(cfg, P)
    fd_p, fd_t = pinocchio_fd(model, data, P), titop_fd(titop_system(P), P)
    m = mujoco_model(cfg, P)
    d = mujoco.MjData(m)
    rng = np.random.default_rng(3)
    for _ in range(10):
        q, v = _random_state(rng)
        R = quat_to_R(q[3:7])
        d.qpos[:] = pin_to_mujoco_qpos(q)
        d.qvel[:] = np.concatenate((R @ v[:3], v[3:]))
        mujoco.mj_forward(m, d)
        a_mj = np.concatenate((R.T @ d.qacc[:3] - np.cross(v[3:6], v[:3]), d.qacc[3:]))
        a_p = fd_p(q, v)
        assert np.allclose(a_mj, a_p, atol=1e-9)
        assert np.allclose(fd_t(q, v), a_p, atol=1e-9)


def test_qdot_matches_pinocchio_integrate():
    cfg = default_config(NAME)
    model, _ = pinocchio_model(cfg, Params(cfg))
    rng = np.random.default_rng(4)
    q, v = _random_state(rng)
    h = 1e-7
    fdq = (pin.integrate(model, q, v * h) - pin.integrate(model, q, -v * h)) / (2 * h)
    assert np.allclose(qdot(q, v), fdq, atol=1e-6)


@pytest.mark.slow
def test_balloon_targets_shortened(tmp_path, cmstack_baseline):
    m, out = run_scenario(
        NAME, run, out=tmp_path, overrides={"duration": 2.5, "energy_duration": 2.0, "random_states": 50}
    )
    assert m["fd_vs_pinocchio_max"] <= 1e-9
    assert m["id_vs_pinocchio_max"] <= 1e-9
    assert m["traj_vs_pinocchio_max"] <= 1e-6  # first 2.5 s, same RK4 and step
    assert m["traj_vs_mujoco_max"] <= 1e-3  # first 2 s, MuJoCo RK4, same step
    assert m["energy_drift_rel"] <= 1e-6  # dampers off
    assert m["ok"] is True
    log = np.load(out / "log.npz")
    assert log["plant_qpos"].shape == (len(log["t"]), 10)
    assert str(log["mjcf_path"]).endswith("balloon.xml")
    # the logged replay is the shown engine's motion: the initial pendulum angles of Table 1
    assert np.allclose(log["plant_qpos"][0, 8:], np.deg2rad([170.0, -170.0]))
    assert_plots_ok(out, ["dofs", "differences_energy"])
    cmstack_baseline.check(
        out, signals=["q", "diff_*"]
    )  # the motion and the engines' differences: tests/baselines/


def test_bad_config_is_refused(tmp_path):
    with pytest.raises(ConfigError):
        run_scenario(NAME, run, out=tmp_path / "a", overrides={"engine": "simscape"})
    with pytest.raises(ConfigError):  # the URDF would no longer describe the config's system
        run_scenario(NAME, run, out=tmp_path / "b", overrides={"pendulum1.mass": 2.5})
    with pytest.raises(ConfigError):
        run_scenario(NAME, run, out=tmp_path / "c", sets=["slider.stiffnes=1"])

"""PIDC with the passive-joint law on the series-parallel manipulator ([Dastranj] plant, [Aghili] law): the arm read
from mjcf/series_parallel.xml as a closed chain (its triangle's connect the loop, ζ and α passive), the generic
PIDC on robot.loops, driven from the measured (φ, θ, δ) (controllers.pidc_adapters.ActuatedJointsPIDC)."""

import numpy as np
import pytest

from cmstack.models.partition import PartitionModel
from cmstack.models.robot import Robot
from cmstack.scenarios._common import default_config, run_scenario
from cmstack.scenarios.series_parallel import NAME, build_pidc, closed_chain_robot, run


@pytest.mark.slow
def test_series_parallel_pidc_closed_loop_shortened(tmp_path):
    m, _ = run_scenario(NAME, run, out=tmp_path, overrides={"controller": "pidc", "duration": 3.0})
    assert m["rmse_steady_phi_rad"] <= 0.01
    assert m["rmse_steady_theta_rad"] <= 0.01
    assert m["rmse_steady_delta_m"] <= 0.002
    assert m["loop_closure_error_max_m"] <= 1e-3


def _sp_cfg(**over):
    cfg = default_config(NAME)
    cfg.update(over)
    return cfg


@pytest.mark.parametrize("bodies", [False, True])
def test_series_parallel_closed_chain_is_the_partition_model(bodies):
    """The series-parallel scenario's PIDC model (mjcf/series_parallel.xml read as a closed chain, its connect the
    loop, ζ and α passive; cylinder and piston massless unless model_actuator_bodies) against the partition model
    of [Dastranj] in (φ, θ, δ) (per-body Jacobians, the map ζ(δ) (28)): the torque PIDC gives on the actuated joints
    for a zero tracking error is the partition model's inverse dynamics Q_a = Γ q̈ + h − Q_e, to 1e-9 relative."""
    cfg = _sp_cfg(model_actuator_bodies=bodies)
    pm = PartitionModel(
        cfg["urdf"], L0=cfg["L0"], l0=cfg["l0"], delta_range=cfg["delta_range"], with_actuator=bodies
    )
    robot = closed_chain_robot(cfg)
    assert robot.actuated_joints == ["phi", "theta", "delta"] and robot.passive_joints == [
        "zeta",
        "cylinder_hinge",
    ]
    assert (robot.model.inertias[robot.joint_index("delta") + 1].mass == 1.0) is bodies
    rng = np.random.default_rng(4)
    for _ in range(6):
        q = np.array([rng.uniform(-1, 1), rng.uniform(-0.5, 0.8), rng.uniform(0.03, 0.17)])
        v = rng.normal(size=3) * np.array([0.5, 0.5, 0.05])
        qdd = rng.normal(size=3)
        ctl = build_pidc(cfg, lambda t, q=q, v=v, a=qdd: (q, v, a))  # zero error: the law's u = q̈_d
        tau = ctl(0.0, q, v)
        x, xd = ctl.complete(q, v)
        zeta = pm.map.zeta(q[2])
        assert abs(x[2] - zeta) < 1e-13 and abs(x[3] - zeta / 2) < 1e-13
        assert abs(xd[2] - pm.map.dzeta(q[2]) * v[2]) < 1e-12
        assert ctl.info.solvable and abs(ctl.info.passive_residual) < 1e-9
        ref = pm.inverse_dynamics(q, v, qdd)
        assert np.linalg.norm(tau - ref) <= 1e-9 * np.linalg.norm(ref), (tau, ref)


def test_series_parallel_massless_actuator_is_the_open_tree():
    """With the cylinder and piston massless, the closed chain's M and h in (φ, θ, ζ) are the open tree's of
    urdf/series_parallel.urdf (the robust law's model) and the actuator's rows are zero: the same dynamics."""
    robot = closed_chain_robot(_sp_cfg())
    tree = Robot("urdf/series_parallel.urdf")
    rng = np.random.default_rng(9)
    for _ in range(5):
        q = robot.assemble(robot.q_initial + 0.03 * rng.normal(size=robot.nq))
        v = rng.normal(size=robot.nv)
        k, kt = robot.update(q, v), tree.update(q[:3], v[:3])
        assert np.allclose(k.M[:3, :3], kt.M, rtol=0, atol=1e-12 * np.abs(kt.M).max())
        assert np.allclose(k.h[:3], kt.h, rtol=0, atol=1e-12 * np.abs(kt.h).max())
        assert np.abs(k.M[3:]).max() == 0.0 and np.abs(k.h[3:]).max() == 0.0

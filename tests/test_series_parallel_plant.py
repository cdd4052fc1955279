"""The series-parallel plant against a rigid closed chain (issue 16): MuJoCo's own M, constraint Jacobian and
J̇q̇ give a rigid q̈ that an independent formulation (the partition model with the cylinder and piston,
models/partition.py) reproduces, and the plant's q̈ stays within 1e-2 of it along a closed-loop run."""

import mujoco
import numpy as np

from cmstack.models.partition import PartitionModel
from cmstack.scenarios import series_parallel as sp
from cmstack.scenarios._common import resolve_config, run_scenario


def _jac(check, qpos):
    m = check.model
    d = mujoco.MjData(m)
    d.qpos[:] = qpos
    mujoco.mj_kinematics(m, d)
    mujoco.mj_comPos(m, d)
    J = []
    for sid in check.sites:
        jp = np.zeros((3, m.nv))
        mujoco.mj_jacSite(m, d, jp, None, sid)
        J.append(jp)
    return J[0] - J[1]


def test_rigid_qacc_from_mujoco_matches_the_partition_model():
    cfg = resolve_config("series_parallel")
    plant = sp.build_plant(cfg)
    check = sp.RigidLoopCheck(plant)
    pm = PartitionModel(
        cfg["urdf"], L0=cfg["L0"], l0=cfg["l0"], delta_range=cfg["delta_range"], with_actuator=True
    )
    rng = np.random.default_rng(0)
    for _ in range(5):
        q = np.array([rng.uniform(-1, 1), rng.uniform(0.1, 0.7), rng.uniform(0.03, 0.17)])
        v = rng.normal(size=3) * [0.5, 0.5, 0.1]
        sp.reset_plant(plant, cfg, q, v)
        Q = np.array([50 * rng.normal(), 800 + 100 * rng.normal(), 200 + 50 * rng.normal()])
        plant.data.ctrl[:] = Q
        a_mj, a_rig, J, jdq = check.accelerations(plant.data)
        d = check.data
        # the connect rows are J_site1 − J_site2, and J̇q̇ is their rate along q̇ (central differences)
        np.testing.assert_allclose(J, _jac(check, d.qpos), atol=1e-12)
        h = 1e-6
        fd = (_jac(check, d.qpos + h * d.qvel) - _jac(check, d.qpos - h * d.qvel)) @ d.qvel / (2 * h)
        np.testing.assert_allclose(jdq, fd, rtol=1e-6, atol=1e-9)
        assert np.abs(jdq).max() > 1e-4
        np.testing.assert_allclose(J @ a_rig + jdq, 0.0, atol=1e-10)
        # independent formulation: Γ q̈ + h − Q_e = Q_a on the open tree with ζ(δ), cylinder and piston
        tm = pm.compute(q, v)
        qdd = np.linalg.solve(tm.Gamma, Q + tm.Qe - tm.h)
        np.testing.assert_allclose(a_rig[check.dofs], qdd, rtol=1e-8, atol=1e-9)
        # a freshly closed state: MuJoCo's reference acceleration has no J̇q̇, so δ̈ differs visibly
        assert check(plant.data) > 1e-3


def test_plant_qacc_is_near_rigid_along_a_run(tmp_path):
    m, _ = run_scenario(sp.NAME, sp.run, out=tmp_path, overrides={"duration": 1.5, "qacc_check_every": 5})
    assert m["plant_vs_rigid_qacc_rel"] <= 1e-2
    assert m["loop_closure_error_max_m"] <= 1e-6

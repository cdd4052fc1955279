"""The shipped closed chains (mjcf/five_bar.xml, four_bar.xml, delta.xml, slider_crank.xml, series_parallel.xml;
urdf/five_bar.urdf and urdf/slider_crank.urdf with their loops sidecars), each cross-validated on random assembled
states:

* forward dynamics (the projection plant's (22) on the loops' rows, damping included) against Pinocchio's own
  ``constraintDynamics`` on the constraint models *its* MJCF parser reads from the same file: <= 1e-9 relative;
* inverse dynamics with passive joints (PIDC's closed form (60-62)) against a KKT solve of our own
  [Bₐ Jᵀ] [τₐ; λ] = M q̈ + h: the same torque, zero on every passive joint, and it reproduces q̈;
* the MuJoCo plant (plant_from_mjcf / plant_from_urdf, loops as equalities) against the rigid model.

The slider-crank scenario's model, the URDF cut at C with its rail as a ``plane`` closure (the slider lumped at C),
is checked against the MJCF mechanism with the slider as a body (Pinocchio's constraintDynamics on it); the
series-parallel arm's controller model (the MJCF's closed chain, cylinder and piston massless) against the
partition model of [Dastranj]: tests/test_pidc_series_parallel.py."""

from __future__ import annotations

import mujoco
import numpy as np
import pinocchio as pin
import pytest

from cmstack.controllers.pidc import PIDC
from cmstack.models.loops import ClosureSet
from cmstack.models.mjcf import wrapped_mjcf
from cmstack.models.projection import project
from cmstack.models.robot import Robot
from cmstack.sim.mjcf_plant import plant_from_mjcf
from cmstack.sim.projection_sim import ProjectionPlant
from cmstack.sim.urdf_plant import plant_from_urdf

MECHANISMS = {
    "five_bar": "mjcf/five_bar.xml",
    "four_bar": "mjcf/four_bar.xml",
    "delta": "mjcf/delta.xml",
    "slider_crank": "mjcf/slider_crank.xml",
    "series_parallel": "mjcf/series_parallel.xml",
}
#: measured medians of |q̈_MuJoCo − q̈_rigid| / |q̈_rigid| at random torques (the soft equalities' regularizer
#: (1 − d)/d at MuJoCo's largest impedance d = 0.9999): five-bar 8.6e-3, four-bar 2.9e-5, Delta 2.3e-2,
#: slider-crank 2.4e-5, series-parallel 2.0e-5 (max of the 10 states: 3.3e-5, 4.5e-5)
MUJOCO_QACC_REL = {
    "five_bar": 2e-2,
    "four_bar": 1e-4,
    "delta": 5e-2,
    "slider_crank": 1e-4,
    "series_parallel": 1e-4,
}
#: spread of the random states about q_initial (rad, m): the series-parallel arm's stroke stays inside its
#: 0.2 m range (MuJoCo's joint limits would add rows the rigid model does not have)
SPREAD = {"series_parallel": 0.03}
#: the scenarios' URDF models with their loops sidecars (the controllers' models)
URDF_MODELS = {
    "five_bar": ("urdf/five_bar.urdf", "urdf/five_bar.loops.toml"),
    "slider_crank": ("urdf/slider_crank.urdf", "urdf/slider_crank.loops.toml"),
}


def _states(robot, n, seed, spread=0.15):
    cs = ClosureSet(robot.loops)
    rng = np.random.default_rng(seed)
    for _ in range(n):
        q = robot.assemble(robot.q_initial + spread * rng.normal(size=robot.nq))
        v = project(cs.jacobian(q)).P @ rng.normal(size=robot.nv)
        yield q, v, rng


def pinocchio_reading(mjcf_path, tmp_path):
    """(model, legacy constraint models) of Pinocchio's own MJCF parser on ``mjcf_path`` (wrapped_mjcf)."""
    f = tmp_path / "wrapped.xml"
    f.write_text(wrapped_mjcf(mjcf_path))
    return pin.buildModelAndLegacyConstraintsFromMJCF(str(f))


def constraint_data(model, constraints):
    """(data, constraint datas) of ``model`` ready for ``pin.constraintDynamics`` with ``constraints``."""
    datas = pin.StdVec_RigidConstraintData()
    for c in constraints:
        datas.append(c.createData())
    data = model.createData()
    pin.initConstraintDynamics(model, data, constraints, datas)
    return data, datas


def mujoco_qacc_rel(plant, rigid, q, v, tau, closed=True):
    """|q̈_MuJoCo − q̈_rigid| / |q̈_rigid| at (q, v, τ): the MuJoCo ``plant`` against the rigid model's ``rigid``
    (``closed``: the plant's loops must be closed at q to 1e-10 after its reset)."""
    plant.reset(q, v)
    if closed:
        assert plant.equality_violation() < 1e-10
    plant.set_torque(tau)
    mujoco.mj_forward(plant.model, plant.data)
    a = rigid.accel(q, v, tau)
    return float(np.linalg.norm(plant.data.qacc[plant.map.dadr] - a) / np.linalg.norm(a))


def _robot(name):
    """A mechanism by name: its MJCF, or ``urdf:NAME`` for a URDF of URDF_MODELS with its sidecar."""
    if name.startswith("urdf:"):
        urdf, loops = URDF_MODELS[name[5:]]
        return Robot.from_urdf(urdf, loops=loops)
    return Robot.from_mjcf(MECHANISMS[name])


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_forward_dynamics_match_pinocchio_constraint_dynamics(name, tmp_path):
    robot = Robot.from_mjcf(MECHANISMS[name])
    pm, cms = pinocchio_reading(robot.mjcf_path, tmp_path)  # Pinocchio's own reading of the loops
    assert len(cms) == len(robot.loops) and [pm.names[i] for i in range(1, pm.njoints)] == robot.joint_names
    pm.gravity = robot.model.gravity
    pd, cds = constraint_data(pm, cms)
    prox = pin.ProximalSettings(1e-14, 1e-8, 200)
    plant = ProjectionPlant(robot, None, sim_dt=1e-3)
    worst = 0.0
    for q, v, rng in _states(robot, 12, 1, SPREAD.get(name, 0.15)):
        tau = 3.0 * rng.normal(size=robot.nv) * plant.actuated
        a = plant.accel(q, v, tau)
        a_pin = pin.constraintDynamics(pm, pd, q, v, tau - robot.damping * v, cms, cds, prox)
        worst = max(worst, float(np.linalg.norm(a - a_pin) / np.linalg.norm(a_pin)))
    assert worst <= 1e-9, worst


@pytest.mark.parametrize("name", sorted(MECHANISMS) + [f"urdf:{k}" for k in sorted(URDF_MODELS)])
def test_inverse_dynamics_with_passive_joints_match_a_kkt_solve(name):
    robot = _robot(name)
    act = np.array([n not in robot.passive_joints for n in robot.joint_names])
    ctl = PIDC(robot, None, robot.actuated_joints, np.zeros(act.sum()), 1.0, 1.0)
    plant = ProjectionPlant(robot, None, sim_dt=1e-3)
    cs = ClosureSet(robot.loops)
    for q, v, rng in _states(robot, 8, 2, SPREAD.get(name, 0.15)):
        J, jdv = cs.jacobian_and_jdot_v(q, v)
        pr = project(J)
        qdd = pr.P @ rng.normal(size=robot.nv) - pr.A_pinv @ jdv  # J q̈ + J̇v = 0
        assert np.allclose(J @ qdd + jdv, 0.0, atol=1e-10)
        kin = robot.update(q, v)
        b = kin.M @ qdd + kin.h + robot.damping * v
        tau = ctl.passive_closed_form(pr.P @ b, pr.P)
        # our own KKT: unknowns (τₐ, λ) of Bₐ τₐ + Jᵀ λ = b (least norm: λ is not unique when J is rank deficient)
        B = np.eye(robot.nv)[:, act]
        x = np.linalg.lstsq(np.hstack([B, J.T]), b, rcond=1e-12)[0]
        assert np.linalg.norm(np.hstack([B, J.T]) @ x - b) <= 1e-10 * np.linalg.norm(b)
        tau_kkt = B @ x[: act.sum()]
        assert np.abs(tau[~act]).max() <= 1e-10 * np.abs(b).max()
        assert np.linalg.norm(tau - tau_kkt) <= 1e-9 * np.linalg.norm(tau_kkt)
        assert np.linalg.norm(plant.accel(q, v, tau * act) - qdd) <= 1e-8 * np.linalg.norm(qdd)


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_mujoco_plant_matches_the_rigid_model(name):
    robot = Robot.from_mjcf(MECHANISMS[name])
    mj = plant_from_mjcf(robot, sim_dt=1e-3)
    assert mj.model.neq == len(robot.loops) and np.allclose(mj.model.eq_solref, [2e-3, 1.0])
    assert list(mj.map.actuated) == [n not in robot.passive_joints for n in robot.joint_names]
    rigid = ProjectionPlant(robot, None, sim_dt=1e-3)
    rel = []
    for q, v, rng in _states(robot, 10, 3, SPREAD.get(name, 0.15)):
        rel.append(mujoco_qacc_rel(mj, rigid, q, v, rng.normal(size=robot.nv) * rigid.actuated))
    assert np.median(rel) <= MUJOCO_QACC_REL[name], rel


def test_delta_platform_only_translates():
    robot = Robot.from_mjcf("mjcf/delta.xml")
    cs = ClosureSet(robot.loops)
    fid = robot.frame_id("platform")
    for q, _, _ in _states(robot, 5, 4):
        N = project(cs.jacobian(q)).P
        kin = robot.update(q, np.zeros(robot.nv))
        Jp = kin.frame(fid).J
        assert np.linalg.matrix_rank(N, tol=1e-9) == 3
        assert np.abs(Jp[3:] @ N).max() < 1e-9 and np.linalg.matrix_rank(Jp[:3] @ N, tol=1e-9) == 3


def test_urdf_sidecar_plant_is_the_mjcf_plant(tmp_path):
    """The five-bar from URDF + sidecar through plant_from_urdf (loops added as site equalities) moves as the
    MJCF plant does, and its saved XML (a run directory's plant.xml) has the loop closed."""
    from cmstack.sim.urdf_plant import save_xml

    m = Robot.from_mjcf("mjcf/five_bar.xml")
    u = Robot.from_urdf("urdf/five_bar.urdf", loops="urdf/five_bar.loops.toml")
    pm = plant_from_mjcf(m, sim_dt=1e-3)
    pu = plant_from_urdf(u, sim_dt=1e-3, q0=u.q_initial)
    assert pu.model.neq == 1 and np.allclose(pu.model.eq_solref, [2e-3, 1.0])
    assert list(pu.map.actuated) == list(pm.map.actuated)
    for p in (pm, pu):
        p.set_torque([0.2, 0, 0, -0.1, 0])
        p.step(300)
    assert np.abs(pm.state()[0] - m.q_initial).max() > 0.1  # it moved
    assert np.allclose(pm.state()[0], pu.state()[0], atol=1e-9)
    assert np.isclose(pm.equality_violation(), pu.equality_violation(), rtol=1e-6)
    saved = mujoco.MjModel.from_xml_path(str(save_xml(pu, tmp_path / "plant.xml")))
    assert saved.neq == 1 and saved.nu == 2 and np.allclose(saved.eq_solref, [2e-3, 1.0])


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_our_constraint_models_are_pinocchios_own(name, tmp_path):
    """pinocchio_constraint_models (what closed_chain's dynamics_vs_pinocchio_rel uses, for URDF sidecars too)
    gives the dynamics of the constraint models Pinocchio's MJCF parser reads."""
    from cmstack.models.loops import pinocchio_constraint_models

    robot = Robot.from_mjcf(MECHANISMS[name])
    pm, theirs = pinocchio_reading(robot.mjcf_path, tmp_path)
    pm.gravity = robot.model.gravity
    d1, td = constraint_data(pm, theirs)
    ours, od = pinocchio_constraint_models(robot)
    d2 = robot.model.createData()
    pin.initConstraintDynamics(robot.model, d2, ours, od)
    prox = pin.ProximalSettings(1e-14, 1e-8, 200)
    for q, v, rng in _states(robot, 5, 6, SPREAD.get(name, 0.15)):
        tau = rng.normal(size=robot.nv)
        a1 = pin.constraintDynamics(pm, d1, q, v, tau, theirs, td, prox)
        a2 = pin.constraintDynamics(robot.model, d2, q, v, tau, ours, od, prox)
        assert np.linalg.norm(a1 - a2) <= 1e-9 * np.linalg.norm(a1)


def test_revolute_closure_in_the_urdf_plant(tmp_path):
    """A hinge closure (kind revolute, 5 rows) from a sidecar becomes two MuJoCo connects along the hinge axis:
    the plant keeps the hinge closed and moves as the rigid model does."""
    side = tmp_path / "hinge.toml"
    side.write_text(
        'passive = ["elbow_l", "tip", "elbow_r"]\n[[loop]]\nname = "hinge"\nframe_a = "tool"\n'
        'frame_b = "dist_r"\nkind = "revolute"\n'
        "offset = {xyz = [0.2, 0.0, 0.18], rpy = [1.5707963267948966, 0.0, 0.0]}\n"
        "offset_b = {rpy = [1.5707963267948966, 0.0, 0.0]}\n"
    )
    robot = Robot.from_urdf("urdf/five_bar.urdf", loops=side)
    (c,) = robot.loops
    assert c.kind == "revolute" and c.residual(robot.q_initial) < 1e-12
    plant = plant_from_urdf(robot, sim_dt=2.5e-4, q0=robot.q_initial)
    assert plant.model.neq == 2  # two connects on the hinge axis
    rigid = ProjectionPlant(robot, None, sim_dt=1e-3)
    rel = []
    for q, v, rng in _states(robot, 8, 7):
        rel.append(
            mujoco_qacc_rel(plant, rigid, q, v, rng.normal(size=robot.nv) * rigid.actuated, closed=False)
        )
    assert np.median(rel) <= 2e-2, rel
    plant.reset(robot.q_initial)
    plant.set_torque([0.05, 0, 0, -0.05, 0])
    for _ in range(400):
        plant.step(4)
        assert c.residual(plant.state()[0]) < 1e-4
    assert np.abs(plant.state()[0] - robot.q_initial).max() > 0.05


def test_slider_crank_urdf_with_its_rail_is_the_mjcf_mechanism(tmp_path):
    """The slider-crank scenario's model (urdf/slider_crank.urdf cut at C, the slider a point mass at C, the rail a
    one-row plane closure) has the forward dynamics of the MJCF mechanism (the slider a body on a slide joint, C
    closed by a connect) as Pinocchio's own constraintDynamics gives them: on the rail the slider's kinetic energy
    is the point's and its potential is constant, so q̈ of (crank, rod) agree to <= 1e-9 relative."""
    robot = _robot("urdf:slider_crank")
    mech = Robot.from_mjcf(MECHANISMS["slider_crank"])
    assert mech.joint_names == ["crank", "rod", "slider"] and mech.passive_joints == ["rod", "slider"]
    pm, cms = pinocchio_reading(mech.mjcf_path, tmp_path)
    pm.gravity = mech.model.gravity
    pd, cds = constraint_data(pm, cms)
    prox = pin.ProximalSettings(1e-14, 1e-8, 200)
    plant = ProjectionPlant(robot, None, sim_dt=1e-3)
    d = robot.model.createData()
    fid = robot.frame_id("slider_point")
    x0 = 1.0  # the MJCF slider body's x at qpos = 0
    worst, n = 0.0, 0
    for q, v, rng in _states(robot, 12, 8, 1.0):
        pin.computeJointJacobians(robot.model, d, q)
        pin.framesForwardKinematics(robot.model, d, q)
        xc = d.oMf[fid].translation[0]
        xcd = (pin.getFrameJacobian(robot.model, d, fid, pin.ReferenceFrame.LOCAL_WORLD_ALIGNED) @ v)[0]
        tau = np.array([5.0 * rng.normal(), 0.0])
        a = plant.accel(q, v, tau)
        a_pin = pin.constraintDynamics(
            pm, pd, np.r_[q, xc - x0], np.r_[v, xcd], np.r_[tau, 0.0], cms, cds, prox
        )
        worst = max(worst, float(np.linalg.norm(a - a_pin[:2]) / np.linalg.norm(a_pin[:2])))
        n += 1
    assert n == 12 and worst <= 1e-9, worst

"""mjcf/quadruped_five_bar.xml (written by mjcf/make_quadruped_five_bar.py): a direct-drive quadruped on a free joint
whose four legs are planar five-bars (two coaxial hip motors, two passive knees, the loop closed at the foot by an
``<equality connect>``), 4 point feet, a floor.  Cross-validated on random assembled states with the four feet in
stance, each a rigid point contact (a ``point`` closure to the world at the foot's position):

* forward dynamics with the loops and the stance feet (the projection plant's (22), damping included) against
  ``pin.constraintDynamics`` on the same constraints as Pinocchio's CONTACT_3D models: <= 1e-9 relative;
* inverse dynamics: PIDC's closed form (60-62) gives zero torque on every passive joint (the 8 knees and the
  free joint's 6 coordinates), a torque that some loop and contact reaction completes to M q̈ + h (the stance's
  internal forces make it not unique) and that reproduces the commanded q̈.

The stance is taken where the feet are at each random state (assembled with its loops), as a robot standing on
uneven ground: with the four feet at one height, planar legs let the base sway sideways (the stance rows' smallest
non-zero singular value drops to ~1e-7, and Pinocchio's proximal solver at mu = 1e-8 cannot resolve it)."""

from __future__ import annotations

import mujoco
import numpy as np
import pinocchio as pin
import pytest

from cmstack.controllers.pidc import PIDC
from cmstack.models.coupling import FrameTask
from cmstack.models.loops import ClosureSet, LoopClosure, pinocchio_constraint_models
from cmstack.models.projection import project
from cmstack.models.robot import Robot
from cmstack.sim.mjcf_plant import plant_from_mjcf
from cmstack.sim.projection_sim import ProjectionPlant

PATH = "mjcf/quadruped_five_bar.xml"
LEGS = ("fl", "fr", "hl", "hr")


@pytest.fixture(scope="module")
def robot():
    return Robot.from_mjcf(PATH)


def _stance(robot, q):
    """The four stance feet at configuration q: a ``point`` closure of each foot to the world where it is."""
    d = robot.model.createData()  # (a fresh Data: the closures below add frames to the model)
    pin.framesForwardKinematics(robot.model, d, q)
    where = {leg: d.oMf[robot.frame_id(f"{leg}_foot")].translation.copy() for leg in LEGS}
    return [
        LoopClosure(robot, "universe", f"{leg}_foot", "point", offset=where[leg], name=f"{leg}_stance")
        for leg in LEGS
    ]


def _states(robot, n, seed, spread=0.2):
    """Random states: q_initial ⊕ a random step (pin.integrate), the legs' loops closed (``assemble``), the feet in
    stance where they are; v random in the null space of loops and stance."""
    rng = np.random.default_rng(seed)
    for _ in range(n):
        q = robot.assemble(pin.integrate(robot.model, robot.q_initial, spread * rng.normal(size=robot.nv)))
        cons = list(robot.loops) + _stance(robot, q)
        cs = ClosureSet(cons)
        assert np.abs(cs.phi(q)).max() <= 1e-12
        v = project(cs.jacobian(q)).P @ rng.normal(size=robot.nv)
        yield q, v, cons, cs, rng


def test_loads(robot):
    assert (robot.nq, robot.nv) == (7 + 16, 6 + 16) and robot.floating_base == "base"
    assert robot.actuated_joints == [f"{leg}_hip_{s}" for leg in LEGS for s in "ab"]
    assert sorted(robot.passive_joints) == sorted(
        ["base"] + [f"{leg}_knee_{s}" for leg in LEGS for s in "ab"]
    )
    assert [c.kind for c in robot.loops] == ["point"] * 4
    d = robot.model.createData()
    pin.framesForwardKinematics(robot.model, d, robot.q_initial)
    for leg in LEGS:  # the feet (spheres of 1 mm) on the floor, under their hips
        p = d.oMf[robot.frame_id(f"{leg}_foot")].translation
        assert p[2] == pytest.approx(0.001, abs=1e-6)
    plant = plant_from_mjcf(robot)
    assert plant.model.neq == 4 and plant.model.nu == 8 and plant.map.has_free
    mujoco.mj_forward(plant.model, plant.data)
    np.testing.assert_allclose(plant.state(noisy=False)[0], robot.q_initial, atol=1e-15)


def test_forward_dynamics_with_stance_match_pinocchio(robot):
    worst = 0.0
    for q, v, cons, _, rng in _states(robot, 10, 1):
        plant = ProjectionPlant(robot, cons, sim_dt=1e-3)
        cms, cds = pinocchio_constraint_models(robot, cons)
        pd = robot.model.createData()
        pin.initConstraintDynamics(robot.model, pd, cms, cds)
        tau = 3.0 * rng.normal(size=robot.nv) * plant.actuated
        a = plant.accel(q, v, tau)
        a_pin = pin.constraintDynamics(
            robot.model, pd, q, v, tau - robot.damping * v, cms, cds, pin.ProximalSettings(1e-14, 1e-8, 200)
        )
        worst = max(worst, float(np.linalg.norm(a - a_pin) / np.linalg.norm(a_pin)))
    assert worst <= 1e-9, worst  # measured 5.6e-13


def test_passive_torques_zero_with_stance(robot):
    act = np.array(
        [
            n not in robot.passive_joints
            for n in robot.joint_names
            for _ in range(robot.model.joints[robot.model.getJointId(n)].nv)
        ]
    )
    assert act.sum() == 8 and act.size == robot.nv
    for q, v, cons, cs, rng in _states(robot, 6, 2):
        ctl = PIDC(robot, cons, FrameTask(robot, "base_site", pin.SE3.Identity()))
        plant = ProjectionPlant(robot, cons, sim_dt=1e-3)
        np.testing.assert_array_equal(plant.actuated, act)
        J, jdv = cs.jacobian_and_jdot_v(q, v)
        pr = project(J)
        qdd = pr.P @ rng.normal(size=robot.nv) - pr.A_pinv @ jdv  # J q̈ + J̇v = 0
        kin = robot.update(q, v)
        b = kin.M @ qdd + kin.h + robot.damping * v
        tau = ctl.passive_closed_form(pr.P @ b, pr.P)
        # τ on the actuated joints only, and it realises b with some contact and loop reaction: Jᵀ λ = b − τ (the
        # stance's internal forces make τₐ not unique, so τ is checked for what it must do, not against one solve)
        assert np.abs(tau[~act]).max() <= 1e-9 * np.abs(b).max()
        lam = np.linalg.lstsq(J.T, b - tau, rcond=1e-12)[0]
        assert np.linalg.norm(J.T @ lam - (b - tau)) <= 1e-9 * np.linalg.norm(b)
        assert np.linalg.norm(plant.accel(q, v, tau * act) - qdd) <= 1e-7 * np.linalg.norm(qdd)

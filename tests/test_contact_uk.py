"""controllers/contact_uk.py: UK on the five-bar quadruped standing on 4 point contacts, its 4 loops closed, the
free joint and the 8 knees passive.  The step's torque, applied to the rigid model with the loops and the stance
(``models/contact.contact_dynamics``), gives back the commanded v̇; the passive torques are zero; the contacts hold;
the forces stay in their pyramids, through the cone QP when the least-torque forces leave them."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest
from _quadruped import PATH, stance_levels

from cmstack.controllers.contact_uk import ContactUKController
from cmstack.models.contact import PointContact, contact_dynamics, gauss_solve
from cmstack.models.errors import ConfigError
from cmstack.models.robot import Robot


@pytest.fixture(scope="module")
def robot():
    return Robot.from_mjcf(PATH)


def _controller(robot, mu, dx=0.01, swing=None):
    contacts, levels = stance_levels(robot, mu, np.array([dx, 0.0, 0.0]), swing)
    return ContactUKController(robot, contacts, levels), contacts


def _sagittal(robot, contacts, q):
    """A basis of the motions the loops and the stance allow at q without base roll: the level stance also lets the
    base sway sideways (roll with a lateral shift) at first order, a direction it constrains only at second order
    (singular value 0 at q_initial, ~1e-5 of the largest a few mm away); resisting gravity along it takes lateral
    squeezing forces ~ 1/σ, beyond any friction cone, so the states here leave it out."""
    kin = robot.update(q, np.zeros(robot.nv))
    J = np.vstack([c.rows(kin)[0] for c in contacts] + [lp.qp_rows(kin, 0.0)[0] for lp in robot.loops])
    _, s, Vt = np.linalg.svd(np.vstack((J, np.eye(robot.nv)[3:4])))  # + base roll rate = 0
    return Vt[int((s > 1e-9 * s[0]).sum()) :].T


def _states(robot, n, seed):
    """q_initial at rest, then random states near it on the same stance (the feet where they stand at q_initial):
    a random step of the sagittal motions (x, z, pitch: ``_sagittal``) and a random velocity of them."""
    rng = np.random.default_rng(seed)
    yield robot.q_initial.copy(), np.zeros(robot.nv)
    _, contacts = _controller(robot, 1.0)
    for _ in range(n):
        N = _sagittal(robot, contacts, robot.q_initial)
        q = pin.integrate(robot.model, robot.q_initial, N @ (0.3 * rng.normal(size=N.shape[1])))
        N = _sagittal(robot, contacts, q)
        yield q, N @ (0.3 * rng.normal(size=N.shape[1]))


def _check_step(robot, ctl, contacts, q, v):
    tau = ctl(0.0, q, v)
    info = ctl.info
    P = robot.v_indices(robot.passive_joints)
    assert np.all(tau[P] == 0.0)  # exactly
    assert info.passive_residual <= 1e-9 * max(1.0, np.abs(tau).max())
    act = [c for c in contacts if c.active]
    # the torque realises the commanded motion on the rigid model with loops and stance (Gauss' principle on the
    # same rows, the loops' Baumgarte terms included: the states are on the manifold only to the rank tolerance)
    kin = robot.update(q, v)
    rows = [c.rows(kin) for c in act] + [lp.qp_rows(kin, 0.0) for lp in robot.loops]
    hD = kin.h + robot.damping * v
    a = gauss_solve(kin.M, tau - hD, np.vstack([J for J, _ in rows]), np.concatenate([b for _, b in rows]))
    if not np.any(v):  # at rest on the manifold: the same as the rigid dynamics without feedback terms
        np.testing.assert_allclose(contact_dynamics(robot, q, v, tau, act)[0], a, atol=1e-9)
    assert np.linalg.norm(a - info.vdot) <= 1e-8 * max(1.0, np.linalg.norm(a)), np.linalg.norm(a - info.vdot)
    for c in act:  # the contact rows hold: the stance feet do not accelerate
        J, b = c.rows(kin)
        assert np.linalg.norm(J @ info.vdot - b) <= 1e-9 * max(1.0, np.linalg.norm(b))
    assert set(info.forces) == {c.name for c in act}
    return info


def test_stand_forces_in_cone_and_passive_zero(robot):
    for q, v in _states(robot, 3, 7):
        ctl, contacts = _controller(robot, 1.0)
        info = _check_step(robot, ctl, contacts, q, v)
        assert info.status == "solved"  # (the moving states need the cone QP)
        assert info.cone_margin_min >= 0.0
        assert info.level_residuals[0] <= 1e-9  # contacts, loops, passive rows held


def test_cone_qp_moves_internal_forces_inside(robot):
    q, v = robot.q_initial.copy(), np.zeros(robot.nv)
    loose, _ = _controller(robot, 1.0)
    loose(0.0, q, v)
    ratio = max(np.linalg.norm(f[:2]) / f[2] for f in loose.info.forces.values())
    mu = 0.5
    assert ratio > mu / np.sqrt(2)  # the least-torque forces leave the pyramid at μ = 0.5 ...
    ctl, contacts = _controller(robot, mu)
    info = _check_step(robot, ctl, contacts, q, v)
    assert info.cone_qp and info.status == "solved"  # ... and the QP brings them inside
    assert info.cone_margin_min >= 0.0
    np.testing.assert_allclose(info.vdot, loose.info.vdot, atol=1e-12)  # the same motion
    total = sum(info.forces.values())
    np.testing.assert_allclose(
        total, sum(loose.info.forces.values()), rtol=1e-6, atol=1e-9
    )  # the same net force


def test_cone_that_cannot_hold_is_reported(robot):
    ctl, contacts = _controller(robot, 0.05)
    tau = ctl(0.0, robot.q_initial, np.zeros(robot.nv))
    assert ctl.info.status == "cone_infeasible" and ctl.cone_violations == 1
    assert ctl.info.cone_margin_min < 0.0
    assert np.all(tau[robot.v_indices(robot.passive_joints)] == 0.0)


def test_swing_foot(robot):
    ctl, contacts = _controller(robot, 1.0, dx=-0.03, swing="fl_foot")
    info = _check_step(robot, ctl, contacts, robot.q_initial.copy(), np.zeros(robot.nv))
    assert set(info.forces) == {"fr_foot", "hl_foot", "hr_foot"}
    assert info.level_residuals[1] <= 1e-9  # base and swing foot both achieved
    kin = robot.update(robot.q_initial, np.zeros(robot.nv))
    F = kin.frame("fl_foot")
    acc = F.J[:3] @ info.vdot + F.acc[:3]
    assert acc[2] == pytest.approx(400 * 0.05, rel=1e-9)  # the foot's commanded lift: K_p e


def test_bad_input(robot):
    c = PointContact(robot, "fl_foot")
    with pytest.raises(ConfigError, match="used twice"):
        ContactUKController(robot, [c, PointContact(robot, "fl_foot")])
    with pytest.raises(ConfigError, match="is not a PointContact"):
        ContactUKController(robot, ["fl_foot"])

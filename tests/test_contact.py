"""models/contact.py: PointContact's rows against finite differences of the foot's position, its friction pyramid,
bad input, and the rigid dynamics of the quadruped with its 4 loops and 4 stance feet against
``pin.constraintDynamics`` on the same constraints (Pinocchio's CONTACT_3D models)."""

from __future__ import annotations

import math

import numpy as np
import pinocchio as pin
import pytest

from cmstack.models.contact import PointContact, contact_dynamics, pinocchio_stance_models
from cmstack.models.errors import ConfigError, FrameNotFoundError
from cmstack.models.robot import Robot

PATH = "mjcf/quadruped_five_bar.xml"
LEGS = ("fl", "fr", "hl", "hr")


@pytest.fixture(scope="module")
def robot():
    return Robot.from_mjcf(PATH)


def _foot(robot, q, fid):
    d = robot.model.createData()
    pin.framesForwardKinematics(robot.model, d, q)
    return d.oMf[fid].translation.copy()


def _random_state(robot, rng, spread=0.2):
    q = robot.assemble(pin.integrate(robot.model, robot.q_initial, spread * rng.normal(size=robot.nv)))
    return q, rng.normal(size=robot.nv)


def test_rows_match_finite_differences(robot):
    rng = np.random.default_rng(3)
    c = PointContact(robot, "fl_foot", mu=0.8)
    for _ in range(4):
        q, v = _random_state(robot, rng)
        c.set_active(True)
        J, b = c.rows(robot.update(q, v))
        eps = 1e-4
        pp = _foot(robot, pin.integrate(robot.model, q, eps * v), c.fid)
        p0 = _foot(robot, q, c.fid)
        pm = _foot(robot, pin.integrate(robot.model, q, -eps * v), c.fid)
        vel = (pp - pm) / (2 * eps)
        acc = (pp - 2 * p0 + pm) / eps**2  # along q ⊕ t v, v̇ = 0 (constant tangent velocity)
        np.testing.assert_allclose(J @ v, vel, rtol=0, atol=1e-7 * np.abs(vel).max())
        np.testing.assert_allclose(-b, acc, rtol=0, atol=1e-5 * max(1.0, np.abs(acc).max()))
        np.testing.assert_allclose(c.anchor, p0, atol=1e-15)  # made active where it was


def test_feedback_terms(robot):
    c = PointContact(robot, "hr_foot", kp=100.0, kd=20.0)
    q, v = _random_state(robot, np.random.default_rng(4))
    kin = robot.update(q, v)
    c.set_active(True, position=c.position(kin) + [0.01, 0.0, 0.0])
    J, b = c.rows(kin)
    F = kin.frame(c.fid)
    np.testing.assert_allclose(
        b, -F.acc[:3] - 20.0 * (J @ v) - 100.0 * np.array([-0.01, 0.0, 0.0]), atol=1e-12
    )
    c.set_active(False)
    assert c.anchor is None and not c.active


@pytest.mark.parametrize("k", [3, 4, 8])
def test_pyramid_is_the_inscribed_polygon(robot, k):
    mu = 0.7
    n = np.array([0.1, -0.2, 1.0])
    c = PointContact(robot, "fr_foot", normal=n, mu=mu, facets=k)
    n = n / np.linalg.norm(n)
    C = c.cone_rows()
    assert C.shape == (k + 1, 3)
    t1, t2 = c.tangents
    np.testing.assert_allclose([t1 @ n, t2 @ n, t1 @ t2], 0.0, atol=1e-15)
    # the polygon's vertices (radius μ f_n, at the facets' corners) lie on two faces, margin 0: inscribed
    fn = 3.0
    for i in range(k):
        th = 2 * math.pi * (i + 0.5) / k
        f = fn * n + mu * fn * (math.cos(th) * t1 + math.sin(th) * t2)
        assert abs(c.cone_margin(f)) <= 1e-12
        assert c.cone_margin(fn * n + 1.01 * (f - fn * n)) < 0  # just outside the cone
    rng = np.random.default_rng(5)
    for _ in range(200):  # inside the pyramid ⇒ inside the exact cone
        f = rng.normal(size=3)
        if c.cone_margin(f) >= 0:
            assert np.linalg.norm(f - (f @ n) * n) <= mu * (f @ n) + 1e-12
    assert c.cone_margin(-n) == pytest.approx(-1.0)  # pulling on the ground: outside, by 1 N on f_n
    if k == 4:  # TSID's |f·t_i| <= μ/√2 f_n
        f = fn * n + 0.999 * mu / math.sqrt(2) * fn * t1
        assert c.cone_margin(f) > 0
        assert c.cone_margin(fn * n + 1.001 * mu / math.sqrt(2) * fn * t1) < 0


def test_bad_input(robot):
    with pytest.raises(FrameNotFoundError, match="'fl_toe'"):
        PointContact(robot, "fl_toe")
    for mu in (0.0, -1.0, float("nan")):
        with pytest.raises(ConfigError, match="contact 'fl_foot': mu must be"):
            PointContact(robot, "fl_foot", mu=mu)
    with pytest.raises(ConfigError, match="contact 'fl_foot': normal .* has zero length"):
        PointContact(robot, "fl_foot", normal=(0, 0, 0))
    with pytest.raises(ConfigError, match="facets must be an integer >= 3"):
        PointContact(robot, "fl_foot", facets=2)
    for e in (FrameNotFoundError, ConfigError):
        try:
            PointContact(robot, "nope" if e is FrameNotFoundError else "fl_foot", mu=-1)
        except e as exc:
            assert "\n" not in str(exc)


def test_dynamics_with_loops_and_stance_match_pinocchio(robot):
    """Random assembled states, the four feet in stance where they are (uneven ground: level feet make the rows
    nearly rank deficient, which Pinocchio's proximal solver cannot resolve at mu = 1e-8), v in the constraints'
    null space, random torques on the motors: v̇ and the contact forces against ``pin.constraintDynamics``."""
    rng = np.random.default_rng(1)
    act = np.zeros(robot.nv)
    act[robot.v_indices(robot.actuated_joints)] = 1.0
    worst = worst_f = 0.0
    for _ in range(5):
        q, _ = _random_state(robot, rng)
        contacts = [PointContact(robot, f"{leg}_foot") for leg in LEGS]
        kin = robot.update(q, np.zeros(robot.nv))
        for c in contacts:
            c.set_active(True, c.position(kin))
        J = np.vstack([c.rows(kin)[0] for c in contacts] + [lp.qp_rows(kin, 0.0)[0] for lp in robot.loops])
        _, s, Vt = np.linalg.svd(J)
        v = Vt[int((s > 1e-9 * s[0]).sum()) :].T @ rng.normal(size=robot.nv - int((s > 1e-9 * s[0]).sum()))
        tau = 3.0 * rng.normal(size=robot.nv) * act
        a, forces = contact_dynamics(robot, q, v, tau, contacts)
        cms, cds = pinocchio_stance_models(robot, contacts)
        pd = robot.model.createData()
        pin.initConstraintDynamics(robot.model, pd, cms, cds)
        a_pin = pin.constraintDynamics(
            robot.model, pd, q, v, tau - robot.damping * v, cms, cds, pin.ProximalSettings(1e-14, 1e-8, 200)
        )
        worst = max(worst, float(np.linalg.norm(a - a_pin) / np.linalg.norm(a_pin)))
        # the forces: the stance's internal forces make them not unique (rank of J below its rows), so they are
        # checked for what they must do: J_cᵀ f + the loops' reaction = M v̇ + h + D v − τ
        kin = robot.update(q, v)
        Jc = np.vstack([kin.frame(c.fid).J[:3] for c in contacts])
        Jl = np.vstack([lp.qp_rows(kin, 0.0)[0] for lp in robot.loops])
        y = kin.M @ a + kin.h + robot.damping * v - tau
        fc = Jc.T @ np.concatenate(forces)
        lam_l = np.linalg.lstsq(Jl.T, y - fc, rcond=None)[0]
        worst_f = max(worst_f, float(np.linalg.norm(Jl.T @ lam_l + fc - y) / np.linalg.norm(y)))
    assert worst <= 1e-9, worst  # measured 1.2e-11
    assert worst_f <= 1e-9, worst_f  # measured 2.3e-14

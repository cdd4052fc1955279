"""PIDC with the stance contacts as closures (controllers/contact_pidc.py) on mjcf/quadruped_five_bar.xml: its torques
checked by an independent formulation (the paper's closed form (60-62)) and by the rigid forward dynamics with those
torques (``models/contact.contact_dynamics``: its v̇ is the law's, its constraint force the one of the chosen
multipliers, the contact forces the chosen ones where the stance determines them), passive torques exactly zero,
forces inside the pyramids; the cone QP infeasible: the named error.  The closed loop: tests/test_legged_pidc.py."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from cmstack.controllers.contact_pidc import ContactPIDC
from cmstack.controllers.contact_uk import ContactUKController
from cmstack.models.com import CenterOfMassTask
from cmstack.models.contact import PointContact, contact_dynamics, pinocchio_stance_models
from cmstack.models.coupling import FrameTask, PostureTask
from cmstack.models.errors import ConfigError, InfeasibleError
from cmstack.scenarios._common import resolve_config

FEET = ["fl_foot", "fr_foot", "hl_foot", "hr_foot"]


@pytest.fixture(scope="module")
def robot():
    from cmstack.models.robot import Robot
    from cmstack.scenarios._common import default_config

    return Robot.from_mjcf(default_config("legged")["model"])


def _stance(robot, q, feet, mu=0.8):
    """Fresh contacts of ``feet`` anchored where they stand at q, and the stacked rows' null space N (loops, then feet;
    without Baumgarte terms: the state is assembled and v = N z)."""
    stance = [PointContact(robot, f, mu=mu) for f in feet]
    kin = robot.update(q, np.zeros(robot.nv))
    for c in stance:
        c.set_active(True, c.position(kin))
    J = _rows(robot, kin, stance)[0]
    _, s, Vt = np.linalg.svd(J)
    return stance, Vt[int((s > 1e-9 * s[0]).sum()) :].T


def _rows(robot, kin, stance):
    rows = [lp.qp_rows(kin, 0.0) for lp in robot.loops] + [c.rows(kin) for c in stance]
    return np.vstack([a for a, _ in rows]), np.concatenate([b for _, b in rows])


def _state(robot, seed, feet, vscale=0.1, spread=0.05, mu=0.8):
    """A random assembled state (q_initial moved by 0.05 N(0, I), loops closed), the feet anchored there, v in the
    null space of the stance's and loops' rows (so the loops' Baumgarte terms vanish)."""
    rng = np.random.default_rng(seed)
    q = robot.assemble(pin.integrate(robot.model, robot.q_initial, spread * rng.normal(size=robot.nv)))
    stance, N = _stance(robot, q, feet, mu)
    return q, N @ (vscale * rng.normal(size=N.shape[1])), stance


def _base(robot, q, offset=(0.01, 0.0, 0.005)):
    kin = robot.update(q, np.zeros(robot.nv))
    F = kin.frame("base_site")
    ref = (pin.SE3(F.R.copy(), F.p + np.asarray(offset)), np.zeros(6), np.zeros(6))
    return FrameTask(robot, "base_site", lambda t: ref, 400.0, 40.0, name="base")


def _foot(robot, q, foot="fl_foot", up=0.01):
    kin = robot.update(q, np.zeros(robot.nv))
    ref = (pin.SE3(np.eye(3), kin.frame(foot).p + [0.0, 0.0, up]), np.zeros(6), np.zeros(6))
    return FrameTask(robot, foot, lambda t: ref, 400.0, 40.0, rows="position", name="swing")


def _passive(robot):
    return np.asarray(robot.v_indices(robot.passive_joints))


def _pinocchio(robot, q, v, tau, stance):
    """``pin.constraintDynamics`` with the loops and the stance (proximal, 1e-14, μ 1e-10, 500 iterations): (v̇, the
    stance's contact forces stacked, world axes, on the robot)."""
    cms, cds = pinocchio_stance_models(robot, stance)
    d = robot.model.createData()
    pin.initConstraintDynamics(robot.model, d, cms, cds)
    prox = pin.ProximalSettings(1e-14, 1e-10, 500)
    a = pin.constraintDynamics(robot.model, d, q, v, tau - robot.damping * v, cms, cds, prox)
    return a, d.lambda_c[-3 * len(stance) :].copy()


def test_minimum_torque_forces_are_the_papers_closed_form(robot):
    """Where no force leaves its pyramid, τ = {I − (I−P)[(I−B)(I−P)]⁺(I−B)} τ_∥ (60-62), written out here on the same
    P (J_h's SVD truncated at the law's 1e-6 σ_max), against the law's least-torque multipliers (59).  (μ = 50: at
    μ = 0.8 the least-torque forces of most random stances squeeze the feet sideways out of the pyramid, below.)"""
    n, pas = robot.nv, _passive(robot)
    IB = np.zeros((n, n))
    IB[pas, pas] = 1.0
    checked = 0
    for seed in range(6):
        q, v, stance = _state(robot, seed, FEET, vscale=0.02, mu=50.0)
        ctl = ContactPIDC(robot, stance, [_base(robot, q)], on_infeasible="report")
        tau = ctl(0.0, q, v)
        if ctl.info.cone_qp:
            continue
        J, _ = _rows(robot, ctl.kin, stance)
        _, s, Vt = np.linalg.svd(J)
        Vr = Vt[: int((s > 1e-6 * s[0]).sum())].T
        Q = Vr @ Vr.T  # I − P
        tp = ctl.info.tau_par
        assert np.allclose(tp, (np.eye(n) - Q) @ (ctl.kin.M @ ctl.info.vdot + ctl.kin.h + robot.damping * v))
        closed = tp - Q @ (np.linalg.pinv(IB @ Q, rcond=1e-10) @ (IB @ tp))
        assert np.abs(closed - tau).max() <= 1e-9 * np.abs(tau).max(), seed
        checked += 1
    assert checked >= 3


def test_rigid_dynamics_with_the_torques_give_the_motion_and_the_forces(robot):
    """Four feet: the rigid forward dynamics with the law's τ (``contact_dynamics``, and ``pin.constraintDynamics``)
    give v̇ = v̇_des, and their constraint force M v̇ + h + D v − τ is J_hᵀ λ of the law's multipliers (so the chosen
    contact forces are a rigid solution: the four feet's lateral squeeze does nothing in the rigid model, so the
    contact forces themselves are only determined up to it); the task rows are met in the least-squares sense; the
    base and knees get exactly 0; every chosen force inside its pyramid, also on the states where the cone QP moved
    them."""
    pas = _passive(robot)
    qp = 0
    for seed in range(6):
        q, v, stance = _state(robot, seed, FEET, vscale=0.02, spread=0.02)
        ctl = ContactPIDC(robot, stance, [_base(robot, q)])
        tau = ctl(0.0, q, v)
        info = ctl.info
        assert info.status == "solved" and info.solvable
        qp += info.cone_qp
        vd, _ = contact_dynamics(robot, q, v, tau, stance)
        assert np.linalg.norm(vd - info.vdot) <= 1e-9 * np.linalg.norm(info.vdot), seed
        a_pin, _ = _pinocchio(robot, q, v, tau, stance)
        assert np.linalg.norm(a_pin - info.vdot) <= 1e-9 * np.linalg.norm(info.vdot), seed
        kin = robot.update(q, v)
        J, b = _rows(robot, kin, stance)
        assert np.linalg.norm(J @ info.vdot - b) <= 1e-10 * (1 + np.linalg.norm(b))
        fc = kin.M @ vd + kin.h + robot.damping * v - tau
        assert np.linalg.norm(fc - J.T @ info.lam) <= 1e-9 * np.linalg.norm(fc), seed
        assert np.all(tau[pas] == 0.0) and info.passive_residual <= 1e-9
        for c in stance:
            f = info.forces[c.name]
            assert np.all(c.cone_rows() @ f <= 0.0) and info.cone_margin[c.name] >= 0.0
        assert info.task_residual <= 1e-9 * max(1.0, np.linalg.norm(info.vdot))
    assert qp >= 1  # the cone QP chose the internal forces on some of these states


def test_three_feet_forces_equal_the_rigid_dynamics(robot):
    """Three feet (a foot lifted, its swing task beside the base's): the stance determines every contact force, and
    the rigid forward dynamics with the law's τ (``contact_dynamics``; ``pin.constraintDynamics``) give the chosen
    ones, and v̇ = v̇_des.  These random three-foot
    stances cannot hold the robot inside μ = 0.8 (the centre of mass is not over the three feet: the scenario shifts
    the base first), so the law reports "cone_infeasible" and keeps the least-torque forces, the ones checked here."""
    feet = FEET[1:]
    for seed in range(4):
        q, v, stance = _state(robot, 10 + seed, feet)
        ctl = ContactPIDC(robot, stance, [_base(robot, q), _foot(robot, q)], on_infeasible="report")
        tau = ctl(0.0, q, v)
        info = ctl.info
        assert info.solvable and info.passive_residual <= 1e-9
        vd, F = contact_dynamics(robot, q, v, tau, stance)
        assert np.linalg.norm(vd - info.vdot) <= 1e-9 * np.linalg.norm(info.vdot), seed
        f_law = np.concatenate([info.forces[c.name] for c in stance])
        assert np.linalg.norm(np.concatenate(F) - f_law) <= 1e-9 * np.linalg.norm(f_law), seed
        # Pinocchio's own: its proximal solver's answer (measured 1.7e-10 to 1.2e-9 from the law's on these states)
        a_pin, f_pin = _pinocchio(robot, q, v, tau, stance)
        assert np.linalg.norm(a_pin - info.vdot) <= 1e-8 * np.linalg.norm(info.vdot), seed
        assert np.linalg.norm(f_pin - f_law) <= 1e-8 * np.linalg.norm(f_law), seed
        assert np.all(tau[_passive(robot)] == 0.0)


def test_same_as_uk_where_the_base_spans_the_stance(robot):
    """On the level stance the base pose task spans the stance's motion, so PIDC's projected v̇ is UK's (whose lower
    levels have nothing left) and the torques agree (UK's force choice is ε-regularised, 1e-8: hence 1e-6)."""
    q = robot.q_initial
    stance, _ = _stance(robot, q, FEET)
    base = _base(robot, q)
    com = CenterOfMassTask(robot, lambda t: (np.zeros(3), np.zeros(3), np.zeros(3)), kp=100.0, kd=20.0)
    post = PostureTask(robot, q, joints=robot.actuated_joints, kp=25.0, kd=10.0)
    uk = ContactUKController(robot, stance, [[base], [com], [post]], compiled=False)
    pidc = ContactPIDC(robot, stance, [base])
    v = np.zeros(robot.nv)
    t_uk, t_p = uk(0.0, q, v), pidc(0.0, q, v)
    assert np.abs(t_uk - t_p).max() <= 1e-6 * np.abs(t_uk).max()
    assert np.linalg.norm(uk.info.vdot - pidc.info.vdot) <= 1e-9 * np.linalg.norm(uk.info.vdot)


def test_cone_infeasible_is_the_named_error(robot):
    """μ = 0.02 and a base pulled 2 cm forward at 400/s²: no internal force keeps the feet in their pyramids.  The
    default raises ``InfeasibleError`` naming the contacts; ``on_infeasible="report"`` keeps the least-torque forces,
    says "cone_infeasible" and counts the step."""
    q = robot.q_initial
    stance, _ = _stance(robot, q, FEET, mu=0.02)
    base = _base(robot, q, offset=(0.02, 0.0, 0.0))
    with pytest.raises(InfeasibleError, match="fl_foot") as err:
        ContactPIDC(robot, stance, [base])(0.0, q, np.zeros(robot.nv))
    assert "friction pyramids" in str(err.value) and "\n" not in str(err.value)
    ctl = ContactPIDC(robot, stance, [base], on_infeasible="report")
    ctl(0.0, q, np.zeros(robot.nv))
    assert ctl.info.status == "cone_infeasible" and ctl.cone_violations == 1 and ctl.info.cone_margin_min < 0


def test_bad_arguments_are_named(robot):
    stance, _ = _stance(robot, robot.q_initial, FEET)
    base = _base(robot, robot.q_initial)
    with pytest.raises(ConfigError, match="on_infeasible='stop'"):
        ContactPIDC(robot, stance, [base], on_infeasible="stop")
    with pytest.raises(ConfigError, match="at least one task"):
        ContactPIDC(robot, stance, [])
    with pytest.raises(ConfigError, match="is not a PointContact"):
        ContactPIDC(robot, ["fl_foot"], [base])


def test_legged_law_key_is_checked():
    """``law`` of the legged scenario: "uk" by default; an unknown value is one line naming the key and the values."""
    assert resolve_config("legged")["law"] == "uk"
    assert resolve_config("legged", sets=["law=pidc"])["law"] == "pidc"
    with pytest.raises(ConfigError) as err:
        resolve_config("legged", sets=["law=qp"])
    msg = str(err.value)
    assert "law" in msg and "'uk'" in msg and "'pidc'" in msg and "'qp'" in msg and "\n" not in msg


def test_legged_law_pidc_switches_contacts(robot):
    """``law = "pidc"`` in the scenario: the stance and the swing are ``ContactPIDC``s sharing the four contacts, the
    swing one with the foot's task beside the base's; while the foot is up its contact is off (three forces reported)
    and on again after it lands (four), passive torques exactly 0 throughout."""
    from cmstack.scenarios import legged

    cfg = resolve_config("legged", sets=["law=pidc"])
    law = legged.LeggedLaw(robot, cfg, legged.Phases(cfg))
    assert isinstance(law.stance, ContactPIDC) and isinstance(law.swing, ContactPIDC)
    assert law.swing is not law.stance and law.swing.contacts == law.stance.contacts == law.contacts
    assert [t.name for t, _ in law.swing.tasks] == ["base", "swing"]
    q, v, pas = robot.q_initial, np.zeros(robot.nv), _passive(robot)
    ph = law.phases
    for t, feet in ((0.0, 4), (0.5 * (ph.t_up + ph.t_down), 3), (ph.t_land + 0.01, 4)):
        tau = law(t, q, v)
        assert len(law.info.forces) == feet and np.all(tau[pas] == 0.0), t
        assert ("fl_foot" in law.info.forces) == (feet == 4)


def test_null_damping_acts_only_where_the_tasks_leave_freedom(robot):
    """The base's position rows alone leave the stance's pitch free: ``null_damping`` k changes v̇ by −k (P − Π) v, Π the
    projector onto range((A_t P)ᵀ) (here from the test's own SVDs), and the task rows' accelerations not at all."""
    q = robot.q_initial
    stance, N = _stance(robot, q, FEET)
    v = N @ np.linspace(0.2, -0.1, N.shape[1])
    kin = robot.update(q, np.zeros(robot.nv))
    F = kin.frame("base_site")
    ref = (pin.SE3(F.R.copy(), F.p.copy()), np.zeros(6), np.zeros(6))
    pos = FrameTask(robot, "base_site", lambda t: ref, 400.0, 40.0, rows="position", name="base")
    free, damped = ContactPIDC(robot, stance, [pos]), ContactPIDC(robot, stance, [pos], null_damping=5.0)
    free(0.0, q, v)
    damped(0.0, q, v)
    kin = robot.update(q, v)
    J, _ = _rows(robot, kin, stance)
    _, s, Vt = np.linalg.svd(J)
    V0 = Vt[int((s > 1e-6 * s[0]).sum()) :].T
    At = pos.qp_rows(kin, 0.0)[0]
    _, st, Wt = np.linalg.svd(At @ V0)
    W = V0 @ Wt[: int((st > 1e-10 * st[0]).sum())].T
    dv = damped.info.vdot - free.info.vdot
    expected = -5.0 * (V0 @ (V0.T @ v) - W @ (W.T @ v))
    assert np.linalg.norm(expected) > 1e-3  # the stance leaves a direction the position rows do not fix
    assert np.linalg.norm(dv - expected) <= 1e-9 * np.linalg.norm(expected)
    assert np.linalg.norm(At @ dv) <= 1e-9 * np.linalg.norm(expected)


def test_survives_pickling(robot):
    """A copy (``pickle``: a law sent to another process) gives the same torque."""
    import pickle

    stance, _ = _stance(robot, robot.q_initial, FEET)
    kin = robot.update(robot.q_initial, np.zeros(robot.nv))
    from cmstack.tasks import Constant

    base = FrameTask(robot, "base_site", Constant(kin.frame("base_site").T), kp=400, kd=40)
    ctl = ContactPIDC(robot, stance, [base])
    q, v = robot.q_initial, np.zeros(robot.nv)
    tau = ctl(0.0, q, v)
    assert np.array_equal(pickle.loads(pickle.dumps(ctl))(0.0, q, v), tau)

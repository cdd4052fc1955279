"""The QP of (3.40)/(4.2) against closed forms: (3.8)/(3.10) without tasks or limits, the KKT system
of (4.2) with soft tasks, the hierarchy (3.39) in strict mode, τ = RNEA(q, v, v̇*) + D v."""

import numpy as np
import pinocchio as pin
import pytest

from cmstack.controllers.udwadia_kalaba import UdwadiaKalabaController, udwadia_kalaba_closed_form
from cmstack.models.coupling import FrameTask, stack
from cmstack.models.errors import InfeasibleError, StateError
from cmstack.models.loops import RigidCoupling
from cmstack.models.robot import Robot
from cmstack.models.trajectory import Circle

T_AB = pin.SE3(np.array([[1.0, 0, 0], [0, 0, 1], [0, -1, 0]]), np.array([0.0, -0.4, 0.12]))
TRAJ = Circle([0.436763, 0.185684, 0.512661], 0.12, 1.5, np.pi / 2)


@pytest.fixture(scope="module")
def robot():
    return Robot("urdf/yumi.urdf")


def states(n=4, seed=3):
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=14), rng.normal(size=14)) for _ in range(n)]


def parts(robot):
    c = RigidCoupling(robot, "yumi_link_7_l", "yumi_link_7_r", T_AB, 1000, 33)
    u = FrameTask(robot, "yumi_link_7_l", TRAJ, 500, 17)
    return c, u


@pytest.mark.parametrize("q,v", states())
def test_qp_equals_closed_form_without_tasks(robot, q, v):
    c, _ = parts(robot)
    ctl = UdwadiaKalabaController(robot, [c], [], torque_limits=False, eps_abs=1e-12)
    tau = ctl(0.2, q, v)
    kin = robot.update(q, v)
    Q = -kin.h - robot.damping * v
    A, b, _ = stack([c], kin, 0.2, 14)
    vdot, Qc = udwadia_kalaba_closed_form(kin.M, Q, A, b)
    np.testing.assert_allclose(ctl.info.vdot, vdot, atol=1e-8)
    np.testing.assert_allclose(ctl.info.Qc, Qc, atol=1e-6 * (1 + np.abs(Qc).max()))
    # τ = RNEA(q, v, v̇*) + D v
    np.testing.assert_allclose(
        tau, pin.rnea(robot.model, robot.model.createData(), q, v, vdot) + robot.damping * v, atol=1e-8
    )


@pytest.mark.parametrize("q,v", states(seed=5))
def test_qp_equals_kkt_with_soft_tasks(robot, q, v):
    c, u = parts(robot)
    om = 50.0
    ctl = UdwadiaKalabaController(robot, [c], [u], omega=om, torque_limits=False, eps_abs=1e-12)
    ctl(0.3, q, v)
    kin = robot.update(q, v)
    Q = -kin.h - robot.damping * v
    Ac, bc, _ = stack([c], kin, 0.3, 14)
    Au, bu = u.compute(kin, 0.3)
    H = kin.M + om * Au.T @ Au
    g = -Q - om * Au.T @ bu
    K = np.block([[H, Ac.T], [Ac, np.zeros((6, 6))]])
    sol = np.linalg.solve(K, np.r_[-g, bc])
    np.testing.assert_allclose(ctl.info.vdot, sol[:14], atol=1e-7)
    # the force balance M v̇ = Q + Q_c + Q_u
    np.testing.assert_allclose(kin.M @ ctl.info.vdot, Q + ctl.info.Qc + ctl.info.Qu, atol=1e-6)


@pytest.mark.parametrize("q,v", states(seed=11))
def test_strict_priority_hierarchy(robot, q, v):
    c, u = parts(robot)
    ctl = UdwadiaKalabaController(robot, [c], [u], priority="strict", torque_limits=False)
    ctl(0.3, q, v)
    x = ctl.info.vdot
    kin = robot.update(q, v)
    Ac, bc, _ = stack([c], kin, 0.3, 14)
    Au, bu = u.compute(kin, 0.3)
    np.testing.assert_allclose(Ac @ x, bc, atol=1e-8)
    # level 2 of (3.39): the task residual is the least-squares optimum within N(Ac)
    N = np.linalg.svd(Ac)[2][6:].T
    x1 = np.linalg.pinv(Ac) @ bc
    z = np.linalg.lstsq(Au @ N, bu - Au @ x1, rcond=None)[0]
    best = np.linalg.norm(Au @ (x1 + N @ z) - bu)
    assert np.linalg.norm(Au @ x - bu) <= best + 1e-8
    # here 12 independent rows in 14 DoF: both met exactly; Gauss decides the 2 remaining DoF
    np.testing.assert_allclose(Au @ x, bu, atol=1e-7)
    N2 = np.linalg.svd(np.vstack([Ac, Au]))[2][12:].T
    Q = -kin.h - robot.damping * v
    np.testing.assert_allclose(N2.T @ (kin.M @ x - Q), 0.0, atol=1e-7)  # stationarity of Gauss


def feasible_limit(robot, c, q, v):
    """A limit the constraint-only Gauss solution satisfies (so the QP stays feasible) but that the
    task solution exceeds (so the limit is really active)."""
    only_c = UdwadiaKalabaController(robot, [c], [], torque_limits=False)
    return 1.05 * np.abs(only_c(0.1, q, v)).max()


@pytest.mark.parametrize("prio", ["weighted", "strict"])
def test_torque_limits_active(robot, prio):
    c, u = parts(robot)
    q, v = states(1, seed=2)[0]
    lim = feasible_limit(robot, c, q, v)
    free = UdwadiaKalabaController(robot, [c], [u], priority=prio, torque_limits=False)
    assert np.abs(free(0.1, q, v)).max() > lim  # the limit will really be active
    ctl = UdwadiaKalabaController(robot, [c], [u], priority=prio, torque_limits=True)
    ctl.tau_max = np.full(14, lim)
    tau = ctl(0.1, q, v)
    assert np.abs(tau).max() <= lim * (1 + 1e-6) + 1e-6
    kin = robot.update(q, v)
    Ac, bc, _ = stack([c], kin, 0.1, 14)
    np.testing.assert_allclose(Ac @ ctl.info.vdot, bc, atol=1e-6)  # constraints still exact
    if prio == "strict":
        assert ctl.info.limits_active


@pytest.mark.parametrize("prio", ["weighted", "strict"])
def test_constraints_beyond_limits_are_reported(robot, prio):
    c, u = parts(robot)
    q, v = states(1, seed=2)[0]
    ctl = UdwadiaKalabaController(robot, [c], [u], priority=prio, torque_limits=True)
    ctl.tau_max = np.full(14, 1.0)
    with pytest.raises(InfeasibleError, match=r"effort limits \(joint 'yumi_joint_\d_[lr]'"):
        ctl(0.1, q, 3 * v)


def test_incompatible_hard_constraints_are_reported(robot):
    a = FrameTask(robot, "yumi_link_7_l", TRAJ, 500, 17, name="E1 on the circle")
    shifted = lambda t: (lambda T, v, acc: (pin.SE3(T.rotation, T.translation + 0.3), v, acc))(*TRAJ(t))
    b = FrameTask(robot, "yumi_link_7_l", shifted, 500, 17, name="E1 elsewhere")
    for prio in ("weighted", "strict"):
        ctl = UdwadiaKalabaController(robot, [a, b], [], priority=prio, torque_limits=False)
        with pytest.raises(InfeasibleError, match="E1 elsewhere"):
            ctl(0.0, np.zeros(14), np.zeros(14))


def test_nan_state_is_a_clear_error(robot):
    c, u = parts(robot)
    ctl = UdwadiaKalabaController(robot, [c], [u])
    q = np.zeros(14)
    q[3] = np.nan
    with pytest.raises(StateError, match="q contains non-finite values at indices \\[3\\]"):
        ctl(0.0, q, np.zeros(14))


# ----------------------------------------------------------------------------- levels (issue 11)
import warnings  # noqa: E402

import _uk_reference as reference  # noqa: E402
from _yumi_states import recorded_states, thesis_setup  # noqa: E402

from cmstack.controllers.udwadia_kalaba import GAUSS  # noqa: E402
from cmstack.models.coupling import PostureTask  # noqa: E402
from cmstack.models.errors import ConfigError  # noqa: E402
from cmstack.models.limits import EffortLimit, JointPositionLimit  # noqa: E402


def _rel(a, b):
    return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)


@pytest.mark.parametrize("priority", ["weighted", "strict"])
def test_thesis_configuration_gives_the_same_torques_as_before(priority):
    """On the states of a real closed-loop run, the levels implementation and the frozen former one
    (its own QP tolerance tightened to 1e-12, so that it is the reference) agree to 1e-9 relative."""
    cfg, robot, c, u = thesis_setup(priority=priority)
    old = reference.UdwadiaKalabaController(
        robot, [c], [u], omega=cfg["omega"], priority=priority, torque_limits=True, eps_abs=1e-12
    )
    new = UdwadiaKalabaController(
        robot, [c], [u], omega=cfg["omega"], priority=priority, torque_limits=True, warn_free_dof=False
    )
    if priority == "weighted":
        lv = [[c], [(u, cfg["omega"]), GAUSS]]
    else:
        lv = [[c], [(u, cfg["omega"])], [GAUSS]]
    explicit = UdwadiaKalabaController(robot, levels=lv, limits=[EffortLimit(robot)], warn_free_dof=False)
    worst = 0.0
    for t, q, v in recorded_states(priority):
        ref = old(t, q, v)
        worst = max(worst, _rel(new(t, q, v), ref), _rel(explicit(t, q, v), ref))
    assert worst <= 1e-9, worst


def test_free_degrees_of_freedom_warn_once():
    cfg, robot, c, u = thesis_setup()
    ctl = UdwadiaKalabaController(robot, [c], [u], omega=50.0)
    t, q, v = recorded_states()[0]
    with pytest.warns(UserWarning, match=r"2 degree\(s\) of freedom have no task"):
        ctl(t, q, v)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ctl(t, q, v)  # once only
        full = UdwadiaKalabaController(robot, levels=[[c], [u], [PostureTask(robot, q, kp=10, kd=6), GAUSS]])
        full(t, q, v)  # a posture task covers every DoF: no warning


def test_shipped_thesis_controllers_do_not_warn_about_the_thesis_free_dofs():
    """The thesis set-up leaves 2 DoF to Gauss on purpose: the yumi_dual_arm builders (thesis law and robust
    law) run a step without the warning a user's own under-specified controller gets (test above)."""
    from cmstack.scenarios._common import default_config
    from cmstack.scenarios.yumi_dual_arm import CONTROLLERS

    cfg, robot, c, u = thesis_setup()
    full = default_config("yumi_dual_arm")
    t, q, v = recorded_states()[0]
    for name in ("uk", "uk_robust"):
        ctl = CONTROLLERS[name](full, robot, c, u)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ctl(t, q, v)


def test_three_strict_levels():
    """coupling / E1 task / posture + Gauss: each level optimal within the ones above (3.39)."""
    cfg, robot, c, u = thesis_setup()
    t, q, v = recorded_states()[50]
    p = PostureTask(robot, recorded_states()[0][1], kp=10.0, kd=6.0)
    ctl = UdwadiaKalabaController(robot, levels=[[c], [u], [p, GAUSS]], limits=[])
    ctl(t, q, v)
    x = ctl.info.vdot
    kin = robot.update(q, v)
    Ac, bc = c.compute(kin, t)
    Au, bu = u.compute(kin, t)
    Ap, bp = p.compute(kin, t)
    np.testing.assert_allclose(Ac @ x, bc, atol=1e-8)
    np.testing.assert_allclose(Au @ x, bu, atol=1e-8)
    # level 3: min ‖A_p x − b_p‖² + Gauss within N([A_c; A_u]), an independent null-space solution
    E = np.vstack([Ac, Au])
    N = np.linalg.svd(E)[2][12:].T
    x0 = np.linalg.lstsq(E, np.r_[bc, bu], rcond=None)[0]
    Q = -kin.h - robot.damping * v
    Hn = N.T @ (kin.M + Ap.T @ Ap) @ N
    y = np.linalg.solve(Hn, N.T @ (Q + Ap.T @ bp - (kin.M + Ap.T @ Ap) @ x0))
    np.testing.assert_allclose(x, x0 + N @ y, atol=1e-8)
    # the force balance M v̇ = Q + Q_c + Q_u
    np.testing.assert_allclose(kin.M @ x, Q + ctl.info.Qc + ctl.info.Qu, atol=1e-7)


def test_position_limit_in_every_level():
    cfg, robot, c, u = thesis_setup()
    t, q, v = recorded_states()[100]
    free = UdwadiaKalabaController(robot, [c], [u], torque_limits=False, warn_free_dof=False)
    free(t, q, v)
    a = free.info.vdot
    j = int(np.argmax(np.where(a * v >= 0, np.abs(a), -1.0)))  # accelerating the way it moves
    name = robot.joint_names[j]
    # the joint sits on its limit in the direction it moves: the bound must brake it
    s = np.sign(a[j])
    lo, hi = (q[j] - 1.0, q[j]) if s > 0 else (q[j], q[j] + 1.0)
    lim = JointPositionLimit(robot, dt=0.005, a_max=1.0, q_min=lo, q_max=hi, joints=[name])
    ctl = UdwadiaKalabaController(robot, levels=[[c], [u], [GAUSS]], limits=[lim], warn_free_dof=False)
    ctl(t, q, v)
    bl, bu_ = lim.acceleration_bounds(q[[j]], v[[j]])
    assert bl[0] - 1e-6 <= ctl.info.vdot[j] <= bu_[0] + 1e-6
    assert not (bl[0] <= free.info.vdot[j] <= bu_[0])  # the limit was really active
    kin = robot.update(q, v)
    Ac, bc = c.compute(kin, t)
    np.testing.assert_allclose(Ac @ ctl.info.vdot, bc, atol=1e-6)  # level 1 still exact


def test_level_errors_are_named(robot):
    c, u = parts(robot)
    with pytest.raises(ConfigError, match="GAUSS is in level 1 of 2"):
        UdwadiaKalabaController(robot, levels=[[c, GAUSS], [u]])
    with pytest.raises(ConfigError, match="weight of 'task\\(yumi_link_7_l\\)' must be a finite number > 0"):
        UdwadiaKalabaController(robot, levels=[[c], [(u, -1.0), GAUSS]])
    with pytest.raises(ConfigError, match="not a Task"):
        UdwadiaKalabaController(robot, levels=[["coupling"]])
    with pytest.raises(ConfigError, match="either levels"):
        UdwadiaKalabaController(robot, [c], [u], levels=[[c]])


@pytest.mark.parametrize("prio", ["weighted", "strict"])
def test_force_balance_with_active_limits(robot, prio):
    """M v̇* = Q + Q_c + Q_u + Q_lim also when an effort limit is active (forces from the QP's
    multipliers)."""
    c, u = parts(robot)
    q, v = states(1, seed=2)[0]
    lim = feasible_limit(robot, c, q, v)
    ctl = UdwadiaKalabaController(robot, [c], [u], priority=prio, warn_free_dof=False)
    ctl.tau_max = np.full(14, lim)
    ctl(0.1, q, v)
    assert ctl.info.limits_active and ctl.info.path in ("qp", "sequential")
    kin = robot.update(q, v)
    Q = -kin.h - robot.damping * v
    i = ctl.info
    lhs = kin.M @ i.vdot
    np.testing.assert_allclose(lhs, Q + i.Qc + i.Qu + i.Qlim, atol=1e-6 * (1 + np.abs(lhs).max()))
    assert np.abs(i.Qlim).max() > 1.0


def test_weighted_tasks_within_a_level_and_velocity_limit(robot):
    """Two weighted tasks in one level equal the hand-built KKT of that level; a velocity limit
    bounds v + Δt v̇."""
    from cmstack.models.limits import JointVelocityLimit

    c, u = parts(robot)
    q, v = states(1, seed=4)[0]
    p = PostureTask(robot, np.zeros(14), kp=4.0, kd=4.0)
    ctl = UdwadiaKalabaController(robot, levels=[[c], [(u, 30.0), (p, 2.0), GAUSS]], limits=[])
    ctl(0.2, q, v)
    kin = robot.update(q, v)
    Ac, bc = c.compute(kin, 0.2)
    Au, bu = u.compute(kin, 0.2)
    Ap, bp = p.compute(kin, 0.2)
    Q = -kin.h - robot.damping * v
    H = kin.M + 30.0 * Au.T @ Au + 2.0 * Ap.T @ Ap
    g = -Q - 30.0 * Au.T @ bu - 2.0 * Ap.T @ bp
    sol = np.linalg.solve(np.block([[H, Ac.T], [Ac, np.zeros((6, 6))]]), np.r_[-g, bc])
    np.testing.assert_allclose(ctl.info.vdot, sol[:14], rtol=1e-9, atol=1e-9)
    # now a velocity bound that the free solution breaks
    dt = 0.01
    free = ctl.info.vdot
    vmax = np.maximum(np.abs(v + dt * free) * 0.9, np.abs(v) + 1e-3)
    lim = JointVelocityLimit(robot, dt=dt, v_max=vmax)
    ctl2 = UdwadiaKalabaController(robot, levels=[[c], [(u, 30.0), (p, 2.0), GAUSS]], limits=[lim])
    ctl2(0.2, q, v)
    assert np.all(np.abs(v + dt * ctl2.info.vdot) <= vmax * (1 + 1e-6) + 1e-9)
    np.testing.assert_allclose(Ac @ ctl2.info.vdot, bc, atol=1e-6)


def test_missing_effort_limits_are_named(robot):
    c, u = parts(robot)
    saved = robot.effort_limit.copy()
    try:
        robot.effort_limit[3] = 0.0
        with pytest.raises(
            ConfigError,
            match=r"torque_limits=true but joints \['yumi_joint_3_l'\]|"
            r"torque_limits=true but joints \['\w+'\] have no positive",
        ):
            UdwadiaKalabaController(robot, [c], [u])
        UdwadiaKalabaController(robot, [c], [u], torque_limits=False)  # fine without limits
    finally:
        robot.effort_limit[:] = saved

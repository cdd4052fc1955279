"""Each (A, b) constructor of [Milioshin] §3.3–3.4 against finite differences along a smooth motion, in the
task's own axes (the rows are in world axes, P = diag(I, R) with R = ``task.axes``, so w_own = Pᵀ w):
   P d/dt w_own = A v̇ + drift,   and   A v̇ − b = P(ẇ_own + K_d w_own + K_p e_own)   (the error ODE the law
imposes); and against an independent NumPy formulation of the thesis' own-axes rows."""

import numpy as np
import pinocchio as pin
import pytest

from cmstack.models.coupling import FrameTask
from cmstack.models.lie import jr_inv, se3_error
from cmstack.models.loops import RigidCoupling
from cmstack.models.robot import Robot
from cmstack.models.trajectory import Circle

rng = np.random.default_rng(7)
Q0, AMP, FREQ = rng.normal(size=14), rng.normal(size=14), rng.uniform(0.5, 2.0, 14)
qf = lambda t: Q0 + AMP * np.sin(FREQ * t)
vf = lambda t: AMP * FREQ * np.cos(FREQ * t)
af = lambda t: -AMP * FREQ**2 * np.sin(FREQ * t)
H = 1e-6


@pytest.fixture(scope="module")
def robot():
    return Robot("urdf/yumi.urdf")


def constraints(robot):
    T_AB = pin.SE3(pin.rpy.rpyToMatrix(0.3, -0.2, 0.5), np.array([0.1, -0.4, 0.12]))
    traj = Circle([0.4, 0.2, 0.5], 0.12, 1.5, np.pi / 2, R=pin.rpy.rpyToMatrix(0.1, 0.2, 0.3))
    out = []
    for rows in ("full", "position", "orientation"):
        out += [
            RigidCoupling(robot, "yumi_link_7_l", "yumi_link_7_r", T_AB, 3.0, 2.0, rows=rows),
            FrameTask(robot, "yumi_link_7_l", traj, 5.0, 1.5, rows=rows),
            FrameTask(robot, "yumi_link_7_r", traj, 5.0, 1.5, offset=T_AB, rows=rows),
        ]
    return out


def P_of(c, kin, t):
    """P = diag(I, R) of the task at (kin, t) (identity without axes of its own)."""
    P = np.eye(6)
    R = c.axes(kin, t)
    if R is not None:
        P[3:, 3:] = R
    return P


def own_axes(robot, c, t):
    """(W, drift, w, e) at t and the own-axes velocity error w_own = Pᵀ w at t ± H (for the finite differences)."""
    kin = robot.update(qf(t), vf(t))
    W, drift, w, e = c.error_dynamics(kin, t)
    P = P_of(c, kin, t)
    ws = []
    for s in (t + H, t - H):
        k = robot.update(qf(s), vf(s))
        ws.append(P_of(c, k, s).T @ c.error_dynamics(k, s).w)
    return kin, P, W, drift, w, e, (ws[0] - ws[1]) / (2 * H)


@pytest.mark.parametrize("idx", range(9))
@pytest.mark.parametrize("t", [0.1, 0.77])
def test_affine_constraint_matches_finite_differences(robot, idx, t):
    c = constraints(robot)[idx]
    kin, P, W, drift, w, e, wdot_own = own_axes(robot, c, t)
    np.testing.assert_allclose(P @ wdot_own, W @ af(t) + drift, atol=1e-6)
    # the law: A v̇ − b equals P(ẇ_own + K_d w_own + K_p e_own) on the selected rows
    A, b = c.compute(robot.update(qf(t), vf(t)), t)
    r = c.rows
    np.testing.assert_allclose(A @ af(t) - b, (P @ wdot_own + c.kd * w + c.kp * e)[r], atol=1e-5)
    np.testing.assert_allclose(P.T @ e, np.r_[e[:3], P[3:, 3:].T @ e[3:]], atol=1e-15)
    if r == slice(0, 6):
        np.testing.assert_allclose(c.error(kin, t), P.T @ e, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("idx", [0, 1, 2])
def test_pose_error_derivative(robot, idx):
    """In the task's own axes, linear part: d/dt e_lin = w_lin;  angular part: d/dt e_ang = J_r⁻¹(e) w_ang
    (thesis 3.22), with e_own = ``error`` and w_own = Pᵀ w."""
    c = constraints(robot)[idx]
    t = 0.4
    kin = robot.update(qf(t), vf(t))
    w = P_of(c, kin, t).T @ c.error_dynamics(kin, t).w
    e = c.error(kin, t)
    ep = c.error(robot.update(qf(t + H), vf(t + H)), t + H)
    em = c.error(robot.update(qf(t - H), vf(t - H)), t - H)
    edot = (ep - em) / (2 * H)
    np.testing.assert_allclose(edot[:3], w[:3], atol=1e-6)
    np.testing.assert_allclose(edot[3:], jr_inv(e[3:]) @ w[3:], atol=1e-6)


def test_se3_error_and_jr_identities():
    R1 = pin.exp3(np.array([0.3, -0.5, 0.2]))
    R2 = pin.exp3(np.array([-0.1, 0.4, 0.9]))
    T1, T2 = pin.SE3(R1, np.array([1.0, 2, 3])), pin.SE3(R2, np.array([0.5, 0, 1]))
    e = se3_error(T1, T2)
    np.testing.assert_allclose(e[:3], [-0.5, -2, -2])
    np.testing.assert_allclose(pin.exp3(e[3:]), R1.T @ R2, atol=1e-12)
    th = e[3:]
    np.testing.assert_allclose(th @ jr_inv(th), th, atol=1e-12)  # eᵀ J_r⁻¹(e) = eᵀ (Lemma 3 of [16])
    from cmstack.models.lie import jr

    np.testing.assert_allclose(jr(th) @ jr_inv(th), np.eye(3), atol=1e-12)


def test_kinematics_cache_matches_pinocchio(robot):
    q, v = qf(0.3), vf(0.3)
    kin = robot.update(q, v)
    m, d = robot.model, robot.model.createData()
    np.testing.assert_allclose(kin.M, pin.crba(m, d, q), atol=1e-12)
    np.testing.assert_allclose(kin.M, kin.M.T, atol=1e-12)
    np.testing.assert_allclose(kin.h, pin.rnea(m, d, q, v, np.zeros(14)), atol=1e-10)
    fs = kin.frame("yumi_link_7_l")
    J = pin.computeFrameJacobian(m, d, q, robot.frame_id("yumi_link_7_l"), pin.LOCAL_WORLD_ALIGNED)
    np.testing.assert_allclose(fs.J, J, atol=1e-12)


# ----------------------------------------------------------------------------- typed core (issue 11)
from cmstack.models.coupling import ErrorDynamics, PostureTask, RelativeFrameTask, Task  # noqa: E402
from cmstack.models.errors import ConfigError  # noqa: E402


def rotating_relative(T0: pin.SE3, axis, amp=0.4, w=1.3, lin=(0.05, -0.03, 0.02)):
    """T_D(t) = (p0 + lin·sin(w t), R0 Exp(axis·amp·sin(w t))): body angular velocity axis·φ̇ (fixed axis)."""
    axis = np.asarray(axis, float) / np.linalg.norm(axis)
    lin = np.asarray(lin, float)

    def traj(t):
        s, c = np.sin(w * t), np.cos(w * t)
        T = pin.SE3(T0.rotation @ pin.exp3(axis * amp * s), T0.translation + lin * s)
        vel = np.r_[lin * w * c, axis * amp * w * c]
        acc = np.r_[-lin * w * w * s, -axis * amp * w * w * s]
        return T, vel, acc

    return traj


def test_error_dynamics_is_a_named_tuple(robot):
    c = constraints(robot)[0]
    ed = c.error_dynamics(robot.update(qf(0.2), vf(0.2)), 0.2)
    assert isinstance(ed, ErrorDynamics) and isinstance(c, Task)
    assert ed.W.shape == (6, 14) and ed.drift.shape == ed.w.shape == ed.e.shape == (6,)
    assert not hasattr(c, "terms")  # the former alias is gone: one name, error_dynamics


def test_relative_task_with_constant_target_is_the_coupling(robot):
    T_AB = pin.SE3(pin.rpy.rpyToMatrix(0.3, -0.2, 0.5), np.array([0.1, -0.4, 0.12]))
    c = RigidCoupling(robot, "yumi_link_7_l", "yumi_link_7_r", T_AB, 3.0, 2.0)
    r = RelativeFrameTask(robot, "yumi_link_7_l", "yumi_link_7_r", kp=3.0, kd=2.0)
    r.set_target(T_AB)
    for t in (0.1, 0.6):
        kin = robot.update(qf(t), vf(t))
        for x, y in zip(c.error_dynamics(kin, t), r.error_dynamics(kin, t)):
            np.testing.assert_allclose(y, x, atol=1e-10)


def test_relative_task_from_the_coupling_body_with_identity_target_is_the_coupling_exactly(robot):
    """B = T_a·I with a = the coupling's body frame B: the moving frame is B itself (r = 0, R_B = R_a, no own
    motion), so the relative task's rows are the coupling's bit for bit (one kernel, coupling_error)."""
    T_AB = pin.SE3(pin.rpy.rpyToMatrix(0.3, -0.2, 0.5), np.array([0.1, -0.4, 0.12]))
    c = RigidCoupling(robot, "yumi_link_7_l", "yumi_link_7_r", T_AB, 3.0, 2.0)
    r = RelativeFrameTask(robot, robot.model.frames[c.fB].name, "yumi_link_7_r", kp=3.0, kd=2.0)
    r.set_target(pin.SE3.Identity())
    for t in (0.1, 0.6):
        kin = robot.update(qf(t), vf(t))
        for x, y in zip(c.error_dynamics(kin, t), r.error_dynamics(kin, t)):
            np.testing.assert_array_equal(y, x)
        np.testing.assert_array_equal(r.error(kin, t), c.error(kin, t))


@pytest.mark.parametrize("rows", ["full", "position", "orientation"])
@pytest.mark.parametrize("t", [0.1, 0.77])
def test_relative_task_with_moving_target_matches_finite_differences(robot, rows, t):
    T0 = pin.SE3(pin.rpy.rpyToMatrix(0.3, -0.2, 0.5), np.array([0.1, -0.4, 0.12]))
    c = RelativeFrameTask(
        robot,
        "yumi_link_7_l",
        "yumi_link_7_r",
        rotating_relative(T0, [0.3, -1.0, 0.5]),
        kp=5.0,
        kd=1.5,
        rows=rows,
    )
    kin, P, W, drift, w, e, wdot_own = own_axes(robot, c, t)
    np.testing.assert_allclose(P @ wdot_own, W @ af(t) + drift, atol=1e-6)
    e_own = lambda s: (
        P_of(c, robot.update(qf(s), vf(s)), s).T @ c.error_dynamics(robot.update(qf(s), vf(s)), s).e
    )
    edot = (e_own(t + H) - e_own(t - H)) / (2 * H)
    w, e = P.T @ w, P.T @ e
    np.testing.assert_allclose(edot[:3], w[:3], atol=1e-6)
    np.testing.assert_allclose(edot[3:], jr_inv(e[3:]) @ w[3:], atol=1e-6)


def test_frame_task_set_target_equals_constant_trajectory(robot):
    T = pin.SE3(pin.rpy.rpyToMatrix(0.1, 0.2, 0.3), np.array([0.4, 0.2, 0.5]))
    a = FrameTask(robot, "yumi_link_7_l", lambda t: (T, np.zeros(6), np.zeros(6)), 5.0, 1.5)
    b = FrameTask(robot, "yumi_link_7_l", kp=5.0, kd=1.5)
    with pytest.raises(ConfigError, match="no target"):
        b.compute(robot.update(qf(0.3), vf(0.3)), 0.3)
    b.set_target(T.homogeneous)
    kin = robot.update(qf(0.3), vf(0.3))
    for x, y in zip(a.compute(kin, 0.3), b.compute(kin, 0.3)):
        np.testing.assert_array_equal(x, y)


def test_posture_task_law(robot):
    names = ["yumi_joint_1_l", "yumi_joint_3_r"]
    q_ref = np.array([0.2, -0.4])
    p = PostureTask(robot, q_ref, joints=names, kp=9.0, kd=6.0)
    kin = robot.update(qf(0.3), vf(0.3))
    A, b = p.compute(kin, 0.3)
    idx = [robot.joint_index(n) for n in names]
    # A v̇ = b  ⇔  q̈_sel = kp (q_ref − q) − kd v on the selected joints
    x = np.zeros(14)
    x[idx] = 9.0 * (q_ref - kin.q[idx]) - 6.0 * kin.v[idx]
    np.testing.assert_allclose(A @ x, b, atol=1e-12)
    assert A.shape == (2, 14) and p.dim == 2
    full = PostureTask(robot, np.zeros(14), kp=1.0, kd=1.0)
    assert full.dim == 14
    with pytest.raises(ConfigError, match="q_ref has 3 values"):
        PostureTask(robot, np.zeros(3), joints=names)


def test_coupling_from_configuration_has_zero_error_at_q0(robot):
    q0 = qf(0.3)
    c = RigidCoupling.from_configuration(robot, "yumi_link_7_l", "yumi_link_7_r", q0, 10.0, 5.0)
    np.testing.assert_allclose(c.error(robot.update(q0, np.zeros(14)), 0.0), 0.0, atol=1e-12)
    assert np.linalg.norm(c.error(robot.update(qf(0.5), np.zeros(14)), 0.0)) > 1e-3


@pytest.mark.parametrize("kp", [-1.0, float("nan"), float("inf")])
def test_bad_gains_are_refused(robot, kp):
    with pytest.raises(ConfigError, match="E1: kp must be a finite number ≥ 0"):
        FrameTask(robot, "yumi_link_7_l", kp=kp, kd=1.0, name="E1")


def own_axes_rows(c, kin, t):
    """The thesis' rows in the task's own axes, written here in NumPy (independent of the kernels):
    coupling (3.27–3.30) in E₂'s axes, frame task (3.34) in D's axes; all six rows."""
    if isinstance(c, RigidCoupling):
        B, E2 = kin.frame(c.fB), kin.frame(c.f2)
        R2t = E2.R.T
        Jd, wd, ad = E2.J - B.J, E2.twist - B.twist, E2.acc - B.acc
        A = np.vstack([Jd[:3], R2t @ Jd[3:]])
        drift = np.r_[ad[:3], R2t @ (ad[3:] - np.cross(E2.twist[3:], wd[3:]))]
        w = np.r_[wd[:3], R2t @ wd[3:]]
        e = se3_error(B.T, E2.T)
    else:
        C = kin.frame(c.fid)
        T_D, vel, acc = c.desired(t)
        RDt = T_D.rotation.T
        A = -np.vstack([C.J[:3], RDt @ C.J[3:]])
        drift = np.r_[
            acc[:3] - C.acc[:3], acc[3:] - RDt @ (C.acc[3:] - np.cross(T_D.rotation @ vel[3:], C.twist[3:]))
        ]
        w = np.r_[vel[:3] - C.twist[:3], vel[3:] - RDt @ C.twist[3:]]
        e = se3_error(C.T, T_D)
    return A, -drift - c.kd * w - c.kp * e, e


@pytest.mark.parametrize("idx", range(9))
@pytest.mark.parametrize("const", [False, True])
def test_rows_are_the_own_axes_rows_turned_by_P(robot, idx, const):
    """compute = qp_rows = (P A_own, P b_own) on the selected rows, P = diag(I, R) orthogonal, against the
    thesis' own-axes rows written independently here; ``error`` is e_own."""
    c = constraints(robot)[idx]
    if const and isinstance(c, FrameTask):
        c = FrameTask(
            robot, "yumi_link_7_l", kp=5.0, kd=1.5, rows=["full", "position", "orientation"][idx // 3]
        )
        c.set_target(pin.SE3(pin.rpy.rpyToMatrix(0.1, 0.2, 0.3), np.array([0.4, 0.2, 0.5])))
    kin = robot.update(qf(0.4), vf(0.4))
    A0, b0, e0 = own_axes_rows(c, kin, 0.4)
    R = kin.frame(c.f2).R if isinstance(c, RigidCoupling) else c.desired(0.4)[0].rotation
    np.testing.assert_array_equal(c.axes(kin, 0.4), R)
    P = np.eye(6)
    P[3:, 3:] = R
    r = c.rows
    for A, b in (c.compute(kin, 0.4), c.qp_rows(kin, 0.4)):
        np.testing.assert_allclose(A, (P @ A0)[r], rtol=0, atol=1e-12)
        np.testing.assert_allclose(b, (P @ b0)[r], rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(c.error(kin, 0.4), e0[r], rtol=1e-12, atol=1e-14)


class ShiftedFrameTask(FrameTask):
    """A subclass with maths of its own: the target 1 cm higher (in error_dynamics only)."""

    def error_dynamics(self, kin, t):
        W, drift, w, e = super().error_dynamics(kin, t)
        e = e.copy()
        e[2] += 0.01
        return ErrorDynamics(W, drift, w, e)


def test_a_subclass_with_its_own_error_dynamics_has_its_maths_everywhere(robot):
    """compute, qp_rows and error of a subclass that redefines error_dynamics are its maths, not the
    kernel's: the 1 cm shift shows in e and in b (K_p · 0.01 on the z row)."""
    traj = Circle([0.4, 0.2, 0.5], 0.12, 1.5, np.pi / 2, R=pin.rpy.rpyToMatrix(0.1, 0.2, 0.3))
    base, sub = (
        FrameTask(robot, "yumi_link_7_l", traj, 5.0, 1.5),
        ShiftedFrameTask(robot, "yumi_link_7_l", traj, 5.0, 1.5),
    )
    assert base.kernel_kind() == 1 and sub.kernel_kind() is None
    kin = robot.update(qf(0.4), vf(0.4))
    shift = np.zeros(6)
    shift[2] = 0.01
    np.testing.assert_allclose(sub.error(kin, 0.4), base.error(kin, 0.4) + shift, rtol=0, atol=1e-15)
    for m in ("compute", "qp_rows"):
        (A, b), (A1, b1) = getattr(base, m)(kin, 0.4), getattr(sub, m)(kin, 0.4)
        np.testing.assert_array_equal(A1, A)
        np.testing.assert_allclose(b1, b - 5.0 * shift, rtol=0, atol=1e-13)


def test_frame_drift_equals_the_jacobian_time_variation(robot):
    kin = robot.update(qf(0.4), vf(0.4))
    fs = kin.frame("yumi_link_7_r")
    np.testing.assert_allclose(fs.acc, fs.dJ @ kin.v, atol=1e-12)


@pytest.mark.parametrize("joints", [None, ["yumi_joint_1_l", "yumi_joint_3_r"]])
def test_posture_qp_rows_equal_compute(robot, joints):
    p = PostureTask(robot, qf(0.1), joints=joints, kp=9.0, kd=6.0)
    kin = robot.update(qf(0.3), vf(0.3))
    for x, y in zip(p.compute(kin, 0.3), p.qp_rows(kin, 0.3)):
        np.testing.assert_allclose(y, x, rtol=1e-14, atol=1e-14)

"""Each (A, b) constructor of [Milioshin] §3.3–3.4 against finite differences along a smooth motion:
   d/dt w = A v̇ + drift,   and   A v̇ − b = ẇ + K_d w + K_p e   (the error ODE the law imposes)."""
import numpy as np
import pinocchio as pin
import pytest

from cmstack.models.coupling import FrameTask, RigidCoupling
from cmstack.models.trajectory import Circle
from cmstack.models.lie import jr_inv, se3_error
from cmstack.models.robot import Robot

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
        out += [RigidCoupling(robot, "yumi_link_7_l", "yumi_link_7_r", T_AB, 3.0, 2.0, rows=rows),
                FrameTask(robot, "yumi_link_7_l", traj, 5.0, 1.5, rows=rows),
                FrameTask(robot, "yumi_link_7_r", traj, 5.0, 1.5, offset=T_AB, rows=rows)]
    return out


@pytest.mark.parametrize("idx", range(9))
@pytest.mark.parametrize("t", [0.1, 0.77])
def test_affine_constraint_matches_finite_differences(robot, idx, t):
    c = constraints(robot)[idx]
    kin = robot.update(qf(t), vf(t))
    W, drift, w, e = c.terms(kin, t)
    wp = c.terms(robot.update(qf(t + H), vf(t + H)), t + H)[2]
    wm = c.terms(robot.update(qf(t - H), vf(t - H)), t - H)[2]
    wdot = (wp - wm) / (2 * H)
    np.testing.assert_allclose(wdot, W @ af(t) + drift, atol=1e-6)
    # the law: A v̇ − b equals ẇ + K_d w + K_p e on the selected rows
    A, b = c.compute(robot.update(qf(t), vf(t)), t)
    r = c.rows
    np.testing.assert_allclose(A @ af(t) - b, (wdot + c.kd * w + c.kp * e)[r], atol=1e-5)


@pytest.mark.parametrize("idx", [0, 1, 2])
def test_pose_error_derivative(robot, idx):
    """Linear part: d/dt e_lin = w_lin;  angular part: d/dt e_ang = J_r⁻¹(e) w_ang (thesis 3.22)."""
    c = constraints(robot)[idx]
    t = 0.4
    _, _, w, e = c.terms(robot.update(qf(t), vf(t)), t)
    ep = c.terms(robot.update(qf(t + H), vf(t + H)), t + H)[3]
    em = c.terms(robot.update(qf(t - H), vf(t - H)), t - H)[3]
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
    np.testing.assert_allclose(th @ jr_inv(th), th, atol=1e-12)   # eᵀ J_r⁻¹(e) = eᵀ (Lemma 3 of [16])
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
    np.testing.assert_array_equal(ed.e, c.terms(robot.update(qf(0.2), vf(0.2)), 0.2)[3])


def test_relative_task_with_constant_target_is_the_coupling(robot):
    T_AB = pin.SE3(pin.rpy.rpyToMatrix(0.3, -0.2, 0.5), np.array([0.1, -0.4, 0.12]))
    c = RigidCoupling(robot, "yumi_link_7_l", "yumi_link_7_r", T_AB, 3.0, 2.0)
    r = RelativeFrameTask(robot, "yumi_link_7_l", "yumi_link_7_r", kp=3.0, kd=2.0)
    r.set_target(T_AB)
    for t in (0.1, 0.6):
        kin = robot.update(qf(t), vf(t))
        for x, y in zip(c.error_dynamics(kin, t), r.error_dynamics(kin, t)):
            np.testing.assert_allclose(y, x, atol=1e-10)


@pytest.mark.parametrize("rows", ["full", "position", "orientation"])
@pytest.mark.parametrize("t", [0.1, 0.77])
def test_relative_task_with_moving_target_matches_finite_differences(robot, rows, t):
    T0 = pin.SE3(pin.rpy.rpyToMatrix(0.3, -0.2, 0.5), np.array([0.1, -0.4, 0.12]))
    c = RelativeFrameTask(robot, "yumi_link_7_l", "yumi_link_7_r", rotating_relative(T0, [0.3, -1.0, 0.5]),
                          kp=5.0, kd=1.5, rows=rows)
    W, drift, w, e = c.error_dynamics(robot.update(qf(t), vf(t)), t)
    p = c.error_dynamics(robot.update(qf(t + H), vf(t + H)), t + H)
    m = c.error_dynamics(robot.update(qf(t - H), vf(t - H)), t - H)
    np.testing.assert_allclose((p.w - m.w) / (2 * H), W @ af(t) + drift, atol=1e-6)
    edot = (p.e - m.e) / (2 * H)
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


@pytest.mark.parametrize("idx", range(9))
def test_fast_compute_equals_the_error_dynamics_law(robot, idx):
    """The hot-path compute() of the coupling and the frame task equals b = −drift − K_d w − K_p e."""
    c = constraints(robot)[idx]
    kin = robot.update(qf(0.4), vf(0.4))
    A, b = c.compute(kin, 0.4)
    A0, b0 = Task.compute(c, kin, 0.4)
    np.testing.assert_allclose(A, A0, rtol=0, atol=1e-13)
    np.testing.assert_allclose(b, b0, rtol=1e-13, atol=1e-12)


def test_frame_drift_equals_the_jacobian_time_variation(robot):
    kin = robot.update(qf(0.4), vf(0.4))
    fs = kin.frame("yumi_link_7_r")
    np.testing.assert_allclose(fs.acc, fs.dJ @ kin.v, atol=1e-12)


@pytest.mark.parametrize("idx", range(9))
@pytest.mark.parametrize("const", [False, True])
def test_qp_rows_are_an_orthogonal_transform_of_compute(robot, idx, const):
    """qp_rows = (P A, P b) with P = diag(I, R) orthogonal on the task's rows (the controller's form)."""
    c = constraints(robot)[idx]
    if const and isinstance(c, FrameTask):
        c = FrameTask(robot, "yumi_link_7_l", kp=5.0, kd=1.5, rows=["full", "position", "orientation"][idx // 3])
        c.set_target(pin.SE3(pin.rpy.rpyToMatrix(0.1, 0.2, 0.3), np.array([0.4, 0.2, 0.5])))
    kin = robot.update(qf(0.4), vf(0.4))
    A, b = c.compute(kin, 0.4)
    A2, b2 = c.qp_rows(kin, 0.4)
    R = (kin.frame(c.f2).R if isinstance(c, RigidCoupling) else c.desired(0.4)[0].rotation)
    P = np.eye(6)
    P[3:, 3:] = R
    P = P[c.rows, c.rows]
    np.testing.assert_allclose(P.T @ P, np.eye(c.dim), atol=1e-12)
    np.testing.assert_allclose(A2, P @ A, atol=1e-12)
    np.testing.assert_allclose(b2, P @ b, rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize("joints", [None, ["yumi_joint_1_l", "yumi_joint_3_r"]])
def test_posture_qp_rows_equal_compute(robot, joints):
    p = PostureTask(robot, qf(0.1), joints=joints, kp=9.0, kd=6.0)
    kin = robot.update(qf(0.3), vf(0.3))
    for x, y in zip(p.compute(kin, 0.3), p.qp_rows(kin, 0.3)):
        np.testing.assert_allclose(y, x, rtol=1e-14, atol=1e-14)

"""Each (A, b) constructor of seed 002 §3.3–3.4 against finite differences along a smooth motion:
   d/dt w = A v̇ + drift,   and   A v̇ − b = ẇ + K_d w + K_p e   (the error ODE the law imposes)."""
import numpy as np
import pinocchio as pin
import pytest

from cmstack.models.coupling import FrameTask, RigidCoupling, circle_trajectory
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
    traj = circle_trajectory([0.4, 0.2, 0.5], 0.12, 1.5, np.pi / 2, R=pin.rpy.rpyToMatrix(0.1, 0.2, 0.3))
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

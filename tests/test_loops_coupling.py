"""One closure concept (issue 29 item 4): ``RigidCoupling`` is a weld ``LoopClosure`` whose error is in frame b's
axes (``error_axes="b"``, the kernels' loop code ``WELD_B``), and ``assemble`` closes it as the yumi_dual_arm
scenario's own Newton iteration did.  Checked against what does not share the code: the weld rows of the same frames
(J equal, J̇v differing by exactly −[0; ω_b × ω_d]), finite differences of R_bᵀ J v along q ⊕ t v (the drift is
R_b d/dt(R_bᵀ J v) at v̇ = 0), the coupling's own error dynamics (``coupling_error``) against the ``ClosureSet``
pass (frames in the kernel), and a Newton iteration written here on the error in E₂'s axes."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from cmstack.models import _loop_kernels
from cmstack.models.errors import ConfigError
from cmstack.models.lie import jr_inv
from cmstack.models.loops import ClosureSet, LoopClosure, RigidCoupling, assemble, joint_ranges
from cmstack.models.robot import Robot

F1, F2 = "yumi_link_7_l", "yumi_link_7_r"
T_AB = pin.SE3(np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]]), np.array([0.0, -0.4, 0.12]))
Q0 = np.array(  # the thesis' initial pose (scenarios/configs/yumi_dual_arm.toml), in the URDF's joint order
    [
        0.9732,
        1.6181,
        -2.9988,
        0.5775,
        0.1748,
        0.6528,
        -0.1875,
        -0.7914,
        1.1193,
        3.4577,
        0.2045,
        -1.0548,
        1.7651,
        1.4572,
    ]
)


@pytest.fixture(scope="module")
def robot():
    return Robot("urdf/yumi.urdf")


def _states(n, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.uniform(-1.5, 1.5, 14), rng.normal(0.0, 1.0, 14)) for _ in range(n)]


def test_a_coupling_is_a_weld_closure_in_b_axes(robot):
    c = RigidCoupling(robot, F1, F2, T_AB, 7.0, 3.0, name="c")
    assert isinstance(c, LoopClosure) and c.kind == "weld" and c.error_axes == "b"
    assert c.code == _loop_kernels.WELD_B and c.kernel_kind() == LoopClosure._KERNEL == 3
    assert (c.fB, c.f2, c.f1) == (c.fa, c.fb, robot.frame_id(F1)) and c.dim == c.m == 6
    weld = LoopClosure(
        robot, F1, F2, "weld", T_AB, name="c"
    )  # the same frames (the name's offset frame reused)
    assert weld.fa == c.fa and weld.code == _loop_kernels.WELD
    assert RigidCoupling(robot, F1, F2, T_AB, 7.0, 3.0, rows="position").dim == 3
    with pytest.raises(ConfigError, match="error_axes='b'"):
        LoopClosure(robot, F1, F2, "point", error_axes="b")
    with pytest.raises(ConfigError, match="keeps rows 0:3 of its 6"):
        ClosureSet([RigidCoupling(robot, F1, F2, T_AB, 7.0, 3.0, rows="position", name="p")])


def test_rows_weld_in_b_axes_against_the_weld_and_finite_differences(robot):
    c = RigidCoupling(robot, F1, F2, T_AB, 7.0, 3.0, name="c")
    weld = LoopClosure(robot, F1, F2, "weld", T_AB, name="c")
    cs, ws = ClosureSet([c]), ClosureSet([weld])
    model, d = robot.model, robot.model.createData()

    def rb_t_Jv(q, v):  # R_bᵀ (J_b − J_A)_ω v from Pinocchio's own frame Jacobians
        pin.computeJointJacobians(model, d, q)
        pin.updateFramePlacements(model, d)
        J = pin.getFrameJacobian(model, d, c.fb, pin.LOCAL_WORLD_ALIGNED) - pin.getFrameJacobian(
            model, d, c.fa, pin.LOCAL_WORLD_ALIGNED
        )
        return d.oMf[c.fb].rotation.T @ (J[3:] @ v), d.oMf[c.fb].rotation

    for q, v in _states(4):
        J, jdv = cs.jacobian_and_jdot_v(q, v)
        Jw, jdvw = ws.jacobian_and_jdot_v(q, v)
        np.testing.assert_array_equal(J, Jw)
        np.testing.assert_array_equal(cs.phi(q), ws.phi(q))
        np.testing.assert_array_equal(jdv[:3], jdvw[:3])
        kin = robot.update(q, v)
        wb, wd = kin.frame(c.fb).twist[3:], kin.frame(c.fb).twist[3:] - kin.frame(c.fa).twist[3:]
        np.testing.assert_allclose(jdv[3:], jdvw[3:] - np.cross(wb, wd), rtol=0, atol=1e-12)
        eps = 1e-6  # R_b d/dt(R_bᵀ J_d,ω v) along q ⊕ t v, v̇ = 0
        up, _ = rb_t_Jv(pin.integrate(model, q, eps * v), v)
        dn, _ = rb_t_Jv(pin.integrate(model, q, -eps * v), v)
        _, Rb = rb_t_Jv(q, v)
        np.testing.assert_allclose(
            jdv[3:], Rb @ (up - dn) / (2 * eps), rtol=0, atol=1e-6 * (1 + np.abs(jdv).max())
        )
        # the coupling's error dynamics (coupling_error on Robot.update's frames) = the closure set's pass
        W, drift, w, e = c.error_dynamics(kin, 0.0)
        np.testing.assert_allclose(W, J, rtol=0, atol=1e-12)
        np.testing.assert_allclose(drift, jdv, rtol=0, atol=1e-11)
        np.testing.assert_allclose(e, cs.phi(q), rtol=0, atol=1e-12)
        np.testing.assert_allclose(w, J @ v, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(c.axes(kin, 0.0), kin.frame(c.fb).R)


def _newton_in_e2_axes(robot, c, q, tol=1e-12, iters=50):
    """The scenario's former close_loop: Δq = −J_e⁺ e, e = [φ_p; R₂ᵀ φ_R], J_e = [W_p; J_r⁻¹(e_R) R₂ᵀ W_R]."""
    q = q.copy()
    for _ in range(iters):
        kin = robot.update(q, np.zeros(robot.nv))
        W, _, _, ew = c.error_dynamics(kin, 0.0)
        R2t = kin.frame(c.f2).R.T
        e = np.r_[ew[:3], R2t @ ew[3:]]
        if np.linalg.norm(e) < tol:
            return q
        q = q - np.linalg.lstsq(np.vstack([W[:3], jr_inv(e[3:]) @ R2t @ W[3:]]), e, rcond=None)[0]
    raise AssertionError("no convergence")


def test_assemble_closes_a_coupling_as_newton_in_e2_axes(robot):
    c = RigidCoupling(robot, F1, F2, T_AB, 1000.0, 33.0, name="c")
    lo, hi, _ = joint_ranges(robot)
    assert np.any((Q0 < lo) | (Q0 > hi))  # the thesis' pose is outside the URDF's ranges (the plant has none)
    q = assemble(robot, Q0, [c], within_ranges=False)
    assert c.residual(q) < 1e-12
    np.testing.assert_allclose(q, _newton_in_e2_axes(robot, c, Q0), rtol=0, atol=1e-12)
    assert 0.1 < np.max(np.abs(q - Q0)) < 0.3
    inside = assemble(robot, Q0, [c])  # within the ranges: another closed pose, inside them
    assert c.residual(inside) < 1e-12 and np.all(inside >= lo - 1e-12) and np.all(inside <= hi + 1e-12)

"""The loop closures' compiled rows (models/_loop_kernels.py, the one copy of their algebra: the compiled control steps
and the Python path ``models/loops.py`` call it) against what does not share that code: J against finite differences
of φ, J̇v against finite differences of J v along q(t) = q ⊕ t v (v̇ = 0), φ against Pinocchio's placements (pin.log3
for the weld); and the ``ClosureSet`` pass (frames from data.J in the kernel, ``_frame_kernels.frame_states``)
against the rows from Pinocchio's own frame Jacobians and classical accelerations.  Every kind, on the five-bar and
the Delta, closed (all rows are ∂φ/∂q there) and open (the point and plane rows are ∂φ/∂q everywhere)."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from cmstack.models._loop_kernels import KIND_CODES, PHI_KINDS, closure_phi, closure_rows, frame_rows
from cmstack.models.loops import KINDS, ClosureSet, LoopClosure
from cmstack.models.robot import Robot

MODELS = [("mjcf/five_bar.xml", "tool", "dist_r"), ("mjcf/delta.xml", "wp_1", "platform")]
OFF_A = {"xyz": [0.01, 0.02, -0.03], "rpy": [-0.2, 0.4, 0.1]}


def _row(F):
    return np.concatenate((F.R.ravel(), F.p, F.twist, F.acc))


def _closed(robot, kind, fa, fb, q0):
    """A closure of ``kind`` with frame A = fa·OFF_A, b = fb·offset_b chosen so that b = A at q0 (closed there)."""
    d = robot.model.createData()
    pin.framesForwardKinematics(robot.model, d, q0)
    A = d.oMf[robot.frame_id(fa)] * pin.SE3(pin.rpy.rpyToMatrix(*OFF_A["rpy"]), np.array(OFF_A["xyz"]))
    return LoopClosure(robot, fa, fb, kind=kind, offset=OFF_A, offset_b=d.oMf[robot.frame_id(fb)].actInv(A))


def _kernel(robot, c, q, v):
    """(φ, J, J̇v) by ``frame_rows`` from the frames of a ``Robot.update`` pass (Pinocchio's frame accessors), into
    rows 1..m of NaN-filled arrays (checked: nothing else written)."""
    kin = robot.update(q, v)
    A, B = kin.frame(c.fa), kin.frame(c.fb)
    phi, J, jdv = np.full(c.m + 2, np.nan), np.full((c.m + 2, robot.nv), np.nan), np.full(c.m + 2, np.nan)
    assert (
        frame_rows(KIND_CODES[c.kind], A.R, A.p, A.J, A.acc, B.R, B.p, B.J, B.acc, v, phi, J, jdv, 1) == c.m
    )
    assert (
        np.isnan(J[0]).all()
        and np.isnan(J[-1]).all()
        and np.isnan(phi[[0, -1]]).all()
        and np.isnan(jdv[[0, -1]]).all()
    )
    return phi[1:-1], J[1:-1], jdv[1:-1]


def _phi_reference(robot, c, q):
    """φ from Pinocchio's placements, in NumPy (module docstring of models/loops.py)."""
    d = robot.model.createData()
    pin.framesForwardKinematics(robot.model, d, q)
    A, B = d.oMf[c.fa], d.oMf[c.fb]
    dp = B.translation - A.translation
    Ra, Rb = A.rotation, B.rotation
    if c.kind == "plane":
        return np.array([Ra[:, 2] @ dp])
    if c.kind == "point":
        return dp
    if c.kind == "weld":
        return np.r_[dp, pin.log3(Rb @ Ra.T)]
    return np.r_[dp, Ra[:, :2].T @ np.cross(Ra[:, 2], Rb[:, 2])]


def _random_q(robot, rng):
    """A configuration from the test's own seeded generator (pin.randomConfiguration draws from Pinocchio's
    unseeded one, which made these tests differ from run to run): each joint moved by up to ±1 from neutral."""
    return pin.integrate(robot.model, pin.neutral(robot.model), rng.uniform(-1.0, 1.0, robot.nv))


def _assert_phi_close(phi, ref, kinds):
    """φ against the reference row by row, to 1e-14 (m or rad) but on a weld's rotation vector, whose log is
    ill-conditioned near θ = π: a rounding of R moves its axis by ~eps/sin θ, so two exact implementations of the
    log (Shepperd's quaternion here, pin.log3 in the reference) differ by up to ~eps·θ/sin θ; those rows get
    1e-14·max(1, θ/sin θ)."""
    atol, i = np.full(len(ref), 1e-14), 0
    for kind in kinds:
        if kind == "weld":
            th = np.linalg.norm(ref[i + 3 : i + 6])
            atol[i + 3 : i + 6] *= max(1.0, th / max(np.sin(th), 1e-300))
        i += KINDS[kind]
    err = np.abs(np.asarray(phi) - ref)
    assert np.all(err <= atol), f"phi differs from the reference by {err} (allowed {atol})"


def _fd_jacobian(robot, c, q, eps=1e-6):
    cols = []
    for i in range(robot.nv):
        dq = np.zeros(robot.nv)
        dq[i] = eps
        cols.append(
            (
                _phi_reference(robot, c, pin.integrate(robot.model, q, dq))
                - _phi_reference(robot, c, pin.integrate(robot.model, q, -dq))
            )
            / (2 * eps)
        )
    return np.array(cols).T


@pytest.mark.parametrize("kind", list(KIND_CODES))
@pytest.mark.parametrize("model,fa,fb", MODELS)
def test_compiled_rows_against_finite_differences(kind, model, fa, fb):
    robot = Robot.from_mjcf(model)
    rng = np.random.default_rng(4)
    m = KINDS[kind]
    for _k in range(4):
        q0 = _random_q(robot, rng)
        c = _closed(robot, kind, fa, fb, q0)
        v = rng.normal(size=robot.nv)
        q1 = pin.integrate(robot.model, q0, 0.3 * rng.normal(size=robot.nv))  # open: φ of order 0.1
        for q, closed in ((q0, True), (q1, False)):
            phi, J, jdv = _kernel(robot, c, q, v)
            ref = _phi_reference(robot, c, q)
            _assert_phi_close(phi, ref, [kind])
            assert (np.abs(ref).max() < 1e-12) == closed
            fd = _fd_jacobian(robot, c, q)
            rows = slice(0, m) if (closed or kind == "plane") else slice(0, 3)  # J = ∂φ/∂q there
            np.testing.assert_allclose(J[rows], fd[rows], rtol=0, atol=1e-8)
            # J̇v = d/dt (J(q(t)) v) at t = 0, q(t) = q ⊕ t v: everywhere, every kind
            eps = 1e-6
            Jp = _kernel(robot, c, pin.integrate(robot.model, q, eps * v), v)[1]
            Jm = _kernel(robot, c, pin.integrate(robot.model, q, -eps * v), v)[1]
            fdd = (Jp @ v - Jm @ v) / (2 * eps)
            np.testing.assert_allclose(jdv, fdd, rtol=0, atol=1e-7 * max(1.0, np.abs(fdd).max()))


def test_the_checks_see_a_wrong_row():
    """A revolute row without its (ω_A × x_A)·ω_d term (ω_A zeroed in frame a's row; J is unchanged) moves J̇v far
    beyond the finite-difference check's tolerance: that check can fail on the term."""
    robot = Robot.from_mjcf("mjcf/delta.xml")  # spatial (in the planar five-bar the term is zero)
    rng = np.random.default_rng(7)
    q = _random_q(robot, rng)
    c = _closed(robot, "revolute", "wp_1", "platform", q)
    v = rng.normal(size=robot.nv)
    kin = robot.update(q, v)
    A, B = kin.frame(c.fa), kin.frame(c.fb)
    xa = _row(A)
    J, jdv = np.empty((5, robot.nv)), np.empty(5)
    closure_rows(KIND_CODES["revolute"], xa, A.J, _row(B), B.J, J, jdv, 0)
    xa[15:18] = 0.0
    J2, jdv2 = np.empty((5, robot.nv)), np.empty(5)
    closure_rows(KIND_CODES["revolute"], xa, A.J, _row(B), B.J, J2, jdv2, 0)
    np.testing.assert_array_equal(J, J2)
    assert np.abs(jdv2 - jdv).max() > 1e-3 * max(1.0, np.abs(jdv).max())


@pytest.mark.parametrize("model,fa,fb", MODELS)
def test_closure_set_pass_equals_the_rows_from_pinocchios_frames(model, fa, fb):
    """``ClosureSet``'s one pass (computeJointJacobians, then frames from data.J and v in the kernel) against the
    same rows from Pinocchio's getFrameJacobian and classical acceleration (``rows_from`` a ``Robot.update``), every
    kind stacked, open configurations; and its cache: a second (q, v) is a new pass."""
    robot = Robot.from_mjcf(model)
    cs = ClosureSet(
        [LoopClosure(robot, fa, fb, kind=k, offset=OFF_A, offset_b=[0.0, 0.01, 0.0]) for k in KIND_CODES]
    )
    rng = np.random.default_rng(9)
    for _ in range(5):
        q = _random_q(robot, rng)
        v = rng.normal(size=robot.nv)
        J, jdv = cs.jacobian_and_jdot_v(q, v)
        phi = cs.phi(q)
        Jr, jdvr = cs.rows_from(robot.update(q, v))
        np.testing.assert_allclose(J, Jr, rtol=0, atol=1e-13 * max(1.0, np.abs(Jr).max()))
        np.testing.assert_allclose(jdv, jdvr, rtol=0, atol=1e-12 * max(1.0, np.abs(jdvr).max()))
        _assert_phi_close(
            phi,
            np.concatenate([_phi_reference(robot, c, q) for c in cs.closures]),
            [c.kind for c in cs.closures],
        )
        assert np.abs(phi).max() > 1e-3
        np.testing.assert_allclose(
            cs.jdot_v(q, 2 * v), 4 * jdvr, rtol=0, atol=1e-11 * max(1.0, np.abs(jdvr).max())
        )


@pytest.mark.parametrize("kind", PHI_KINDS)
@pytest.mark.parametrize("model,fa,fb", MODELS)
def test_compiled_residual_equals_pinocchios(kind, model, fa, fb):
    """``closure_phi`` against φ from Pinocchio's placements (pin.log3 for the weld), open configurations; zero to
    round-off on a closed weld."""
    robot = Robot.from_mjcf(model)
    c = LoopClosure(
        robot,
        fa,
        fb,
        kind=kind,
        offset=[0.01, 0.02, -0.03],
        offset_b={"xyz": [0.0, 0.01, 0.0], "rpy": [0.1, 0.2, 0.3]},
    )
    rng = np.random.default_rng(5)
    for _k in range(10):
        q, v = rng.normal(size=robot.nq), rng.normal(size=robot.nv)
        kin = robot.update(q, v)
        A, B = kin.frame(c.fa), kin.frame(c.fb)
        phi = np.full(c.m + 2, np.nan)
        assert closure_phi(KIND_CODES[kind], _row(A), _row(B), phi, 1) == c.m
        np.testing.assert_allclose(phi[1 : 1 + c.m], _phi_reference(robot, c, q), rtol=0, atol=1e-13)
        assert np.isnan(phi[0]) and np.isnan(phi[-1])
    w = LoopClosure(robot, fa, fb, kind="weld")
    q = rng.normal(size=robot.nq)
    kin = robot.update(q, 0 * q)
    A = kin.frame(w.fa)
    phi = np.empty(6)
    closure_phi(KIND_CODES["weld"], _row(A), _row(A), phi, 0)  # frame b put where A is
    assert np.abs(phi).max() < 1e-14

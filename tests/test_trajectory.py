"""models/trajectory.py: every kind's velocity and acceleration are the derivatives of its position
(central finite differences, on R^n and on SE(3) with the angular parts in the desired frame), the
point-to-point laws start and stop at rest, and the world-axes view agrees with the sample."""

import numpy as np
import pinocchio as pin
import pytest

from cmstack.models.errors import ConfigError
from cmstack.models.lie import quat_exp, quat_mul, quat_to_matrix
from cmstack.models.trajectory import (
    Circle,
    Constant,
    FromFunction,
    FromWorldFunction,
    MinimumJerk,
    MinimumJerkSE3,
    Sample,
    SE3Trajectory,
    Sinusoid,
    Trajectory,
    as_trajectory,
)

H = 1e-5


def _fd_rn(traj, t):
    xp, vp, _ = traj(t + H)
    xm, vm, _ = traj(t - H)
    return (xp - xm) / (2 * H), (vp - vm) / (2 * H)


def _fd_se3(traj, t):
    """Linear parts: d/dt of the world position/velocity; angular: ω^D = Log(R(t−h)ᵀR(t+h))/2h (body
    frame of D) and ε^D = d/dt ω^D (the ω × ω term vanishes, see the module docstring)."""
    Tp, vp, _ = traj(t + H)
    Tm, vm, _ = traj(t - H)
    vel = np.concatenate(
        ((Tp.translation - Tm.translation) / (2 * H), pin.log3(Tm.rotation.T @ Tp.rotation) / (2 * H))
    )
    return vel, (vp - vm) / (2 * H)


@pytest.mark.parametrize(
    "traj",
    [
        Sinusoid([0.1, 0.5, 0.05], [0.2, 0.1, 0.02], [0.5, 0.25, 1.0], [0.0, 1.0, 2.0]),
        MinimumJerk([0.0, 1.0], [1.0, -2.0], duration=2.0, t0=0.5),
    ],
)
def test_rn_derivatives(traj):
    assert isinstance(traj, Trajectory) and traj.space == "Rn"
    for t in (0.7, 1.3, 2.1):
        s = traj(t)
        assert isinstance(s, Sample)
        dv, da = _fd_rn(traj, t)
        np.testing.assert_allclose(s.velocity, dv, atol=1e-8)
        np.testing.assert_allclose(s.acceleration, da, atol=1e-7)


@pytest.mark.parametrize(
    "traj",
    [
        Circle([0.4, 0.2, 0.5], 0.12, 1.5, np.pi / 2, R=pin.rpy.rpyToMatrix(0.1, 0.2, 0.3)),
        Circle([0.4, 0.2, 0.5], 0.12, 1.5, 0.3, normal=[0.0, 0.0, 1.0]),
        Circle(
            [0.1, -0.2, 0.7], 0.3, -2.5, 1.0, R=pin.rpy.rpyToMatrix(0.3, 0.0, 0.1), normal=[1.0, 2.0, -0.5]
        ),
        Circle([0.0, 0.0, 0.3], 0.05, 4.0, axes=([0.0, 1.0, 1.0], [1.0, 0.0, 0.0])),
        MinimumJerkSE3(
            pin.SE3(np.eye(3), np.array([0.3, 0.0, 0.4])),
            pin.SE3(pin.rpy.rpyToMatrix(0.5, -0.3, 1.2), np.array([0.5, 0.2, 0.1])),
            duration=1.5,
            t0=0.2,
        ),
    ],
)
def test_se3_derivatives_and_world_view(traj):
    assert isinstance(traj, SE3Trajectory) and traj.space == "SE3"
    for t in (0.4, 0.9, 1.4):
        T, vel, acc = traj(t)
        dv, da = _fd_se3(traj, t)
        np.testing.assert_allclose(vel, dv, atol=1e-8)
        np.testing.assert_allclose(acc, da, atol=1e-6)
        w = traj.world(t)
        np.testing.assert_allclose(quat_to_matrix(w.quaternion), T.rotation, atol=1e-14)
        np.testing.assert_allclose(w.position, T.translation, atol=0)
        np.testing.assert_allclose(w.twist, np.r_[vel[:3], T.rotation @ vel[3:]], atol=1e-15)
        np.testing.assert_allclose(w.twist_rate, np.r_[acc[:3], T.rotation @ acc[3:]], atol=1e-15)


def test_point_to_point_rests_at_both_ends():
    x0, x1 = np.array([0.0, 1.0]), np.array([1.0, -2.0])
    mj = MinimumJerk(x0, x1, duration=2.0, t0=0.5)
    for t, x in ((0.0, x0), (0.5, x0), (2.5, x1), (3.0, x1)):
        s = mj(t)
        np.testing.assert_allclose(s.position, x, atol=1e-15)
        np.testing.assert_allclose(s.velocity, 0.0, atol=1e-15)
        np.testing.assert_allclose(s.acceleration, 0.0, atol=1e-15)
    np.testing.assert_allclose(mj(1.5).position, 0.5 * (x0 + x1), atol=1e-15)  # s(½) = ½
    T0 = pin.SE3(np.eye(3), np.zeros(3))
    T1 = pin.SE3(pin.rpy.rpyToMatrix(0.2, 0.1, -0.4), np.array([0.1, 0.2, 0.3]))
    se = MinimumJerkSE3(T0, T1, duration=1.0)
    assert se(1.0).position.isApprox(T1, 1e-14) and se(0.0).position.isApprox(T0, 1e-14)
    np.testing.assert_allclose(se(1.0).velocity, 0.0, atol=1e-15)


def test_circle_is_the_thesis_circle_and_constant_targets():
    c = Circle([0.4, 0.2, 0.5], 0.12, 1.5, 0.3)
    T, v, a = c(0.7)
    ph = 1.5 * 0.7 + 0.3
    np.testing.assert_allclose(
        T.translation, [0.4 + 0.12 * np.cos(ph), 0.2, 0.5 + 0.12 * np.sin(ph)], atol=1e-15
    )
    np.testing.assert_allclose(T.rotation, np.eye(3))
    np.testing.assert_allclose(v[3:], 0)
    np.testing.assert_allclose(a[3:], 0)
    k = Constant([1.0, 2.0])
    np.testing.assert_array_equal(k(3.0).position, [1.0, 2.0])
    np.testing.assert_array_equal(k(3.0).velocity, [0.0, 0.0])
    P = pin.SE3(pin.rpy.rpyToMatrix(0.1, 0.0, 0.2), np.array([0.1, 0.2, 0.3]))
    kp = Constant(P)
    assert kp.space == "SE3" and kp(1.0).position.isApprox(P) and kp(1.0).velocity.shape == (6,)
    assert np.allclose(quat_to_matrix(kp.world(0.0).quaternion), P.rotation, atol=1e-14)
    assert isinstance(as_trajectory(2.0), Constant) and as_trajectory(c) is c
    f = as_trajectory(lambda t: (np.array([t]), np.ones(1), np.zeros(1)))
    assert isinstance(f, FromFunction) and f(2.0).position[0] == 2.0


def _old_xz_circle(c, r, w, ph, t):
    """The x–z-only kernel's expressions before circles took a plane (bit-identity reference)."""
    a = w * t + ph
    ca, sa = np.cos(a), np.sin(a)
    p = np.array([c[0] + r * ca, c[1], c[2] + r * sa])
    v = np.array([-r * w * sa, 0.0, r * w * ca, 0.0, 0.0, 0.0])
    acc = np.array([-r * w * w * ca, 0.0, -r * w * w * sa, 0.0, 0.0, 0.0])
    return p, v, acc


def test_circle_default_plane_is_bit_identical_to_the_xz_kernel():
    """Without a plane, and with the x–z plane given as normal -y or as axes (x, z), the circle's numbers are
    the former x–z kernel's bit for bit (including the signs of zeros)."""
    c, r, w, ph = [0.436763, 0.185684, 0.512661], 0.12, 1.5, np.pi / 2
    for circ in (
        Circle(c, r, w, ph),
        Circle(c, r, w, ph, normal=[0.0, -1.0, 0.0]),
        Circle(c, r, w, ph, axes=([1.0, 0.0, 0.0], [0.0, 0.0, 1.0])),
    ):
        np.testing.assert_array_equal(circ.axes, [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
        for t in (0.0, 0.001, 0.37, 1.0, 2.5, 10.0):
            T, vel, acc = circ(t)
            for got, want in zip((T.translation, vel, acc), _old_xz_circle(c, r, w, ph, t)):
                assert got.tobytes() == want.tobytes(), (t, got, want)
    T, vel, _ = Circle(c, r, w, 0.0)(0.0)  # sin a = 0: the former -0.0 of v_x is kept
    assert np.signbit(vel[0]) == np.signbit(-r * w * 0.0)


@pytest.mark.parametrize(
    "kw",
    [
        dict(normal=[0.0, 0.0, 1.0]),
        dict(normal=[0.0, 0.0, -2.0]),
        dict(normal=[1.0, 0.0, 0.0]),
        dict(normal=[0.3, -0.4, 0.8]),
        dict(axes=([0.0, 1.0, 1.0], [2.0, 0.0, 0.0])),
    ],
)
def test_circle_in_any_plane(kw):
    """The circle lies in its plane (|p − c| = r, (p − c)·n = 0), starts at c + r (cos φ u + sin φ w), runs
    counter-clockwise about n = u × w, and equals the NumPy formula p = c + r (cos a u + sin a w)."""
    c, r, w, ph = np.array([0.3, -0.1, 0.6]), 0.2, 1.7, 0.4
    circ = Circle(c, r, w, ph, **kw)
    u, e = circ.axes
    n = circ.normal
    np.testing.assert_allclose(circ.axes @ circ.axes.T, np.eye(2), atol=1e-15)
    if "normal" in kw:
        nk = np.asarray(kw["normal"]) / np.linalg.norm(kw["normal"])
        np.testing.assert_allclose(n, nk, atol=1e-15)
    else:
        a0, b0 = (np.asarray(x) / np.linalg.norm(x) for x in kw["axes"])
        np.testing.assert_allclose(u, a0, atol=1e-15)
        np.testing.assert_allclose(e, b0, atol=1e-15)
    for t in (0.0, 0.3, 1.1, 2.9):
        T, vel, acc = circ(t)
        a = w * t + ph
        d = T.translation - c
        np.testing.assert_allclose(np.linalg.norm(d), r, rtol=1e-14)
        assert abs(d @ n) < 1e-15
        np.testing.assert_allclose(T.translation, c + r * (np.cos(a) * u + np.sin(a) * e), atol=1e-15)
        np.testing.assert_allclose(vel[:3], r * w * (-np.sin(a) * u + np.cos(a) * e), atol=1e-15)
        np.testing.assert_allclose(acc[:3], -r * w * w * (np.cos(a) * u + np.sin(a) * e), atol=1e-15)
        assert np.cross(d, vel[:3]) @ n > 0  # counter-clockwise about n (ω > 0)
    if kw.get("normal") == [0.0, 0.0, 1.0]:  # horizontal: from +x towards +y
        np.testing.assert_allclose(circ.axes, [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], atol=0)


def test_world_function_round_trip():
    q0 = quat_exp(np.array([0.1, -0.2, 0.3]))
    ax = np.array([0.0, 0.6, 0.8])

    def f(t):
        q = quat_mul(quat_exp(ax * 0.3 * np.sin(t)), q0)
        w = ax * 0.3 * np.cos(t)
        return (
            np.array([t, 0.0, 0.0]),
            q,
            np.r_[1.0, 0.0, 0.0, w],
            np.r_[0.0, 0.0, 0.0, -ax * 0.3 * np.sin(t)],
        )

    tr = FromWorldFunction(f)
    for t in (0.3, 1.1):
        w = tr.world(t)
        for got, want in zip(w, f(t)):
            np.testing.assert_array_equal(got, want)  # returned as is
        back = SE3Trajectory.world(tr, t)  # through the sample (desired-frame parts)
        for got, want in zip(back[2:], f(t)[2:]):
            np.testing.assert_allclose(got, want, atol=1e-15)
        dv, da = _fd_se3(tr, t)
        np.testing.assert_allclose(tr(t).velocity, dv, atol=1e-8)
        np.testing.assert_allclose(tr(t).acceleration, da, atol=1e-6)


def test_bad_input_is_refused():
    with pytest.raises(ConfigError, match="duration"):
        MinimumJerk([0.0], [1.0], duration=0.0)
    with pytest.raises(ConfigError, match="size"):
        MinimumJerk([0.0], [1.0, 2.0], duration=1.0)
    with pytest.raises(ConfigError, match="center"):
        Circle([0.0, 1.0], 0.1, 1.0)
    with pytest.raises(ConfigError, match="either normal= or axes="):
        Circle([0.0, 1.0, 0.0], 0.1, 1.0, normal=[0, 0, 1], axes=([1, 0, 0], [0, 1, 0]))
    with pytest.raises(ConfigError, match="not orthogonal"):
        Circle([0.0, 1.0, 0.0], 0.1, 1.0, axes=([1, 0, 0], [1, 1, 0]))
    with pytest.raises(ConfigError, match="normal must be a non-zero 3-vector"):
        Circle([0.0, 1.0, 0.0], 0.1, 1.0, normal=[0, 0, 0])
    with pytest.raises(ConfigError, match="non-zero"):
        Circle([0.0, 1.0, 0.0], 0.1, 1.0, axes=([0, 0, 0], [0, 1, 0]))
    with pytest.raises(ConfigError, match="two 3-vectors"):
        Circle([0.0, 1.0, 0.0], 0.1, 1.0, axes=([1, 0], [0, 1]))
    with pytest.raises(ConfigError, match="matching"):
        Sinusoid([0.0, 1.0], [1.0, 2.0, 3.0], 1.0)
    with pytest.raises(ConfigError):
        Constant([np.nan])

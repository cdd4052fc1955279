"""The one trajectory type: time → (position, velocity, acceleration), on R^n or on SE(3).

    traj = Circle(center=[0.4, 0.2, 0.5], radius=0.12, omega=1.5, phase=π/2)
    pose, vel, acc = traj(t)            # a Sample (NamedTuple): unpacks as three values

Conventions of a :class:`Sample`:
  * on R^n: ``position`` x (n,), ``velocity`` ẋ (n,), ``acceleration`` ẍ (n,) (SI units of x);
  * on SE(3): ``position`` the pose T_D as a ``pin.SE3``; ``velocity`` = [v_D; ω_D^D] and
    ``acceleration`` = [a_D; ε_D^D] (6,), the linear parts in world axes [m/s, m/s²], the angular
    parts in the desired frame's own axes [rad/s, rad/s²] — what the frame tasks of
    models/coupling.py consume ([Milioshin] (3.34)).
    :meth:`SE3Trajectory.world` gives the same motion as (p, quaternion (w, x, y, z), [v; ω], [a; ω̇])
    with every part in world axes — what the DAC task-space law consumes ([Eslami] law III).
    Since ω = R_D ω^D, ω̇ = R_D ε^D (the term ω × ω vanishes).

Kinds: :class:`Constant` (R^n or SE(3)), :class:`Sinusoid` (R^n, per coordinate),
:class:`Circle` (SE(3), a circle in any plane, by default the world x–z plane, at a fixed
orientation), :class:`MinimumJerk` (R^n) and :class:`MinimumJerkSE3` (point to point with the quintic time law
s(τ) = 10τ³ − 15τ⁴ + 6τ⁵, zero velocity and acceleration at both ends), and :class:`FromFunction`
(any function t → (x, ẋ, ẍ)).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, NamedTuple, cast

import numpy as np
import pinocchio as pin
from numpy.typing import ArrayLike

from cmstack.models import _params
from cmstack.models.errors import ConfigError
from cmstack.models.lie import log3, quat_from_matrix, quat_to_matrix


class Sample(NamedTuple):
    """One instant of a trajectory (see the module docstring for the units and frames)."""

    position: np.ndarray | pin.SE3
    velocity: np.ndarray
    acceleration: np.ndarray


class WorldSample(NamedTuple):
    """One instant of an SE(3) trajectory with every part in world axes: position p [m], unit
    quaternion (w, x, y, z) of the orientation, twist [v; ω] [m/s; rad/s], its rate [m/s²; rad/s²]."""

    position: np.ndarray
    quaternion: np.ndarray
    twist: np.ndarray
    twist_rate: np.ndarray


class Trajectory(ABC):
    """t [s] → :class:`Sample`.  Calling the trajectory is the same as :meth:`sample`."""

    #: "Rn" or "SE3"
    space: str = "Rn"

    @abstractmethod
    def sample(self, t: float) -> Sample:
        """Position, velocity and acceleration at time t [s]."""

    def __call__(self, t: float) -> Sample:
        return self.sample(t)


class SE3Trajectory(Trajectory):
    """A trajectory of poses (see the module docstring for the frames of its velocity parts)."""

    space = "SE3"

    def world(self, t: float) -> WorldSample:
        """The sample at t with every part in world axes and the orientation as a quaternion."""
        pose, vel, acc = self.sample(t)
        T = cast(pin.SE3, pose)  # an SE(3) trajectory's samples are poses
        R = T.rotation
        return WorldSample(
            T.translation.copy(),
            quat_from_matrix(R),
            np.concatenate((vel[:3], R @ vel[3:])),
            np.concatenate((acc[:3], R @ acc[3:])),
        )


def _vector(x: ArrayLike, what: str) -> np.ndarray:
    a = np.atleast_1d(np.asarray(x, dtype=float))
    if a.ndim != 1 or not np.all(np.isfinite(a)):
        raise ConfigError(f"{what} must be a finite number or vector, got {x!r}")
    return a


class Constant(Trajectory):
    """A constant target: a vector (R^n; a scalar is a 1-vector) or a ``pin.SE3`` pose (SE(3)),
    with zero velocity and acceleration."""

    def __init__(self, value: ArrayLike | pin.SE3):
        if isinstance(value, pin.SE3):
            self.space = "SE3"
            self._s = Sample(value.copy(), np.zeros(6), np.zeros(6))
        else:
            x = _vector(value, "Constant: the value")
            z = np.zeros_like(x)
            self._s = Sample(x, z, z)

    def sample(self, t: float) -> Sample:
        return self._s

    def world(self, t: float) -> WorldSample:  # SE(3) constants only
        if self.space != "SE3":
            raise ConfigError("Constant.world: this constant is a vector, not a pose")
        return SE3Trajectory.world(self, t)  # type: ignore[arg-type]  # a pose constant samples as an SE(3) trajectory


class Sinusoid(Trajectory):
    """x_i(t) = c_i + a_i sin(2π f_i t + φ_i) per coordinate: center c, amplitude a (units of x),
    frequency f [Hz], phase φ [rad] (scalars broadcast)."""

    def __init__(
        self, center: ArrayLike, amplitude: ArrayLike, frequency_hz: ArrayLike, phase: ArrayLike = 0.0
    ):
        c, a, f, p = (
            _vector(x, k)
            for x, k in (
                (center, "center"),
                (amplitude, "amplitude"),
                (frequency_hz, "frequency_hz"),
                (phase, "phase"),
            )
        )
        try:
            c, a, f, p = (np.array(x, dtype=float) for x in np.broadcast_arrays(c, a, f, p))
        except ValueError:
            raise ConfigError(
                f"Sinusoid: center, amplitude, frequency and phase do not have matching sizes "
                f"({c.size}, {a.size}, {f.size}, {p.size})"
            ) from None
        self.c, self.a, self.p = c, a, p
        self.w = 2 * np.pi * f

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        _params.changed()  # a compiled step that samples this sinusoid copies its parameters again

    def kernel_sinusoid(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """(c, a, ω = 2π f, φ) for a compiled step that samples this sinusoid itself, or None when a
        subclass redefines its sampling (``sample`` or ``__call__``: its own maths then runs, in Python).
        Read at each call: a step that compiled the parameters copies them when its reference is set."""
        if type(self).sample is not Sinusoid.sample or type(self).__call__ is not Sinusoid.__call__:
            return None
        return self.c, self.a, self.w, self.p

    def sample(self, t: float) -> Sample:
        """(x, ẋ, ẍ) at t [s]: the compiled ``sinusoid_sample`` (models/_trajectory_kernels.py), the one definition
        the compiled UK step samples as well."""
        from cmstack.models._trajectory_kernels import sinusoid_sample  # numba: imported on first use

        k = self.c.shape[0]
        x, xd, xdd = np.empty(k), np.empty(k), np.empty(k)
        sinusoid_sample(float(t), self.c, self.a, self.w, self.p, x, xd, xdd)
        return Sample(x, xd, xdd)


#: the length of a circle's row of parameters (``circle_sample`` in models/_trajectory_kernels.py; the compiled
#: steps keep one per frame task, ``tcirc``): [c_x, c_y, c_z, r, ω, φ, on (1: sampled), u (3), w (3)]
CIRCLE_ROW = 13


def _circle_axes(normal: ArrayLike | None, axes: tuple[ArrayLike, ArrayLike] | None) -> np.ndarray:
    """The orthonormal axes [u; w] (2×3, read-only) of a circle's plane (see :class:`Circle`)."""
    if normal is not None and axes is not None:
        raise ConfigError("Circle: give either normal= or axes=, not both")
    if axes is not None:
        try:
            a, b = axes
        except (TypeError, ValueError):
            raise ConfigError(f"Circle: axes must be two 3-vectors (u, w), got {axes!r}") from None
        u, w = _vector(a, "Circle: axes[0]"), _vector(b, "Circle: axes[1]")
        if u.shape != (3,) or w.shape != (3,):
            raise ConfigError(f"Circle: axes must be two 3-vectors (u, w), got {list(u)} and {list(w)}")
        nu, nw = float(np.linalg.norm(u)), float(np.linalg.norm(w))
        if not (nu > 1e-12 and nw > 1e-12):
            raise ConfigError(f"Circle: the axes must be non-zero, got {list(u)} and {list(w)}")
        u, w = u / nu, w / nw
        if abs(float(u @ w)) > 1e-6:
            raise ConfigError(
                f"Circle: the axes {list(u)} and {list(w)} are not orthogonal (cos = {float(u @ w):.3g})"
            )
        w = w - (u @ w) * u  # exactly orthonormal
        w /= np.linalg.norm(w)
    elif normal is not None:
        n = _vector(normal, "Circle: normal")
        nn = float(np.linalg.norm(n)) if n.shape == (3,) else 0.0
        if not nn > 1e-12:
            raise ConfigError(f"Circle: normal must be a non-zero 3-vector, got {list(n)}")
        n = n / nn
        ref = np.array([1.0, 0.0, 0.0]) if abs(n[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
        u = ref - (ref @ n) * n
        u /= np.linalg.norm(u)
        w = np.cross(n, u)
    else:
        u, w = np.array([1.0, 0.0, 0.0]), np.array([0.0, 0.0, 1.0])
    uw = np.array([u, w], dtype=float)
    uw.flags.writeable = False
    return uw


class Circle(SE3Trajectory):
    """[Milioshin] §4.4, in any plane: p(t) = c + r (cos(ω t + φ) u + sin(ω t + φ) w) at the fixed
    orientation R, where u, w are orthonormal axes of the circle's plane.

    Args:
        center: c, the centre [m] (3-vector, world axes).
        radius: r [m].
        omega: ω [rad/s] (the circle runs from u towards w, i.e. counter-clockwise about n = u × w).
        phase: φ [rad]; at t = 0 the point is c + r (cos φ u + sin φ w).
        R: the orientation held (3×3, default I).
        normal: n, the plane's normal (world axes, any length): u is world x projected onto the plane
            (world y when n is within 26° of x), w = n × u.  ``normal=[0, 0, 1]`` draws a horizontal circle
            from +x towards +y.
        axes: (u, w), the plane's two axes (normalised; they must be orthogonal to 1e-6).

    The axes are kept as ``circle.axes`` = [u; w] (2×3, read-only), the normal as ``circle.normal``.

    Without ``normal`` or ``axes`` the plane is the world x–z plane (u = e_x, w = e_z, n = −e_y): the
    thesis' circle, p = c + r (cos a, 0, sin a).  Velocity and acceleration are the exact derivatives
    (zero angular parts), sampled by the compiled ``circle_sample`` (models/_trajectory_kernels.py) here
    and inside the compiled control steps.
    """

    def __init__(
        self,
        center: ArrayLike,
        radius: float,
        omega: float,
        phase: float = 0.0,
        R: ArrayLike | None = None,
        *,
        normal: ArrayLike | None = None,
        axes: tuple[ArrayLike, ArrayLike] | None = None,
    ):
        c = _vector(center, "Circle: center")
        if c.shape != (3,):
            raise ConfigError(f"Circle: center must be a 3-vector, got {list(c)}")
        self.cx, self.cy, self.cz = (float(x) for x in c)
        R = np.eye(3) if R is None else np.array(R, dtype=float)
        R.flags.writeable = False  # the circle's own, read-only: assign a new R (models/_params.py)
        self.R = R
        self.axes = _circle_axes(normal, axes)  # [u; w], read-only (models/_params.py)
        self.r, self.w, self.phase = float(radius), float(omega), float(phase)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        _params.changed()  # a compiled step that samples this circle copies its parameters again

    @property
    def normal(self) -> np.ndarray:
        """n = u × w, the plane's unit normal (world axes)."""
        return np.cross(self.axes[0], self.axes[1])

    def kernel_params(self) -> tuple | None:
        """(c_x, c_y, c_z, r, ω, φ, u_x, u_y, u_z, w_x, w_y, w_z) for a compiled step that samples this circle
        itself (its row of ``circle_sample`` without the ``on`` flag), or None when a subclass redefines
        ``sample`` (its own maths then runs, sampled in Python)."""
        if type(self).sample is not Circle.sample or type(self).__call__ is not Circle.__call__:
            return None
        return (self.cx, self.cy, self.cz, self.r, self.w, self.phase, *self.axes[0], *self.axes[1])

    def sample(self, t: float) -> Sample:
        """(T_D, [v; 0], [a_D; 0]) at t [s]: the compiled ``circle_sample`` (models/_trajectory_kernels.py),
        the one definition the compiled steps sample as well."""
        from cmstack.models._trajectory_kernels import circle_sample  # numba: imported on first use

        H = np.empty((4, 4))
        va = np.empty(12)
        row = np.array(
            (self.cx, self.cy, self.cz, self.r, self.w, self.phase, 1.0, *self.axes[0], *self.axes[1])
        )
        circle_sample(float(t), row, H, va)
        return Sample(pin.SE3(self.R, H[:3, 3].copy()), va[:6].copy(), va[6:].copy())


def _quintic(t: float, t0: float, duration: float) -> tuple[float, float, float]:
    """s, ṡ, s̈ of s(τ) = 10τ³ − 15τ⁴ + 6τ⁵, τ = (t − t0)/duration clipped to [0, 1]."""
    tau = (t - t0) / duration
    if tau <= 0.0:
        return 0.0, 0.0, 0.0
    if tau >= 1.0:
        return 1.0, 0.0, 0.0
    s = tau**3 * (10 - 15 * tau + 6 * tau * tau)
    ds = 30 * tau * tau * (1 - tau) ** 2 / duration
    dds = 60 * tau * (1 - tau) * (1 - 2 * tau) / duration**2
    return s, ds, dds


def _duration(duration: float) -> float:
    d = float(duration)
    if not (math.isfinite(d) and d > 0):
        raise ConfigError(f"MinimumJerk: duration must be a finite number > 0 s, got {duration!r}")
    return d


class MinimumJerk(Trajectory):
    """Point to point on R^n: x(t) = x0 + s(t)(x1 − x0) with the quintic s of the module docstring,
    from t0 [s] for ``duration`` [s]; x0 before, x1 after."""

    def __init__(self, x0: ArrayLike, x1: ArrayLike, duration: float, t0: float = 0.0):
        self.x0, self.x1 = _vector(x0, "MinimumJerk: x0"), _vector(x1, "MinimumJerk: x1")
        if self.x0.shape != self.x1.shape:
            raise ConfigError(f"MinimumJerk: x0 and x1 differ in size ({self.x0.size} vs {self.x1.size})")
        self.d, self.T, self.t0 = self.x1 - self.x0, _duration(duration), float(t0)

    def sample(self, t: float) -> Sample:
        s, ds, dds = _quintic(t, self.t0, self.T)
        return Sample(self.x0 + s * self.d, ds * self.d, dds * self.d)


class MinimumJerkSE3(SE3Trajectory):
    """Pose to pose: p(t) = p0 + s(t)(p1 − p0), R(t) = R0 Exp(s(t) θ) with θ = Log(R0ᵀ R1) (the
    shortest rotation about a fixed axis), quintic s from t0 [s] for ``duration`` [s].  Hence
    ω^D = ṡ θ and ε^D = s̈ θ (a rotation about a fixed axis of the desired frame)."""

    def __init__(self, T0: pin.SE3, T1: pin.SE3, duration: float, t0: float = 0.0):
        if not (isinstance(T0, pin.SE3) and isinstance(T1, pin.SE3)):
            raise ConfigError("MinimumJerkSE3: T0 and T1 must be pinocchio.SE3 poses")
        self.p0, self.dp = T0.translation.copy(), T1.translation - T0.translation
        self.R0 = T0.rotation.copy()
        self.theta = log3(T0.rotation.T @ T1.rotation)
        self.T, self.t0 = _duration(duration), float(t0)

    def sample(self, t: float) -> Sample:
        s, ds, dds = _quintic(t, self.t0, self.T)
        T = pin.SE3(self.R0 @ pin.exp3(s * self.theta), self.p0 + s * self.dp)
        return Sample(
            T,
            np.concatenate((ds * self.dp, ds * self.theta)),
            np.concatenate((dds * self.dp, dds * self.theta)),
        )


class FromFunction(Trajectory):
    """A trajectory from a function t → (x, ẋ, ẍ) (R^n arrays, or an SE(3) triple in the
    conventions above when ``space="SE3"``)."""

    def __init__(self, f: Callable[[float], tuple], space: str = "Rn"):
        if space not in ("Rn", "SE3"):
            raise ConfigError(f"FromFunction: space='{space}' is not 'Rn' or 'SE3'")
        self.f, self.space = f, space

    def kernel_function(self) -> Callable[[float], tuple] | None:
        """The user's function t → (x, ẋ, ẍ), for a compiled step that calls it directly (no ``Sample``
        built around its result), or None when a subclass redefines the sampling (``sample`` or
        ``__call__``: its own maths then runs)."""
        if type(self).sample is not FromFunction.sample or type(self).__call__ is not FromFunction.__call__:
            return None
        return self.f

    def sample(self, t: float) -> Sample:
        return Sample(*self.f(t))


def as_trajectory(
    x: Trajectory | ArrayLike | pin.SE3 | Callable[[float], tuple], space: str | None = None
) -> Trajectory:
    """A Trajectory from a Trajectory (returned as is), a constant (vector or pin.SE3) or a function
    t → (x, ẋ, ẍ)."""
    if isinstance(x, Trajectory):
        return x
    if callable(x):
        return FromFunction(x, space or "Rn")
    return Constant(x)


class FromWorldFunction(SE3Trajectory):
    """An SE(3) trajectory from a function t → (p, quaternion (w, x, y, z), [v; ω], [a; ω̇]) with
    every part in world axes (the form :meth:`SE3Trajectory.world` returns, which it returns as is)."""

    def __init__(self, f: Callable[[float], tuple]):
        self.f = f

    def world(self, t: float) -> WorldSample:
        return WorldSample(*self.f(t))

    def sample(self, t: float) -> Sample:
        p, q, tw, twd = self.world(t)
        R = quat_to_matrix(np.asarray(q, dtype=float))
        tw, twd = np.asarray(tw, dtype=float), np.asarray(twd, dtype=float)
        return Sample(
            pin.SE3(R, np.asarray(p, dtype=float)),
            np.concatenate((tw[:3], R.T @ tw[3:])),
            np.concatenate((twd[:3], R.T @ twd[3:])),
        )

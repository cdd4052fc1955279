"""A robust variant of the prioritized Udwadia–Kalaba law ([Milioshin]): integral action on the hard
coupling constraint and on the weighted task, and a complementary filter on the measured position.
The thesis law (controllers/udwadia_kalaba.py) is unchanged; this module wraps it.

Why the thesis law misses the robustness target (virtual YuMi plant, "all of them together": masses
±20 %, σ_q = 1e-4 rad, σ_v = 1e-3 rad/s, 1-step delay).  Measured on the seeds that failed with integral
action on the coupling alone, one perturbation at a time:

* e_c (coupling) is dominated by the **position noise**, not by the mass error: noise alone gives
  e_c ≈ 1.6–1.9e-4 (mostly the orientation rows), the masses alone 5–9e-5, the delay alone 2e-5.  The
  coupling loop passes measurement noise n_e on e to the true error through T(s) = (K_d s + K_p) /
  (s² + K_d s + K_p); white noise sampled every Δt has the density σ² Δt, and
  ∫|T(jω)|² dω/2π = (K_d² K_p + K_p²) / (2 K_d K_p) = 31.7 rad/s for K_p = 1000, K_d = 33, so the true
  error keeps √(31.7 Δt) ≈ 0.4 of the noise of the measured e (σ_q √14 ≈ 3.7e-4 rad on the relative
  orientation of two 7-joint arms): ≈ 1.5e-4, as measured.
* e_u (task) misses 0.0062 through the **mass error** (0.0063–0.0065 on 2 seeds of 50): the task sits
  in the weighted level, where the thesis law realises only a fraction of the commanded task
  acceleration (below), so a model error shifts the task error as a constant gravity error would.

The three parts of the law:

1. **Integral action** on a task of the error ODE  ẇ + K_d w + K_p e = 0  (``IntegralTask``):

       ẇ + K_d w + K_p e + K_i z = 0,     ż = e,

   i.e. b ← b − K_i z in the rows A v̇ = b.  When the plant realises  ẇ = r·(commanded) + d  with a
   constant d, the equilibrium has ẇ = w = 0 and e = 0 exactly (z = d / (r K_i) absorbs the bias).
   The error polynomial s³ + r K_d s² + r K_p s + r K_i is Hurwitz iff r K_d K_p > K_i (Routh).  For
   the hard coupling r = 1 (up to the mass error); for the task in the weighted level r is the
   eigenvalue of R = ∂(A v̇)/∂b of the thesis law, which at the thesis' q0 ranges over 0.63–0.99
   (measured by finite differences of the law's output): Gauss' principle takes the rest.  At Δt = 5 ms
   with a d-step delay the loop is the discrete system of ``loop_spectral_radius``; with one step of
   delay it is stable for r ≥ 0.36 at the coupling's K_i = 1e4 (r ≥ 0.70 at 2e4, which the masses'
   ±20 % and the filter already break in the campaign) and for r ≥ 0.21 at the task's K_i = 1500
   (r ≥ 0.41 at 3000, r ≥ 0.55 at 4000: the masses +20 % take the task's 0.63 to ≈ 0.5, and on the
   50 seeds task K_i = 3000 met the targets on 17, 4000 on none, e_u ≈ 0.012; 1500 and 2000 on all 50).
   The scalar model ignores the coupling between rows and the motion along the circle, so the gains
   keep a margin of about 2 to where the campaign degrades.  z is clamped to |z_i| ≤ z_max
   (anti-windup).

2. **Complementary position filter** (``ComplementaryFilter``): the velocity measurement, integrated
   over one step, carries far less noise (Δt σ_v = 5e-6 rad) than the position measurement
   (σ_q = 1e-4 rad), so

       q̂_k = q̂_k⁻ ⊕ β (q_k ⊖ q̂_k⁻),     q̂_k⁻ = q̂_{k−1} ⊕ Δt v_k,     β = 1 − exp(−2π f_q Δt).

   For a plant integrated by semi-implicit Euler at the control step (MuJoCo's Euler, sim_dt =
   control_dt: q_k = q_{k−1} + Δt v_k) the estimation error ε_k = q̂_k − q_k obeys
   ε_k = (1 − β)(ε_{k−1} + Δt n_v) + β n_q: it vanishes without noise, and with noise its stationary
   variance is ((1 − β)² Δt² σ_v² + β² σ_q²) / (1 − (1 − β)²) per coordinate, minimal near
   β ≈ Δt σ_v / σ_q.  f_q = 1.6 Hz (β = 0.049) cuts the position noise ≈ 4.5× (its slow residue is
   inside the loop's bandwidth, so e_c falls by less: median 2.1e-4 → 1.6e-4 on the six seeds of 50
   that missed with integral action on the coupling alone).  With sub-steps
   (sim_dt < control_dt) the prediction is off by ≈ Δt² q̈ / 2 per step and q̂ lags by that / β.

Speed: the wrapped tasks keep the compiled UK step (``UdwadiaKalabaController(fused=True)``): the kernel
takes β = K_i z as a bias on each integral task's b (in the task's axes, rotated with its rows) and returns
the pose errors that ``IntegralTask.record`` stores for the next step's z, so one step costs 42 µs against
the thesis law's 30 µs and 155 µs through the generic path (interleaved, one closed loop, load 3.4); the
torques equal the generic path's to 1e-9 (tests/test_uk_kernels.py).

3. An optional first-order **velocity filter** v̂ ← v̂ + α (v − v̂), α = 1 − exp(−2π f_v Δt) (off by
   default: it adds phase lag to the damping term and measured worse than none).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pinocchio as pin

from cmstack.controllers.udwadia_kalaba import UdwadiaKalabaController
from cmstack.models.coupling import ErrorDynamics, Task
from cmstack.models.errors import ConfigError
from cmstack.models.robot import Kinematics, Robot


class IntegralTask(Task):
    """``inner`` with integral action:  A v̇ = b − K_i z  on the selected rows, z = ∫ e dt.

    Args: inner: the task (e.g. a RigidCoupling); ki: integral gain K_i [1/s³]; z_max: bound on each
    |z_i| [error unit · s].  z advances once per new time t (rectangle rule with the error at t), so the
    controller may call ``compute`` several times per step (levels, retries) without winding up."""

    def __init__(self, inner: Task, ki: float, z_max: float = 1e-3):
        if not (np.isfinite(ki) and ki >= 0):
            raise ConfigError(f"{inner.name}: integral gain ki must be finite and >= 0, got {ki}")
        if not (np.isfinite(z_max) and z_max > 0):
            raise ConfigError(f"{inner.name}: z_max must be finite and > 0, got {z_max}")
        if ki >= inner.kd * inner.kp:
            raise ConfigError(
                f"{inner.name}: ki = {ki:g} makes s³ + kd s² + kp s + ki unstable "
                f"(needs ki < kd·kp = {inner.kd * inner.kp:g})"
            )
        self.inner = inner
        self.name, self.kp, self.kd, self.rows = inner.name, inner.kp, inner.kd, inner.rows
        self.ki, self.z_max = float(ki), float(z_max)
        self.z = np.zeros(inner.dim)
        self._t: float | None = None
        self._e: np.ndarray | None = None

    def error_dynamics(self, kin: Kinematics, t: float) -> ErrorDynamics:
        return self.inner.error_dynamics(kin, t)

    def axes(self, kin: Kinematics, t: float) -> np.ndarray | None:
        return self.inner.axes(kin, t)

    def kernel_biased_inner(self) -> Task | None:
        """The task whose compiled rows, less the bias K_i z, are this task's rows (for the compiled UK
        step), or None when a subclass redefines the row maths (its own ``compute`` then runs)."""
        cls = type(self)
        if any(
            getattr(cls, m) is not getattr(IntegralTask, m)
            for m in ("compute", "error_dynamics", "qp_rows", "axes", "error")
        ):
            return None
        return self.inner

    def compute(self, kin: Kinematics, t: float) -> tuple[np.ndarray, np.ndarray]:
        """The inner rows (world axes) less P β: β = K_i z in the task's own axes (z integrates ``error``),
        turned to world axes by the inner task's P = diag(I, R) (``Task.axes``) as its rows are."""
        A, b = self.inner.compute(kin, t)
        if self.advance(t):
            self.record(t, self.inner.error(kin, t))
        beta = self.ki * self.z
        R = self.inner.axes(kin, t)
        if R is not None:
            full = np.zeros(6)
            full[self.rows] = beta
            full[3:] = R @ full[3:]
            beta = full[self.rows]
        return A, b - beta

    def advance(self, t: float) -> bool:
        """At a new time t: z ← clip(z + e(t_prev)·(t − t_prev)) (rectangle rule, the error of the last
        step), and True (the caller then ``record``s e(t)); False when t is not new (z unchanged).  The
        generic controller path calls it through ``compute``; the compiled path (``_FusedPlan``) calls it
        itself and records the error its kernel wrote."""
        t_prev, e_prev = self._t, self._e  # set together by ``record``
        if t_prev is not None and not t > t_prev:
            return False
        if t_prev is not None and e_prev is not None:
            self.z = np.clip(self.z + e_prev * (t - t_prev), -self.z_max, self.z_max)
        return True

    def record(self, t: float, e: np.ndarray) -> None:
        """The pose error e (selected rows) at the time t just advanced to."""
        self._t, self._e = t, np.array(e, dtype=float)

    def reset(self) -> None:
        self.z[:] = 0.0
        self._t = self._e = None


def loop_spectral_radius(
    kp: float, kd: float, ki: float, dt: float, delay_steps: int = 0, r: float = 1.0
) -> float:
    """Spectral radius of one row of the sampled error loop (stable iff < 1): the command
    u_k = −K_d w_k − K_p e_k − K_i z_k is computed every ``dt`` [s] (z_k = z_{k−1} + Δt e_{k−1}, as
    ``IntegralTask``), applied ``delay_steps`` steps later scaled by the realised fraction ``r``, and the
    error integrates it by semi-implicit Euler (w_{k+1} = w_k + Δt r u_{k−d}, e_{k+1} = e_k + Δt w_{k+1}).
    As dt → 0 without delay it tends to 1 from below iff K_i < r K_d K_p (Routh)."""
    d = int(delay_steps)
    n = 3 + d
    K = np.zeros(n)
    K[:3] = (-kp, -kd, -ki)  # the command, on the state [e, w, z, u_{k−1}, …, u_{k−d}]
    acc = r * K if d == 0 else r * np.eye(n)[n - 1]
    I = np.eye(n)
    A = np.zeros((n, n))
    A[1] = I[1] + dt * acc
    A[0] = I[0] + dt * A[1]
    A[2] = I[2] + dt * I[0]
    if d:
        A[3] = K
        for i in range(1, d):
            A[3 + i, 2 + i] = 1.0
    return float(np.max(np.abs(np.linalg.eigvals(A))))


class ComplementaryFilter:
    """q̂_k = q̂_k⁻ ⊕ β (q_k ⊖ q̂_k⁻), q̂_k⁻ = q̂_{k−1} ⊕ Δt v_k (module docstring, part 2).

    Args: model: the Pinocchio model (its ⊕ = ``pin.integrate``, ⊖ = ``pin.difference``); dt: the
    control period [s]; f_hz: cross-over frequency [Hz] (β = 1 − exp(−2π f Δt); 0 = off, q̂ = q).
    The first call returns the measurement."""

    def __init__(self, model: pin.Model, dt: float, f_hz: float):
        if not (np.isfinite(f_hz) and f_hz >= 0):
            raise ConfigError(f"q_filter_hz must be finite and >= 0, got {f_hz}")
        if not (np.isfinite(dt) and dt > 0):
            raise ConfigError(f"control_dt must be > 0 s, got {dt}")
        self.model, self.dt = model, float(dt)
        self.beta = 1.0 - np.exp(-2 * np.pi * f_hz * dt) if f_hz > 0 else 1.0
        self.q: np.ndarray | None = None

    def __call__(self, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        if self.q is None or self.beta >= 1.0:
            self.q = np.array(q, dtype=float)
        else:
            pred = pin.integrate(self.model, self.q, self.dt * np.asarray(v, dtype=float))
            self.q = pin.integrate(self.model, pred, self.beta * pin.difference(self.model, pred, q))
        return self.q


class RobustUKController:
    """The thesis' UK controller on ``IntegralTask(coupling)`` and ``IntegralTask(task)`` with the
    measured position through a ``ComplementaryFilter`` (and optionally the velocity through a
    first-order filter).

    Args: robot; coupling, task: as for ``UdwadiaKalabaController``; ki: integral gain on the coupling
    [1/s³]; z_max: its anti-windup bound; task_ki: integral gain on the task [1/s³] (0 = none);
    task_z_max: its bound; q_filter_hz: cross-over of the position filter [Hz] (0 = off);
    v_filter_hz: cut-off of the velocity filter [Hz] (0 = off); control_dt: the control period [s];
    **uk: the thesis controller's options."""

    def __init__(
        self,
        robot: Robot,
        coupling: Task,
        task: Task,
        *,
        ki: float,
        z_max: float = 1e-3,
        task_ki: float = 0.0,
        task_z_max: float = 1e-2,
        q_filter_hz: float = 0.0,
        v_filter_hz: float = 0.0,
        control_dt: float = 0.005,
        **uk: Any,
    ):
        if not (np.isfinite(v_filter_hz) and v_filter_hz >= 0):
            raise ConfigError(f"v_filter_hz must be finite and >= 0, got {v_filter_hz}")
        self.coupling = IntegralTask(coupling, ki, z_max)
        self.task = IntegralTask(task, task_ki, task_z_max) if task_ki > 0 else task
        self.uk = UdwadiaKalabaController(robot, [self.coupling], [self.task], **uk)
        self.robot = robot
        self.qfilter = ComplementaryFilter(robot.model, control_dt, q_filter_hz)
        self.alpha = 1.0 - np.exp(-2 * np.pi * v_filter_hz * control_dt) if v_filter_hz > 0 else 1.0
        self._vf: np.ndarray | None = None

    def __getattr__(self, name: str) -> Any:  # kin, info, failures, … of the thesis controller
        if name == "uk":
            raise AttributeError(name)
        return getattr(self.uk, name)

    def __call__(self, t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        if self._vf is None or self.alpha >= 1.0:
            self._vf = np.array(v, dtype=float)
        else:
            self._vf = self._vf + self.alpha * (v - self._vf)
        return self.uk(t, self.qfilter(q, v), self._vf)

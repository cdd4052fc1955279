"""A robust variant of the prioritized Udwadia–Kalaba law ([Milioshin]): integral action on the hard
coupling constraint, and a first-order filter on the measured velocity.  The thesis law
(controllers/udwadia_kalaba.py) is unchanged; this module wraps it.

Why: the law realises the constraint's error ODE  ẅ-level  ẇ + K_d w + K_p e = 0  through the
controller's model.  When the plant's masses differ from the model, the realised acceleration differs
by a slowly varying d(t) (gravity and inertia mismatch along the path), and the error settles at
e ≈ d / K_p.  Integral action,

    ẇ + K_d w + K_p e + K_i z = 0,     ż = e,

removes a constant d and divides a d of frequency ω by about |K_i + j ω K_p| / (ω K_p) against the
plain law.  The error polynomial s³ + K_d s² + K_p s + K_i is Hurwitz iff K_d K_p > K_i (Routh), e.g.
K_i < 33 000 1/s³ for the thesis' K_p = 1000, K_d = 33.  z is clamped to |z_i| ≤ z_max (anti-windup).

The velocity filter v_f ← v_f + α (v − v_f), α = 1 − exp(−2π f_c Δt), attenuates measurement noise
on v (the coupling's damping term K_d w amplifies it) at the price of a phase lag; f_c = 0 turns it off.
"""
from __future__ import annotations

import numpy as np

from cmstack.controllers.udwadia_kalaba import UdwadiaKalabaController
from cmstack.models.coupling import ErrorDynamics, Task
from cmstack.models.errors import ConfigError


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
            raise ConfigError(f"{inner.name}: ki = {ki:g} makes s³ + kd s² + kp s + ki unstable "
                              f"(needs ki < kd·kp = {inner.kd * inner.kp:g})")
        self.inner = inner
        self.name, self.kp, self.kd, self.rows = inner.name, inner.kp, inner.kd, inner.rows
        self.ki, self.z_max = float(ki), float(z_max)
        self.z = np.zeros(inner.dim)
        self._t = None
        self._e = None

    def error_dynamics(self, kin, t: float) -> ErrorDynamics:
        return self.inner.error_dynamics(kin, t)

    def compute(self, kin, t: float):
        A, b = self.inner.compute(kin, t)
        if self._t is None or t > self._t:
            e = self.inner.error(kin, t)
            if self._t is not None:
                self.z = np.clip(self.z + self._e * (t - self._t), -self.z_max, self.z_max)
            self._t, self._e = t, e
        return A, b - self.ki * self.z

    def reset(self) -> None:
        self.z[:] = 0.0
        self._t = self._e = None


class RobustUKController:
    """The thesis' UK controller on ``IntegralTask(coupling)`` with a filtered velocity.

    Args: robot; coupling, task: as for ``UdwadiaKalabaController``; ki: integral gain on the coupling
    [1/s³]; z_max: anti-windup bound; v_filter_hz: cut-off of the velocity filter [Hz] (0 = off);
    control_dt: the control period [s] (for the filter); **uk: the thesis controller's options."""

    def __init__(self, robot, coupling: Task, task: Task, *, ki: float, z_max: float = 1e-3,
                 v_filter_hz: float = 0.0, control_dt: float = 0.005, **uk):
        if not (np.isfinite(v_filter_hz) and v_filter_hz >= 0):
            raise ConfigError(f"v_filter_hz must be finite and >= 0, got {v_filter_hz}")
        self.coupling = IntegralTask(coupling, ki, z_max)
        self.uk = UdwadiaKalabaController(robot, [self.coupling], [task], **uk)
        self.robot = robot
        self.alpha = 1.0 - np.exp(-2 * np.pi * v_filter_hz * control_dt) if v_filter_hz > 0 else 1.0
        self._vf = None

    def __getattr__(self, name):          # kin, info, failures, … of the thesis controller
        if name == "uk":
            raise AttributeError(name)
        return getattr(self.uk, name)

    def __call__(self, t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        if self._vf is None or self.alpha >= 1.0:
            self._vf = np.array(v, dtype=float)
        else:
            self._vf = self._vf + self.alpha * (v - self._vf)
        return self.uk(t, q, self._vf)


def build_yumi(cfg: dict, robot, coupling, task) -> RobustUKController:
    """yumi_dual_arm's ``controller = "uk_robust"``: the thesis settings plus ``robust_ki``,
    ``robust_z_max``, ``robust_v_filter_hz``."""
    return RobustUKController(robot, coupling, task, ki=cfg["robust_ki"], z_max=cfg["robust_z_max"],
                              v_filter_hz=cfg["robust_v_filter_hz"], control_dt=cfg["control_dt"],
                              omega=cfg["omega"], priority=cfg["priority"], torque_limits=cfg["torque_limits"],
                              model_damping=cfg["model_damping"])

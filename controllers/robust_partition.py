"""Robust model-based tracking law (18) of [Dastranj] (Dastranj & Mattila, arXiv:2510.23226, §III-A) on the
inertia-partitioning model (models/partition.py):

    e = q − q_d,  ė = q̇ − q̇_d,  s = ė + Λ e                           (14)–(15)
    q̇_r = q̇_d − Λ e,  q̈_r = q̈_d − Λ ė                                 (16)
    Q_a = Γ(q) q̈_r + h(q, q̇) − Q_e(q, q̇) − K s − κ sat(s / ε)           (18)

with sat(x) = clip(x, −1, 1) and the division s/ε taken componentwise.  Table II gains by default:
Λ = diag(1, 1, 1), K = diag(30, 30, 30), κ = diag(50, 50, 50), ε = (1e−4, 1e−4, 1e−4).
Q_a is in q = (φ, θ, δ): two joint torques [N·m] and the piston force [N].
Under |dᵢ| ≤ d̄ᵢ < κᵢ the filtered error s is uniformly ultimately bounded (§III-B).

``terms`` chooses how the model part Γ q̈_r + h − Q_e is evaluated: ``"rnea"`` (default) by one
recursive Newton–Euler pass on the open tree projected by Eᵀ (:meth:`PartitionModel.model_force`),
``"partition"`` by the paper's body-wise sums Γ = Σ Γᵢ, h = Σ hᵢ, Q_e = Σ Q_e,i
(:meth:`PartitionModel.compute`).  Both give the same torques to round-off (tested); the body-wise
terms stay available for reconfiguration studies and diagnostics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from pinocchio import rnea as pin_rnea

from cmstack.controllers.base import StepInfo
from cmstack.controllers.kernels import robust18_post, robust18_pre
from cmstack.models.errors import ConfigError, StateError
from cmstack.models.partition import PartitionModel, PartitionTerms
from cmstack.models.trajectory import Trajectory, as_trajectory


def _diag3(name: str, x: ArrayLike) -> np.ndarray:
    a = np.asarray(x, dtype=float).ravel()
    if a.size == 1:
        a = np.repeat(a, 3)
    if a.shape != (3,) or not np.all(np.isfinite(a)):
        raise ConfigError(f"{name} must be a scalar or 3 finite values (φ, θ, δ), got {x!r}")
    return a


@dataclass
class RobustInfo(StepInfo):
    """Last step's internals, for logging: e = q − q_d, s = ė + Λe, the model and robust parts of Q_a."""

    e: np.ndarray
    s: np.ndarray
    Q_model: np.ndarray  # Γ q̈_r + h − Q_e
    Q_robust: np.ndarray  # −κ sat(s/ε)


class RobustPartitionController:
    """Q_a = __call__(t, q, v) with q = (φ, θ, δ), v = (φ̇, θ̇, δ̇); trajectory: a Trajectory on R³
    (models/trajectory.py: t → (q_d, q̇_d, q̈_d))."""

    def __init__(
        self,
        model: PartitionModel,
        trajectory: Trajectory | Callable[[float], tuple],
        *,
        Lambda: ArrayLike = 1.0,
        K: ArrayLike = 30.0,
        kappa: ArrayLike = 50.0,
        eps: ArrayLike = 1e-4,
        terms: str = "rnea",
    ) -> None:
        """model: the inertia-partitioning model; trajectory: t [s] -> (q_d, q̇_d, q̈_d) in (φ, θ, δ)
        (rad, rad, m); Lambda [1/s], K [N·m·s/rad | N·s/m], kappa [N·m | N] and eps (units of s) are
        scalars or 3 values; terms: "rnea" or "partition" (see the module docstring)."""
        if terms not in ("rnea", "partition"):
            raise ConfigError(f"terms='{terms}' is not one of ['rnea', 'partition']")
        self.use_rnea = terms == "rnea"
        self.model = model
        self._trajectory = as_trajectory(trajectory)
        self.Lambda = _diag3("Lambda", Lambda)
        self.K = _diag3("K", K)
        self.kappa = _diag3("kappa", kappa)
        self.eps = _diag3("eps", eps)
        if np.any(self.Lambda <= 0) or np.any(self.K <= 0):
            raise ConfigError(
                f"Λ and K must be positive definite (diagonal > 0), got Λ={self.Lambda}, K={self.K}"
            )
        if np.any(self.kappa < 0) or np.any(self.eps <= 0):
            raise ConfigError(f"κ must be ≥ 0 and ε > 0 componentwise, got κ={self.kappa}, ε={self.eps}")
        self._neg_kappa = -self.kappa
        self._inv_eps = 1.0 / self.eps
        self.info: RobustInfo | None = None
        self.terms: PartitionTerms | None = None
        # compiled step (``kernels.robust18_pre``/``robust18_post`` around the one RNEA): constants and buffers
        mp = model.map
        self._kprm = np.concatenate(
            [np.zeros(12), self.Lambda, [mp.L0, mp.l0, mp.lo - mp.slack, mp.hi + mp.slack]]
        )
        self._sinus = False
        self._copy_reference()
        self._kgain = np.array([self.K, self._neg_kappa, self._inv_eps])
        self._kref = np.zeros((3, 3))
        self._kact = bool(mp.with_actuator)
        self._kH = np.zeros((3, mp.nqhat))
        self._kHrows = tuple(self._kH)
        self._kinfo: RobustInfo | None = None  # q̂, q̂̇, q̂̈ (contiguous row views, for pin.rnea)
        self._q: np.ndarray | None = None  # the last step's q (``kin``)

    @property
    def trajectory(self) -> Trajectory:
        """The reference t ↦ (q_d, q̇_d, q̈_d) in (φ, θ, δ)."""
        return self._trajectory

    @trajectory.setter
    def trajectory(self, reference: Trajectory | Callable[[float], tuple]) -> None:
        self._trajectory = as_trajectory(reference)
        self._copy_reference()

    def _copy_reference(self) -> None:
        """The compiled step's copy of the reference: one that samples itself as a sinusoid in the kernel
        (``kernel_sinusoid()``: chosen by what it does, not by its type, so a subclass that redefines its
        sampling is called instead) has (c, a, ω, φ) in the kernel's parameters; any other is called at each
        step.  Done at construction and whenever ``trajectory`` is set."""
        params = getattr(self._trajectory, "kernel_sinusoid", None)
        sin = params() if callable(params) else None
        if sin is not None and any(np.shape(x) != (3,) for x in sin):
            sin = None
        self._sinus = sin is not None
        self._kprm[:12] = (
            np.concatenate([np.asarray(x, float).ravel() for x in sin]) if sin is not None else 0.0
        )

    @property
    def kin(self) -> np.ndarray | None:
        """The last step's configuration q = (φ, θ, δ) (this law's kinematics; None before the first step)."""
        return self._q

    def errors(self, kin: np.ndarray, t: float) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """({}, {"trajectory": q_d(t) − q}) at the configuration ``kin`` = q and time t [rad, rad, m]
        (``ReportsErrors``; the law's own e = q − q_d is ``info.e``)."""
        return {}, {"trajectory": np.asarray(self.trajectory(t)[0], dtype=float) - kin}

    def __call__(self, t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        if not self.use_rnea:
            return self._numpy_step(t, q, v)
        q = np.asarray(q, dtype=float)
        self._q = q
        v = np.asarray(v, dtype=float)
        if q.shape != (3,) or v.shape != (3,):
            raise StateError(f"robust_partition: q and v must be (φ, θ, δ), got shapes {q.shape}, {v.shape}")
        r = self._kref
        if not self._sinus:
            r[0], r[1], r[2] = self.trajectory(t)
        out = np.empty((5, 3))  # e, s, model part, robust part, Q_a
        st, dz = robust18_pre(float(t), q, v, self._sinus, self._kact, self._kprm, r, self._kH, out)
        if st:
            if st == 1:
                self.model.map.check_delta(float(q[2]))  # raises with the stroke named
            raise StateError(
                f"partition model: non-finite state q={q}, q̇={v} or reference {r.tolist()} at t={t}"
            )
        pm = self.model
        qh, vh, ah = self._kHrows
        robust18_post(pin_rnea(pm.model, pm.data, qh, vh, ah), dz, self._kact, self._kgain, out)
        e, s, Q_model, Q_rob, Q = out
        info = self._kinfo
        if info is None or info is not self.info:  # one record, refilled with this step's arrays
            info = self._kinfo = RobustInfo(e, s, Q_model, Q_rob, status="solved")
        else:
            info.e, info.s, info.Q_model, info.Q_robust = e, s, Q_model, Q_rob
        self.info = info
        return Q

    def _numpy_step(self, t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        """The law as NumPy calls (the reference of the compiled step; the path of ``terms="partition"``)."""
        q = np.asarray(q, dtype=float)
        self._q = q
        v = np.asarray(v, dtype=float)
        if q.shape != (3,) or v.shape != (3,):
            raise StateError(f"robust_partition: q and v must be (φ, θ, δ), got shapes {q.shape}, {v.shape}")
        qd, vd, ad = self.trajectory(t)
        L = self.Lambda
        e = q - qd
        ed = v - vd
        s = ed + L * e
        a_r = ad - L * ed
        if self.use_rnea:
            Q_model = self.model.model_force(q, v, a_r)  # validates the state (finite, δ in its stroke)
        else:
            tm = self.model.compute(q, v)  # validates the state (finite, δ in its stroke)
            self.terms = tm
            Q_model = tm.Gamma @ a_r + tm.h - tm.Qe
        # −κ sat(s/ε); np.minimum/np.maximum: np.clip costs several µs on 3-vectors
        Q_rob = self._neg_kappa * np.minimum(1.0, np.maximum(-1.0, s * self._inv_eps))
        self.info = RobustInfo(e, s, Q_model, Q_rob, status="solved")
        return Q_model - self.K * s + Q_rob

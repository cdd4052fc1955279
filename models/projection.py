"""Projection-matrix formulation of constrained dynamics ([Aghili]; maths re-derived below).

Setting: q ∈ ℝⁿ, constraints φ(q) = 0, A = ∂φ/∂q ∈ ℝ^{m×n} (may be rank deficient), and

    M q̈ + h = τ + f_c,   f_c = Aᵀλ,   A q̇ = 0                              (19), (11)

Projector.  SVD A = U Σ Vᵀ; singular values σ_i ≤ tol are treated as zero (rank r).  With V_r the
right singular vectors of the kept values,

    A⁺ = V_r Σ_r⁻¹ U_rᵀ,      P = I − A⁺A = I − V_r V_rᵀ                       (4), (15)

so P = Pᵀ = P², P Aᵀ = 0 (range(Aᵀ) = span V_r when no σ is dropped).  Nothing inverts A, AAᵀ or a
KKT matrix: only the kept singular values (> tol) are divided by.

Acceleration constraint.  A q̇ = 0 ⇒ A q̈ + Ȧ q̇ = 0 ⇒ A⁺A q̈ = −A⁺Ȧ q̇, i.e.

    (I − P) q̈ = C q̇,   C = −A⁺Ȧ                                                 (13)-(14)

(Also: P q̇ = q̇ along the motion ⇒ Ṗ q̇ + P q̈ = q̈ ⇒ C q̇ = Ṗ q̇ for admissible q̇ — the FD test.)
Only the product Ȧ q̇ is needed, so constraints supply ``jdot_v(q, v)`` = Ȧ q̇.

Direct dynamics.  P f_c = 0, so P·(19): P M q̈ = P(τ − h) (21).  Adding M·(13):

    (23) M_c = M + P M − M P,               M_c q̈ = P(τ − h) + M C q̇                (22)
    (28) M_c = P M P + (I−P) M (I−P),       M_c q̈ = P(τ − h) + (I − 2P) M C q̇   [P M P q̈ = P(τ−h) − P M C q̇,
                                                                                   (I−P)M(I−P) q̈ = (I−P) M C q̇]
    (29) M_c = P M + μ (I − P),             M_c q̈ = P(τ − h) + μ C q̇

Constraint force: f_c ∈ range(Aᵀ) = range(I − P), so f_c = (I − P)(M q̈ + h − τ) (32).
Potent/impotent split: τ_∥ = P τ, τ_⊥ = (I − P) τ (25).  λ = (A⁺)ᵀ f_c when A has full row rank.
Decoupling (Prop. 3): if P M = M P, f_c does not depend on τ_∥ (the defect ‖PM − MP‖/‖M‖ is reported).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from cmstack.models.errors import ConfigError, InfeasibleError, StateError
from cmstack.models.lie import svd_rank

DEFAULT_TOL = 1e-9


@dataclass
class Projection:
    """SVD-based projector data at one configuration."""

    P: np.ndarray  # n×n, projector onto N(A)
    A_pinv: np.ndarray  # n×m, truncated pseudo-inverse
    rank: int
    sigma: np.ndarray  # all singular values of A (descending)
    m: int  # number of constraint rows

    @property
    def Q(self) -> np.ndarray:
        """I − P, the projector onto range(Aᵀ) (constraint-force directions)."""
        return np.eye(self.P.shape[0]) - self.P

    @property
    def full_row_rank(self) -> bool:
        return self.rank == self.m


def project(A: ArrayLike, tol: float = DEFAULT_TOL) -> Projection:
    """P = I − A⁺A and A⁺ from the SVD of A, dropping σ ≤ tol (absolute, in A's units).  A single
    row a is done in closed form: σ = ‖a‖, A⁺ = aᵀ/σ², P = I − a aᵀ/σ² (rank 1 if σ > tol, else P = I)."""
    if not (math.isfinite(tol) and tol >= 0):
        raise ConfigError(f"project: rank tolerance must be a finite number >= 0, got {tol}")
    if type(A) is not np.ndarray or A.dtype != np.float64 or A.ndim != 2:
        A = np.atleast_2d(np.asarray(A, dtype=float))
        if A.ndim != 2:
            raise StateError(f"project: A must be a matrix, got shape {A.shape}")
    m, n = A.shape
    if m == 1:
        # one row a: its only singular value is σ = ‖a‖, v₁ = a/σ, so A⁺ = aᵀ/σ², P = I − a aᵀ/σ²
        # (the SVD's own result to round-off; no LAPACK call for the common single loop).  A finite
        # σ² means every entry is finite (NaN/inf propagate); otherwise the general checks below.
        a = A[0]
        s2 = float(a @ a)
        if math.isfinite(s2):
            sigma = math.sqrt(s2)
            if not sigma > tol:
                return Projection(np.eye(n), np.zeros((n, 1)), 0, np.array([sigma]), 1)
            a_pinv = a / s2
            P = a_pinv[:, None] * -a
            P.flat[:: n + 1] += 1.0
            return Projection(P, a_pinv.reshape(n, 1), 1, np.array([sigma]), 1)
    if not np.all(np.isfinite(A)):
        raise StateError("project: the constraint Jacobian A contains NaN/inf")
    if m == 0:
        return Projection(np.eye(n), np.zeros((n, 0)), 0, np.zeros(0), 0)
    svd = svd_rank(A, atol=tol)
    Vr = svd.Vt[: svd.rank].T
    return Projection(np.eye(n) - Vr @ Vr.T, svd.pinv(), svd.rank, svd.s, m)


def c_times_v(proj: Projection, jdot_v: ArrayLike) -> np.ndarray:
    """C q̇ = −A⁺ (Ȧ q̇)  (14), from the product Ȧ q̇ supplied by the constraint."""
    return -proj.A_pinv @ np.asarray(jdot_v, dtype=float)


def c_matrix(proj: Projection, Adot: ArrayLike) -> np.ndarray:
    """C = −A⁺ Ȧ (14) as a matrix, when Ȧ itself is available."""
    return -proj.A_pinv @ np.atleast_2d(np.asarray(Adot, dtype=float))


KINDS = ("23", "28", "29")


def constraint_inertia(M: np.ndarray, P: np.ndarray, kind: str = "23", mu: float | None = None) -> np.ndarray:
    """M_c of (23), (28) or (29); μ defaults to trace(M)/n for (29)."""
    M = np.asarray(M, dtype=float)
    n = M.shape[0]
    if kind == "23":
        PM = P @ M
        return M + PM - PM.T  # M P = (P M)ᵀ for symmetric M, P
    if kind == "28":
        Q = np.eye(n) - P
        return P @ M @ P + Q @ M @ Q
    if kind == "29":
        mu = float(np.trace(M) / n) if mu is None else float(mu)
        if not mu > 0:
            raise ConfigError(f"constraint_inertia (29): μ must be > 0, got {mu}")
        return P @ M + mu * (np.eye(n) - P)
    raise ConfigError(f"constraint_inertia: kind='{kind}' is not one of {KINDS}")


def direct_dynamics(
    M: np.ndarray,
    h: np.ndarray,
    tau: np.ndarray,
    proj: Projection,
    Cv: np.ndarray,
    kind: str = "23",
    mu: float | None = None,
) -> np.ndarray:
    """q̈ from (22) / (27-28) / (29): M_c q̈ = P(τ − h) + R C q̇ with R = M, (I − 2P) M, μ I."""
    M = np.asarray(M, dtype=float)
    P = proj.P
    n = M.shape[0]
    f = P @ (np.asarray(tau, dtype=float) - h)
    if kind == "23":
        rhs = f + M @ Cv
    elif kind == "28":
        rhs = f + (np.eye(n) - 2 * P) @ (M @ Cv)
    elif kind == "29":
        mu = float(np.trace(M) / n) if mu is None else float(mu)
        rhs = f + mu * Cv
    else:
        raise ConfigError(f"direct_dynamics: kind='{kind}' is not one of {KINDS}")
    Mc = constraint_inertia(M, P, kind, mu)
    try:
        return np.linalg.solve(Mc, rhs)
    except np.linalg.LinAlgError:
        raise StateError(
            f"direct_dynamics: constraint inertia ({kind}) is singular; is M positive definite?"
        ) from None


def split_input(tau: np.ndarray, P: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """τ = τ_∥ + τ_⊥ with τ_∥ = P τ (potent) and τ_⊥ = (I − P) τ (impotent)  (25)."""
    tau = np.asarray(tau, dtype=float)
    tp = P @ tau
    return tp, tau - tp


def constraint_force(
    M: np.ndarray, h: np.ndarray, tau: np.ndarray, qdd: np.ndarray, P: np.ndarray
) -> np.ndarray:
    """f_c = (I − P)(M q̈ + h − τ)  (32)."""
    r = np.asarray(M) @ qdd + h - tau
    return r - P @ r


def multipliers(proj: Projection, f_c: ArrayLike) -> np.ndarray:
    """λ with Aᵀλ = f_c, λ = (A⁺)ᵀ f_c; unique only when A has full row rank (Remark 4)."""
    if not proj.full_row_rank:
        raise InfeasibleError(
            f"Lagrange multipliers are not unique: A has rank {proj.rank} < {proj.m} rows "
            "(redundant constraints or a singular configuration); use the force f_c instead"
        )
    return proj.A_pinv.T @ np.asarray(f_c, dtype=float)


def decoupling_defect(M: np.ndarray, P: np.ndarray) -> float:
    """‖P M − M P‖_F / ‖M‖_F; zero iff M maps N(A) into itself (Proposition 3)."""
    PM = P @ np.asarray(M)
    return float(np.linalg.norm(PM - PM.T) / np.linalg.norm(M))


def is_decoupled(M: np.ndarray, P: np.ndarray, tol: float = 1e-10) -> bool:
    return decoupling_defect(M, P) <= tol

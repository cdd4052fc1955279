"""Law (III)'s obstacle potential in NumPy, the test oracle of the compiled ``kernels._obstacle_wish`` (which
``controllers.dac.null_space_wish`` and the compiled step call): the same U_o, g = −∇U_o and ġ by array
algebra over every (body, point, sphere) at once, plus the position Hessian the controller does not need.
Moved here from controllers/dac.py (issue 22: a formulation only tests use lives in tests/)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cmstack.controllers.dac import Obstacle, _clip, _spheres
from cmstack.models.lie import cross
from cmstack.models.tensor_chain import ChainState


def obstacle_potential(
    pos: np.ndarray, obstacles: Sequence[Obstacle], gain: float, d0: float, clip: float | None = None
) -> tuple[float, np.ndarray, np.ndarray, float]:
    """U_o on the CoMs, as in the paper (54): Σ_{i<N} Σ_o φ(‖p_i − c_o‖) with Khatib's FIRAS form outside the
    core and its C² quartic continuation inside (``_point_potential``).  Returns (U, ∇U (N,3) with zero rows
    for body N, Hessian blocks (N,3,3), min d)."""
    R = np.broadcast_to(np.eye(3), (pos.shape[0], 3, 3))
    U, gp, _, hp, dmin = _body_potential(pos, R, obstacles, gain, d0, np.zeros((1, 3)), clip)
    return U, gp, hp, dmin


def _point_potential(rho: np.ndarray, radius: float, gain: float, d0: float, dc: float):
    """One sphere (radius r, centre c) acting on points at distances ρ = ‖x − c‖ from its centre (d = ρ − r):

        φ(ρ) = ½ η (1/d − 1/d₀)²              d_c ≤ d < d₀        (FIRAS, the paper's U_o)
        φ(ρ) = a + b ρ² + c ρ⁴                ρ < ρ_c = r + d_c   (inside the core: the sphere and a shell d_c)
        φ(ρ) = 0                               d ≥ d₀

    with (a, b, c) such that φ, φ' and φ'' are continuous at ρ_c: with p = φ'(ρ_c) < 0 and k = φ''(ρ_c) > 0,
        c = (k ρ_c − p) / (8 ρ_c³) > 0,   b = (3p/ρ_c − k) / 4 < 0,   a = φ(ρ_c) − b ρ_c² − c ρ_c⁴.
    Then φ'(ρ) = 2ρ(b + 2cρ²) < 0 on (0, ρ_c] (repulsive everywhere inside, since ρ_c² < −b/(2c)) and φ is
    smooth at the centre (φ'(0) = 0), so U_o is one C² function of x everywhere: its force and its rate are
    exact derivatives (a clip of d alone, as before issue 16, kept φ'' of the unclipped d in the rate).
    In x: ∇φ = α (x − c), ∇²φ = α I + β (x − c)(x − c)ᵀ with
        outside the core  α = φ'(ρ)/ρ,  β = (φ''(ρ) − φ'(ρ)/ρ)/ρ²;   inside  α = 2b + 4cρ²,  β = 8c.
    Returns (φ, α, β) for the points with d < d₀ (the caller selects them)."""
    d = rho - radius
    rc = radius + dc
    ac = 1.0 / dc - 1.0 / d0
    pc = -gain * ac / dc**2  # φ'(ρ_c)
    kc = gain * (1.0 / dc**4 + 2.0 * ac / dc**3)  # φ''(ρ_c)
    cq = (kc * rc - pc) / (8.0 * rc**3)
    bq = (3.0 * pc / rc - kc) / 4.0
    aq = 0.5 * gain * ac * ac - bq * rc**2 - cq * rc**4
    outer = d >= dc
    do = np.where(outer, d, dc)  # only used where outer
    ro = np.where(outer, rho, rc)
    a = 1.0 / do - 1.0 / d0
    du = -gain * a / do**2
    ddu = gain * (1.0 / do**4 + 2.0 * a / do**3)
    r2 = rho * rho
    phi = np.where(outer, 0.5 * gain * a * a, aq + bq * r2 + cq * r2 * r2)
    alpha = np.where(outer, du / ro, 2.0 * bq + 4.0 * cq * r2)
    beta = np.where(outer, (ddu - du / ro) / ro**2, 8.0 * cq)
    return phi, alpha, beta


def _pairs(pos, R, centers, radii, gain, d0, dc, points):
    """Every (body i < N, point k, sphere o) at once: R_i r_k (N−1,K,3), x − c (N−1,K,O,3), and φ, α, β of
    ``_point_potential`` (N−1,K,O), zero where d ≥ d₀ (all three None when no point is in range); plus the
    smallest d."""
    rw = np.einsum("iab,kb->ika", R[:-1], points)
    dx = (pos[:-1, None, :] + rw)[:, :, None, :] - centers
    rho = np.sqrt(np.einsum("ikoa,ikoa->iko", dx, dx))
    d = rho - radii
    dmin = float(d.min())
    if dmin >= d0:
        return rw, dx, None, None, None, dmin
    act = d < d0
    if dmin >= dc:  # no point in a core: the FIRAS branch only (d₀ where out of range: φ = φ' = 0)
        dd = np.where(act, d, d0)
        a = 1.0 / dd - 1.0 / d0
        du = (-gain) * a / (dd * dd)
        alpha = du / rho
        beta = act * ((gain * (1.0 / dd**4 + 2.0 * a / dd**3) - alpha) / (rho * rho))
        return rw, dx, (0.5 * gain) * a * a, alpha, beta, dmin
    phi, alpha, beta = _point_potential(rho, radii, gain, d0, dc)
    out = ~act
    if out.any():
        phi[out] = alpha[out] = beta[out] = 0.0
    return rw, dx, phi, alpha, beta, dmin


def _body_potential(pos, R, obstacles, gain, d0, points, clip=None):
    """U_o (``_point_potential``) on body-fixed points r_k of the bodies 1…N−1: x = p_i + R_i r_k.
    ``clip`` = d_c, the core shell (m; default d₀/10).
    Returns U, ∂U/∂p (N,3), ∂U/∂θ (N,3) (= Σ R_i r_k × ∂U/∂x, the derivative along a world rotation δθ of
    the body), the position Hessian blocks (N,3,3) and the smallest distance d of any point to a sphere."""
    dc = _clip(d0, clip)
    centers, radii = _spheres(obstacles)
    n = pos.shape[0]
    gp, gw, hp = np.zeros((n, 3)), np.zeros((n, 3)), np.zeros((n, 3, 3))
    if radii.size == 0:
        return 0.0, gp, gw, hp, np.inf
    rw, dx, phi, alpha, beta, dmin = _pairs(pos, R, centers, radii, gain, d0, dc, points)
    if phi is None:
        return 0.0, gp, gw, hp, dmin
    f = (alpha[..., None] * dx).sum(axis=2)  # ∂U/∂x per point (N−1,K,3)
    gp[:-1] = f.sum(axis=1)
    gw[:-1] = cross(rw, f).sum(axis=1)
    hp[:-1] = alpha.sum(axis=(1, 2))[:, None, None] * np.eye(3) + np.einsum(
        "iko,ikoa,ikob->iab", beta, dx, dx
    )
    return float(phi.sum()), gp, gw, hp, dmin


def null_space_wish_numpy(
    state: ChainState,
    obstacles: Sequence[Obstacle],
    gain: float,
    d0: float,
    points: np.ndarray,
    clip: float | None = None,
    R: np.ndarray | None = None,
    spheres: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, float, float]:
    """g = −∇U_o as a 6N twist (linear parts −∂U/∂p_i, angular parts −∂U/∂θ_i; body N zero) and its exact
    rate along the motion: ẋ = v_i + ω_i × R_i r_k, D(∂U/∂x) = H ẋ, D(R_i r_k × f) = (ω_i × R_i r_k) × f +
    R_i r_k × H ẋ,
    with H ẋ = α ẋ + β (x − c)((x − c)·ẋ) (``_point_potential``), all points and spheres at once.
    With ``points = [[0, 0, 0]]`` this is the paper's U_o(s_{B_1 I}, …, s_{B_{N−1} I}) (54).  U_o is C² at
    every distance, inside a sphere too (``_point_potential``), so ġ is the exact derivative of g.
    ``R`` (the state's rotations) and ``spheres`` (``_spheres(obstacles)``) may be passed to skip recomputing."""
    n = state.n
    dc = _clip(d0, clip)
    centers, radii = _spheres(obstacles) if spheres is None else spheres
    if radii.size == 0:
        return np.zeros(6 * n), np.zeros(6 * n), 0.0, np.inf
    R = state.R if R is None else R
    nu = state.nu
    v, w = nu[: 3 * n].reshape(n, 3), nu[3 * n :].reshape(n, 3)
    rw, dx, phi, alpha, beta, dmin = _pairs(state.pos, R, centers, radii, gain, d0, dc, points)
    if phi is None:
        return np.zeros(6 * n), np.zeros(6 * n), 0.0, dmin
    wr = cross(w[:-1, None, :], rw)  # ω_i × R_i r_k
    xd = v[:-1, None, :] + wr  # ẋ (N−1,K,3)
    f = np.einsum("iko,ikoa->ika", alpha, dx)  # ∂U/∂x
    fd = alpha.sum(axis=2)[..., None] * xd + np.einsum(
        "iko,ikoa->ika", beta * np.einsum("ikoa,ika->iko", dx, xd), dx
    )
    g = np.zeros(6 * n)
    gdot = np.zeros(6 * n)
    g[: 3 * (n - 1)] = -f.sum(axis=1).ravel()
    g[3 * n : 6 * n - 3] = -cross(rw, f).sum(axis=1).ravel()
    gdot[: 3 * (n - 1)] = -fd.sum(axis=1).ravel()
    gdot[3 * n : 6 * n - 3] = -(cross(wr, f) + cross(rw, fd)).sum(axis=1).ravel()
    return g, gdot, float(phi.sum()), dmin

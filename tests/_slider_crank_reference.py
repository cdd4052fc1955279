"""Test oracle: the slider-crank's loop in the closed form of [Aghili] (67)-(69), written by hand.

The library and the scenario read the slider-crank's loop from its model file (urdf/slider_crank.urdf with
urdf/slider_crank.loops.toml: one ``plane`` LoopClosure, the rail); this independent formulation checks it
(tests/test_loops_plane.py: φ, A and Ȧq̇, Python and compiled, equal to round-off on random states) and serves
the tests of the paper's projection formulas, where the closed form is the thing under test."""

from __future__ import annotations

import math

import numpy as np

from cmstack.models.errors import ConfigError


class SliderCrankLoop:
    """Slider-crank of §8 cut open at the slider C, q = (θ₁, θ₂), two links of length l:

        φ(q) = l sin θ₁ + l sin(θ₁ + θ₂)                                            (67)
        A    = l [cos θ₁ + cos θ₁₂,  cos θ₁₂]                                        (69)
        Ȧ q̇  = −l [sin θ₁ θ̇₁² + sin θ₁₂ (θ̇₁ + θ̇₂)²]

    A = 0 at θ₁ = ±π/2, θ₂ = π (65): the rod folds onto the crank and C passes the pivot.
    ``idx`` gives the indices of (θ₁, θ₂) in the model's q."""

    def __init__(self, length: float, idx: tuple[int, int] = (0, 1), n: int = 2):
        if not (np.isfinite(length) and length > 0):
            raise ConfigError(f"SliderCrankLoop: link length must be > 0, got {length}")
        self.l = float(length)
        self.i1, self.i2 = int(idx[0]), int(idx[1])
        self.n = int(n)
        self.m = 1
        self._row = np.zeros(self.n)

    def phi(self, q: np.ndarray) -> np.ndarray:
        return np.array([self.l * (np.sin(q[self.i1]) + np.sin(q[self.i1] + q[self.i2]))])

    def jacobian(self, q: np.ndarray) -> np.ndarray:
        c1, c12 = np.cos(q[self.i1]), np.cos(q[self.i1] + q[self.i2])
        A = np.zeros((1, self.n))
        A[0, self.i1] = self.l * (c1 + c12)
        A[0, self.i2] = self.l * c12
        return A

    def jdot_v(self, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        w1, w12 = v[self.i1], v[self.i1] + v[self.i2]
        return np.array([-self.l * (np.sin(q[self.i1]) * w1**2 + np.sin(q[self.i1] + q[self.i2]) * w12**2)])

    def row_and_jdot_v(self, q: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, float]:
        """(the row a of A (n,), the scalar Ȧ q̇): ``jacobian`` and ``jdot_v`` at once, on Python floats
        (the per-step path of controllers.pidc).  The row is a buffer reused by the next call."""
        l, i1, i2 = self.l, self.i1, self.i2
        ql, vl = q.tolist(), v.tolist()
        t1, t12 = ql[i1], ql[i1] + ql[i2]
        w1, w12 = vl[i1], vl[i1] + vl[i2]
        c12 = math.cos(t12)
        a = self._row
        a[i1] = l * (math.cos(t1) + c12)
        a[i2] = l * c12
        return a, -l * (math.sin(t1) * w1 * w1 + math.sin(t12) * w12 * w12)

"""Random matrices that are hard for a rank decision: what the null-space tests of the pivoted QR
(tests/test_limit_rows.py, tests/test_limits_hierarchy.py) run on."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


def hard_matrices(seed: int, count: int, m_max: int) -> Iterator[tuple[int, np.ndarray, np.random.Generator]]:
    """``count`` random B (m × k, 0 ≤ m < m_max, 1 ≤ k < 15), scaled by 10^U(-3, 3): every third (m > 2) with two
    rows dependent on the first, every seventh (m > 0) with a zero column; full-rank, rank-deficient, wide and
    tall.  Yields (t, B, rng): the generator, for the caller's own draws between two matrices."""
    rng = np.random.default_rng(seed)
    for t in range(count):
        m, k = int(rng.integers(0, m_max)), int(rng.integers(1, 15))
        B = rng.normal(size=(m, k)) * 10 ** rng.uniform(-3, 3)
        if m > 2 and t % 3 == 0:
            B[1] = 3.0 * B[0]
            B[2] = B[0] - 2.0 * B[1]
        if m and t % 7 == 0:
            B[:, 0] = 0.0
        yield t, B, rng


def spd(rng: np.random.Generator, n: int) -> np.ndarray:
    """A random symmetric positive definite n × n matrix (a mass matrix's stand-in): R Rᵀ + 0.1 I, R ~ N(0, 1)."""
    R = rng.normal(size=(n, n))
    return R @ R.T + 0.1 * np.eye(n)

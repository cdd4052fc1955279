"""Trajectory maths compiled by numba, written once: ``Circle.sample`` and ``Sinusoid.sample``
(models/trajectory.py) call it, and so does the compiled UK step (controllers/_uk_kernels.py) when it samples a
circle or a joint sinusoid itself."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

import cmstack.models._compile_notice  # noqa: F401  (says when these kernels compile)


@njit(cache=True)
def circle_sample(t: float, c: np.ndarray, T: np.ndarray, va: np.ndarray) -> None:
    """The circle of [Milioshin] §4.4 in the plane of the orthonormal axes u, w at t, from the row
    c = [c_x, c_y, c_z, r, ω, φ, on, u (3), w (3)] (``CIRCLE_ROW`` values): with a = ω t + φ,

        p = c + r (cos a · u + sin a · w),   v = ṗ = r ω (−sin a · u + cos a · w),
        a_D = p̈ = −r ω² (cos a · u + sin a · w),

    zero angular parts; p into T[:3, 3], [v; 0; a_D; 0] into va (the rotation T[:3, :3] is the circle's R).
    The x–z plane (u = e_x, w = e_z, the thesis' circle and the default) keeps its own expressions
    p = c + r (cos a, 0, sin a), so that its numbers are bit for bit those of the x–z-only kernel."""
    r, w = c[3], c[4]
    ang = w * t + c[5]
    ca, sa = math.cos(ang), math.sin(ang)
    for i in range(12):
        va[i] = 0.0
    if c[7] == 1.0 and c[8] == 0.0 and c[9] == 0.0 and c[10] == 0.0 and c[11] == 0.0 and c[12] == 1.0:
        T[0, 3] = c[0] + r * ca
        T[1, 3] = c[1]
        T[2, 3] = c[2] + r * sa
        va[0] = -r * w * sa
        va[2] = r * w * ca
        va[6] = -r * w * w * ca
        va[8] = -r * w * w * sa
        return
    rw, rww = r * w, r * w * w
    for i in range(3):
        u, e = c[7 + i], c[10 + i]
        T[i, 3] = c[i] + r * (ca * u + sa * e)
        va[i] = rw * (ca * e - sa * u)
        va[6 + i] = -rww * (ca * u + sa * e)


@njit(cache=True)
def sinusoid_sample(
    t: float,
    c: np.ndarray,
    a: np.ndarray,
    w: np.ndarray,
    p: np.ndarray,
    x: np.ndarray,
    xd: np.ndarray,
    xdd: np.ndarray,
) -> None:
    """The sinusoid x_i = c_i + a_i sin(ω_i t + φ_i) per coordinate at t: x, ẋ = a ω cos(ω t + φ),
    ẍ = −a ω² sin(ω t + φ) into x, xd, xdd (each of the coordinates' count; c, a, ω, φ as many)."""
    for i in range(c.shape[0]):
        ph = w[i] * t + p[i]
        s, co = math.sin(ph), math.cos(ph)
        x[i] = c[i] + a[i] * s
        xd[i] = a[i] * w[i] * co
        xdd[i] = -a[i] * w[i] * w[i] * s

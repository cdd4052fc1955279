"""Trajectory maths compiled by numba, written once: ``Circle.sample`` (models/trajectory.py) calls it, and so
does the compiled UK step (controllers/_uk_kernels.py) when it samples a circle itself."""
from __future__ import annotations

import math

from numba import njit


@njit(cache=True)
def circle_sample(t, c, T, va):
    """The circle of [Milioshin] §4.4 at t from c = [c_x, c_y, c_z, r, ω, φ]: with
    a = ω t + φ, p = c + r (cos a, 0, sin a), v = r ω (−sin a, 0, cos a), a_D = −r ω² (cos a, 0, sin a),
    zero angular parts; p into T[:3, 3], [v; 0; a_D; 0] into va (the rotation T[:3, :3] is the circle's R)."""
    r, w = c[3], c[4]
    ang = w * t + c[5]
    ca, sa = math.cos(ang), math.sin(ang)
    T[0, 3] = c[0] + r * ca
    T[1, 3] = c[1]
    T[2, 3] = c[2] + r * sa
    for i in range(12):
        va[i] = 0.0
    va[0] = -r * w * sa
    va[2] = r * w * ca
    va[6] = -r * w * w * ca
    va[8] = -r * w * w * sa

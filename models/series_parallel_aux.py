"""The series-parallel manipulator ([Dastranj]) in auxiliary coordinates with its elbow triangle as a
constraint, for the projection method ([Aghili]):

    x = (φ, θ, ζ, δ),   φ_c(x) = ζ − ζ(δ) = 0,   A = [0, 0, 1, −ζ'(δ)],   Ȧ ẋ = −ζ''(δ) δ̇²

ζ(δ), ζ', ζ'' from models.partition.TriangleMap (28).  M(x), h(x, ẋ) are the open tree's
(urdf/series_parallel.urdf, Pinocchio CRBA/nle) in (φ, θ, ζ), bordered by the stroke δ with the
piston's mass m_δ along its rows (m_δ = 0: the cylinder and piston are neglected, as in the robust
controller's default model).  ζ is passive; φ, θ and δ are actuated.

``AugmentedRobot`` offers the part of models.robot.Robot that controllers.pidc.PIDC uses
(nv, joint_names, joint_index, update → M, h, damping, effort_limit, path).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cmstack.models.errors import FrameNotFoundError, StateError
from cmstack.models.partition import TriangleMap
from cmstack.models.robot import Robot

NAMES = ("phi", "theta", "zeta", "delta")


@dataclass
class _Kin:
    q: np.ndarray
    v: np.ndarray
    M: np.ndarray
    h: np.ndarray


class AugmentedRobot:
    def __init__(self, urdf: str, delta_mass: float = 0.0, delta_effort: float = 5000.0):
        self.tree = Robot(urdf)
        if self.tree.joint_names != ["phi", "theta", "zeta"]:
            raise FrameNotFoundError(f"{self.tree.path.name}: expected joints ['phi', 'theta', 'zeta'], got "
                                     f"{self.tree.joint_names}")
        self.path = self.tree.path
        self.joint_names = list(NAMES)
        self.nq = self.nv = 4
        self.m_delta = float(delta_mass)
        self.damping = np.concatenate([self.tree.damping, [0.0]])
        self.effort_limit = np.concatenate([self.tree.effort_limit, [float(delta_effort)]])

    def joint_index(self, name: str) -> int:
        if name not in NAMES:
            raise FrameNotFoundError(f"joint '{name}' is not one of the auxiliary coordinates {list(NAMES)}")
        return NAMES.index(name)

    def update(self, q: np.ndarray, v: np.ndarray) -> _Kin:
        q, v = np.asarray(q, dtype=float), np.asarray(v, dtype=float)
        if q.shape != (4,) or v.shape != (4,):
            raise StateError(f"auxiliary state must have 4 entries (φ, θ, ζ, δ), got {q.shape}, {v.shape}")
        k = self.tree.update(q[:3], v[:3])
        M = np.zeros((4, 4))
        M[:3, :3] = k.M
        M[3, 3] = self.m_delta
        h = np.concatenate([k.h, [0.0]])
        return _Kin(q, v, M, h)


class TriangleConstraint:
    """φ_c(x) = ζ − ζ(δ) in x = (φ, θ, ζ, δ)."""

    def __init__(self, tm: TriangleMap):
        self.tm = tm
        self.m = 1

    def phi(self, x: np.ndarray) -> np.ndarray:
        return np.array([x[2] - self.tm.zeta(x[3])])

    def jacobian(self, x: np.ndarray) -> np.ndarray:
        return np.array([[0.0, 0.0, 1.0, -self.tm.dzeta(x[3])]])

    def jdot_v(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        return np.array([-self.tm.d2zeta(x[3]) * v[3] ** 2])


def lift(tm: TriangleMap, q: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Measured (φ, θ, δ), rates → auxiliary (x, ẋ) on the constraint manifold."""
    z, dz = tm.zeta(q[2]), tm.dzeta(q[2])
    return np.array([q[0], q[1], z, q[2]]), np.array([v[0], v[1], dz * v[2], v[2]])

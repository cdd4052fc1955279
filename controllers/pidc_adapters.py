"""PIDC (controllers/pidc.py) on the other scenarios' plants: registry builders.

* ``build_series_parallel(cfg, traj)``: the seed-001 manipulator in auxiliary coordinates
  x = (φ, θ, ζ, δ) with the triangle ζ = ζ(δ) as a constraint and ζ passive (models/series_parallel_aux.py);
  PIDC with the passive-joint law (60–62) tracks (φ, θ, δ); returns Q_a = (τ_φ, τ_θ, f_δ).
"""
from __future__ import annotations

import numpy as np

from controllers.pidc import PIDC
from models.partition import TriangleMap
from models.series_parallel_aux import AugmentedRobot, TriangleConstraint, lift


class SeriesParallelPIDC:
    def __init__(self, cfg, traj):
        self.tm = TriangleMap(cfg["L0"], cfg["l0"], cfg["delta_range"], slack=cfg["stroke_slack_m"])
        # the cylinder and piston are neglected, as in the robust law's default model (their inertia is
        # coupled to φ, θ, ζ; a lumped mass on δ alone would be a wrong model, not a better one)
        self.robot = AugmentedRobot(cfg["urdf"], delta_mass=0.0)
        self.pidc = PIDC(self.robot, TriangleConstraint(self.tm), ["phi", "theta", "delta"], traj,
                         cfg["pidc_kp"], cfg["pidc_kv"], passive=("zeta",), on_unsolvable="raise")
        self.failures = 0

    @property
    def info(self):
        return None   # the scenario logs the robust law's s / Q_robust when present; PIDC has neither

    def __call__(self, t, q, v):
        x, xd = lift(self.tm, q, v)
        tau = self.pidc(t, x, xd)
        return tau[[0, 1, 3]]


def build_series_parallel(cfg, traj):
    return SeriesParallelPIDC(cfg, traj)

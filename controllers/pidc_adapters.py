"""PIDC (controllers/pidc.py) on a plant that measures less than the model's state.

``ActuatedJointsPIDC(pidc)``: a PIDC on a closed chain (``robot.loops``) whose plant measures the actuated joints
only, e.g. the series-parallel arm measured in (φ, θ, δ) (scenarios/series_parallel.py ``build_pidc``): the passive
joints are closed by the loops at every step and the torque is returned on the actuated joints.  (The hybrid
motion/force PIDC of the YuMi holding a bar is the scenario's own: scenarios/_yumi_force.py.)
"""
from __future__ import annotations

import numpy as np

from cmstack.controllers.pidc import PIDC, PIDCInfo
from cmstack.models.errors import StateError
from cmstack.models.lie import svd_rank
from cmstack.models.loops import ClosureSet, assemble


class ActuatedJointsPIDC:
    """A PIDC on a closed chain driven from the actuated joints' measurement (q_a, q̇_a).

    The state of the chain is completed on the loops' manifold at every step: the passive joints q_p solve
    φ(q_a, q_p) = 0 (Newton with q_a held, ``models.loops.assemble``, started from the previous step's q_p and
    run to ``tol``), and their rates are the ones the loops allow, J_a q̇_a + J_p q̇_p = 0:

        q̇_p = −J_p⁺ J_a q̇_a        (J_p⁺ the truncated pseudo-inverse: a planar loop's empty rows are dropped)

    which is unique when the passive joints are determined by the actuated ones (J_p of full column rank on the
    manifold, e.g. the series-parallel arm's elbow ζ and cylinder angle α given (φ, θ, δ)).  Returns the PIDC
    torque on the actuated joints, in ``pidc.robot.actuated_joints`` order.

    pidc: a ``PIDC`` on ``robot.loops`` with the robot's passive joints; q_guess: a configuration near the
    first measured state (default ``robot.q_initial``); tol: the Newton tolerance on |φ| (m, rad)."""

    def __init__(self, pidc: PIDC, q_guess: np.ndarray | None = None, *, tol: float = 1e-14) -> None:
        robot = pidc.robot
        if not robot.loops:
            raise StateError(f"ActuatedJointsPIDC: {robot.label} has no loops (robot.loops) to close")
        self.pidc = pidc
        self.robot = robot
        self.loops = ClosureSet(robot.loops)
        self.act = np.array([robot.joint_index(n) for n in robot.actuated_joints], dtype=int)
        self.pas = np.array([robot.joint_index(n) for n in robot.passive_joints], dtype=int)
        self.q = np.array(robot.q_initial if q_guess is None else q_guess, dtype=float)
        self.tol = float(tol)
        self.max_iter = 50
        self.failures = 0

    @property
    def info(self) -> PIDCInfo:
        return self.pidc.info

    @property
    def unsolvable_steps(self) -> int:
        return self.pidc.unsolvable_steps

    def complete(self, qa: np.ndarray, va: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(q, q̇) of the whole chain from the actuated joints' (q_a, q̇_a), on the loops' manifold."""
        qa, va = np.asarray(qa, dtype=float), np.asarray(va, dtype=float)
        if qa.shape != self.act.shape or va.shape != self.act.shape or not np.all(np.isfinite(qa)) \
                or not np.all(np.isfinite(va)):
            raise StateError(f"ActuatedJointsPIDC: expected {self.act.size} finite positions and rates of "
                             f"{self.robot.actuated_joints}, got {qa!r}, {va!r}")
        q = self.q.copy()
        q[self.act] = qa
        cs, pas = self.loops, self.pas
        for _ in range(self.max_iter):                # Newton on q_p, q_a held (``assemble(fixed=...)``'s step)
            phi = cs.phi(q)
            if float(np.max(np.abs(phi))) <= self.tol:
                break
            J = cs.jacobian(q)                        # the same Pinocchio pass as phi (cached on q)
            q[pas] -= svd_rank(J[:, pas], rtol=1e-10).pinv() @ phi
        else:
            q = assemble(self.robot, q, tol=self.tol, fixed=self.robot.actuated_joints)  # raises, naming the loop
        J = cs.jacobian(q)
        v = np.zeros(self.robot.nv)
        v[self.act] = va
        v[self.pas] = -(svd_rank(J[:, self.pas], rtol=1e-10).pinv() @ (J[:, self.act] @ va))
        self.q = q
        return q, v

    def __call__(self, t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        """τ on the actuated joints from their measured positions q and rates v."""
        x, xd = self.complete(q, v)
        return self.pidc(t, x, xd)[self.act]

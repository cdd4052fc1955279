"""Projection-method simulator ([Aghili] §6): an alternative plant for any Pinocchio model with
holonomic constraints φ(q) = 0, with the same state/torque interface as sim.plant.MujocoPlant.

    plant = ProjectionPlant(robot, constraint, sim_dt=1e-3, passive=("rod",))
    plant.reset(q0); q, v = plant.state(); plant.set_torque(tau); plant.step(n)

Each step integrates the direct dynamics (22) (or (28)/(29)),

    M_c(q, q̇) q̈ = P(τ − h) + M C q̇,

with classical RK4 on (q, q̇), then restores the constraint without Baumgarte terms:

    q ← q − A⁺(q) φ(q)   until ‖φ‖ ≤ nr_tol                                     (39)
    q̇ ← P(q) q̇                                                                   (velocity projection)

A⁺ and P come from the SVD with a rank tolerance (models/projection.py), so the loop runs through
singular configurations (A → 0) where the KKT matrix would be singular.

``constraint`` is a ``LoopClosure``, a list of them (stacked), None (the robot's ``robot.loops``; passive
joints default to ``robot.passive_joints``), or any object with phi(q) (m,), jacobian(q) (m×n),
jdot_v(q, v) = Ȧ q̇ (m,).
"""

from __future__ import annotations

import numpy as np
import pinocchio as pin
from numpy.typing import ArrayLike

from cmstack.models.errors import ConfigError, JointMapError, StateError
from cmstack.models.loops import as_constraint
from cmstack.models.projection import DEFAULT_TOL, KINDS, c_times_v, direct_dynamics, project
from cmstack.models.robot import Robot


class _Data:
    """Stand-in for MjData's qpos (viewer/logging use plant.data.qpos)."""

    def __init__(self, n: int) -> None:
        self.qpos = np.zeros(n)
        self.qvel = np.zeros(n)


class ProjectionPlant:
    def __init__(
        self,
        robot: Robot,
        constraint: object,
        *,
        sim_dt: float = 1e-3,
        kind: str = "23",
        rank_tol: float = DEFAULT_TOL,
        nr_tol: float = 1e-12,
        nr_iters: int = 50,
        passive: tuple[str, ...] | None = None,
        damping: bool = True,
        torque_limits: ArrayLike | None = None,
    ) -> None:
        if not sim_dt > 0:
            raise ConfigError(f"ProjectionPlant: sim_dt must be > 0, got {sim_dt}")
        if kind not in KINDS:
            raise ConfigError(f"ProjectionPlant: kind='{kind}' is not one of {KINDS}")
        if not nr_tol > 0 or nr_iters < 1:
            raise ConfigError(
                f"ProjectionPlant: nr_tol must be > 0 and nr_iters >= 1 (got {nr_tol}, {nr_iters})"
            )
        self.robot = robot
        self.model = robot.model
        self._data = robot.model.createData()  # own cache: the controller's Robot.data is not touched
        self.c = as_constraint(robot.loops if constraint is None else constraint)
        self._rows_fn = getattr(self.c, "jacobian_and_jdot_v", None)
        if passive is None:
            passive = tuple(getattr(robot, "passive_joints", ()))
        self._dt = float(sim_dt)
        self.kind, self.rank_tol, self.nr_tol, self.nr_iters = (
            kind,
            float(rank_tol),
            float(nr_tol),
            int(nr_iters),
        )
        self.path = robot.path
        n = robot.nv
        self.actuated = np.ones(n, dtype=bool)
        self.actuated[robot.v_indices(list(passive))] = False  # (a ball or free joint: all its coordinates)
        self.D = robot.damping.copy() if damping else np.zeros(n)
        self.tau_max = None if torque_limits is None else np.asarray(torque_limits, dtype=float)
        self.data = _Data(n)
        self.q = np.zeros(n)
        self.v = np.zeros(n)
        self.tau = np.zeros(n)
        self.t = 0.0
        self.saturated = 0
        self.nr_iterations_max = 0  # worst NR iteration count over the run (diagnostic)
        self.rank_drops = 0  # steps that ended in a rank-deficient A

    # ------------------------------------------------------------------ MujocoPlant interface
    @property
    def dt(self) -> float:
        return self._dt

    @property
    def time(self) -> float:
        return self.t

    def reset(
        self, q: ArrayLike, v: ArrayLike | None = None, qpos_extra: dict[str, float] | None = None
    ) -> None:
        q = np.asarray(q, dtype=float)
        if q.shape != (self.robot.nq,):
            raise StateError(f"reset: q has shape {q.shape}, the model has {self.robot.nq} joints")
        self.q = self._restore(q.copy())
        v = np.zeros(self.robot.nv) if v is None else np.asarray(v, dtype=float)
        self.v = project(self.c.jacobian(self.q), self.rank_tol).P @ v
        self.t = 0.0
        self.tau = np.zeros(self.robot.nv)
        self._sync()

    def state(self, noisy: bool = True) -> tuple[np.ndarray, np.ndarray]:
        return self.q.copy(), self.v.copy()

    def set_torque(self, tau: ArrayLike) -> None:
        t = np.asarray(tau, dtype=float)
        if t.shape != (self.robot.nv,):
            raise StateError(f"set_torque: τ has shape {t.shape}, the model has {self.robot.nv} joints")
        if not np.all(np.isfinite(t)):
            raise StateError("set_torque: τ contains NaN/inf")
        if np.any(np.abs(t[~self.actuated]) > 1e-9):
            bad = [n for n, a, x in zip(self.robot.joint_names, self.actuated, t) if not a and abs(x) > 1e-9]
            raise JointMapError(f"projection plant: torque requested on passive joints {bad}")
        if self.tau_max is not None:
            clipped = np.clip(t, -self.tau_max, self.tau_max)
            if np.any(clipped != t):
                self.saturated += 1
            t = clipped
        self.tau = t.copy()

    def set_wrench(self, body: str, f: ArrayLike = (0.0, 0.0, 0.0), m: ArrayLike = (0.0, 0.0, 0.0)) -> None:
        raise ConfigError(
            "the projection plant has no external wrenches; use the MuJoCo plant for disturbances"
        )

    def clear_wrenches(self) -> None:
        pass

    def step(self, n: int = 1) -> None:
        for _ in range(n):
            self._rk4()
            self.q = self._restore(self.q)
            pr = project(self.c.jacobian(self.q), self.rank_tol)
            self.v = pr.P @ self.v
            if not pr.full_row_rank:
                self.rank_drops += 1
            self.t += self._dt
        if not np.isfinite(self.q @ self.q + self.v @ self.v):
            raise StateError(f"the projection plant diverged before t={self.t:.4f} s; reduce sim_dt")
        self._sync()

    def equality_violation(self) -> float:
        """max |φ(q)| after the Newton–Raphson restoration."""
        return float(np.max(np.abs(self.c.phi(self.q)))) if self.c.m else 0.0

    # ------------------------------------------------------------------ internals
    def accel(self, q: np.ndarray, v: np.ndarray, tau: np.ndarray) -> np.ndarray:
        """q̈ of (22) at (q, v) for input τ (joint damping D v added to h, as in the plant)."""
        m, d = self.model, self._data
        M = pin.crba(m, d, q)
        h = pin.nonLinearEffects(m, d, q, v) + self.D * v
        if self._rows_fn is not None:
            A, jdv = self._rows_fn(q, v)  # one kinematics pass for both
        else:
            A, jdv = self.c.jacobian(q), self.c.jdot_v(q, v)
        pr = project(A, self.rank_tol)
        return direct_dynamics(M, h, tau, pr, c_times_v(pr, jdv), self.kind)

    def _rk4(self) -> None:
        # the position stages through pin.integrate (q ⊕ δ, δ in v's tangent space): q + δ for 1-DoF joints,
        # the exponential map on a ball or free joint's quaternion
        q, v, tau, dt, m = self.q, self.v, self.tau, self._dt, self.model
        k1v = self.accel(q, v, tau)
        k1q = v
        k2q = v + 0.5 * dt * k1v
        k2v = self.accel(pin.integrate(m, q, 0.5 * dt * k1q), k2q, tau)
        k3q = v + 0.5 * dt * k2v
        k3v = self.accel(pin.integrate(m, q, 0.5 * dt * k2q), k3q, tau)
        k4q = v + dt * k3v
        k4v = self.accel(pin.integrate(m, q, dt * k3q), k4q, tau)
        self.q = pin.integrate(m, q, dt / 6 * (k1q + 2 * k2q + 2 * k3q + k4q))
        self.v = v + dt / 6 * (k1v + 2 * k2v + 2 * k3v + k4v)

    def _restore(self, q: np.ndarray) -> np.ndarray:
        """Newton–Raphson (39): q ← q − A⁺ φ until ‖φ‖∞ ≤ nr_tol."""
        for it in range(self.nr_iters + 1):
            phi = self.c.phi(q)
            if np.max(np.abs(phi), initial=0.0) <= self.nr_tol:
                self.nr_iterations_max = max(self.nr_iterations_max, it)
                return q
            if it == self.nr_iters:
                break
            # the correction uses every non-zero singular value: near a singular configuration φ and σ
            # vanish together (φ = O(δ²), σ = O(δ)), so Δq = −A⁺φ stays O(δ) and Newton still converges
            # (linearly there), whereas the dynamics' rank tolerance would stall it.
            q = pin.integrate(self.model, q, -(project(self.c.jacobian(q), 1e-14).A_pinv @ phi))
        raise StateError(
            f"projection plant: Newton–Raphson did not restore φ(q)=0 within {self.nr_iters} "
            f"iterations at t={self.t:.4f} s (‖φ‖ = {np.max(np.abs(phi)):.3g}); reduce sim_dt"
        )

    def constraint_force(self) -> np.ndarray:
        """A force sensor: f_c = (I − P)(M q̈ + h − τ) (32) at the current state under the torque last
        applied (what a loop-closure load cell would read)."""
        m, d = self.model, self._data
        q, v = self.q, self.v
        qdd = self.accel(q, v, self.tau)
        M = pin.crba(m, d, q)
        h = pin.nonLinearEffects(m, d, q, v) + self.D * v
        r = M @ qdd + h - self.tau
        return r - project(self.c.jacobian(q), self.rank_tol).P @ r

    def energy(self) -> float:
        """Kinetic + potential energy of the model at the current state (for conservation checks)."""
        m, d = self.model, self._data
        return float(
            pin.computeKineticEnergy(m, d, self.q, self.v) + pin.computePotentialEnergy(m, d, self.q)
        )

    def _sync(self) -> None:
        self.data.qpos = self.q.copy()
        self.data.qvel = self.v.copy()

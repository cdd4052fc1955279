"""The centre-of-mass task: the robot's centre of mass follows a target, rows from Pinocchio, in Python.

With the bodies that move with the joints k = 1 … nj (Pinocchio's convention: the universe's body, e.g. a fixed
base, is left out), their total mass m = Σ_k m_k and their centres of mass c_k(q) (world axes),

    c(q) = Σ_k m_k c_k(q) / m                                   (``pin.centerOfMass``)
    ċ = J_c v,   J_c = ∂c/∂q = Σ_k m_k J_k,v(c_k) / m  (3×nv)     (``pin.jacobianCenterOfMass``)
    c̈ = J_c v̇ + J̇_c v,   J̇_c v = c̈ at v̇ = 0                  (``pin.centerOfMass(q, v, 0)``: data.acom[0])

The task (``models/coupling.py``, world axes, P = I) against a target (c_d, ċ_d, c̈_d):

    e = c_d − c,   w = ċ_d − J_c v,   ẇ = c̈_d − J_c v̇ − J̇_c v  ⇒  W = −J_c,  drift = c̈_d − J̇_c v

so the law ẇ + K_d w + K_p e = 0 is c̈ = c̈_d + K_d (ċ_d − ċ) + K_p (c_d − c), and ``Task.compute`` gives
A = −J_c, b = −drift − K_d w − K_p e.

The class has no compiled row builder (``kernel_kind()`` is None): the compiled UK step calls its
``error_dynamics`` for its rows in Python while every other task stays compiled (``controllers/uk_plan.py``:
``py_tasks``).  It computes them on a Pinocchio ``Data`` of its own (two passes: ``centerOfMass`` with
(q, v, 0), ``jacobianCenterOfMass``), so the robot's data, which the compiled step reads, is not touched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pinocchio as pin
from numpy.typing import ArrayLike

from cmstack.models.coupling import ErrorDynamics, Task
from cmstack.models.errors import ConfigError
from cmstack.models.robot import Kinematics, Robot

_AXES = {
    "xyz": slice(0, 3),
    "xy": slice(0, 2),
    "yz": slice(1, 3),
    "x": slice(0, 1),
    "y": slice(1, 2),
    "z": slice(2, 3),
}


class CenterOfMassTask(Task):
    """The centre of mass c(q) of ``robot`` follows a target (module docstring for the rows).

    Args:
        robot: the model (``Robot``).
        target: the position c_d (3 values, m, world axes) held constant, or a trajectory
            t ↦ (c_d (3,), ċ_d (3,), c̈_d (3,)) (m, m/s, m/s²); None: the centre of mass at ``robot.q_initial``
            (or q = 0 when the robot has none).
        kp (1/s²), kd (1/s): gains of the error ODE.
        axes: the rows kept: "xyz" (3), "xy", "yz" (2), "x", "y", "z" (1).
        name: shown in errors and logs.
    """

    def __init__(
        self,
        robot: Robot,
        target: ArrayLike | Callable[[float], tuple] | None = None,
        kp: float = 100.0,
        kd: float = 20.0,
        axes: str = "xyz",
        name: str | None = None,
    ) -> None:
        self.name = name or "com"
        if axes not in _AXES:
            raise ConfigError(f"{self.name}: axes={axes!r} is not one of {list(_AXES)}")
        self.robot = robot
        self.rows = _AXES[axes]
        self._set_gains(kp, kd)
        self._data: Any = None
        self._zero = np.zeros(robot.nv)
        self._zero3 = np.zeros(3)
        if target is None:
            q0 = getattr(robot, "q_initial", None)
            q0 = np.zeros(robot.nq) if q0 is None else np.asarray(q0, dtype=float)
            target = self.com(q0)
        if callable(target):
            self.trajectory: Callable[[float], tuple] | None = target
            self._const: tuple | None = None
        else:
            self.set_target(target)

    def set_target(self, c: ArrayLike) -> None:
        """Hold the centre of mass at the constant position c (3 values, m, world axes)."""
        c = np.array(c, dtype=float).ravel()
        if c.shape != (3,) or not np.all(np.isfinite(c)):
            raise ConfigError(
                f"{self.name}: a centre-of-mass target is 3 finite numbers (m), got {c.tolist()}"
            )
        c.flags.writeable = False
        self._const = (c, self._zero3, self._zero3)
        self.trajectory = None

    def desired(self, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(c_d, ċ_d, c̈_d) at time t (s)."""
        if self._const is not None:
            return self._const
        assert self.trajectory is not None
        out = self.trajectory(t)
        try:
            cd, vd, ad = (np.asarray(x, dtype=float).reshape(3) for x in out)
        except (TypeError, ValueError):
            raise ConfigError(
                f"{self.name}: the trajectory must return (c_d, v_d, a_d), 3 values each, got {out!r}"
            ) from None
        return cd, vd, ad

    def _pin_data(self) -> Any:
        if self._data is None:
            self._data = self.robot.model.createData()
        return self._data

    def com(self, q: ArrayLike) -> np.ndarray:
        """c(q) (m, world axes), on the task's own Pinocchio data."""
        return pin.centerOfMass(self.robot.model, self._pin_data(), np.asarray(q, dtype=float)).copy()

    def error_dynamics(self, kin: Kinematics, t: float) -> ErrorDynamics:
        """ErrorDynamics(W = −J_c, drift = c̈_d − J̇_c v, w = ċ_d − J_c v, e = c_d − c) at (kin.q, kin.v, t)."""
        model, d = self.robot.model, self._pin_data()
        pin.centerOfMass(model, d, kin.q, kin.v, self._zero)  # c, ċ, J̇_c v (at v̇ = 0)
        c, cdot, jdv = d.com[0], d.vcom[0], d.acom[0]
        Jc = pin.jacobianCenterOfMass(model, d, kin.q)
        cd, vd, ad = self.desired(t)
        return ErrorDynamics(-Jc, ad - jdv, vd - cdot, cd - c)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_data"] = None  # made again on first use
        return state

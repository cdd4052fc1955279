"""What every control law is: the ``Controller`` protocol and the per-step report it fills.

A controller is called once per control period with the measured state and returns the joint
torques (or generalized forces) to apply:

    tau = controller(t, q, v)          # t [s], q [rad or m], v [rad/s or m/s] → τ [N·m or N]
    controller.info                    # a StepInfo (subclass) describing that step, or None before it

Optional abilities are protocols of their own, so that the closed loop (sim/runner.simulate) and the
scenarios test for them with ``isinstance`` rather than by probing attribute names:

* :class:`SensesPlant`: the law reads a sensor of the plant (a wrist force sensor), given once by
  ``attach_plant(plant)`` before the first step;
* :class:`ReportsErrors`: the law names the errors of its constraints and tasks at the last step,
  ``errors(kin, t) -> ({constraint: e}, {task: e})`` with the kinematics ``kin`` it computed then.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np


@dataclass(kw_only=True)
class StepInfo:
    """The base of every controller's per-step report.

    status: "not run" before the first step, then "solved" or the solver's status of that step.
    qp_iter: iterations of the QP solved in that step (0 for closed-form laws).
    """

    status: str = "not run"
    qp_iter: int = 0


@runtime_checkable
class Controller(Protocol):
    """τ = controller(t, q, v): time [s], positions and velocities in the controller's model order
    → generalized forces [N·m or N] in the same order; ``info`` reports the last step."""

    @property
    def info(self) -> Any:
        """A StepInfo (subclass) describing the last step (None or a blank StepInfo before it)."""
        ...

    def __call__(self, t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray: ...


@runtime_checkable
class SensesPlant(Protocol):
    """A controller that reads a sensor of the plant (e.g. a force sensor) it is given once.

    Across a process boundary (``cmstack rt``, sim/rt_loop.run_rt) the plant lives in the driver process:
    such a controller also names the arrays of ``plant.data`` it reads in ``sensed_data`` (a tuple of
    names, e.g. ``("qfrc_constraint",)``; not a protocol member, so in-process controllers need none),
    which the driver publishes with each state and the loop copies into this process's plant before
    each call.  Without it ``run_rt`` refuses the controller."""

    def attach_plant(self, plant: Any) -> None: ...


@runtime_checkable
class ReportsErrors(Protocol):
    """A controller that names the errors of its constraints and tasks at its last step:
    ``errors(kin, t)`` → ({constraint name: error}, {task name: error}) with ``kin`` its last
    kinematics (attribute ``kin``)."""

    @property
    def kin(self) -> Any:
        """The kinematics of the last step."""
        ...

    def errors(self, kin: Any, t: float) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]: ...


@runtime_checkable
class ReportsMetrics(Protocol):
    """A controller with figures of its own for metrics.json (e.g. a force loop's squeeze error)."""

    def extra_metrics(self) -> dict[str, float]: ...

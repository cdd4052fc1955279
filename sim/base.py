"""What every simulated plant is: the ``Plant`` protocol the closed loop (sim/runner.simulate) drives.

    q, v = plant.state()               # measured state in the controller's order
    plant.set_torque(tau)              # held until the next call (zero-order hold)
    plant.set_wrench(body, f, m)       # external world-frame force [N] / moment [N·m] on a body, until changed
    plant.step(n)                      # n integration steps of plant.dt [s]; plant.time [s] advances
    plant.data.qpos                    # the configuration the viewer draws and the log replays

Implemented by sim.plant.MujocoPlant (MuJoCo, joint-space), sim.chain_plant.ChainMujocoPlant (MuJoCo,
body poses and twists of a chain) and sim.projection_sim.ProjectionPlant (the projection-method
integrator); a plant a user writes needs only these members.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike


@runtime_checkable
class Plant(Protocol):
    """A simulated robot: state out, torques and disturbance wrenches in, time advanced by ``step``."""

    @property
    def data(self) -> Any:
        """Has ``qpos``: the plant's own configuration vector (for viewing and replay)."""
        ...

    @property
    def dt(self) -> float:
        """Integration step [s]."""
        ...

    @property
    def time(self) -> float:
        """Simulated time [s]."""
        ...

    def state(self) -> tuple[np.ndarray, np.ndarray]:
        """(q, v) as the controller sees them."""
        ...

    def set_torque(self, tau: np.ndarray) -> None:
        """Apply τ (controller order) until the next call."""
        ...

    def set_wrench(self, body: str, f: ArrayLike = (0.0, 0.0, 0.0), m: ArrayLike = (0.0, 0.0, 0.0)) -> None:
        """World-frame force f [N] and moment m [N·m] on ``body`` until changed (zero removes it)."""
        ...

    def step(self, n: int = 1) -> None:
        """Advance ``n`` integration steps."""
        ...


@runtime_checkable
class ReportsPlantMetrics(Protocol):
    """A plant with figures of its own for metrics.json (e.g. what a perturbation changed)."""

    def metrics(self) -> dict: ...


class MujocoClock:
    """Mixin: ``dt`` and ``time`` of a plant that holds a MuJoCo ``model`` (MjModel) and ``data`` (MjData)."""

    model: Any
    data: Any

    @property
    def dt(self) -> float:
        """MuJoCo's time step [s]."""
        return float(self.model.opt.timestep)

    @property
    def time(self) -> float:
        """MuJoCo's simulated time [s]."""
        return float(self.data.time)

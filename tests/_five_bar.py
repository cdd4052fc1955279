"""The five-bar of closed_chain's default config (its law, on the projection plant at half the control period):
what tests/test_sensors.py and the child processes it starts build, in one place.  A child imports it with this
folder on its path (``child_env``)."""

from __future__ import annotations

import os
from pathlib import Path

from cmstack.scenarios import closed_chain
from cmstack.scenarios._common import default_config
from cmstack.sim.projection_sim import ProjectionPlant

DT = 1e-3


def setup(model: str = "mjcf/five_bar.xml"):
    """(robot, law, plant) of closed_chain with ``model``, the plant reset to the robot's initial q."""
    cfg = default_config("closed_chain")
    cfg["model"] = model
    robot = closed_chain.load_robot(cfg)
    _, coords, _ = closed_chain.build_reference(cfg, robot)
    ctl = closed_chain.build_law(cfg, robot, coords)
    plant = ProjectionPlant(robot, None, sim_dt=DT / 2)
    plant.reset(robot.q_initial)
    return robot, ctl, plant


def child_env() -> dict[str, str]:
    """The environment of a child process: no display, and this folder on its path (``import _five_bar``)."""
    path = os.pathsep.join(p for p in (str(Path(__file__).parent), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=path)

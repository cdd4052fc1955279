"""Recorded states of a real YuMi closed-loop run (thesis set-up), for comparisons on realistic
states.  The loop is driven by the frozen pre-rewrite controller (tests/_uk_reference.py)."""

from __future__ import annotations

import functools

from cmstack.models.robot import Robot
from cmstack.scenarios._common import default_config
from cmstack.scenarios.yumi_dual_arm import build_problem, initial_state
from cmstack.sim.plant import MujocoPlant


def thesis_setup(**overrides):
    cfg = default_config("yumi_dual_arm")
    cfg.update(overrides)
    robot = Robot(cfg["urdf"])
    coupling, task, traj, _ = build_problem(cfg, robot)
    return cfg, robot, coupling, task


@functools.lru_cache(maxsize=4)
def recorded_states(priority: str = "weighted", duration: float = 2.0, every: int = 1):
    import _uk_reference as ref

    cfg, robot, coupling, task = thesis_setup(priority=priority)
    ctl = ref.UdwadiaKalabaController(
        robot,
        [coupling],
        [task],
        omega=cfg["omega"],
        priority=priority,
        torque_limits=True,
        model_damping=True,
    )
    plant = MujocoPlant(cfg["mjcf_virtual"], robot.joint_names, sim_dt=cfg["control_dt"])
    plant.reset(initial_state(cfg, robot))
    out = []
    for k in range(int(round(duration / cfg["control_dt"]))):
        t = plant.time
        q, v = plant.state()
        if k % every == 0:
            out.append((t, q, v))
        plant.set_torque(ctl(t, q, v))
        plant.step()
    return tuple(out)

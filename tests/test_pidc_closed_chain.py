"""PIDC on closed chains from the model file (issue 23 item 4): task-space coordinates (any Task of the core
contract) with the robot's loops and passive joints, and the constraint force it reports."""

from __future__ import annotations

import numpy as np
import pytest

from cmstack.controllers.pidc import PIDC
from cmstack.models.coupling import FrameTask
from cmstack.models.errors import ConfigError
from cmstack.models.robot import Robot
from cmstack.models.trajectory import Circle
from cmstack.sim.projection_sim import ProjectionPlant


def test_five_bar_tip_tracks_a_circle_with_passive_joints():
    robot = Robot.from_mjcf("mjcf/five_bar.xml")
    q0 = robot.q_initial
    p0 = robot.update(q0, np.zeros(robot.nv)).frame("ee").p.copy()
    circle = Circle(p0 - [0.03, 0.0, 0.0], 0.03, 2 * np.pi * 0.5)  # starts at the tip, in the x-z plane
    task = FrameTask(robot, "ee", circle, kp=400.0, kd=40.0, rows="position")
    ctl = PIDC(robot, None, task)  # robot.loops, robot.passive_joints
    plant = ProjectionPlant(robot, None, sim_dt=1e-3)
    plant.reset(q0)
    errs = []
    for k in range(1500):
        t = k * 1e-3
        q, v = plant.state()
        tau = ctl(t, q, v)
        assert ctl.info.solvable and np.abs(tau[~plant.actuated]).max() <= 1e-9
        assert np.allclose(ctl.info.qdd_des, plant.accel(q, v, tau), atol=1e-8)  # τ realises q̈_des
        # f_c (32) is what the loop exerts on the rigid plant under τ; λ its multipliers on the weld's rows
        plant.set_torque(tau)
        f_plant = plant.constraint_force()
        assert np.allclose(ctl.info.f_c, f_plant, atol=1e-8 * max(1.0, np.abs(f_plant).max()))
        assert ctl.info.lam.shape == (6,)
        assert np.allclose(robot.loops[0].jacobian(q).T @ ctl.info.lam, ctl.info.f_c, atol=1e-9)
        if t > 1.0:
            errs.append(np.linalg.norm(ctl.kin.frame("ee").p - circle(t)[0].translation))
        plant.step()
    assert max(errs) <= 1e-4
    assert np.abs(ctl.info.f_c).max() > 1e-3  # the loop carries load (gravity)


def test_task_coordinates_take_no_reference():
    robot = Robot.from_mjcf("mjcf/five_bar.xml")
    task = FrameTask(robot, "ee", None, rows="position")
    with pytest.raises(ConfigError, match="reference=None"):
        PIDC(robot, None, task, [0.0, 0.0])
    with pytest.raises(ConfigError, match="joint coordinates need a reference"):
        PIDC(robot, None, ["base_l", "base_r"])

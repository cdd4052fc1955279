"""Tasks and constraints, and the trajectories they follow: the public names.

A task is a set of acceleration rows A v̇ = b built from a stable error ODE (models/coupling.py); a
controller takes them in priority levels, e.g.
``UdwadiaKalabaController(robot, levels=[[RigidCoupling(...)], [FrameTask(...)], [PostureTask(...), GAUSS]])``.

    from cmstack.tasks import RigidCoupling, FrameTask, PostureTask, Circle
"""

from __future__ import annotations

from cmstack.controllers.udwadia_kalaba import GAUSS
from cmstack.controllers.uk_robust import IntegralTask
from cmstack.models.com import CenterOfMassTask
from cmstack.models.contact import PointContact
from cmstack.models.coupling import ErrorDynamics, FrameTask, PostureTask, RelativeFrameTask, Task
from cmstack.models.loops import ClosureSet, LoopClosure, RigidCoupling
from cmstack.models.trajectory import (
    Circle,
    Constant,
    FromFunction,
    MinimumJerk,
    MinimumJerkSE3,
    Sample,
    SE3Trajectory,
    Sinusoid,
    Trajectory,
    as_trajectory,
)

__all__ = [
    "Task",
    "ErrorDynamics",
    "RigidCoupling",
    "FrameTask",
    "RelativeFrameTask",
    "PostureTask",
    "CenterOfMassTask",
    "PointContact",
    "LoopClosure",
    "ClosureSet",
    "IntegralTask",
    "GAUSS",
    "Trajectory",
    "SE3Trajectory",
    "Sample",
    "Constant",
    "Sinusoid",
    "Circle",
    "MinimumJerk",
    "MinimumJerkSE3",
    "FromFunction",
    "as_trajectory",
]

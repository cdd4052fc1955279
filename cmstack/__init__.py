"""cmstack — a control stack for robots with closed kinematic chains.

Pinocchio is the controller's model (from URDF), MuJoCo the plant, ProxSuite solves the QPs,
Meshcat shows the runs.  The public names are importable from here::

    from cmstack import Robot, RigidCoupling, FrameTask, UdwadiaKalabaController, MujocoPlant

and each family whole from its namespace: ``cmstack.tasks`` (tasks, constraints, trajectories),
``cmstack.limits``, ``cmstack.controllers`` (every control law), ``cmstack.plants``, and
``cmstack.scenario`` (``Context``, ``Outcome``, ``Row``: writing a scenario file of your own).

Sub-packages: ``cmstack.models`` (robot models and dynamics formulations), ``cmstack.controllers``
(control laws), ``cmstack.sim`` (plants, the closed loop, logging, the viewer),
``cmstack.scenarios`` (the papers' experiments), ``cmstack.bench`` (speed benchmarks).
The command line is ``cmstack`` (``cmstack --help``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

__version__ = "0.2.0"

# Imported from a clone's ``cmstack/`` folder (Python run from the repository's root finds it before an
# installed cmstack), the sub-packages are not below this file: pyproject.toml maps them from the root's
# folders (models/, controllers/, sim/, ...).  Look for them there too, as the installed package has them.
_here = os.path.dirname(os.path.abspath(__file__))
_root = os.path.dirname(_here)
if not os.path.isdir(os.path.join(_here, "models")) and os.path.isfile(
    os.path.join(_root, "models", "__init__.py")
):
    __path__.append(_root)  # noqa: F821 (the package's own search path)
del _here, _root

# public name -> module that defines it (imported on first use: `import cmstack` stays cheap)
_EXPORTS = {
    "Robot": "cmstack.models.robot",
    "Kinematics": "cmstack.models.robot",
    "RigidCoupling": "cmstack.models.loops",
    "FrameTask": "cmstack.models.coupling",
    "RelativeFrameTask": "cmstack.models.coupling",
    "PostureTask": "cmstack.models.coupling",
    "Task": "cmstack.models.coupling",
    "ErrorDynamics": "cmstack.models.coupling",
    "EffortLimit": "cmstack.models.limits",
    "JointPositionLimit": "cmstack.models.limits",
    "JointVelocityLimit": "cmstack.models.limits",
    "GAUSS": "cmstack.controllers.udwadia_kalaba",
    "UdwadiaKalabaController": "cmstack.controllers.udwadia_kalaba",
    "PIDC": "cmstack.controllers.pidc",
    "RobustPartitionController": "cmstack.controllers.robust_partition",
    "MujocoPlant": "cmstack.sim.plant",
    "plant_from_urdf": "cmstack.sim.urdf_plant",
    "example_robot_data_path": "cmstack.models.robot",
    "simulate": "cmstack.sim.runner",
    "Run": "cmstack.sim.runner",
    "Disturbance": "cmstack.sim.runner",
    "Controller": "cmstack.controllers.base",
    "StepInfo": "cmstack.controllers.base",
    "Plant": "cmstack.sim.base",
    "Trajectory": "cmstack.models.trajectory",
    "Constant": "cmstack.models.trajectory",
    "Circle": "cmstack.models.trajectory",
    "Sinusoid": "cmstack.models.trajectory",
    "MinimumJerk": "cmstack.models.trajectory",
    "MinimumJerkSE3": "cmstack.models.trajectory",
    "StackError": "cmstack.models.errors",
    "ConfigError": "cmstack.models.errors",
    "ModelFileError": "cmstack.models.errors",
    "ModelFileWarning": "cmstack.models.errors",
    "FrameNotFoundError": "cmstack.models.errors",
    "JointMapError": "cmstack.models.errors",
    "InfeasibleError": "cmstack.models.errors",
    "SolverError": "cmstack.models.errors",
    "StateError": "cmstack.models.errors",
}

__all__ = sorted(_EXPORTS) + ["__version__"]

if TYPE_CHECKING:  # the same names for type checkers (at run time __getattr__ imports each on first use)
    from cmstack.controllers.base import Controller, StepInfo
    from cmstack.controllers.pidc import PIDC
    from cmstack.controllers.robust_partition import RobustPartitionController
    from cmstack.controllers.udwadia_kalaba import GAUSS, UdwadiaKalabaController
    from cmstack.models.coupling import (
        ErrorDynamics,
        FrameTask,
        PostureTask,
        RelativeFrameTask,
        Task,
    )
    from cmstack.models.errors import (
        ConfigError,
        FrameNotFoundError,
        InfeasibleError,
        JointMapError,
        ModelFileError,
        ModelFileWarning,
        SolverError,
        StackError,
        StateError,
    )
    from cmstack.models.limits import EffortLimit, JointPositionLimit, JointVelocityLimit
    from cmstack.models.loops import RigidCoupling
    from cmstack.models.robot import Kinematics, Robot, example_robot_data_path
    from cmstack.models.trajectory import Circle, Constant, MinimumJerk, MinimumJerkSE3, Sinusoid, Trajectory
    from cmstack.sim.base import Plant
    from cmstack.sim.plant import MujocoPlant
    from cmstack.sim.runner import Disturbance, Run, simulate
    from cmstack.sim.urdf_plant import plant_from_urdf
else:  # hidden from type checkers, which then know exactly the names above
    from cmstack.models._lazy import lazy_getattr

    __getattr__ = lazy_getattr("cmstack", _EXPORTS, globals())


def __dir__():
    return __all__

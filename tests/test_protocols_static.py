"""Static conformance of every plant and controller to the protocols (mypy, when installed): the
checked module assigns each class to its protocol; a model class assigned to a protocol must fail."""

import pytest

GOOD = """
from cmstack.controllers.base import Controller, ReportsErrors, SensesPlant
from cmstack.controllers.pidc import PIDC
from cmstack.controllers.pidc_adapters import ActuatedJointsPIDC
from cmstack.controllers.robust_partition import RobustPartitionController
from cmstack.controllers.udwadia_kalaba import UdwadiaKalabaController
from cmstack.sim.base import Plant
from cmstack.sim.chain_plant import ChainMujocoPlant
from cmstack.sim.plant import MujocoPlant
from cmstack.sim.projection_sim import ProjectionPlant
from cmstack.scenarios.chain_task_space import ChainController
from cmstack.scenarios.chain_open_loop import PortSchedule
from cmstack.scenarios.balloon import RK4Plant, MujocoRK4Plant, Unforced

def plants(a: MujocoPlant, b: ChainMujocoPlant, c: ProjectionPlant, d: RK4Plant, e: MujocoRK4Plant) -> list[Plant]:
    return [a, b, c, d, e]

def controllers(a: PIDC, b: ActuatedJointsPIDC, d: RobustPartitionController,
                e: UdwadiaKalabaController, f: ChainController, g: PortSchedule, h: Unforced) -> list[Controller]:
    return [a, b, d, e, f, g, h]

def abilities(p: PIDC, u: UdwadiaKalabaController) -> tuple[ReportsErrors, ReportsErrors]:
    return p, u
"""
BAD = """
from cmstack.controllers.base import Controller
from cmstack.models.partition import PartitionModel
from cmstack.models.robot import Robot
from cmstack.sim.base import Plant

def f(r: Robot) -> Plant:
    return r

def g(m: PartitionModel) -> Controller:
    return m
"""


#: checked by the typing tests' one mypy run (tests/_mypy.py), each file on its own merits
MYPY_FILES = {"protocols_good.py": GOOD, "protocols_bad.py": BAD}


@pytest.mark.slow
def test_plants_and_controllers_conform_statically(typecheck):
    assert typecheck.returncode in (0, 1) and typecheck.checked > 0, typecheck.describe()  # mypy ran
    assert typecheck.errors_in("protocols_good.py") == [], typecheck.describe()
    bad = typecheck.errors_in("protocols_bad.py")
    assert len(bad) == 2 and all("Incompatible return value" in e for e in bad), bad

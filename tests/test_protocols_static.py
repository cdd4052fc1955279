"""Static conformance of every plant and controller to the protocols (mypy, when installed): the
checked module assigns each class to its protocol; a model class assigned to a protocol must fail."""

import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mypy")
from _mypy import mypy  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

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


def _mypy(tmp_path, name, src):
    pkg = tmp_path / "tree" / "cmstack"  # the package as installed (package-dir mapping), by links
    if not pkg.exists():
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").symlink_to(ROOT / "cmstack" / "__init__.py")
        for d in ("models", "controllers", "sim", "scenarios", "bench"):
            (pkg / d).symlink_to(ROOT / d)
    f = tmp_path / f"{name}.py"
    f.write_text(textwrap.dedent(src))
    return mypy(f, tree=tmp_path / "tree", cache=tmp_path / "cache", cwd=tmp_path)


@pytest.mark.slow
def test_plants_and_controllers_conform_statically(tmp_path):
    good = _mypy(tmp_path, "good", GOOD)
    assert good.returncode == 0, good.stdout + good.stderr
    bad = _mypy(tmp_path, "bad", BAD)
    assert bad.returncode == 1 and bad.stdout.count("Incompatible return value") == 2, bad.stdout

"""Plants, the "real" robots a controller drives (the ``Plant`` protocol of sim/base.py): the public names.

from cmstack.plants import plant_from_urdf
plant = plant_from_urdf(robot, q0=q0, sim_dt=1e-3)          # MuJoCo, motors on every joint
plant = plant_from_mjcf(Robot.from_mjcf("mjcf/five_bar.xml"), sim_dt=1e-3)   # the file's motors, loops
"""

from __future__ import annotations

from cmstack.models.estimator import LoopStateEstimator
from cmstack.sim.base import Plant, ReportsPlantMetrics
from cmstack.sim.chain_plant import ChainMujocoPlant
from cmstack.sim.mjcf_plant import plant_from_mjcf
from cmstack.sim.perturb import Perturbation, PerturbedPlant
from cmstack.sim.plant import JointMap, MujocoPlant, load_mjcf
from cmstack.sim.projection_sim import ProjectionPlant
from cmstack.sim.urdf_plant import penetrations, plant_from_urdf, save_xml

__all__ = [
    "Plant",
    "ReportsPlantMetrics",
    "MujocoPlant",
    "JointMap",
    "load_mjcf",
    "plant_from_urdf",
    "plant_from_mjcf",
    "save_xml",
    "penetrations",
    "ProjectionPlant",
    "ChainMujocoPlant",
    "PerturbedPlant",
    "Perturbation",
    "LoopStateEstimator",
]

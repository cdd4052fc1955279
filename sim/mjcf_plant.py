"""A MuJoCo plant from an MJCF file, its loops made as stiff as the time step allows.

    robot = Robot.from_mjcf("mjcf/five_bar.xml")
    plant = plant_from_mjcf(robot, sim_dt=1e-3, q0=robot.q_initial)

The file is read by MuJoCo (``MjSpec.from_file``): bodies, joints, actuators and ``<equality>`` as written.
Every ``connect``/``weld`` equality gets the solref/solimp of ``loop_solref(sim_dt)`` (τ = 2h, ζ = 1,
impedance 0.9999; derivation there) unless ``loop_solref=False`` keeps the file's.  Torques map to the
motors by joint name (``MujocoPlant``); joints without a motor are the robot's passive joints and refuse a
torque.  ``plant.spec`` is kept: ``save_xml(plant, run_dir / "plant.xml")`` writes the closed mechanism for a
replay.
"""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np
from numpy.typing import ArrayLike

from cmstack.models._model_files import by_mujoco
from cmstack.models.errors import ConfigError
from cmstack.models.robot import Robot, _check_xml, resolve_asset
from cmstack.sim.plant import MujocoPlant
from cmstack.sim.urdf_plant import loop_solref, save_xml


def plant_from_mjcf(
    model: str | Path | Robot,
    *,
    q0: ArrayLike | None = None,
    sim_dt: float | None = None,
    stiff_loops: bool = True,
    xml_path: str | Path | None = None,
    integrator: str | None = None,
    noise_q: float = 0.0,
    noise_v: float = 0.0,
    seed: int = 0,
) -> MujocoPlant:
    """A ``MujocoPlant`` of an MJCF file (a path, or a ``Robot.from_mjcf`` robot, whose file is used and whose
    joint order the plant maps to).

    Args:
        model: the MJCF path, or a robot built by ``Robot.from_mjcf``.
        q0: initial configuration (model order), at rest; None: the robot's assembled ``q_initial``
            when a robot is given, else MuJoCo's qpos0.
        sim_dt: MuJoCo's time step (s); None keeps the file's.
        stiff_loops: give every connect/weld equality ``loop_solref(sim_dt)`` (as stiff as the step allows);
            False keeps the file's solref/solimp.
        xml_path: write the plant's MJCF there (``save_xml``), e.g. a run directory's plant.xml.
        integrator: as ``MujocoPlant``.
        noise_q: as ``MujocoPlant`` (rad or m).
        noise_v: as ``MujocoPlant`` (rad/s or m/s).
        seed: as ``MujocoPlant``."""
    robot = model if isinstance(model, Robot) else None
    if isinstance(model, Robot):
        if model.mjcf_path is None:
            raise ConfigError(
                f"plant_from_mjcf: robot {model.label} was not read from an MJCF (use plant_from_urdf)"
            )
        path = model.mjcf_path
    else:
        path = resolve_asset(model)
    _check_xml(path, "MJCF")
    if sim_dt is not None and not sim_dt > 0:
        raise ConfigError(f"sim_dt must be > 0, got {sim_dt}")
    spec = by_mujoco(lambda: mujoco.MjSpec.from_file(str(path)), path, "read")
    if sim_dt is not None:
        spec.option.timestep = float(sim_dt)
    if stiff_loops:
        ref, imp = loop_solref(spec.option.timestep)
        for e in spec.equalities:
            if e.type in (mujoco.mjtEq.mjEQ_CONNECT, mujoco.mjtEq.mjEQ_WELD, mujoco.mjtEq.mjEQ_JOINT):
                e.solref, e.solimp = ref, imp
    mj = by_mujoco(spec.compile, path, "compiled")
    names = robot.joint_names if robot is not None else [mj.joint(j).name for j in range(mj.njnt)]
    plant = MujocoPlant.from_model(
        mj, names, name=path.name, integrator=integrator, noise_q=noise_q, noise_v=noise_v, seed=seed
    )
    plant.path = path
    plant.spec = spec
    if xml_path is not None:
        save_xml(plant, xml_path)
    if q0 is None and robot is not None:
        q0 = robot.q_initial
    if q0 is not None:
        plant.reset(np.asarray(q0, dtype=float))
    return plant

"""Compile (or load from numba's cache) every control-step kernel at once: ``python -m cmstack.warmup``.

``make install`` runs it after installing, so that test workers and scenario runs load machine code
instead of compiling it each.  It builds each controller as the scenarios build it (their configs, their
builders), so it belongs to the application tier: the kernels themselves (controllers/kernels.py,
controllers/_uk_kernels.py, models/_*_kernels.py) never import a scenario.
"""

from __future__ import annotations

import os

import numpy as np


def _warm_chain() -> None:
    """The tensor chain's and DAC law III's kernels (about two thirds of a cold warm-up), and the
    quaternion maths of ``cmstack.models.lie`` (models/_lie_kernels.py)."""
    from cmstack.models import lie
    from cmstack.models.trajectory import Circle

    Circle([0.0, 0.0, 0.0], 0.1, 1.0).sample(0.0)  # models/_trajectory_kernels.py
    q = lie.quat_exp(np.array([[0.1, 0.2, 0.3]]))
    lie.quat_log(lie.quat_mul(q, q))
    lie.rotation_vector(lie.quat_to_matrix(q))
    lie.quat_from_matrix(lie.quat_to_matrix(q[0]))
    from cmstack.controllers.dac import Obstacle, TaskSpaceLaw
    from cmstack.models.tensor_chain import TensorChain

    ch = TensorChain.rods(3, 0.4, 0.04, 1.0, [1.0, 1.0, 1.0], spring_law="rotvec")
    s = ch.straight_state()
    ee = (s.pos[-1], s.quat[-1], np.zeros(6), np.zeros(6))
    law = TaskSpaceLaw(
        ch,
        lambda t: ee,
        1.0,
        1.0,
        1.0,
        1.0,
        obstacles=[Obstacle(np.array([0.0, 0.3, 0.0]), 0.1)],
        obstacle_gain=1e-5,
        kd_mass=1.0,
    )
    law(0.0, s)


def _warm_rest() -> None:
    """Law (18), PIDC, the TITOP sweeps and the compiled UK step."""
    from cmstack.controllers.pidc import PIDC
    from cmstack.controllers.robust_partition import RobustPartitionController
    from cmstack.models.partition import PartitionModel
    from cmstack.models.robot import Robot
    from cmstack.models.trajectory import Sinusoid
    from cmstack.scenarios._common import default_config

    sin = Sinusoid([0.0, 0.0, 0.1], [0.1, 0.1, 0.05], 0.5)
    RobustPartitionController(PartitionModel(), sin)(0.0, np.array([0.0, 0.0, 0.1]), np.zeros(3))
    robot = Robot.from_urdf("urdf/slider_crank.urdf", loops="urdf/slider_crank.loops.toml")
    for loop in (
        robot.loops[0],
        None,
    ):  # one loop row (kernels.pidc_one_row); robot.loops (the closed-chain step)
        PIDC(robot, loop, ["crank"], Sinusoid(0.0, 0.1, 0.5), 1.0, 1.0)(
            0.0, np.array([0.1, -0.2]), np.zeros(2)
        )
    from cmstack.scenarios.series_parallel import build_pidc

    build_pidc(default_config("series_parallel"), sin)(0.0, np.array([0.0, 0.0, 0.1]), np.zeros(3))
    from cmstack.scenarios.closed_chain import (
        build_law,
        build_reference,
        load_robot,
    )  # PIDC, several loop rows

    for law in ("pidc", "uk"):  # PIDC's rows kernel; UK's compiled closed-chain step (the loops'
        cc = dict(
            default_config("closed_chain"), model="mjcf/four_bar.xml", law=law
        )  # rows and passive map in
        four = load_robot(cc)  # _uk_kernels.uk_step)
        ctl = build_law(cc, four, build_reference(cc, four)[1])
        ctl(0.0, four.q_initial, np.zeros(four.nv))
        if law == "uk":
            ctl.binding_limits(
                ctl.kin, ctl.kin.h, ctl.info.vdot
            )  # its torque map formed (kernels.passive_map)
    sin(0.0)  # Sinusoid.sample (models/_trajectory_kernels.sinusoid_sample)
    from cmstack.scenarios.balloon import Params, titop_system  # the TITOP sweeps (models/_titop_kernels.py)

    P = Params(default_config("balloon"))
    tsys = titop_system(P)
    tsys.forward(P.q0, np.zeros(9), np.zeros(9), ext={("balloon", "B"): np.zeros(6)})
    tsys.inverse(P.q0, np.zeros(9), np.zeros(9))
    tsys.kinematics(P.q0, np.zeros(9))
    # the compiled UK step (controllers/_uk_kernels.py; one signature serves every plan of up to 4
    # joints): the thesis law and the robust law (its integral tasks' bias path), as the flagship builds them
    from cmstack.scenarios.yumi_dual_arm import CONTROLLERS, build_problem, initial_state

    cfg = default_config("yumi_dual_arm")
    yumi = Robot(cfg["urdf"])
    coupling, task, _, _ = build_problem(cfg, yumi)
    q0 = initial_state(cfg, yumi)
    for name in ("uk", "uk_robust"):
        CONTROLLERS[name](cfg, yumi, coupling, task)(0.0, q0, np.zeros(yumi.nv))


def _warm_legged() -> None:
    """The legged contact step (controllers/_contact_kernels.py, the frame table and the loops' rows it reads), one
    stance step of the quadruped as scenarios/legged.py builds it (the biped's tables have the same types)."""
    from cmstack.models.robot import Robot, resolve_asset
    from cmstack.scenarios._common import default_config
    from cmstack.scenarios.legged import LeggedLaw, Phases

    cfg = default_config("legged")
    robot = Robot.from_mjcf(resolve_asset(cfg["model"]))
    LeggedLaw(robot, cfg, Phases(cfg))(0.0, robot.q_initial, np.zeros(robot.nv))


#: a cold warm-up's wall time on 2 idle cores (s): `make install` in a clean clone on 28 Nov 2026, nothing
#: else running, took ~100 s (46 s at load 1.5 before this wave's kernels; at load 12-14, 870 s wall and
#: 191 s CPU; README, "One package, one command")
WARM_S = 100.0


def _quiet_chain() -> None:
    """``_warm_chain`` in the forked process, whose compiles the parent's line already announced."""
    from cmstack.models import _compile_notice

    _compile_notice.quiet()
    _warm_chain()


def warm(parallel: bool = True) -> None:
    """Compile (or load from the cache) every kernel with the argument types the controllers pass, by one
    step of each controller on a small model: ``python -m cmstack.warmup`` (``make install``
    runs it, so that test workers and scenario runs load machine code instead of compiling it each).
    With ``parallel`` and two cores or more, the chain's kernels compile in a forked process beside the
    others; numba writes each cache file atomically, and the two groups compile different kernels.  A
    failure in either raises.  The first kernel compiled (not loaded from the cache) says one line on
    stderr (``models/_compile_notice.py``); a warm cache says nothing."""
    import multiprocessing as mp

    from cmstack.models import _compile_notice

    # one line, at the first kernel that is compiled rather than loaded from the cache (none: no line)
    _compile_notice.say_once_instead(
        f"cmstack: compiling every control-step kernel once (~{WARM_S:.0f} s on 2 idle cores, longer on a "
        "busy machine; cached afterwards) ..."
    )
    if not (parallel and (os.cpu_count() or 1) >= 2 and "fork" in mp.get_all_start_methods()):
        _warm_chain()
        _warm_legged()
        _warm_rest()
        return
    child = mp.get_context("fork").Process(target=_quiet_chain, name="warm-chain")
    child.start()
    try:
        _warm_rest()
        _warm_legged()  # ~50 s cold: beside the chain's group, the longer one
    finally:
        child.join()
    if child.exitcode != 0:
        raise RuntimeError(f"warming the chain kernels failed in their process (exit code {child.exitcode})")


if __name__ == "__main__":
    warm()

"""The typed core of the closed loop: every plant is a sim.base.Plant, every controller a
controllers.base.Controller (runtime-checkable protocols), and sim.runner.simulate runs them the way
a hand-written loop does (same torques, bit for bit), collects per-task errors, times the loop and
saves a run directory the viewer can load."""

import json

import numpy as np
import pytest

from cmstack.controllers.base import Controller, ReportsErrors, ReportsMetrics, SensesPlant, StepInfo
from cmstack.models.loops import assemble
from cmstack.models.robot import Robot
from cmstack.scenarios import chain_open_loop as col
from cmstack.scenarios import series_parallel as sp
from cmstack.scenarios import slider_crank as sc
from cmstack.scenarios import yumi_dual_arm as yumi
from cmstack.scenarios._common import resolve_config
from cmstack.sim.base import Plant
from cmstack.sim.chain_plant import ChainMujocoPlant
from cmstack.sim.projection_sim import ProjectionPlant
from cmstack.sim.runner import Disturbance, Run, simulate
from cmstack.sim.viewer import load_run


def _slider():
    cfg = resolve_config(sc.NAME)
    return cfg, sc.load_robot(cfg)


def _yumi(**over):
    cfg = resolve_config(yumi.NAME, overrides=over)
    robot = Robot(cfg["urdf"])
    coupling, task, _, _ = yumi.build_problem(cfg, robot)
    return cfg, robot, coupling, task


def test_every_plant_is_a_plant():
    cfg, robot = _slider()
    plants = [
        sc.mujoco_plant(cfg, robot),
        ProjectionPlant(robot, None),
        sp.build_plant(resolve_config(sp.NAME)),
    ]
    c = resolve_config(col.NAME)
    plants.append(ChainMujocoPlant(c["mjcf"], col.body_names(c["n_bodies"])))
    for p in plants:
        assert isinstance(p, Plant), type(p).__name__
    assert not isinstance(robot, Plant)  # a model is not a plant


def test_every_controller_is_a_controller():
    cfg, robot = _slider()
    ctls = [sc.build_controller(cfg, robot)]
    scfg = resolve_config(sp.NAME)
    traj = sp.make_trajectory(scfg)
    ctls += [sp.build_robust(scfg, traj), sp.build_pidc(scfg, traj)]
    ycfg, yrobot, coupling, task = _yumi()
    uk = yumi.build_uk(ycfg, yrobot, coupling, task)
    bcfg, brobot, bcoupling, btask = _yumi(plant="bar", controller="pidc_force")
    force = yumi.build_pidc_force(bcfg, brobot, bcoupling, btask)
    ctls += [uk, force, col.PortSchedule(lambda t: (np.zeros(30), False), 1e-3)]
    for c in ctls:
        assert isinstance(c, Controller), type(c).__name__
    assert isinstance(uk, ReportsErrors) and isinstance(force, ReportsErrors)
    assert isinstance(force, SensesPlant) and not isinstance(
        uk, SensesPlant
    )  # (its ForceLaw reads the plant)
    assert not isinstance(force, ReportsMetrics) and not isinstance(uk, ReportsMetrics)
    assert not isinstance(lambda t, q, v: q, Controller)  # a bare function has no per-step info


def test_simulate_matches_a_hand_written_loop_and_saves_a_replayable_run(tmp_path):
    cfg, robot = _slider()
    dt, T = cfg["control_dt"], 0.3
    # reference: the loop written out by hand
    plant = sc.mujoco_plant(cfg, robot)
    sc.mujoco_reset(plant, np.zeros(2), robot)
    ctl = sc.build_controller(cfg, robot)
    n_sub = int(round(dt / plant.dt))
    ref_tau, ref_q = [], []
    for _ in range(int(round(T / dt))):
        q, v = plant.state()
        tau = ctl(plant.time, q, v)
        plant.set_torque(tau)
        ref_tau.append(tau)
        ref_q.append(q)
        plant.step(n_sub)
    # the same through simulate, logging by itself (no record)
    plant = sc.mujoco_plant(cfg, robot)
    sc.mujoco_reset(plant, np.zeros(2), robot)
    ctl = sc.build_controller(cfg, robot)
    run = simulate(plant, ctl, duration=T, control_dt=dt, progress=False)
    assert isinstance(run, Run) and run.steps == len(ref_tau) == 300
    L = run.log.arrays()
    np.testing.assert_array_equal(L["tau"], np.array(ref_tau))
    np.testing.assert_array_equal(L["q"], np.array(ref_q))
    np.testing.assert_allclose(L["t"], np.arange(300) * dt, atol=1e-12)
    assert isinstance(ctl.info, StepInfo) and ctl.info.status in ("solved", "unsolvable")
    # timing: the factor is simulated time over the loop's wall time
    assert run.simulated_s == pytest.approx(T)
    assert run.wall_s > 0 and run.realtime_factor == pytest.approx(T / run.wall_s)
    assert len(run.step_us) == 300 and run.step_us_median > 0
    out = run.save(tmp_path / "run")
    saved = load_run(out)  # what `cmstack view` replays
    assert saved["plant_qpos"].shape == (300, plant.model.nq)
    assert str(saved["mjcf_path"]) == str(plant.path)
    assert json.loads((out / "run.json").read_text())["steps"] == 300


def test_simulate_keeps_per_task_errors_and_attaches_sensors():
    cfg, robot, coupling, task = _yumi()
    plant = yumi.MujocoPlant(
        cfg["mjcf_virtual"], robot.joint_names, sim_dt=cfg["control_dt"], integrator=cfg["integrator"]
    )
    q0 = yumi.initial_state(cfg, robot)
    plant.reset(q0)
    ctl = yumi.build_uk(cfg, robot, coupling, task)
    run = simulate(plant, ctl, duration=0.05, control_dt=cfg["control_dt"], progress=False)
    E = run.error_arrays()
    assert set(E) == {coupling.name, task.name} and E[coupling.name].shape == (10, 6)
    # the first step's errors, computed independently at (q0, 0)
    kin = robot.update(q0, np.zeros(robot.nv))
    np.testing.assert_allclose(E[coupling.name][0], coupling.error(kin, 0.0), rtol=0, atol=1e-14)
    np.testing.assert_allclose(E[task.name][0], task.error(kin, 0.0), rtol=0, atol=1e-14)
    assert np.linalg.norm(E[coupling.name][-1]) < np.linalg.norm(E[coupling.name][0])  # converging

    bcfg, brobot, bcoupling, btask = _yumi(plant="bar", controller="pidc_force")
    bar = yumi.MujocoPlant(bcfg["mjcf_bar"], brobot.joint_names, sim_dt=bcfg["control_dt"])
    bar.reset(assemble(brobot, yumi.initial_state(bcfg, brobot), [bcoupling], within_ranges=False))
    force = yumi.build_pidc_force(bcfg, brobot, bcoupling, btask)
    assert force.plant is None
    simulate(bar, force, duration=0.01, control_dt=bcfg["control_dt"], progress=False)
    assert force.plant is bar  # SensesPlant: given its sensor


def test_simulate_refuses_a_bad_period():
    cfg, robot = _slider()
    plant = sc.mujoco_plant(cfg, robot)
    ctl = sc.build_controller(cfg, robot)
    with pytest.raises(Exception, match="whole multiple"):
        simulate(plant, ctl, duration=0.1, control_dt=plant.dt * 1.5, progress=False)
    with pytest.raises(Exception, match="duration"):
        simulate(plant, ctl, duration=0.0, control_dt=plant.dt, progress=False)


def test_overlapping_disturbances_on_one_body_add_up():
    """Two disturbances on one body that overlap in time act as their sum while both are on, and the later
    one stays on after the first ends (each used to overwrite the body's wrench: the first was lost when the
    second began, the second when the first ended).  The run equals the same wrench history given as three
    disjoint pieces, bit for bit."""
    cfg, robot = _slider()
    dt = cfg["control_dt"]
    f1, f2 = (0.0, 0.0, 3.0), (2.0, 0.0, 1.0)
    both = tuple(a + b for a, b in zip(f1, f2))
    overlapping = [Disturbance("rod", 0.0, 0.1, f1), Disturbance("rod", 0.05, 0.2, f2)]
    disjoint = [
        Disturbance("rod", 0.0, 0.05, f1),
        Disturbance("rod", 0.05, 0.1, both),
        Disturbance("rod", 0.1, 0.2, f2),
    ]
    runs = []
    for ds in (overlapping, disjoint, overlapping[1:]):
        plant = sc.mujoco_plant(cfg, robot)
        sc.mujoco_reset(plant, np.zeros(2), robot)
        ctl = sc.build_controller(cfg, robot)
        runs.append(
            simulate(plant, ctl, duration=0.25, control_dt=dt, disturbances=ds, progress=False).log.arrays()[
                "q"
            ]
        )
    np.testing.assert_array_equal(runs[0], runs[1])
    assert np.abs(runs[0] - runs[2]).max() > 1e-6  # the first disturbance acts (it was lost before)

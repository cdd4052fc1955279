"""Per-task errors from every law through ``ReportsErrors`` (PIDC, the robust partition law, as UK), and the
run that says once when an error stays 100x above its target for 0.5 s (sim/runner.py ``ErrorWatch``,
issue 33 item 5): a five-bar circle of 0.3 m, out of reach, is named with the time; a reachable one is not."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from cmstack.controllers.base import ReportsErrors
from cmstack.controllers.pidc import PIDC
from cmstack.controllers.robust_partition import RobustPartitionController
from cmstack.models.coupling import FrameTask
from cmstack.models.errors import ConfigError
from cmstack.models.partition import PartitionModel
from cmstack.models.robot import Robot
from cmstack.models.trajectory import Circle, Sinusoid
from cmstack.sim.mjcf_plant import plant_from_mjcf
from cmstack.sim.runner import ERROR_FACTOR, ERROR_HOLD_S, ErrorWatch, simulate


def _feed(watch, series, dt=1e-3):
    """Feed {name: [‖e‖ per step]} as errors along one axis; returns the warnings raised."""
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        n = len(next(iter(series.values())))
        for k in range(n):
            for name, x in series.items():
                watch.update(k * dt, name, np.array([0.0, x[k], 0.0]))
    return [str(w.message) for w in rec]


def test_watch_says_once_after_a_continuous_hold():
    assert (ERROR_FACTOR, ERROR_HOLD_S) == (100.0, 0.5)
    w = ErrorWatch({"hand": 1e-3, "loop": 1e-2})
    w.bind({"loop": None}, {"hand": None, "posture": None})
    n = 1200
    hand = np.full(n, 0.2)  # above 100 x 1e-3 ...
    hand[300] = 0.05  # ... but for one step at t = 0.300 s: the hold starts again at 0.301 s
    said = _feed(w, {"hand": hand, "loop": np.full(n, 0.5), "posture": np.full(n, 5.0)})
    assert said == w.said and len(said) == 1  # once, though it stays above until the end
    assert said[0].startswith("hand:") and "from t = 0.301 s to t = 0.801 s" in said[0]
    # 'loop' below 100 x its target; 'posture' has no target: neither is said


def test_watch_one_target_covers_the_tasks_only():
    w = ErrorWatch(1e-3)
    w.bind({"loop": None}, {"hand": None})
    said = _feed(w, {"hand": np.full(600, 0.2), "loop": np.full(600, 9.0)})
    assert len(said) == 1 and said[0].startswith("hand:")


def test_watch_refuses_bad_targets():
    for bad in (0.0, -1.0, float("nan"), {"hand": float("inf")}):
        with pytest.raises(ConfigError, match="finite number > 0"):
            ErrorWatch(bad)
    w = ErrorWatch({"hnad": 1e-3})
    with pytest.raises(ConfigError, match=r"\['hnad'\] are not errors the controller reports .*'hand'"):
        w.bind({"loop": None}, {"hand": None})


def _five_bar_circle(radius):
    robot = Robot.from_mjcf("mjcf/five_bar.xml")
    plant = plant_from_mjcf(robot, sim_dt=2.5e-4)
    plant.reset(robot.q_initial)
    p0 = robot.update(robot.q_initial, np.zeros(robot.nv)).frame("ee").p.copy()
    circle = Circle(p0 - [radius, 0.0, 0.0], radius, np.pi)  # starts at the end effector
    task = FrameTask(robot, "ee", circle, kp=400, kd=40, rows="position", name="ee_circle")
    return robot, plant, task, PIDC(robot, None, task)


@pytest.mark.slow
def test_pidc_reports_errors_and_an_unreachable_circle_is_said_once():
    """PIDC on the five-bar's MuJoCo plant: run.error_arrays() holds its loop and its task (the first row
    equal to the task's error at the initial state, computed apart); a 0.3 m circle (out of reach) is said
    once with its name and time, and run.warnings keeps it; the 0.03 m circle of the scenario is not."""
    robot, plant, task, ctl = _five_bar_circle(0.3)
    assert isinstance(ctl, ReportsErrors)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        run = simulate(
            plant, ctl, duration=0.8, control_dt=1e-3, progress=False, error_targets={"ee_circle": 1e-4}
        )
    said = [str(w.message) for w in rec if "ee_circle" in str(w.message)]
    assert len(said) == 1 and run.warnings == said
    assert said[0].startswith("ee_circle: its error") and "from t = " in said[0] and " s to t = " in said[0]
    E = run.error_arrays()
    assert set(E) == {c.name for c in robot.loops} | {"ee_circle"}
    assert E["ee_circle"].shape == (800, 3)
    kin = robot.update(robot.q_initial, np.zeros(robot.nv))
    np.testing.assert_allclose(E["ee_circle"][0], task.error(kin, 0.0), rtol=0, atol=1e-12)
    assert np.linalg.norm(E["ee_circle"][-1]) > ERROR_FACTOR * 1e-4  # really off: 0.38 m when measured

    robot, plant, task, ctl = _five_bar_circle(0.03)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        run = simulate(
            plant, ctl, duration=0.8, control_dt=1e-3, progress=False, error_targets={"ee_circle": 1e-4}
        )
    assert not [w for w in rec if "ee_circle" in str(w.message)] and run.warnings == []
    assert np.linalg.norm(run.error_arrays()["ee_circle"], axis=1).max() < ERROR_FACTOR * 1e-4


def test_error_targets_need_a_reporting_controller():
    robot, plant, task, ctl = _five_bar_circle(0.03)

    class Silent:
        info = None

        def __call__(self, t, q, v):
            return np.zeros(robot.nv)

    with pytest.raises(ConfigError, match="Silent reports no errors"):
        simulate(plant, Silent(), duration=0.01, control_dt=1e-3, progress=False, error_targets=1e-3)
    with pytest.raises(ConfigError, match=r"task_errors=False"):
        simulate(
            plant, ctl, duration=0.01, control_dt=1e-3, progress=False, error_targets=1e-3, task_errors=False
        )


def test_pidc_joint_coordinates_and_loops_report_their_errors():
    """Joint coordinates: 'coords' = θ_d(t) − θ; each loop closure: its residual φ (≈ 0 at an assembled q)."""
    robot = Robot.from_mjcf("mjcf/four_bar.xml")
    act = robot.actuated_joints
    idx = [robot.joint_index(j) for j in act]
    ref = Sinusoid(robot.q_initial[idx], 0.2, 0.5)
    ctl = PIDC(robot, None, act, ref, 400.0, 40.0)
    q, v = robot.q_initial.copy(), np.zeros(robot.nv)
    t = 0.3
    ctl(t, q, v)
    cons, tasks = ctl.errors(ctl.kin, t)
    assert set(cons) == {c.name for c in robot.loops} and set(tasks) == {"coords"}
    np.testing.assert_allclose(tasks["coords"], ref(t).position - q[idx], rtol=0, atol=1e-15)
    for c in robot.loops:
        np.testing.assert_allclose(cons[c.name], c.phi(q), rtol=0, atol=1e-15)
        assert np.abs(cons[c.name]).max() < 1e-9


def test_robust_partition_law_reports_its_tracking_error():
    traj = Sinusoid([0.1, -0.2, 0.1], [0.1, 0.05, 0.01], 0.5)
    ctl = RobustPartitionController(PartitionModel(), traj)
    assert isinstance(ctl, ReportsErrors) and ctl.kin is None
    q, v = np.array([0.05, -0.1, 0.12]), np.array([0.1, 0.0, -0.01])
    ctl(0.4, q, v)
    cons, tasks = ctl.errors(ctl.kin, 0.4)
    assert cons == {}
    np.testing.assert_allclose(tasks["trajectory"], traj(0.4).position - q, rtol=0, atol=1e-15)
    np.testing.assert_allclose(tasks["trajectory"], -ctl.info.e, rtol=0, atol=1e-15)  # the law's own e


def test_pidc_errors_of_a_compiled_closed_step_are_task_error():
    """The closed-chain step's own task errors (its kernel's table) and the loops' φ (the closure set's pass)
    are Task.error and LoopClosure.error at the step's state, computed apart on another Robot."""
    robot, plant, task, ctl = _five_bar_circle(0.03)
    assert ctl._plan is not None
    other = Robot.from_mjcf("mjcf/five_bar.xml")
    p0 = other.update(other.q_initial, np.zeros(other.nv)).frame("ee").p.copy()
    task2 = FrameTask(other, "ee", Circle(p0 - [0.03, 0.0, 0.0], 0.03, np.pi), kp=400, kd=40, rows="position")
    rng = np.random.default_rng(3)
    for i in range(5):
        q = robot.assemble(robot.q_initial + 0.05 * rng.normal(size=robot.nv))
        q[0] += 1e-3 * i  # a little off the loop as well
        v, t = rng.normal(size=robot.nv), 0.1 * i
        ctl(t, q, v)
        assert ctl._kin_qv is not None  # the compiled closed step ran
        cons, tasks = ctl.errors(ctl.kin, t)
        kin2 = other.update(q, v)
        np.testing.assert_allclose(tasks["ee_circle"], task2.error(kin2, t), rtol=0, atol=1e-13)
        for c, c2 in zip(robot.loops, other.loops):
            np.testing.assert_allclose(cons[c.name], c2.error(other.update(q, v), t), rtol=0, atol=1e-13)


def test_watch_replays_a_finished_runs_errors():
    """The rt override's path: the same check over run.errors afterwards (step k at t = k dt), every name a
    task; the message names the task and the times."""
    dt = 2e-3
    errors = {"hand": [np.array([0.0, 0.0, 0.5])] * 400, "posture": [np.zeros(7)] * 400}
    w = ErrorWatch(1e-3)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        w.replay(errors, dt)
    assert [str(x.message) for x in rec] == w.said and len(w.said) == 1
    assert w.said[0].startswith("hand:") and "from t = 0.000 s to t = 0.500 s" in w.said[0]

"""A robot's real interfaces in the loop (issue 32 items 2 and 3, sim/sensors.py): ``simulate(sensors="actuated")``
gives the law the reconstructed state, ``command="position"`` a joint PD around the law's integrated command, and
a sensor fault ends a run with its name, every cycle before it logged."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import _forkserver
import numpy as np
import pytest
from _five_bar import DT, child_env
from _five_bar import setup as _setup

from cmstack.models.errors import ConfigError, SensorFault
from cmstack.models.robot import Robot
from cmstack.scenarios._common import EXIT_FAILED, default_config
from cmstack.sim.logger import read_log
from cmstack.sim.runner import simulate
from cmstack.sim.sensors import ActuatedSensing, Encoders, JointServo


def _run(model, steps, **kw):
    robot, ctl, plant = _setup(model)
    seen, taus, states = [], [], []
    real = ctl.__call__

    def law(t, q, v):
        seen.append(np.r_[q, v])
        return real(t, q, v)

    law.robot = robot  # what simulate reads to build the estimator / the servo
    law.info = None

    def record(t, q, v, tau):
        taus.append(tau.copy())
        states.append(np.r_[q, v])

    run = simulate(plant, law, duration=steps * DT, control_dt=DT, record=record, progress=False, **kw)
    return run, np.array(seen), np.array(taus), np.array(states)


@pytest.mark.parametrize("model", ["mjcf/five_bar.xml", "mjcf/delta.xml"])
def test_actuated_sensors_give_the_law_the_plants_state_and_the_same_torques(model):
    full, _, tau_f, _ = _run(model, 150)
    act, seen, tau_a, states = _run(model, 150, sensors="actuated")
    assert act.steps == 150 and act.sensing is not None
    assert np.abs(seen - states).max() <= 1e-9  # the law saw the plant's (q, v), passive joints reconstructed
    assert np.abs(tau_a - tau_f).max() <= 1e-7 * max(1.0, np.abs(tau_f).max())
    m = act.sensing.metrics()
    assert m["estimator_calls"] == 150 and m["reconstruction_error_q_max"] <= 1e-10
    assert math.isfinite(act.timing()["reconstruction_us_median"])


def test_position_command_tracks_as_the_torque_run_with_a_small_pd_share():
    """On the rigid plant of the law's own model the command is the motion the torque gives: the PD adds little and
    the joints follow the torque run's."""
    _, _, tau_t, st_t = _run("mjcf/five_bar.xml", 300)
    run, _, _, st_p = _run("mjcf/five_bar.xml", 300, command="position")
    servo = run.servo
    assert isinstance(servo, JointServo) and np.all(servo.kp > 0) and np.all(servo.kd > 0)
    assert servo.pd_torque_max < 0.01 * np.abs(tau_t).max()
    assert np.abs(st_p[:, :5] - st_t[:, :5]).max() < 1e-4


def test_position_command_takes_the_laws_own_acceleration_without_a_dynamics_solve():
    """PIDC reports q̈_d (``info.qdd_des``), which its τ produces on the model's loops: the servo integrates it
    instead of solving the rigid closed-chain dynamics (the cost of the controller side, issue 32), and the command
    equals the one of the rigid solve (a law that reports no acceleration) along a closed-loop run."""
    robot, ctl, plant = _setup()

    class NoInfo:  # the same law, its info hidden: the servo must solve the model's dynamics
        info = None

        def __call__(self, t, q, v):
            return ctl(t, q, v)

    own, rigid = JointServo(robot, DT), JointServo(robot, DT)
    for k in range(60):
        q, v = plant.state()
        tau = ctl(k * DT, q, v)
        own.command(ctl, q, v, tau)
        rigid.command(NoInfo(), q, v, tau)
        assert np.allclose(own.packed(), rigid.packed(), rtol=1e-10, atol=1e-12)
        plant.set_torque(tau)
        plant.step(2)
    assert own.vdot_source == "qdd_des" and own.rigid_solves == 0
    assert rigid.vdot_source == "rigid" and rigid.rigid_solves == 60
    assert np.abs(own.v_des).max() > 1e-3  # the run moved the motors: the comparison is not of zeros


def test_position_command_after_skipped_states_continues_from_the_robots_held_reference():
    """Under cmstack rt a loaded controller skips states; the robot meanwhile holds its reference at the last
    command's acceleration (``hold``).  The controller side's next command must start where the robot's reference
    is then (not one period after its previous command: the commanded motion would fall behind the clock by a
    period per skipped state, measured 4.5e-3..7e-3 m ee error and 32-45 N m of PD before).  A controller/robot
    pair of servos, states answered at irregular cycles: the robot's curve starts at the controller's q_c, v_c."""
    robot, ctl, plant = _setup()
    ctrl, bot = JointServo(robot, DT), JointServo(robot, DT)
    rng = np.random.default_rng(3)
    q, v = plant.state()
    answered = 0
    for k in range(200):
        q, v = plant.state()
        tau = ctl(k * DT, q, v)
        plant.set_torque(tau)
        plant.step(2)
        if k and k - answered <= int(rng.integers(1, 5)):  # this state is skipped by the controller
            continue
        ctrl.command(ctl, q, v, tau, t=k * DT)
        if k == 0:
            bot.receive(ctrl.packed(), q, v)
        else:
            for _ in range(k - answered - 1):  # the periods between the two commands
                bot.hold()
            bot.receive(ctrl.packed())
        assert np.allclose(bot.q_c, ctrl.q_c, rtol=0, atol=1e-12), k
        assert np.allclose(bot.v_c, ctrl.v_c, rtol=0, atol=1e-12), k
        answered = k
    assert ctrl.held_periods > 50 and np.abs(ctrl.v_des).max() > 1e-3


def test_an_open_loop_adds_a_row_to_the_planar_triangle_which_pidcs_default_tolerance_ignores():
    """Why the series-parallel arm given MuJoCo's whole state did not track φ (issue 32 (c), docs/realtime.md): the
    triangle's point loop has an out-of-plane row that is zero on the loop but equals the residual's component
    across φ's axis off it (φ turns the residual vector out of the plane), so an opening ε puts a singular value
    σ₃ = |ε_x| into the loop's Jacobian.  MuJoCo's soft loop is open by ~6e-8 m: above an absolute rank tolerance of
    1e-9 the row counts (rank 3, φ's acceleration then set by a spurious constraint).  PIDC's default threshold
    scales with the residual (max(1e-9 max(1, s_A), 10 √n ‖φ‖), controllers/pidc.py) and does not count it (rank 2),
    in the compiled step and in the NumPy reference alike, as an absolute tolerance above the opening does."""
    from cmstack.controllers.pidc import PIDC
    from cmstack.models.loops import ClosureSet
    from cmstack.scenarios.series_parallel import Q_NAMES, closed_chain_robot, make_trajectory

    cfg = default_config("series_parallel")
    cfg["model_actuator_bodies"] = True
    robot = closed_chain_robot(cfg)
    traj = make_trajectory(cfg)
    q = robot.q_initial.copy()
    q[robot.joint_index("zeta")] += 1e-6  # the loop opened by ~3e-7 m in its plane
    phi, J = ClosureSet(robot.loops).phi_and_jacobian(q)
    s = np.linalg.svd(J, compute_uv=False)
    assert abs(s[2] - abs(phi[0])) < 1e-12 and 1e-7 < s[2] < 1e-6 and s[1] > 0.1
    assert s[2] <= math.sqrt(robot.nv) * np.linalg.norm(phi)  # the bound the default's κ is ten times
    ranks = {}
    for tol in (None, 1e-9, 1e-5):
        kw = {} if tol is None else {"rank_tol": tol}
        ctl = PIDC(robot, None, list(Q_NAMES), traj, cfg["pidc_kp"], cfg["pidc_kv"], **kw)
        ctl(0.0, q, np.zeros(robot.nv))
        rank = ctl.info.rank
        ctl._numpy_step(0.0, q, np.zeros(robot.nv))
        ranks[tol] = (rank, ctl.info.rank)
    assert ranks == {None: (2, 2), 1e-9: (3, 3), 1e-5: (2, 2)}, ranks
    q0 = robot.q_initial.copy()  # the initial pose: the default keeps the real singular values (rank 2)
    ctl = PIDC(robot, None, list(Q_NAMES), traj, cfg["pidc_kp"], cfg["pidc_kv"])
    ctl(0.0, q0, np.zeros(robot.nv))
    assert ctl.info.rank == 2


def test_interfaces_refused_by_name():
    robot, ctl, plant = _setup()
    for kw, msg in (
        ({"sensors": "motors"}, "sensors='motors'"),
        ({"command": "velocity"}, "command='velocity'"),
    ):
        with pytest.raises(ConfigError, match=msg):
            simulate(plant, ctl, duration=0.01, control_dt=DT, progress=False, **kw)
    with pytest.raises(ConfigError, match="no .robot"):
        simulate(
            plant, lambda t, q, v: 0 * q, duration=0.01, control_dt=DT, progress=False, sensors="actuated"
        )


def test_encoders_quantize_and_inject_their_fault():
    enc = Encoders(2**17, fault=(1, 0.5, "jump", 0.2))
    qa, va = np.array([0.123456789, -1.0]), np.array([1.0, 2.0])
    q, v = enc.read(0.0, qa, va)
    step = 2 * math.pi / 2**17
    assert np.allclose(q / step, np.round(q / step), atol=1e-9) and np.abs(q - qa).max() <= step / 2
    q, _ = enc.read(0.5, qa, va)
    assert q[1] == pytest.approx(qa[1] + 0.2, abs=step) and q[0] == pytest.approx(qa[0], abs=step)
    q, v = Encoders(fault=(0, 0.1, "dead", 0.0)).read(0.2, qa, va)
    assert q[0] == 0.0 and v[0] == 0.0 and q[1] == qa[1]


def test_a_jump_in_one_encoder_ends_the_run_named_in_its_cycle(tmp_path):
    """closed_chain (MuJoCo five-bar, 1 kHz) with base_r's encoder jumping 0.2 rad at t = 0.3 s, in a child
    process with a wall-clock limit: exit code 3, metrics.json names the fault, the joint and its time, and the
    log holds every cycle before it (0 … 0.299 s)."""
    out = tmp_path / "r"
    argv = [sys.executable, "-m", "cmstack.cli", "run", "closed_chain", "--out", str(out), "--no-progress"]
    argv += ["--no-plots", "--set", "duration=0.6", "--set", "track_after=0.1", "--set", "check_states=0"]
    argv += ["--set", "sensors='actuated'", "--set", "fault_encoder='base_r'", "--set", "fault_t=0.3"]
    env = dict(os.environ, MPLBACKEND="Agg")
    p = _forkserver.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert p.returncode == EXIT_FAILED, p.stdout + p.stderr
    m = json.loads((out / "metrics.json").read_text())
    assert m["ok"] is False and m["fault"] == "encoder_jump" and m["fault_joint"] == "base_r"
    assert m["fault_t"] == pytest.approx(0.3, abs=1e-9)
    assert "encoder_jump" in m["reason"] and "base_r" in m["reason"]
    t = read_log(out / "log.npz")["t"]
    assert len(t) == 300 and t[-1] == pytest.approx(0.299, abs=1e-9)
    assert np.allclose(np.diff(t), DT)


def test_a_sensor_fault_raises_through_simulate_with_its_time():
    robot, ctl, plant = _setup()
    sensing = ActuatedSensing.for_robot(robot, DT, Encoders(fault=(0, 0.05, "jump", -0.2)))
    with pytest.raises(SensorFault) as exc:
        simulate(plant, ctl, duration=0.1, control_dt=DT, progress=False, sensors=sensing)
    assert exc.value.kind == "encoder_jump" and exc.value.joint == "base_l"
    assert exc.value.t == pytest.approx(0.05, abs=1e-9) and exc.value.fields()["fault"] == "encoder_jump"


def test_cmstack_rt_reconstructs_on_the_controller_side_and_sends_a_position_command():
    from cmstack.sim.runner import LOOP_OVERRIDE
    from cmstack.sim.sensors import PositionCommanding, ReconstructingController

    robot, ctl, plant = _setup()
    got = {}

    def override(plant, controller, **kw):
        got["controller"] = controller
        raise RuntimeError("stop here")

    token = LOOP_OVERRIDE.set(override)
    try:
        with pytest.raises(RuntimeError, match="stop here"):
            simulate(plant, ctl, duration=0.01, control_dt=DT, progress=False, sensors="actuated")
        wrapped = got["controller"]
        assert isinstance(wrapped, ReconstructingController) and wrapped.info is ctl.info
        q, v = plant.state()
        assert np.array_equal(wrapped(0.0, q, v), ctl(0.0, q, v))
        with pytest.raises(RuntimeError, match="stop here"):
            simulate(plant, ctl, duration=0.01, control_dt=DT, progress=False, command="position")
        sent = got[
            "controller"
        ]  # the controller side of a position-controlled robot: (q_des, v_des, a_des, τ_ff)
        assert isinstance(sent, PositionCommanding) and sent.info is ctl.info
        packed = sent(0.0, q, v)
        a = len(robot.actuated_joints)
        assert packed.shape == (4 * a,) and np.array_equal(packed, sent.servo.packed())
        assert np.array_equal(packed[3 * a :], ctl(0.0, q, v)[sent.servo.act])
    finally:
        LOOP_OVERRIDE.reset(token)


_RT_ACTUATED_CHILD = """
import json, sys
import numpy as np
from _five_bar import DT, setup
from cmstack.sim.rt_driver import DriverSettings
from cmstack.models.estimator import DelayPredictor
from cmstack.sim.rt_loop import run_rt
from cmstack.sim.rt_predict import PredictingController
from cmstack.sim.runner import LOOP_OVERRIDE, simulate

DUR = 0.5

seen = []


class Spy:  # what the controller side receives from the transport, before the reconstruction
    def __init__(self, inner):
        self.inner = inner

    def __call__(self, t, q, v):
        seen.append(np.r_[q, v])
        return self.inner(t, q, v)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def late_errors(run):  # the largest error norm over the second half of the run
    return {k: float(np.max(np.linalg.norm(np.array(e)[len(e) // 2 :], axis=-1))) for k, e in run.errors.items()}


robot, ctl, plant = setup()
# (max_misses: a stall of the loaded machine must not stop the run; what is checked is what crosses the boundary)
settings = DriverSettings(max_misses=100_000)
predicting = []


def rt_loop(plant, controller, **kw):  # the law predicting inside the reconstruction, the spy outside both
    law = PredictingController(controller.controller, DelayPredictor(robot, DT), "latency", int(DUR / DT))
    predicting.append(law)
    controller.controller = law
    return run_rt(plant, Spy(controller), driver=settings, **kw)


tok = LOOP_OVERRIDE.set(rt_loop)
try:
    run = simulate(plant, ctl, duration=DUR, control_dt=DT, progress=False, sensors="actuated")
finally:
    LOOP_OVERRIDE.reset(tok)
_, ctl_ref, plant_ref = setup()
ref = simulate(plant_ref, ctl_ref, duration=DUR, control_dt=DT, progress=False)
S, n = np.array(seen), robot.nq
act = [robot.joint_index(j) for j in robot.actuated_joints]
pas = [robot.joint_index(j) for j in robot.passive_joints]
print(json.dumps(dict(
    states=len(S),
    passive_nan=bool(np.isnan(S[:, pas + [n + i for i in pas]]).all()),
    actuated_finite=bool(np.isfinite(S[:, act + [n + i for i in act]]).all()),
    status=run.rt.driver.status, misses=run.rt.misses, rt=late_errors(run), ref=late_errors(ref),
    logged_finite=bool(np.isfinite(run.log.data["q"]).all()), predict=predicting[0].stats(),
)))
"""


def test_cmstack_rt_with_actuated_sensors_transports_the_motors_only_and_tracks(tmp_path):
    """The five-bar under the rt loop with sensors="actuated" (0.5 s at 1 kHz, in a child process with a wall-clock
    limit): every state the controller side receives holds the actuated joints' q and v and NaN in the passive
    entries (the driver publishes the motors' encoders only), the controller reconstructs from those and tracks the
    circle: the largest ee error over the second half within 2x of the in-process run with the full state.  The
    law answers the state predicted when its torque is applied (``PredictingController`` "latency", inside the
    reconstruction, told by the loop which command the driver holds: sim/rt_predict.py): a prediction every cycle
    but the first, none failed."""
    env = child_env()
    p = subprocess.run(
        [sys.executable, "-c", _RT_ACTUATED_CHILD],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["status"] == "done" and got["states"] > 100, got
    assert got["passive_nan"] and got["actuated_finite"] and got["logged_finite"], (
        got
    )  # (the log: the plant's state)
    assert got["rt"]["ee_circle"] <= 2 * got["ref"]["ee_circle"], got
    assert got["rt"]["tip_loop"] <= 1e-9, got
    pr = got["predict"]
    assert pr["mode"] == "latency" and pr["predictions"] == got["states"] - 1 and pr["failures"] == 0, pr


_RT_POSITION_CHILD = """
import functools
import json
import numpy as np
from _five_bar import DT, setup
from cmstack.sim.rt_driver import DriverSettings
from cmstack.sim.rt_loop import run_rt
from cmstack.sim.runner import LOOP_OVERRIDE, simulate

DUR = 0.5
out = {}
for command in ("torque", "position"):
    robot, ctl, plant = setup()
    # (max_misses: a stall of the loaded machine must not stop the run; the mechanism is checked, not the timing)
    tok = LOOP_OVERRIDE.set(functools.partial(run_rt, driver=DriverSettings(max_misses=100_000)))
    try:
        run = simulate(plant, ctl, duration=DUR, control_dt=DT, progress=False, command=command)
    finally:
        LOOP_OVERRIDE.reset(tok)
    ee = np.array(run.errors["ee_circle"])
    tau = run.log.data["tau"]
    pas = [robot.joint_index(j) for j in robot.passive_joints]
    out[command] = dict(
        ee=float(np.max(np.linalg.norm(ee[len(ee) // 2 :], axis=-1))),
        loop=float(np.max(np.abs(run.errors["tip_loop"]))), sat=int(plant.saturated), status=run.rt.driver.status,
        misses=run.rt.misses, pd=float(run.rt.driver.pd_torque_max), tau_finite=bool(np.isfinite(tau).all()),
        pas_tau=float(np.max(np.abs(tau[:, pas]))),
    )
print(json.dumps(out))
"""


def test_cmstack_rt_position_command_runs_the_joint_pd_in_the_driver():
    """The five-bar under the rt loop with command="position" (0.5 s at 1 kHz, in a child process with a wall-clock
    limit): the controller side sends (q_des, v_des, τ_ff) per actuated joint, the driver runs the robot's joint PD
    (JointServo's, its copy in the driver process) at the plant's rate: the run ends done, the PD acted (a torque
    beyond τ_ff), no torque on the passive joints, no motor clipped, the loop closed and the circle tracked (the
    largest ee error over the second half below 3 mm, a tenth of the circle's 3 cm radius).  The issue's
    3x-of-torque target is not asserted here (a timing-dependent ratio on a loaded machine): measured 0.94-0.96x at
    load ~9 since the command follows the clock through skipped states (2.3-13x before; docs/realtime.md)."""
    env = child_env()
    p = subprocess.run(
        [sys.executable, "-c", _RT_POSITION_CHILD], capture_output=True, text=True, env=env, timeout=300
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    pos, tq = got["position"], got["torque"]
    assert pos["status"] == tq["status"] == "done", got
    assert pos["pd"] > 0 and math.isnan(tq["pd"]) and pos["tau_finite"] and pos["pas_tau"] == 0.0, got
    assert pos["sat"] == tq["sat"] == 0, got
    assert pos["loop"] <= 1e-9 and pos["ee"] <= 3e-3 and tq["ee"] <= 3e-3, got


# (max_misses: a loaded machine must not stop the run for misses before the stale frame is read)
_RT_STALE_CHILD = """
import json
import numpy as np
from cmstack.models.errors import SensorFault
from _five_bar import DT, setup
from cmstack.sim.rt_driver import DriverSettings
from cmstack.sim.rt_loop import run_rt

robot, ctl, plant = setup()
ends, out = [], {}
try:
    settings = DriverSettings(stale_frame_at=150, max_misses=100_000)
    run_rt(plant, ctl, duration=0.4, control_dt=DT, driver=settings, on_loop_end=ends.append)
except SensorFault as exc:
    out.update(kind=exc.kind, t=exc.t, message=str(exc))
timing = ends[0].rt.timing()
out.update(status=timing["status"], reason=timing["reason"], cycles=timing["cycles"], stop=timing["stop_cycle"])
print(json.dumps(out))
"""


def test_rt_a_stale_frame_is_named_and_the_driver_brakes():
    """From cycle 150 on the driver publishes frame 149 again (DriverSettings.stale_frame_at, in a child process with a
    wall-clock limit): the controller side names it (SensorFault stale_frame, at that frame's time), asks the
    driver to stop, which brakes: timing.json's status "stopped" with the fault in its reason (cmstack rt: exit 3)."""
    env = child_env()
    p = subprocess.run(
        [sys.executable, "-c", _RT_STALE_CHILD], capture_output=True, text=True, env=env, timeout=300
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got.get("kind") == "stale_frame" and got["t"] == pytest.approx(0.149, abs=1e-9), got
    assert "frame 149 after frame 149" in got["message"], got
    assert got["status"] == "stopped" and "SensorFault: stale_frame" in got["reason"], got
    assert got["stop"] >= 150 and got["cycles"] < 400, got


def test_cmstack_rt_a_jump_in_one_encoder_brakes_the_driver_and_names_the_fault(tmp_path):
    """``cmstack rt closed_chain --sensors actuated`` at 1 kHz, base_r's encoder jumping 0.2 rad at t = 0.2 s,
    in a child process with a wall-clock limit: exit code 3, the fault named at the first state read after the
    jump, the driver stopped with its damping brake (on the motors: the passive joints have none), timing.json
    and metrics.json name the fault, the log holds the run."""
    out = tmp_path / "r"
    argv = [sys.executable, "-m", "cmstack.cli", "rt", "closed_chain", "--duration", "0.4", "--rate", "1000"]
    argv += ["--out", str(out), "--no-html", "--sensors", "actuated", "--set", "fault_encoder='base_r'"]
    argv += [
        "--max-misses",
        "100000",
    ]  # (a stall of the loaded machine must not stop the run before the fault)
    argv += ["--set", "fault_t=0.2", "--set", "track_after=0.1", "--set", "check_states=0"]
    env = dict(os.environ, MPLBACKEND="Agg")
    p = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert p.returncode == EXIT_FAILED, p.stdout[-2000:] + p.stderr[-2000:]
    m = json.loads((out / "metrics.json").read_text())
    assert m["fault"] == "encoder_jump" and m["fault_joint"] == "base_r"
    # named at the first state the controller reads from 0.2 s on (the newest state wins: a state the loaded
    # controller was late for is never read, so that may be 0.201 s or later), and before the driver stopped
    t = json.loads((out / "timing.json").read_text())
    assert t["status"] == "stopped" and t["stops"] == 1 and "SensorFault: encoder_jump" in t["reason"]
    assert 0.2 - 1e-9 <= m["fault_t"] <= t["stop_cycle"] * DT + 1e-9, (m["fault_t"], t["stop_cycle"])
    log = read_log(out / "log.npz")
    assert log["t"][0] == 0.0 and log["t"][-1] >= 0.2 and np.allclose(np.diff(log["t"]), DT)


def test_the_readme_dual_panda_carry_under_a_position_command():
    """The README's carry (examples/dual_panda_carry.py: two Pandas, UK with its own v̇, no loops) sent as
    (q_des, v_des, τ_ff) to the arms' joint PD: coupling and path errors after 1 s (the example's window) within
    3× of the torque run's, no motor clipped (the PD's torque included)."""
    import importlib.util

    from cmstack.models.robot import PACKAGE_ROOT

    spec = importlib.util.spec_from_file_location("carry", PACKAGE_ROOT / "examples" / "dual_panda_carry.py")
    carry = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(carry)
    err, sat = {}, {}
    for command in ("torque", "position"):
        ctl, plant = carry.build(DT, None)
        run = simulate(plant, ctl, duration=1.3, control_dt=DT, progress=False, command=command)
        err[command] = carry.errors_max(run)
        sat[command] = plant.saturated
    assert err["position"][0] <= 3 * err["torque"][0] + 1e-9, err
    assert err["position"][1] <= 3 * err["torque"][1], err
    assert sat == {"torque": 0, "position": 0}


def test_position_command_of_a_robot_without_loops_integrates_its_forward_dynamics():
    """A law without its own v̇ on a robot without loops: v̇ = ABA(q, v, τ − D v), integrated over the period."""
    import pinocchio as pin

    robot = Robot.from_urdf("urdf/five_bar.urdf")  # the tree, its loops not read
    assert not robot.loops
    servo = JointServo(robot, DT)
    rng = np.random.default_rng(0)
    q, v, tau = rng.normal(size=robot.nq), rng.normal(size=robot.nv), rng.normal(size=robot.nv)

    class NoInfo:
        info = None

    for _ in range(2):  # the second from the first command's end
        q_c, v_c = (q, v) if servo.commands == 0 else (servo.q_des.copy(), servo.v_des.copy())
        servo.command(NoInfo(), q, v, tau)
    a = pin.aba(robot.model, robot.model.createData(), q, v, tau - robot.damping * v)
    assert np.allclose(servo.v_des, v_c + DT * a, atol=1e-12)
    assert np.allclose(servo.q_des, q_c + DT * (v_c + 0.5 * DT * a), atol=1e-12)


def test_a_floating_base_robot_is_position_commanded_on_its_motors_with_the_base_held():
    """The quadruped (a free joint, 8 motors, 8 passive knees, 4 five-bar loops) as a position-controlled robot: the
    servo's gains come from the legs' inertia seen at each motor with the torso held, T = ∂q/∂q_a with zero base rows,
    the motors' identity and G = −J_p⁺ J_a on the knees (the loops stay closed: J T = 0); the base is not commanded
    (its τ_ff is 0), the command integrates the law's v̇ on the motors' entries (q and v indices differ by one)."""
    from types import SimpleNamespace

    from cmstack.models.loops import ClosureSet
    from cmstack.sim.sensors import _tangent

    robot = Robot.from_mjcf("mjcf/quadruped_five_bar.xml")
    q = robot.q_initial.copy()
    T = _tangent(robot, q)
    assert np.abs(T[:6]).max() == 0.0
    assert np.abs(ClosureSet(robot.loops).jacobian(q) @ T).max() < 1e-10
    servo = JointServo(robot, DT)
    assert servo.act.size == 8 and np.all(servo.qa == servo.act + 1)
    assert np.all(np.isfinite(servo.kp)) and np.all(servo.kp > 0) and np.all(servo.kd > 0)
    rng = np.random.default_rng(5)
    v, vdot, tau = (rng.normal(size=robot.nv) for _ in range(3))
    tau[:6] = 0.0
    ctl = SimpleNamespace(info=SimpleNamespace(vdot=vdot))
    servo.command(ctl, q, v, tau)
    a, qa = servo.act, servo.qa
    np.testing.assert_allclose(servo.q_des, q[qa] + (v[a] + 0.5 * DT * vdot[a]) * DT, rtol=0, atol=1e-15)
    np.testing.assert_allclose(servo.v_des, v[a] + DT * vdot[a], rtol=0, atol=1e-15)
    assert servo.vdot_source == "vdot" and np.all(servo.tau[:6] == 0.0)


def test_a_passive_ball_joint_moves_with_the_motors_in_the_servos_tangent():
    """Only the root free joint is held in the servo's T = ∂q/∂q_a: the Stewart platform's passive ball joints (3 v
    rows each) move with the motors as the loops require, so the loops stay closed along T (J T = 0), and the
    default gains see the platform's inertia through them."""
    from cmstack.models.loops import ClosureSet
    from cmstack.sim.sensors import _tangent

    robot = Robot.from_mjcf("mjcf/stewart_ball.xml")
    balls = [n for n in robot.passive_joints if robot.model.joints[robot.model.getJointId(n)].nv == 3]
    assert balls and robot.floating_base is None
    T = _tangent(robot, robot.q_initial)
    assert np.abs(T[robot.v_indices(balls)]).max() > 1e-3
    assert np.abs(ClosureSet(robot.loops).jacobian(robot.q_initial) @ T).max() < 1e-10

"""The one closed loop: owns timing (control period, sim sub-steps, duration), the progress bar, the
per-call controller timing, the wall-clock real-time factor, disturbances and logging.

    run = simulate(plant, controller, duration=2.0, control_dt=0.005,
                   record=lambda t, q, v, tau: logger.append(...))
    run.realtime_factor, run.step_us_median, run.errors["E1"], run.save("runs/mine")

``plant`` is a sim.base.Plant, ``controller`` a controllers.base.Controller: the controller sees only
(t, q, v) as a real one would.  Every control period: read (q, v), τ = controller(t, q, v) (timed),
apply τ and the disturbances active at t, ``record(t, q, v, τ)``, update the viewer, step the plant
by control_dt.  A controller that :class:`~cmstack.controllers.base.SensesPlant` is given the plant
first; one that :class:`~cmstack.controllers.base.ReportsErrors` has its constraint/task errors kept
per step in ``run.errors``; given ``error_targets``, a reported error whose norm stays above
``ERROR_FACTOR`` (100) × its target for ``ERROR_HOLD_S`` (0.5 s) of simulated time is said once per name
(a ``UserWarning`` naming it and the time; kept in ``run.warnings``).  Without ``record`` the loop logs
t, q, v, τ and plant_qpos itself, so that ``run.save(dir)`` writes a directory the viewer replays.  Any
exception propagates after the steps done so far have been logged (the scenario framework then writes
log.npz and the reason).
"""

from __future__ import annotations

import contextvars
import json
import math
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cmstack.controllers.base import Controller, ReportsErrors, SensesPlant
from cmstack.models.errors import ConfigError
from cmstack.sim import interrupt
from cmstack.sim.base import Plant
from cmstack.sim.logger import Logger, atomic_write
from cmstack.sim.sensors import (
    COMMANDS,
    SENSORS,
    ActuatedFrame,
    ActuatedSensing,
    JointServo,
    PositionCommanding,
    ReconstructingController,
)

if TYPE_CHECKING:
    from cmstack.models.robot import Robot
    from cmstack.sim.viewer import MeshcatViewer


@dataclass
class Disturbance:
    """A constant world-frame wrench on a body between t0 and t1 (seconds)."""

    body: str
    t0: float
    t1: float
    force: tuple = (0.0, 0.0, 0.0)
    moment: tuple = (0.0, 0.0, 0.0)


@dataclass
class RunResult:
    steps: int = 0
    step_us: list = field(default_factory=list)

    @property
    def step_us_median(self) -> float:
        return float(np.median(self.step_us)) if self.step_us else float("nan")


#: totals over every :func:`simulate` call of this process (a benchmark resets and reads them):
#: simulated seconds, wall seconds and CPU seconds of the loop's thread (``time.thread_time``: what
#: the loop itself cost, whatever else the machine runs)
LOOP_TOTALS = {"simulated_s": 0.0, "wall_s": 0.0, "cpu_s": 0.0}


#: when set (``cmstack rt``, cmstack/rt.py), :func:`simulate` hands its arguments to this function (same
#: signature, returns a Run) instead of running the loop in process: scenarios build as usual
LOOP_OVERRIDE: contextvars.ContextVar = contextvars.ContextVar("cmstack_loop_override", default=None)


def apply_disturbances(plant: Plant, disturbances: Sequence[Disturbance], active: set[int], t: float) -> None:
    """Switch each disturbance's wrench on at its t0 and off at its t1 (``active``: the indices now on,
    updated in place); the one rule for ``simulate`` and the fixed-rate driver (sim/rt_driver.py).  A body's
    wrench is the sum of its disturbances that are on, set again whenever one of them switches (the plant
    holds one wrench per body: setting each alone would drop an overlapping one)."""
    changed = []
    for i, d in enumerate(disturbances):
        on = d.t0 <= t < d.t1
        if on != (i in active):
            (active.add if on else active.discard)(i)
            if d.body not in changed:
                changed.append(d.body)
    for body in changed:
        f, m = np.zeros(3), np.zeros(3)
        for i in sorted(active):
            d = disturbances[i]
            if d.body == body:
                f += d.force
                m += d.moment
        plant.set_wrench(body, f, m)


#: a reported error is said to be off target when its norm stays above ERROR_FACTOR × its target for
#: ERROR_HOLD_S of simulated time (:class:`ErrorWatch`)
ERROR_FACTOR = 100.0
ERROR_HOLD_S = 0.5


class ErrorWatch:
    """Says once per name when a reported error stays far above its target: ‖e‖₂ > ERROR_FACTOR × target
    without a break for ERROR_HOLD_S of simulated time gives one ``UserWarning`` naming the error (task or
    constraint), the time it went above and the time it was said; e.g. a circle out of the robot's reach.

    targets: one target for every task the controller reports (the second group of
    ``ReportsErrors.errors``), or {name: target} for any reported task or constraint, in the units of the
    error (m, rad).  ``said``: the messages, in order."""

    def __init__(self, targets: float | Mapping[str, float]):
        if isinstance(targets, Mapping):
            self.targets: dict[str, float] | None = {str(k): float(v) for k, v in targets.items()}
            self.every = float("nan")
        else:
            self.targets, self.every = None, float(targets)
        for name, x in (self.targets or {"every task": self.every}).items():
            if not (math.isfinite(x) and x > 0):
                raise ConfigError(
                    f"error_targets: the target of {name!r} must be a finite number > 0, got {x!r}"
                )
        self.limit: dict[str, float] = {}
        self.since: dict[str, float] = {}
        self.said: list[str] = []
        self.bound = False

    def bind(self, constraints: Mapping[str, object], tasks: Mapping[str, object]) -> None:
        """The names watched, from the first report: every task for one target, else the names given (a name
        the controller does not report is refused with the names it does)."""
        if self.targets is None:
            self.limit = {k: ERROR_FACTOR * self.every for k in tasks}
        else:
            known = [*constraints, *tasks]
            unknown = sorted(set(self.targets) - set(known))
            if unknown:
                raise ConfigError(
                    f"error_targets: {unknown} are not errors the controller reports (it reports {known})"
                )
            self.limit = {k: ERROR_FACTOR * x for k, x in self.targets.items()}
        self.bound = True

    def update(self, t: float, name: str, e: np.ndarray) -> None:
        """The error ``e`` of ``name`` at time t [s]."""
        lim = self.limit.get(name)
        if lim is None:
            return
        norm = math.sqrt(float(e @ e)) if e.size else 0.0
        if norm <= lim:
            self.since.pop(name, None)
            return
        t0 = self.since.setdefault(name, t)
        if t - t0 >= ERROR_HOLD_S - 1e-9:
            msg = (
                f"{name}: its error |e| = {norm:.3g} has stayed above {ERROR_FACTOR:g} x its target "
                f"{lim / ERROR_FACTOR:g} from t = {t0:.3f} s to t = {t:.3f} s (out of reach, or not tracked)"
            )
            self.said.append(msg)
            del self.limit[name]  # said once
            warnings.warn(msg, UserWarning, stacklevel=3)

    def replay(self, errors: Mapping[str, list], control_dt: float) -> None:
        """The same check over a finished run's ``run.errors`` (step k at t = k · control_dt; every name
        counts as a task: the report's groups are not kept)."""
        self.bind({}, errors)
        for name, rows in errors.items():
            for k, e in enumerate(rows):
                self.update(k * control_dt, name, np.asarray(e, dtype=float))


def substeps(control_dt: float, sim_dt: float) -> int:
    n = int(round(control_dt / sim_dt))
    if n < 1 or abs(n * sim_dt - control_dt) > 1e-9 * max(1.0, control_dt):
        raise ConfigError(f"control_dt={control_dt} must be a whole multiple of sim_dt={sim_dt}")
    return n


def interfaces(
    controller: Controller, control_dt: float, sensors: str | ActuatedSensing, command: str | JointServo
) -> tuple[ActuatedSensing | None, JointServo | None]:
    """``simulate``'s ``sensors`` and ``command`` as objects (None: the full state, the torque), built for
    ``controller.robot`` when given by name."""
    sensing = servo = None
    if isinstance(sensors, ActuatedSensing):
        sensing = sensors
    elif sensors != "full":
        if sensors != "actuated":
            raise ConfigError(f"sensors={sensors!r} is not one of {list(SENSORS)}")
        sensing = ActuatedSensing.for_robot(_robot_of(controller, "sensors='actuated'"), control_dt)
    if isinstance(command, JointServo):
        servo = command
    elif command != "torque":
        if command != "position":
            raise ConfigError(f"command={command!r} is not one of {list(COMMANDS)}")
        servo = JointServo(_robot_of(controller, "command='position'"), control_dt)
    return sensing, servo


def _robot_of(controller: Controller, what: str) -> Robot:
    """``controller.robot`` (for the interfaces built by name), or a ConfigError naming ``what`` needs it."""
    robot = getattr(controller, "robot", None)
    if robot is None:
        raise ConfigError(f"{what} needs the controller's model: {type(controller).__name__} has no .robot")
    return robot


def _simulate_across_processes(
    override: Callable[..., Run],
    plant: Plant,
    controller: Controller,
    sensing: ActuatedSensing | None,
    servo: JointServo | None,
    watch: ErrorWatch | None,
    *,
    control_dt: float,
    **loop: Any,
) -> Run:
    """``simulate`` under ``cmstack rt`` (``LOOP_OVERRIDE`` set): the loop ``override`` runs the plant in a
    driver process; the controller side gets the motors' encoders (``sensing``) and sends a position command
    through ``servo`` when given.  ``loop``: simulate's other keyword arguments, passed on."""
    frame = None
    if sensing is not None:  # the driver publishes the motors' encoders only (ActuatedFrame: the passive
        # entries NaN; the encoders' quantization, noise and fault applied there), the controller side
        # reconstructs the rest from them
        # (the same sensing object, its figures the caller's, without the encoders while the run lasts)
        frame, encoders, sensing.encoders = (
            ActuatedFrame.of(sensing),
            sensing.encoders,
            None,
        )
    if servo is not None:  # the controller side sends (q_des, v_des, τ_ff); the driver runs the joint PD
        controller = PositionCommanding(controller, servo, sensing)
    elif sensing is not None:
        controller = ReconstructingController(controller, sensing)
    try:
        run = override(
            plant,
            controller,
            control_dt=control_dt,
            **loop,
            **({} if frame is None else {"frame": frame}),
            **({} if servo is None else {"servo": servo}),
        )
    finally:
        if frame is not None and sensing is not None:
            sensing.encoders = encoders
    run.sensing, run.servo = sensing, servo
    LOOP_TOTALS["simulated_s"] += run.simulated_s
    LOOP_TOTALS["wall_s"] += run.wall_s
    if watch is not None:  # the driver's loop kept the errors: the same check afterwards
        watch.replay(run.errors, control_dt)
        run.warnings.extend(watch.said)
    return run


def simulate(
    plant: Plant,
    controller: Controller,
    *,
    duration: float,
    control_dt: float,
    record: Callable[[float, np.ndarray, np.ndarray, np.ndarray], None] | None = None,
    disturbances: Sequence[Disturbance] = (),
    viewer: MeshcatViewer | None = None,
    progress: bool = True,
    desc: str = "sim",
    log: Logger | None = None,
    task_errors: bool = True,
    sensors: str | ActuatedSensing = "full",
    command: str | JointServo = "torque",
    error_targets: float | Mapping[str, float] | None = None,
) -> Run:
    """Run ``controller`` on ``plant`` for ``duration`` s of simulated time at one call per
    ``control_dt`` s (a whole multiple of plant.dt).  ``record(t, q, v, tau)`` is called once per
    control step after τ is applied; ``log`` is the Logger the run saves (a new one if omitted; filled
    by the loop itself when ``record`` is None).  ``viewer.maybe_update(t, qpos)`` is called per step.
    ``task_errors``: keep a ReportsErrors controller's errors per step.  ``sensors`` (sim/sensors.py):
    "full" (the controller sees the plant's state) or "actuated" (its motors' encoders and the passive joints
    reconstructed by the loops, ``controller.robot``'s; an ``ActuatedSensing`` for quantization, noise and the
    estimator's options); ``command``: "torque" or "position" (the robot's own joint PD around the law's
    integrated (q_des, v_des) with τ as feed-forward; a ``JointServo`` for its gains).  ``record`` gets the
    plant's state; a ``SensorFault`` ends the run (raised, the cycles before it logged).  ``error_targets``: a
    target [m, rad] for every task the controller reports, or {task or constraint name: target}; an error
    whose norm stays above 100 × its target for 0.5 s of simulated time is said once (:class:`ErrorWatch`: a
    ``UserWarning`` naming it and the time, kept in ``run.warnings``); it needs a controller that reports its
    errors and ``task_errors``.  Returns the :class:`Run`."""
    if not duration > 0:
        raise ConfigError(f"duration must be > 0 s, got {duration}")
    watch = None if error_targets is None else ErrorWatch(error_targets)
    if watch is not None and not (task_errors and isinstance(controller, ReportsErrors)):
        raise ConfigError(
            f"error_targets: {type(controller).__name__} reports no errors to compare with them"
            + ("" if task_errors else " (task_errors=False)")
        )
    sensing, servo = interfaces(controller, control_dt, sensors, command)
    if (override := LOOP_OVERRIDE.get()) is not None:  # cmstack rt: across a process boundary
        return _simulate_across_processes(
            override,
            plant,
            controller,
            sensing,
            servo,
            watch,
            duration=duration,
            control_dt=control_dt,
            record=record,
            disturbances=disturbances,
            viewer=viewer,
            progress=progress,
            desc=desc,
            log=log,
            task_errors=task_errors,
        )
    n_sub = substeps(control_dt, plant.dt)
    n_steps = int(round(duration / control_dt))
    log = Logger() if log is None else log
    res = Run(duration=n_steps * control_dt, control_dt=control_dt, log=log)
    if record is None:

        def record(t: float, q: np.ndarray, v: np.ndarray, tau: np.ndarray) -> None:
            log.append(t=t, q=q, v=v, tau=tau, plant_qpos=plant.data.qpos)

        path = getattr(plant, "path", None)  # a MuJoCo plant's MJCF: what the viewer replays
        if path is not None:
            log.meta.setdefault("mjcf_path", str(path))
            # a plant_from_urdf plant without xml_path has no file: Run.save writes its MJCF beside the log
            spec = getattr(plant, "spec", None)
            if spec is not None and not Path(path).is_file():
                res.plant_spec = spec
    if isinstance(controller, SensesPlant):
        controller.attach_plant(plant)
    reporter = controller if task_errors and isinstance(controller, ReportsErrors) else None
    errors = res.errors
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=n_steps, desc=desc, unit="step", leave=False, mininterval=0.5)
    perf = time.perf_counter
    w0, cpu0 = perf(), time.thread_time()
    try:
        active: set[int] = set()
        for _ in range(n_steps):
            if interrupt.requested() is not None:  # SIGINT/SIGTERM (sim/interrupt.py): end here, keep the log
                break
            t = plant.time
            q, v = plant.state()
            qc, vc = (q, v) if sensing is None else sensing.measure(t, q, v)
            c0 = perf()
            tau = controller(t, qc, vc)
            res.step_us.append((perf() - c0) * 1e6)
            if servo is None:
                plant.set_torque(tau)
            else:
                servo.command(controller, qc, vc, tau)
            apply_disturbances(plant, disturbances, active, t)
            if reporter is not None:
                groups = reporter.errors(reporter.kin, t)
                for group in groups:
                    for name, e in group.items():
                        e = np.array(e, dtype=float)
                        errors.setdefault(name, []).append(e)
                        if watch is not None:
                            if not watch.bound:
                                watch.bind(*groups)
                            watch.update(t, name, e)
            record(t, q, v, tau)
            if viewer is not None:
                viewer.maybe_update(t, plant.data.qpos)
            if servo is None:
                plant.step(n_sub)
            else:
                servo.step(plant, n_sub)
            res.steps += 1
            if bar is not None:
                bar.update(1)
    finally:
        res.sensing, res.servo = sensing, servo
        res.wall_s = perf() - w0
        res.cpu_s = time.thread_time() - cpu0
        for k, x in (("simulated_s", res.simulated_s), ("wall_s", res.wall_s), ("cpu_s", res.cpu_s)):
            LOOP_TOTALS[k] += x
        if bar is not None:
            close_bar(bar)
        if watch is not None:
            res.warnings.extend(watch.said)
    return res


def close_bar(bar: Any) -> None:
    """Close a ``leave=False`` progress bar.  On a terminal tqdm erases it; into a pipe or a file its
    frames stay, ended by a carriage return and no newline, so the next line written (a metrics table on
    stdout, when both streams go to one pipe) would be glued to the bar's last frame: end that line."""
    bar.close()
    stream = getattr(bar, "fp", None) or sys.stderr  # the stream tqdm writes to (wrapped)
    try:
        if not stream.isatty():
            stream.write("\n")
            stream.flush()
    except (AttributeError, ValueError, OSError):  # a closed or unusual stream: nothing to end
        pass


@dataclass
class Run(RunResult):
    """What :func:`simulate` returns.

    steps: control steps done; duration [s]: simulated time asked for (steps × control_dt when
    complete); control_dt [s]; step_us: wall time of each controller call [µs]; wall_s: wall time of
    the whole loop [s] (logging, viewer and plant included; imports and plots excluded); cpu_s: CPU
    time of the loop's thread over the same span [s] (on a busy machine wall_s also counts the waits);
    errors: per constraint/task name, its error at every step (empty if the controller does not
    report errors); warnings: what the loop said of the run (an error off its target, ``error_targets``);
    log: the Logger of the run."""

    duration: float = 0.0
    control_dt: float = 0.0
    wall_s: float = float("nan")
    cpu_s: float = float("nan")
    errors: dict[str, list] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    log: Logger | None = None
    #: the measurement and command paths of a run with sensors="actuated" / command="position" (sim/sensors.py)
    sensing: ActuatedSensing | None = None
    servo: JointServo | None = None
    #: the MuJoCo specification of a plant whose MJCF is not a file (``plant_from_urdf`` without
    #: ``xml_path``): ``save`` writes it as ``plant.xml`` in the run directory, for ``cmstack view``
    plant_spec: Any = None

    @property
    def simulated_s(self) -> float:
        """Simulated time actually covered [s]."""
        return self.steps * self.control_dt

    @property
    def realtime_factor(self) -> float:
        """Simulated time / wall time of the loop (> 1: faster than real time)."""
        return self.simulated_s / self.wall_s if self.wall_s > 0 else float("nan")

    def error_arrays(self) -> dict[str, np.ndarray]:
        """Per name, its errors stacked (steps × dim)."""
        return {k: np.stack(v) for k, v in self.errors.items()}

    def timing(self) -> dict[str, float]:
        """The run's speed figures (for metrics.json)."""
        out = {
            "realtime_factor": self.realtime_factor,
            "control_step_us_median": self.step_us_median,
            "loop_wall_s": self.wall_s,
            "simulated_s": self.simulated_s,
        }
        if self.sensing is not None:
            out["reconstruction_us_median"] = self.sensing.metrics()["reconstruction_us_median"]
        return out

    def save(self, out: str | Path) -> Path:
        """Write ``out/log.npz`` (the log, with ``error__<name>`` per reported error: what
        ``cmstack view`` replays) and ``out/run.json`` (the timing), and ``out/plant.xml`` when the plant's
        MJCF was no file (``plant_spec``); returns ``out``."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        log = self.log if self.log is not None else Logger()
        if self.plant_spec is not None and not Path(str(log.meta.get("mjcf_path", ""))).is_file():
            xml = out / "plant.xml"  # the plant's MJCF (mesh paths absolute), which the log then names
            atomic_write(xml, self.plant_spec.to_xml())
            log.meta["mjcf_path"] = str(xml.resolve())
        for k, v in self.error_arrays().items():
            log.meta[f"error__{k}"] = v
        log.save(out / "log.npz")
        atomic_write(out / "run.json", json.dumps({"steps": self.steps, **self.timing()}, indent=1))
        return out

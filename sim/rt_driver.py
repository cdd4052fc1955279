"""The robot side of a fixed-rate loop across a process boundary: a process that behaves like a real
torque-controlled robot's driver, around a simulated plant.

    proc = DriverProcess.start(plant, link, n_cycles=60_000, settings=DriverSettings(rate_hz=1000))
    ...                                              # the controller side runs (sim/rt_loop.py)
    report = proc.finish()                           # DriverReport: status, reason, misses, the per-cycle log

It owns the plant (a ``sim.base.Plant``, e.g. the MuJoCo plant) and advances it in wall-clock time at a
fixed rate: tick k is at ``start + k / rate`` seconds (``time.perf_counter``), reached by a hybrid wait
(sleep until ``spin_s`` before the tick, then spin).  A real robot's clock never stalls; this process
can be preempted: a tick reached more than a period late is a driver *overrun*, and the schedule
resumes one period after it (the clock slips) instead of rushing through the ticks it missed.  At tick k it

1. reads the command record: the torque is *in time* when it answers the state of tick k-1; otherwise
   the previous torque is held and a **miss** is counted;
2. publishes the state s_k (measured at the tick: precomputed, so that publication is not delayed by
   the physics), with the ``plant.data`` arrays a sensing controller reads (``sensed``), read with it;
3. applies the torque (and the disturbances active at t_k) and steps the plant to s_{k+1}.

A torque computed from s_{k-1} thus acts over [t_k, t_{k+1}]: one cycle of delay, as on a real robot
(the in-process loop, sim/runner.simulate, has none).  Start: s_0 is published and the driver waits
(untimed, ``start_timeout_s``) for its answer, which acts over [t_0, t_1]; the clock starts then.

After ``max_misses`` consecutive misses the robot is stopped as real drivers do (libfranka raises
``communication_constraints_violation``): a damping brake τ = -D v for ``brake_s`` seconds, status
STOPPED and the reason recorded.  A stop request from the controller side does the same.

Per cycle it records the wall time of the tick and its lateness, the cycle the applied torque
answered, the torque's age when applied (tick - the controller's send time), misses, the plant's
``data.qpos``/``qvel``, the applied τ and, when they are not the plant's qpos/qvel (measurement noise),
the published q, v (``DriverLog``: a shared anonymous mapping the parent reads after the run; compact
types: 365 bytes per cycle on the YuMi flagship, 608 when every column was float64 and q, v were
always stored).
"""

from __future__ import annotations

import math
import mmap
import multiprocessing
import os
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from cmstack.models.errors import ConfigError
from cmstack.sim import rt_transport as rt
from cmstack.sim.base import Plant
from cmstack.sim.rt_transport import Link
from cmstack.sim.runner import Disturbance, apply_disturbances, substeps


@dataclass
class DriverSettings:
    """rate_hz: control rate; max_misses: consecutive misses that stop the robot; brake_damping
    [N·m·s/rad]: D of the brake τ = -D v; brake_s: how long the brake acts before the driver ends;
    spin_s: the last part of each wait spent spinning instead of sleeping; start_timeout_s: how long the
    driver waits for the first command; cpu: pin the driver to this CPU (None: no pinning); fifo:
    SCHED_FIFO at ``fifo_priority`` when the OS allows it."""

    rate_hz: float = 1000.0
    max_misses: int = 20
    brake_damping: float = 5.0
    brake_s: float = 0.1
    spin_s: float = 3e-4
    start_timeout_s: float = 30.0
    cpu: int | None = None
    fifo: bool = False
    fifo_priority: int = 80
    #: fault injection (tests): from this cycle on the driver publishes the frame before it again (its counter
    #: and state), as a robot whose bus froze on an old frame; the controller side names it (stale_frame) at
    #: the first repeat it reads, however late it is; -1: never
    stale_frame_at: int = -1

    def check(self) -> DriverSettings:
        if not (math.isfinite(self.rate_hz) and 1.0 <= self.rate_hz <= 20_000.0):
            raise ConfigError(f"rate must be a finite number in [1, 20000] Hz, got {self.rate_hz}")
        if not (isinstance(self.max_misses, int) and self.max_misses >= 1):
            raise ConfigError(f"max_misses must be an integer >= 1, got {self.max_misses!r}")
        for key in ("brake_damping", "brake_s", "spin_s", "start_timeout_s"):
            val = getattr(self, key)
            if not (math.isfinite(val) and val >= 0):
                raise ConfigError(f"{key} must be a finite number >= 0, got {val}")
        return self

    @property
    def dt(self) -> float:
        return 1.0 / self.rate_hz


def wait_until(
    target: float,
    spin_s: float,
    perf: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Hybrid wait: sleep until ``spin_s`` before ``target`` (a ``perf_counter`` instant), then spin."""
    rest = target - perf() - spin_s
    if rest > 0:
        sleep(rest)
    while perf() < target:
        pass


#: the task flag the kernel sets as soon as a process starts to exit (include/linux/sched.h)
PF_EXITING = 0x4
_SIGKILL_BIT = 1 << (signal.SIGKILL - 1)


def process_ending(pid: int) -> bool:
    """Whether process ``pid`` is gone or on its way out: no /proc entry, a zombie, exiting (the
    kernel's PF_EXITING flag, /proc/PID/stat field 9), or a SIGKILL pending for it (/proc/PID/status
    SigPnd, ShdPnd).  A ``kill -9`` shows at once this way (0.1 ms here), while ``waitpid`` and
    ``getppid`` show it only once the kernel has torn down the process' address space: 130-190 ms for
    a process with 400 MB mapped on this machine.  Linux only (False where /proc cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        if fields[0] in (b"Z", b"X", b"x") or int(fields[6]) & PF_EXITING:
            return True
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith((b"SigPnd:", b"ShdPnd:")) and int(line.split()[1], 16) & _SIGKILL_BIT:
                    return True
    except (FileNotFoundError, ProcessLookupError):
        return True
    except (OSError, ValueError, IndexError):
        return False
    return False


def realtime_setup(cpu: int | None, fifo: bool, priority: int, who: str) -> list[str]:
    """Pin this process to ``cpu`` and/or switch it to SCHED_FIFO at ``priority`` when asked and allowed;
    returns one line per request saying what was done or why not (never raises)."""
    lines = []
    if cpu is not None:
        try:
            os.sched_setaffinity(0, {int(cpu)})
            lines.append(f"{who}: pinned to CPU {cpu}")
        except (OSError, ValueError, AttributeError) as exc:
            lines.append(
                f"{who}: CPU pinning to {cpu} not allowed ({type(exc).__name__}: {exc}); running unpinned"
            )
    if fifo:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(int(priority)))
            lines.append(f"{who}: SCHED_FIFO priority {priority}")
        except (OSError, AttributeError) as exc:
            lines.append(
                f"{who}: SCHED_FIFO not allowed ({type(exc).__name__}: {exc}); running under the "
                "default scheduler (docs/realtime.md: CAP_SYS_NICE or rtprio in limits.conf)"
            )
    return lines


class DriverLog:
    """Per-cycle record of the driver in a shared anonymous mapping (made before the fork, written by
    the driver, read by the parent): what the timing report and the replay of the run need, in compact
    types.  Columns, each one contiguous block of the mapping (``col[name]``, one row per cycle):

    ======================  =========  ==================================================================
    ``wall``, ``t``         float64    tick wall time (``perf_counter``), the plant's time [s]
    ``late``, ``age``       float32    the tick's lateness, the applied torque's age [s] (µs resolution)
    ``answers``             int32      the cycle the applied torque answered (-1: none, braking)
    ``miss``                uint8      1 when the torque was not in time (the previous one held)
    ``qpos``, ``qvel``      float64    the plant's own state (what the replay sets and logs)
    ``tau``                 float64    the torque applied (model order)
    ``q``, ``v``            float64    the state published, only when it is not ``qpos``/``qvel`` at the
                                       plant's joints (``index``: (qadr, dadr) when it is: no noise)
    ======================  =========  ==================================================================

    ``log["q"]`` reads ``qpos[:, qadr]`` when q is not stored.  ``header``: cycles done, start wall time.
    With ``records`` (a directory) each column is instead a shared mapping of the file
    ``records/<column>.npy`` (and the header ``header.npy``): the rows stream to the run directory as
    they are written (sim/rt_records.py)."""

    FIXED = ("wall", "late", "t", "answers", "age", "miss")
    TYPES = {
        "wall": np.float64,
        "t": np.float64,
        "late": np.float32,
        "age": np.float32,
        "answers": np.int32,
        "miss": np.uint8,
    }

    def __init__(
        self,
        n_cycles: int,
        nqpos: int,
        nqvel: int,
        nq: int,
        nv: int,
        index: tuple[np.ndarray, np.ndarray] | None = None,
        records: Path | None = None,
    ):
        self.n = n_cycles
        self.index = (
            None if index is None else (np.asarray(index[0], dtype=int), np.asarray(index[1], dtype=int))
        )
        shapes: dict[str, tuple[tuple[int, ...], type]] = {k: ((), t) for k, t in self.TYPES.items()}
        shapes.update(qpos=((nqpos,), np.float64), qvel=((nqvel,), np.float64), tau=((nv,), np.float64))
        if self.index is None:
            shapes.update(q=((nq,), np.float64), v=((nv,), np.float64))
        sizes = {k: int(np.prod(s, dtype=int)) * np.dtype(t).itemsize for k, (s, t) in shapes.items()}
        self.bytes_per_cycle = sum(sizes.values())
        offsets, off = {}, 32  # (the header: 4 float64)
        for k in shapes:
            offsets[k] = off
            off += -(-sizes[k] * n_cycles // 8) * 8  # each block 8-byte aligned
        self.records = records
        if records is not None:  # one shared file mapping per column (sim/rt_records.py)
            from cmstack.sim.rt_records import record_array

            records.mkdir(parents=True, exist_ok=True)
            self._map = None
            self.header = record_array(records, "header", (4,), np.float64, 0.0)
            self.col = {k: record_array(records, k, (n_cycles, *s), t, 0) for k, (s, t) in shapes.items()}
            if self.index is not None:
                np.save(records / "qadr.npy", self.index[0])
                np.save(records / "dadr.npy", self.index[1])
            return
        self._map = mmap.mmap(-1, off)  # MAP_SHARED | MAP_ANONYMOUS
        self.header = np.ndarray((4,), dtype=np.float64, buffer=self._map)
        self.col = {
            k: np.ndarray((n_cycles, *s), dtype=t, buffer=self._map, offset=offsets[k])
            for k, (s, t) in shapes.items()
        }

    def touch(self) -> None:
        """Write every page of the mapping (zeros) before the clock starts: no page fault in the loop."""
        if self._map is None:
            for c in self.col.values():
                c[...] = 0
            return
        np.ndarray((len(self._map),), dtype=np.uint8, buffer=self._map)[32:] = 0

    @property
    def cycles(self) -> int:
        """Cycles recorded (rows 0..cycles-1 are valid)."""
        return int(self.header[0])

    def __getitem__(self, name: str) -> np.ndarray:
        n = self.cycles
        if name in ("q", "v") and name not in self.col and self.index is not None:
            src, idx = ("qpos", self.index[0]) if name == "q" else ("qvel", self.index[1])
            return self.col[src][:n][:, idx]
        return self.col[name][:n]


@dataclass
class DriverReport:
    """How the driver's run ended: status ("done", "stopped", "failed"), reason (a sentence, "" when
    done), cycles run, misses (total, longest run of consecutive ones), driver overruns (ticks reached
    more than a period late: the driver was preempted; its clock then slips by the stall, ``slip_s`` in
    all, rather than rushing through the missed ticks), the cycle of the stop (-1: none), the plant's
    torque saturations, what the real-time set-up did (``setup``), and the per-cycle ``log``."""

    status: str
    reason: str
    cycles: int
    misses: int
    max_consecutive_misses: int
    overruns: int
    slip_s: float
    stop_cycle: int
    saturated: int
    log: DriverLog
    setup: list[str] = field(default_factory=list)
    #: a position-controlled robot's largest |PD torque| (N·m, N; NaN: a torque-controlled one)
    pd_torque_max: float = float("nan")


def sensor_views(data: Any, sensed: Sequence[str]) -> list[np.ndarray]:
    """Flat views of the ``plant.data`` arrays named in ``sensed`` (what a SensesPlant controller reads),
    in that order; a name that is not an array of ``data`` is refused, naming it."""
    out = []
    for name in sensed:
        a = getattr(data, name, None)
        if not isinstance(a, np.ndarray) or a.dtype.kind not in "fiu" or not a.flags.c_contiguous:
            raise ConfigError(
                f"sensed_data: '{name}' is not a contiguous numeric array of the plant's data "
                f"({type(data).__name__})"
            )
        out.append(a.reshape(-1))  # (a view: contiguous)
    return out


def drive(
    plant: Plant,
    link: Link,
    log: DriverLog,
    n_cycles: int,
    settings: DriverSettings,
    disturbances: Sequence[Disturbance] = (),
    sensed: Sequence[str] = (),
    controller_pid: int | None = None,
    frame: Any = None,
    servo: Any = None,
) -> dict[str, Any]:
    """The driver's loop (run in the driver process; returns the report's fields).  ``sensed``: arrays of
    ``plant.data`` published with each state (read with it, after the step that produced it).
    ``controller_pid``: the controller process, this process's parent (default: the parent now); on
    every miss (and while waiting for the first command) the driver checks that it is still its
    parent and not ending (:func:`process_ending`: a ``kill -9`` shows at once): a dead controller stops
    the robot at once (the brake; status "stopped", the reason naming it, ``controller_died`` set in
    the fields) instead of after ``max_misses``.  ``frame``: what is published instead of the plant's (q, v)
    (``frame.publish(t, q, v, q_out, v_out)``, e.g. ``sim/sensors.ActuatedFrame``: the motors' encoders only);
    the log keeps the plant's state.  ``servo``: a position-controlled robot (``sim/sensors.JointServo``, this
    process's copy): the command record holds (q_des, v_des, τ_ff) of the actuated joints (``servo.receive``;
    a miss: ``servo.hold``, the reference goes on at its rate) and the period's plant steps run the servo's
    joint PD (``servo.step``); the brake acts on the torque directly.  The log's τ is the PD's torque averaged
    over the period."""
    dt = settings.dt
    n_sub = substeps(dt, plant.dt)
    st, cmd = link.state, link.command
    perf, read = time.perf_counter, cmd.read
    wall_c, late_c, t_c, ans_c, age_c, miss_c = (log.col[k] for k in DriverLog.FIXED)
    qpos_c, qvel_c, tau_c = (log.col[k] for k in ("qpos", "qvel", "tau"))
    measured = "q" in log.col  # the published state is logged apart (not qpos/qvel)
    q_c, v_c = (log.col["q"], log.col["v"]) if measured else (tau_c, tau_c)
    data = plant.data
    tau = np.zeros(link.nv)
    brake = np.zeros(link.nv)
    # the brake acts through the motors: a closed chain's passive joints have none (the plant refuses a torque there)
    motors = np.ones(link.nv)
    has_motor = getattr(getattr(plant, "map", None), "actuated", getattr(plant, "actuated", None))
    if has_motor is not None and np.shape(has_motor) == (link.nv,):
        motors[:] = has_motor
    active: set[int] = set()
    sources = sensor_views(data, sensed)
    sensors = np.zeros(sum(a.size for a in sources)) if sources else None
    parts = []
    if sensors is not None:
        i = 0
        for a in sources:
            parts.append((sensors[i : i + a.size], a))
            i += a.size

    def sense() -> None:
        for dst, src in parts:
            np.copyto(dst, src)

    pq, pv = np.zeros(link.nq), np.zeros(link.nv)  # the published frame (with ``frame``)

    def published(t: float, q: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if frame is None:
            return q, v
        frame.publish(t, q, v, pq, pv)
        return pq, pv

    out: dict[str, Any] = dict(
        status="done", reason="", misses=0, max_consecutive_misses=0, overruns=0, slip_s=0.0, stop_cycle=-1
    )
    # the controller process is this one's parent (forked): once it is gone, getppid() changes
    parent = os.getppid() if controller_pid is None else controller_pid
    getppid = os.getppid

    def controller_gone(k: int, t: float) -> str | None:
        if getppid() == parent and not process_ending(parent):
            return None
        out["controller_died"] = True
        return (
            f"the controller process (pid {parent}) died (killed?) after answering cycle {held_answer} "
            f"(seen at cycle {k}, t = {t:.4f} s)"
        )

    def apply(t: float, k: int) -> None:
        plant.set_torque(tau)
        apply_disturbances(plant, disturbances, active, t)
        tau_c[k] = tau

    def advance(k: int) -> None:  # the period's plant steps (through the robot's joint PD when it has one)
        if servo is None or out["stop_cycle"] >= 0:
            plant.step(n_sub)
        else:
            servo.step(plant, n_sub)
            tau_c[k] = servo.applied

    def stop(k: int, code: int, why: str) -> int:
        out.update(status="stopped", reason=why, stop_cycle=k)
        link.set_driver_status(rt.STOPPED, code)
        return k + max(1, int(round(settings.brake_s / dt)))  # the last cycle of the brake

    log.touch()  # touch every page of the log before the clock starts
    # cycle 0: publish s_0, wait (untimed) for its answer, apply it over [t_0, t_1]
    q, v = plant.state()
    sense()
    t = plant.time
    w = perf()
    st.publish(0, t, w, *published(t, q, v), sensors)
    wall_c[0], late_c[0], t_c[0] = w, 0.0, t
    qpos_c[0], qvel_c[0] = data.qpos, data.qvel
    if measured:
        q_c[0], v_c[0] = q, v
    give_up = w + settings.start_timeout_s
    held_answer = -1
    while True:
        if read() >= 0 and cmd.answers == 0 and cmd.seq > 0:
            break
        gone = controller_gone(0, t)
        if gone is not None:
            out.update(status="stopped", reason=f"{gone}, before the first command")
            link.set_driver_status(rt.STOPPED, rt.CONTROLLER_DIED)
            log.header[0] = 1
            return out
        if link.stop_requested:
            out.update(status="stopped", reason="the controller side asked to stop before the first cycle")
            link.set_driver_status(rt.STOPPED, rt.CONTROLLER_REQUEST)
            log.header[0] = 1
            return out
        if perf() > give_up:
            out.update(status="failed", reason=f"no first command within {settings.start_timeout_s:g} s")
            link.set_driver_status(rt.FAILED, rt.DRIVER_ERROR)
            log.header[0] = 1
            return out
        time.sleep(1e-4)
    if servo is None:
        tau[:] = cmd.tau
    else:
        servo.receive(cmd.tau, q, v)  # (its curve starts at the measured motors)
        tau[:] = servo.tau
    held_send = cmd.send_wall
    ans_c[0], miss_c[0], age_c[0] = 0, 0, perf() - held_send
    apply(t, 0)
    advance(0)
    start = perf()
    log.header[1] = start
    link.set_driver_status(rt.RUNNING)
    t_prev, q_prev, v_prev = t, q.copy(), v.copy()  # (the previous frame: only for stale_frame_at)
    consecutive, end = 0, n_cycles - 1
    held_answer = servo_answer = 0  # (servo_answer: the newest command the joint PD has, a late one included)
    k = 0
    for k in range(1, n_cycles):
        q, v = plant.state()  # s_k, ready before its tick
        sense()
        t = plant.time
        fq, fv = published(t, q, v)
        qpos_c[k], qvel_c[k], t_c[k] = data.qpos, data.qvel, t
        if measured:
            q_c[k], v_c[k] = q, v
        target = start + k * dt
        wait_until(target, settings.spin_s, perf)
        now = perf()
        if now - target > dt:  # the driver itself stalled (preempted): its clock slips
            out["overruns"] += 1  # by the stall instead of rushing through the missed ticks
            out["slip_s"] += now - target
            start += now - target
            target = now
        fresh = read() >= 0 and cmd.answers == k - 1 and out["stop_cycle"] < 0
        s0 = settings.stale_frame_at
        if 0 <= s0 <= k:  # (injected fault: frame s0 - 1 again from then on, so a late reader sees it too)
            st.publish(s0 - 1, t_prev, now, *published(t_prev, q_prev, v_prev), sensors)
        else:
            st.publish(k, t, now, fq, fv, sensors)
        if k < s0:
            t_prev, q_prev, v_prev = t, q.copy(), v.copy()
        wall_c[k], late_c[k] = now, now - target
        if out["stop_cycle"] >= 0:  # braking: τ = -D v
            np.multiply(v, -settings.brake_damping, out=brake)
            brake *= motors
            tau[:] = brake
            ans_c[k], age_c[k], miss_c[k] = -1, 0.0, 0
        elif fresh:
            if servo is None:
                tau[:] = cmd.tau
            elif k - 1 > servo_answer:  # a new command (the first one, answering s_0, was received at tick 0)
                servo.receive(cmd.tau)
                servo_answer = k - 1
                tau[:] = servo.tau
            else:
                servo.hold()
            held_answer, held_send = k - 1, cmd.send_wall
            ans_c[k], age_c[k], miss_c[k] = held_answer, now - held_send, 0
            consecutive = 0
        else:
            out["misses"] += 1
            consecutive += 1
            out["max_consecutive_misses"] = max(out["max_consecutive_misses"], consecutive)
            ans_c[k], age_c[k], miss_c[k] = held_answer, now - held_send, 1
            if servo is not None:
                servo.hold()
            gone = controller_gone(k, t)
            if gone is not None:
                end = min(
                    end,
                    stop(k, rt.CONTROLLER_DIED, f"{gone}: robot stopped with a damping brake"),
                )
            elif consecutive >= settings.max_misses:
                end = min(
                    end,
                    stop(
                        k,
                        rt.MISSES,
                        f"{consecutive} consecutive cycles without a torque in time "
                        f"(max_misses = {settings.max_misses}) at cycle {k} "
                        f"(t = {t:.4f} s): robot stopped with a damping brake "
                        f"(communication constraints violated)",
                    ),
                )
        if link.stop_requested and out["stop_cycle"] < 0:
            end = min(
                end,
                stop(
                    k,
                    rt.CONTROLLER_REQUEST,
                    f"the controller side asked to stop at cycle {k} "
                    f"(t = {t:.4f} s): robot stopped with a damping brake",
                ),
            )
        apply(t, k)
        log.header[0] = k + 1  # (after the row is complete: a reader of a killed driver's log)
        if k >= end:
            break
        advance(k)
    log.header[0] = k + 1
    if servo is not None:
        out["pd_torque_max"] = servo.pd_torque_max
    if out["status"] == "done":
        link.set_driver_status(rt.DONE)
    return out


def _child(
    plant: Plant,
    link: Link,
    log: DriverLog,
    n_cycles: int,
    settings: DriverSettings,
    disturbances: Sequence[Disturbance],
    sensed: Sequence[str],
    conn: Connection,
    on_orphan: Callable[[dict[str, Any], DriverLog], None] | None = None,
    frame: Any = None,
    servo: Any = None,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop (stop request)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    setup = realtime_setup(settings.cpu, settings.fifo, settings.fifo_priority, "driver")
    import gc

    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        out = drive(plant, link, log, n_cycles, settings, disturbances, sensed, frame=frame, servo=servo)
    except BaseException as exc:
        link.set_driver_status(rt.FAILED, rt.DRIVER_ERROR)
        out = dict(
            status="failed",
            reason=f"driver: {type(exc).__name__}: {exc}",
            misses=0,
            max_consecutive_misses=0,
            overruns=0,
            slip_s=0.0,
            stop_cycle=-1,
            traceback=traceback.format_exc(),
        )
    out["saturated"] = int(getattr(plant, "saturated", 0))
    out["setup"] = setup
    if out.pop("controller_died", False):  # nobody to report to: leave the record, release the link
        _orphaned(out, log, link, on_orphan)
        conn.close()
        return
    try:
        conn.send(out)
    finally:
        conn.close()


def _orphaned(
    out: dict[str, Any],
    log: DriverLog,
    link: Link,
    on_orphan: Callable[[dict[str, Any], DriverLog], None] | None,
) -> None:
    """The driver's end when its controller process died: ``on_orphan(fields, log)`` writes the record
    (``run_rt``: the log's parts, timing.json), then the transport is closed and, being a copy of the
    owner's, its shared-memory block unlinked and unregistered from the resource tracker (which would
    otherwise warn of a leaked segment and remove it).  Each step is tried whatever the one before did;
    one line on stderr says what happened."""
    import gc
    import sys

    gc.enable()
    wrote = ""
    if on_orphan is not None:
        try:
            on_orphan(out, log)
            wrote = "; its record is written"
        except Exception as exc:  # the link is released all the same
            wrote = f"; its record could not be written ({type(exc).__name__}: {exc})"
    try:
        link.close()
    except Exception:
        pass
    print(f"rt driver: {out['reason']}{wrote}", file=sys.stderr, flush=True)


def state_index(plant: Plant) -> tuple[np.ndarray, np.ndarray] | None:
    """(qadr, dadr) when the plant's measured state is exactly ``data.qpos[qadr]``, ``data.qvel[dadr]`` (its
    ``measured_index()``, e.g. a MuJoCo plant without measurement noise), checked once on the current
    state; None otherwise (the driver then logs the published q, v as well)."""
    get = getattr(plant, "measured_index", None)
    index = get() if callable(get) else None
    if index is None:
        return None
    qadr, dadr = (np.asarray(i, dtype=int) for i in index)
    q, v = plant.state()  # (no noise: no random draw is taken from the plant's stream)
    data = plant.data
    if not (np.array_equal(q, data.qpos[qadr]) and np.array_equal(v, data.qvel[dadr])):
        return None
    return qadr, dadr


class DriverProcess:
    """The driver in a forked child process (the plant object is inherited, not pickled)."""

    def __init__(self, proc: multiprocessing.process.BaseProcess, conn: Connection, log: DriverLog):
        self.proc, self.conn, self.log = proc, conn, log

    def is_alive(self) -> bool:
        """Whether the driver process runs and is not ending (:func:`process_ending`: a ``kill -9`` is
        seen before the kernel has torn the process down)."""
        pid = self.proc.pid  # None only before start(), and then is_alive() is False
        return self.proc.is_alive() and pid is not None and not process_ending(pid)

    @classmethod
    def start(
        cls,
        plant: Plant,
        link: Link,
        n_cycles: int,
        settings: DriverSettings,
        disturbances: Sequence[Disturbance] = (),
        sensed: Sequence[str] = (),
        on_orphan: Callable[[dict[str, Any], DriverLog], None] | None = None,
        records: Path | None = None,
        frame: Any = None,
        servo: Any = None,
    ) -> DriverProcess:
        """Fork the driver for ``plant`` on ``link``; ``sensed``: arrays of ``plant.data`` it publishes with
        each state (the transport must have room for them: its ``ns``).  ``on_orphan(fields, log)`` is
        called in the driver process when this (the controller) process died during the run, after
        the brake, with the report's fields and the driver's log: what is left of the run is written
        there (:func:`_orphaned`).  ``records``: a directory where the driver's log is made as files
        (:class:`DriverLog`); ``frame``: what is published instead of the plant's state (:func:`drive`)."""
        settings.check()
        ns = sum(a.size for a in sensor_views(plant.data, sensed))
        if ns != getattr(link.state, "ns", 0):
            raise ConfigError(
                f"the transport carries {getattr(link.state, 'ns', 0)} sensor values, the sensed "
                f"arrays {list(sensed)} have {ns}"
            )
        if n_cycles < 2:
            raise ConfigError(f"an rt run needs at least 2 cycles, got {n_cycles} (duration × rate)")
        substeps(settings.dt, plant.dt)  # the period must be a whole number of plant steps
        data = plant.data
        log = DriverLog(
            n_cycles,
            len(data.qpos),
            len(data.qvel),
            link.nq,
            link.nv,
            index=state_index(plant),
            records=records,
        )
        ctx = multiprocessing.get_context("fork")
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(
            target=_child,
            args=(
                plant,
                link,
                log,
                n_cycles,
                settings,
                tuple(disturbances),
                tuple(sensed),
                child,
                on_orphan,
                frame,
                servo,
            ),
            name="cmstack-rt-driver",
            daemon=True,
        )
        proc.start()
        child.close()
        return cls(proc, parent, log)

    def finish(self, timeout_s: float = 30.0) -> DriverReport:
        """Wait for the driver to end (``timeout_s``; then it is killed) and return its report."""
        out = None
        if self.conn.poll(timeout_s):
            try:
                out = self.conn.recv()
            except EOFError:
                out = None
        self.proc.join(timeout=5.0)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        if out is None:
            out = self._died()
        out.pop("traceback", None)
        out.pop("controller_died", None)
        return DriverReport(cycles=self.log.cycles, log=self.log, **out)

    def _died(self) -> dict[str, Any]:
        """The report of a driver that ended without one (killed, crashed): what its log says."""
        code = self.proc.exitcode
        how = (
            f"killed by {signal.Signals(-code).name}"
            if code is not None and code < 0 and -code in signal.valid_signals()
            else f"exit code {code}"
        )
        n = self.log.cycles
        miss = self.log["miss"].astype(bool)
        runs = np.diff(np.flatnonzero(np.diff(np.r_[0, miss, 0]))) if miss.any() else np.zeros(0, int)
        where = f"after cycle {n - 1} (t = {self.log['t'][-1]:.4f} s)" if n else "before its first cycle"
        return dict(
            status="failed",
            reason=f"the driver process (pid {self.proc.pid}) ended without a report {where}: {how}",
            misses=int(miss.sum()),
            max_consecutive_misses=int(runs[::2].max()) if runs.size else 0,
            overruns=0,
            slip_s=0.0,
            stop_cycle=-1,
            saturated=0,
            setup=[],
        )

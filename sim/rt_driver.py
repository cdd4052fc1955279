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
    over the period.  The loop's parts are :class:`_Driver`'s methods."""
    d = _Driver(plant, link, log, n_cycles, settings, disturbances, sensed, controller_pid, frame, servo)
    log.touch()  # touch every page of the log before the clock starts
    if not d.first_cycle():
        log.header[0] = 1
        return d.out
    d.run()
    if servo is not None:
        d.out["pd_torque_max"] = servo.pd_torque_max
    if d.out["status"] == "done":
        link.set_driver_status(rt.DONE)
    return d.out


class _Driver:
    """The state of :func:`drive`'s loop and its parts: the published frame and sensors, the torque applied and
    held, the clock, the miss count, the stop (``out``: the report's fields)."""

    def __init__(
        self,
        plant: Plant,
        link: Link,
        log: DriverLog,
        n_cycles: int,
        settings: DriverSettings,
        disturbances: Sequence[Disturbance],
        sensed: Sequence[str],
        controller_pid: int | None,
        frame: Any,
        servo: Any,
    ) -> None:
        self.plant, self.link, self.log, self.n_cycles, self.settings = plant, link, log, n_cycles, settings
        self.disturbances, self.frame, self.servo = disturbances, frame, servo
        self.dt = settings.dt
        self.n_sub = substeps(self.dt, plant.dt)
        self.cols = tuple(log.col[k] for k in DriverLog.FIXED)  # wall, late, t, answers, age, miss
        self.qpos_c, self.qvel_c, self.tau_c = (log.col[k] for k in ("qpos", "qvel", "tau"))
        self.measured = "q" in log.col  # the published state is logged apart (not qpos/qvel)
        self.q_c, self.v_c = (log.col["q"], log.col["v"]) if self.measured else (self.tau_c, self.tau_c)
        self.tau = np.zeros(link.nv)
        self.brake = np.zeros(link.nv)
        # the brake acts through the motors: a closed chain's passive joints have none (the plant refuses a torque
        # there)
        self.motors = np.ones(link.nv)
        has_motor = getattr(getattr(plant, "map", None), "actuated", getattr(plant, "actuated", None))
        if has_motor is not None and np.shape(has_motor) == (link.nv,):
            self.motors[:] = has_motor
        self.active: set[int] = set()
        sources = sensor_views(plant.data, sensed)
        self.sensors = np.zeros(sum(a.size for a in sources)) if sources else None
        self.parts = []
        if self.sensors is not None:
            i = 0
            for a in sources:
                self.parts.append((self.sensors[i : i + a.size], a))
                i += a.size
        self.pq, self.pv = np.zeros(link.nq), np.zeros(link.nv)  # the published frame (with ``frame``)
        self.out: dict[str, Any] = dict(
            status="done",
            reason="",
            misses=0,
            max_consecutive_misses=0,
            overruns=0,
            slip_s=0.0,
            stop_cycle=-1,
        )
        # the controller process is this one's parent (forked): once it is gone, getppid() changes
        self.parent = os.getppid() if controller_pid is None else controller_pid
        self.held_answer = -1
        self.held_send = 0.0
        self.servo_answer = 0  # the newest command the joint PD has, a late one included
        self.consecutive = 0
        self.end = n_cycles - 1
        self.start = 0.0
        self.prev = (0.0, self.pq, self.pv)  # the frame an injected stale frame repeats (``stale_frame_at``)

    def sense(self) -> None:
        for dst, src in self.parts:
            np.copyto(dst, src)

    def published(self, t: float, q: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.frame is None:
            return q, v
        self.frame.publish(t, q, v, self.pq, self.pv)
        return self.pq, self.pv

    def controller_gone(self, k: int, t: float) -> str | None:
        parent = self.parent
        if os.getppid() == parent and not process_ending(parent):
            return None
        self.out["controller_died"] = True
        return (
            f"the controller process (pid {parent}) died (killed?) after answering cycle {self.held_answer} "
            f"(seen at cycle {k}, t = {t:.4f} s)"
        )

    def apply(self, t: float, k: int) -> None:
        self.plant.set_torque(self.tau)
        apply_disturbances(self.plant, self.disturbances, self.active, t)
        self.tau_c[k] = self.tau

    def advance(self, k: int) -> None:
        """The period's plant steps (through the robot's joint PD when it has one)."""
        if self.servo is None or self.out["stop_cycle"] >= 0:
            self.plant.step(self.n_sub)
        else:
            self.servo.step(self.plant, self.n_sub)
            self.tau_c[k] = self.servo.applied

    def stop(self, k: int, code: int, why: str) -> None:
        """Stop the robot at cycle k: the brake until the end of ``brake_s`` (the loop's last cycle)."""
        self.out.update(status="stopped", reason=why, stop_cycle=k)
        self.link.set_driver_status(rt.STOPPED, code)
        self.end = min(self.end, k + max(1, int(round(self.settings.brake_s / self.dt))))

    def _record_state(self, k: int, t: float, q: np.ndarray, v: np.ndarray) -> None:
        data = self.plant.data
        self.qpos_c[k], self.qvel_c[k], self.cols[2][k] = data.qpos, data.qvel, t
        if self.measured:
            self.q_c[k], self.v_c[k] = q, v

    def first_cycle(self) -> bool:
        """Cycle 0: publish s_0, wait (untimed) for its answer, apply it over [t_0, t_1]; then the clock starts.
        False when the run ended before the first command (the controller gone or asking to stop, a timeout)."""
        link, cmd, out, perf = self.link, self.link.command, self.out, time.perf_counter
        wall_c, late_c, _, ans_c, age_c, miss_c = self.cols
        q, v = self.plant.state()
        self.sense()
        t = self.plant.time
        w = perf()
        link.state.publish(0, t, w, *self.published(t, q, v), self.sensors)
        wall_c[0], late_c[0] = w, 0.0
        self._record_state(0, t, q, v)
        give_up = w + self.settings.start_timeout_s
        while True:
            if cmd.read() >= 0 and cmd.answers == 0 and cmd.seq > 0:
                break
            gone = self.controller_gone(0, t)
            if gone is not None:
                out.update(status="stopped", reason=f"{gone}, before the first command")
                link.set_driver_status(rt.STOPPED, rt.CONTROLLER_DIED)
                return False
            if link.stop_requested:
                out.update(
                    status="stopped", reason="the controller side asked to stop before the first cycle"
                )
                link.set_driver_status(rt.STOPPED, rt.CONTROLLER_REQUEST)
                return False
            if perf() > give_up:
                out.update(
                    status="failed", reason=f"no first command within {self.settings.start_timeout_s:g} s"
                )
                link.set_driver_status(rt.FAILED, rt.DRIVER_ERROR)
                return False
            time.sleep(1e-4)
        if self.servo is None:
            self.tau[:] = cmd.tau
        else:
            self.servo.receive(cmd.tau, q, v)  # (its curve starts at the measured motors)
            self.tau[:] = self.servo.tau
        self.held_send = cmd.send_wall
        ans_c[0], miss_c[0], age_c[0] = 0, 0, perf() - self.held_send
        self.apply(t, 0)
        self.advance(0)
        self.prev = (t, q.copy(), v.copy())  # (the previous frame: only for stale_frame_at)
        self.start = perf()
        self.log.header[1] = self.start
        link.set_driver_status(rt.RUNNING)
        self.held_answer = self.servo_answer = 0
        return True

    def run(self) -> None:
        """Cycles 1 … n − 1 (or to the end of a stop's brake): each cycle's tick and publication (``_tick``), its
        torque (``_command``), the stop a request asks for, the torque applied and the plant advanced."""
        log = self.log
        k = 0
        for k in range(1, self.n_cycles):
            t, v, now, fresh = self._tick(k)
            self._command(k, t, v, now, fresh)
            if self.link.stop_requested and self.out["stop_cycle"] < 0:
                self.stop(
                    k,
                    rt.CONTROLLER_REQUEST,
                    f"the controller side asked to stop at cycle {k} "
                    f"(t = {t:.4f} s): robot stopped with a damping brake",
                )
            self.apply(t, k)
            log.header[0] = k + 1  # (after the row is complete: a reader of a killed driver's log)
            if k >= self.end:
                break
            self.advance(k)
        log.header[0] = k + 1

    def _tick(self, k: int) -> tuple[float, np.ndarray, float, bool]:
        """Tick k: the state s_k (ready before it), the wait for the tick (a stalled driver's clock slips), whether
        the command answers s_{k−1} (read before s_k is out), the publication (an injected stale frame instead from
        ``stale_frame_at`` on).  Returns (t, v, now, fresh)."""
        out, perf, settings, cmd = self.out, time.perf_counter, self.settings, self.link.command
        q, v = self.plant.state()  # s_k, ready before its tick
        self.sense()
        t = self.plant.time
        fq, fv = self.published(t, q, v)
        self._record_state(k, t, q, v)
        target = self.start + k * self.dt
        wait_until(target, settings.spin_s, perf)
        now = perf()
        if now - target > self.dt:  # the driver itself stalled (preempted): its clock slips
            out["overruns"] += 1  # by the stall instead of rushing through the missed ticks
            out["slip_s"] += now - target
            self.start += now - target
            target = now
        fresh = cmd.read() >= 0 and cmd.answers == k - 1 and out["stop_cycle"] < 0
        s0 = settings.stale_frame_at
        st = self.link.state
        if 0 <= s0 <= k:  # (injected fault: frame s0 - 1 again from then on, so a late reader sees it too)
            t_prev, q_prev, v_prev = self.prev
            st.publish(s0 - 1, t_prev, now, *self.published(t_prev, q_prev, v_prev), self.sensors)
        else:
            st.publish(k, t, now, fq, fv, self.sensors)
        if k < s0:
            self.prev = (t, q.copy(), v.copy())
        self.cols[0][k], self.cols[1][k] = now, now - target
        return t, v, now, fresh

    def _command(self, k: int, t: float, v: np.ndarray, now: float, fresh: bool) -> None:
        """The torque of tick k: the brake while stopping (τ = −D v on the motors), the command when it answers
        s_{k−1} (in time), else the held one and a miss (a dead controller or ``max_misses`` in a row: a stop)."""
        out, cmd, servo = self.out, self.link.command, self.servo
        _, _, _, ans_c, age_c, miss_c = self.cols
        if out["stop_cycle"] >= 0:  # braking: τ = -D v
            np.multiply(v, -self.settings.brake_damping, out=self.brake)
            self.brake *= self.motors
            self.tau[:] = self.brake
            ans_c[k], age_c[k], miss_c[k] = -1, 0.0, 0
        elif fresh:
            if servo is None:
                self.tau[:] = cmd.tau
            elif (
                k - 1 > self.servo_answer
            ):  # a new command (the first one, answering s_0, was received at tick 0)
                servo.receive(cmd.tau)
                self.servo_answer = k - 1
                self.tau[:] = servo.tau
            else:
                servo.hold()
            self.held_answer, self.held_send = k - 1, cmd.send_wall
            ans_c[k], age_c[k], miss_c[k] = self.held_answer, now - self.held_send, 0
            self.consecutive = 0
        else:
            out["misses"] += 1
            self.consecutive += 1
            out["max_consecutive_misses"] = max(out["max_consecutive_misses"], self.consecutive)
            ans_c[k], age_c[k], miss_c[k] = self.held_answer, now - self.held_send, 1
            if servo is not None:
                servo.hold()
            gone = self.controller_gone(k, t)
            if gone is not None:
                self.stop(k, rt.CONTROLLER_DIED, f"{gone}: robot stopped with a damping brake")
            elif self.consecutive >= self.settings.max_misses:
                self.stop(
                    k,
                    rt.MISSES,
                    f"{self.consecutive} consecutive cycles without a torque in time "
                    f"(max_misses = {self.settings.max_misses}) at cycle {k} "
                    f"(t = {t:.4f} s): robot stopped with a damping brake "
                    f"(communication constraints violated)",
                )


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

"""The controller side of a fixed-rate loop across a process boundary, and ``run_rt``, which runs any
``Controller`` against a simulated plant driven by a driver process (sim/rt_driver.py) as it would run
against a real robot.

    run = run_rt(plant, controller, duration=60.0, control_dt=1e-3)      # same arguments as simulate()
    run.rt.misses, run.rt.timing()["latency_us"]["p99.9"], run.rt.gc_collections

Every cycle the controller loop (:func:`control_loop`)

1. waits for a new state: sleeps until ``spin_s`` before the state is due (the previous one's
   publication + one period), then spins on the state record's sequence counter (yielding the CPU
   between checks once the state is ``spin_s`` overdue);
2. reads the state under the sequence lock, calls ``controller(t, q, v)`` (with copies of q and v, as
   ``plant.state()`` gives them in process), and sends τ with the cycle it answers and the send time;
3. records, in preallocated arrays indexed by the cycle: latency (state published → τ sent), compute
   time, wake-up delay (float32 µs), and the plain fields of ``controller.info`` (for the run's log;
   float32, int64 or uint8: :func:`capture_buffer`).

**GC-free and allocation-free in the steady state.** The loop allocates nothing that outlives a cycle
(its arrays are made before it starts; Python floats and the controller's temporaries are freed each
cycle).  The cyclic garbage collector is disabled and every existing object frozen during the loop
(``gc.disable()``, ``gc.freeze()``), and ``gc.callbacks`` counts any collection that happens anyway (a
controller calling ``gc.collect()``).  The proof is measured, not assumed: ``gc.get_count()[0]`` (net
container allocations: what would trigger a collection if the GC were on) at the end of warm-up and at
the end, and, when ``tracemalloc`` is tracing, the traced memory at the same two points (the soak test
asserts zero collections and no growth).

Optional ``SCHED_FIFO`` and CPU pinning (``realtime_setup``), with one line saying what the OS allowed.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import math
import os
import shutil
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from cmstack.controllers.base import Controller, ReportsErrors, SensesPlant
from cmstack.models.errors import ConfigError, SensorFault, StackError
from cmstack.sim import interrupt
from cmstack.sim import rt_transport as rt
from cmstack.sim.base import Plant
from cmstack.sim.logger import Logger, write_parts
from cmstack.sim.rt_driver import DriverProcess, DriverReport, DriverSettings, realtime_setup, sensor_views
from cmstack.sim.rt_predict import prediction_stats, with_prediction
from cmstack.sim.rt_records import RECORDS, log_series, record_array, write_meta
from cmstack.sim.rt_transport import TRANSPORTS, Link
from cmstack.sim.runner import Disturbance, Run, substeps


class RtError(StackError):
    """The real-time loop could not run (no state from the driver, the driver failed or died)."""


class DriverDied(RtError):
    """The driver process ended without a word (killed, crashed) while the loop waited for a state."""


@dataclass
class LoopSettings:
    """spin_s: the last part of each wait spent spinning; warmup: cycles before the steady state (the
    GC and allocation figures are taken from there on); dead_after_periods: once a state is this many
    periods overdue, each check of the wait also asks whether the driver process still runs (a dead
    one ends the loop at once: :class:`DriverDied`; a live one that stalls is waited for);
    timeout_s: no new state for this long (after the first) ends the loop with an error;
    cpu / fifo / fifo_priority: as ``DriverSettings``; gc_off: disable and freeze the GC during the
    loop; capture_info: record ``controller.info``'s plain fields per cycle."""

    spin_s: float = 3e-4
    warmup: int = 200
    dead_after_periods: float = 2.0
    timeout_s: float = 2.0
    start_timeout_s: float = 30.0
    cpu: int | None = None
    fifo: bool = False
    fifo_priority: int = 80
    gc_off: bool = True
    capture_info: bool = True


@dataclass
class LoopReport:
    """What the controller loop measured.  Per cycle k (the state it answered; NaN where none):
    ``latency_us`` (state published → τ sent), ``compute_us`` (the controller call), ``wake_us`` (state
    published → the call starts).  ``cycles``: states answered; ``read_failures``; ``gc_collections``
    during the whole loop; ``gc_gen0_growth`` and ``traced_growth_bytes`` (None when tracemalloc was
    off) from the end of warm-up to the end.  ``ended_by``: what ended the loop (the driver's status,
    "interrupted", "driver died", "controller error", "timeout"); ``last_state_wall``: the publication
    time of the last state read (``perf_counter``); ``driver_lost_after_s``: when the driver died, how
    long after that state its death was seen."""

    cycles: int = 0
    read_failures: int = 0
    gc_collections: int = 0
    gc_gen0_growth: int = 0
    traced_growth_bytes: int | None = None
    steady_cycles: int = 0
    ended_by: str = ""
    last_state_wall: float = float("nan")
    driver_lost_after_s: float = float("nan")
    setup: list[str] = field(default_factory=list)
    latency_us: np.ndarray = field(default_factory=lambda: np.zeros(0))
    compute_us: np.ndarray = field(default_factory=lambda: np.zeros(0))
    wake_us: np.ndarray = field(default_factory=lambda: np.zeros(0))
    info: dict[str, np.ndarray] = field(default_factory=dict)
    errors: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def bytes_per_cycle(self) -> int:
        """Bytes the loop keeps per cycle: its timing arrays, the captured info fields and errors."""
        arrays = [self.latency_us, self.compute_us, self.wake_us, *self.info.values(), *self.errors.values()]
        return sum(a.nbytes // max(len(a), 1) for a in arrays)


def _info_fields(info: object) -> list[tuple[str, Any]]:
    """(name, first value) of the plain fields and properties of a step report that can be recorded
    per cycle in a preallocated array: NumPy arrays, numbers and bools (not private, not strings)."""
    out: list[tuple[str, Any]] = []
    names = [f.name for f in dataclasses.fields(info)] if dataclasses.is_dataclass(info) else []
    names += [n for n, a in vars(type(info)).items() if isinstance(a, property)]
    for name in dict.fromkeys(names):
        if name.startswith("_"):
            continue
        try:
            val = getattr(info, name)
        except Exception:
            continue
        if isinstance(val, np.ndarray) and val.dtype.kind in "fiub" and val.size <= 4096:
            out.append((name, val))
        elif isinstance(val, (bool, int, float, np.number)):
            out.append((name, val))
    return out


def capture_buffer(value: Any, n_cycles: int, records: Path | None = None, name: str = "info") -> np.ndarray:
    """A preallocated per-cycle buffer for one field of ``controller.info`` whose first value is ``value``,
    in a compact type: uint8 for booleans, int64 for integers (0 until recorded), float32 for real values
    (7 significant digits; NaN until recorded); with ``records``, the file ``records/<name>.npy``
    (:func:`record_array`)."""
    kind = np.asarray(value).dtype.kind
    shape = (n_cycles, *np.shape(value))
    if kind == "b":
        return record_array(records, name, shape, np.uint8, 0)
    if kind in "iu":
        return record_array(records, name, shape, np.int64, 0)
    return record_array(records, name, shape, np.float32, np.nan)


def read_loop_records(records: str | Path) -> LoopReport:
    """The :class:`LoopReport` a controller loop streamed to ``records`` (``control_loop(records=…)``),
    read back by another process (the driver, after the controller process died): the per-cycle
    arrays (``latency_us``, ``compute_us``, ``wake_us``, ``info__*``, ``error__*``) and the cycles
    answered; a file left half-made by the kill is skipped."""
    d = Path(records)
    rep = LoopReport(ended_by="controller process died")
    for f in sorted(d.glob("*.npy")):
        try:
            a = np.load(f, mmap_mode="r")
        except (OSError, ValueError):
            continue
        name = f.stem
        if name == "loop":
            rep.cycles = int(a[0])
        elif name in ("latency_us", "compute_us", "wake_us"):
            setattr(rep, name, np.asarray(a))
        elif name.startswith("info__"):
            rep.info[name[6:]] = np.asarray(a)
        elif name.startswith("error__"):
            rep.errors[name[7:]] = np.asarray(a)
    return rep


def _captured(buf: np.ndarray, row: int) -> Any:
    """Row ``row`` of a :func:`capture_buffer` in the field's own kind (bool, int64, float64); NaN for
    row -1 (no answer yet)."""
    if row < 0:
        return buf[0] * np.nan
    x = buf[row]
    return x != 0 if buf.dtype == np.uint8 else x.astype(np.float64) if buf.dtype == np.float32 else x


def _sensor_views(link: Link, sense_into: Sequence[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(destination, source) pairs of :func:`control_loop`: each array of ``sense_into`` receives, in
    order, its slice of the sensor values published with each state (views of the local copy, made once);
    a ConfigError if their sizes do not add up to the transport's."""
    sensed, i0 = [], 0
    for dst in sense_into:
        sensed.append((dst, link.state.sensors[i0 : i0 + dst.size]))
        i0 += dst.size
    if i0 != link.state.sensors.size:
        raise ConfigError(
            f"sense_into takes {i0} values, the transport's states carry {link.state.sensors.size}"
        )
    return sensed


def _first_cycle_buffers(
    controller: Controller,
    reporter: ReportsErrors | None,
    t: float,
    n_cycles: int,
    records: Path | None,
    rep: LoopReport,
    s: LoopSettings,
    capture: list[tuple[str, np.ndarray]],
) -> None:
    """The per-cycle arrays of :func:`control_loop` (n_cycles rows each), allocated and touched before the
    first answer, which the driver waits for before its clock starts (outside the timed run): the
    controller's ``info`` fields (appended to ``capture``, ``rep.info``) and its errors at time ``t``."""
    if s.capture_info and getattr(controller, "info", None) is not None:
        for name, val in _info_fields(controller.info):
            capture.append((name, capture_buffer(val, n_cycles, records, f"info__{name}")))
        rep.info = dict(capture)
    if reporter is not None:
        for group in reporter.errors(reporter.kin, t):
            for name, e in group.items():
                rep.errors[name] = record_array(
                    records, f"error__{name}", (n_cycles, np.size(e)), np.float64, np.nan
                )


def _check_waiting(
    link: Link,
    is_alive: Callable[[], bool] | None,
    rep: LoopReport,
    due: float,
    last_wall: float,
    dt: float,
    dead_after: float,
    due_timeout: float,
    next_alive_check: float,
) -> float:
    """:func:`control_loop`'s check while it waits for a state (every 1024 spins).  ``due``, ``last_wall``,
    ``dead_after``, ``due_timeout`` and ``next_alive_check`` in perf_counter seconds, ``dt`` the period (s).
    Returns the next time to ask ``is_alive()`` (at most once a period: it reads /proc), or −1 when the wait
    is to end (the driver no longer runs, or an interrupt was requested); raises DriverDied once the state is
    ``dead_after`` overdue and the driver is dead, RtError after ``due_timeout``.  (The times are separate
    arguments, not a tuple: a tuple made here, on the rare path a loaded machine takes, outlives its call on
    CPython's free list and shows as allocation growth in the steady state.)"""
    if link.driver_status not in (rt.STARTING, rt.RUNNING):
        return -1.0
    now = time.perf_counter()
    over = now - due
    if over > dead_after and is_alive is not None and now >= next_alive_check:
        next_alive_check = now + dt
        if not is_alive():
            rep.driver_lost_after_s = time.perf_counter() - last_wall
            rep.ended_by = "driver died"
            raise DriverDied(
                f"the driver process ended without a word (killed?): no state for "
                f"{rep.driver_lost_after_s * 1e3:.1f} ms after its last one"
            )
    if over > due_timeout:
        rep.ended_by = "timeout"
        raise RtError(f"no new state from the driver for {due_timeout:g} s")
    if interrupt.requested() is not None:
        return -1.0
    return next_alive_check


def _record_cycle(
    controller: Controller,
    reporter: ReportsErrors | None,
    t: float,
    k: int,
    rep: LoopReport,
    capture: list[tuple[str, np.ndarray]],
) -> None:
    """Row ``k`` of :func:`control_loop`'s per-cycle arrays, after the send: the reporter's task errors
    at time ``t`` and the captured fields of ``controller.info`` (a field that does not fit is skipped)."""
    if reporter is not None:
        for group in reporter.errors(reporter.kin, t):
            for name, e in group.items():
                rep.errors[name][k] = e
    if capture:
        info = controller.info  # (capture is filled only if it has one)
        for name, buf in capture:
            try:
                buf[k] = getattr(info, name)
            except (ValueError, TypeError):
                pass


def _timing_arrays(
    records: Path | None, n_cycles: int, rep: LoopReport
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`control_loop`'s per-cycle latency, compute and wake times (µs, float32: 0.01 µs below 100 ms,
    NaN until written; also set on ``rep``) and its one-entry count of states answered (for a reader)."""
    lat = record_array(records, "latency_us", (n_cycles,), np.float32, np.nan)
    comp = record_array(records, "compute_us", (n_cycles,), np.float32, np.nan)
    wake = record_array(records, "wake_us", (n_cycles,), np.float32, np.nan)
    rep.latency_us, rep.compute_us, rep.wake_us = lat, comp, wake
    return lat, comp, wake, record_array(records, "loop", (1,), np.int64, 0)


def _close_gc_count(
    rep: LoopReport,
    s: LoopSettings,
    i: int,
    gen0: int,
    mem0: int | None,
    collections: int,
    on_gc: Callable[[str, dict[str, Any]], None],
) -> None:
    """:func:`control_loop`'s allocation figures once it ends after ``i`` cycles: growth of the gc's
    generation 0 and (``mem0`` not None: tracemalloc on) of the traced memory since the warm-up, the steady
    cycles and the collections seen; then the gc callback removed and the gc back on if ``gc_off``."""
    if i >= s.warmup:
        rep.gc_gen0_growth = gc.get_count()[0] - gen0
        if mem0 is not None:
            rep.traced_growth_bytes = tracemalloc.get_traced_memory()[0] - mem0
    rep.steady_cycles = max(0, i - s.warmup)
    rep.gc_collections = collections
    gc.callbacks.remove(on_gc)
    if s.gc_off:
        gc.enable()
        gc.unfreeze()


def control_loop(
    link: Link,
    controller: Controller,
    n_cycles: int,
    dt: float,
    settings: LoopSettings | None = None,
    is_alive: Callable[[], bool] | None = None,
    errors: bool = False,
    sense_into: Sequence[np.ndarray] = (),
    report: LoopReport | None = None,
    records: Path | None = None,
) -> LoopReport:
    """Answer the driver's states with ``controller`` until the driver ends (done or stopped) or the
    run is interrupted (SIGINT/SIGTERM: the driver is asked to stop).  ``is_alive``: whether the driver
    process still runs (checked while waiting).  ``errors``: record ``controller.errors(controller.kin,
    t)`` per cycle after the send (a :class:`ReportsErrors` controller; ``LoopReport.errors``).
    ``sense_into``: flat arrays (views of the plant data a SensesPlant controller reads) that receive,
    in order, the sensor values published with each state, before the controller is called.  A
    controller exception asks the driver to stop and propagates.  ``report``: the LoopReport to fill
    (the caller then has the cycles recorded however the loop ends, an exception included).
    ``records``: a directory where the per-cycle arrays are made as files (:func:`record_array`: the
    rows are in the page cache as soon as written, read back by :func:`read_loop_records` if this
    process dies), with ``loop.npy`` holding the number of states answered.
    A driver that stops publishing: once the state is ``dead_after_periods`` overdue, ``is_alive()``
    is asked once a period (at the wait's checks, every 1024 spins); a dead driver raises
    :class:`DriverDied` there, a few periods after its last state; one that lives is waited for up to
    ``timeout_s``."""
    s = settings or LoopSettings()
    sensed = _sensor_views(link, sense_into)
    reporter = controller if errors and isinstance(controller, ReportsErrors) else None
    rep = report if report is not None else LoopReport()
    rep.setup = realtime_setup(s.cpu, s.fifo, s.fifo_priority, "controller")
    st, cmd = link.state, link.command
    perf, sleep, yield_cpu = time.perf_counter, time.sleep, os.sched_yield
    lat, comp, wake, answered = _timing_arrays(records, n_cycles, rep)
    capture: list[tuple[str, np.ndarray]] = []
    seen = 0
    gcs = [0]
    on_frame = getattr(controller, "on_frame", None)  # (a PredictingController: which torque the robot holds)
    sent_k, sent_wall = -1, 0.0

    def on_gc(phase, _info):
        if phase == "start":
            gcs[0] += 1

    tracing = tracemalloc.is_tracing()
    mem0 = gen0 = 0
    if s.gc_off:
        gc.collect()  # (before the count starts: this one is ours, outside the loop)
        gc.freeze()
        gc.disable()
    gc.callbacks.append(on_gc)
    running = (rt.STARTING, rt.RUNNING)
    try:
        last_seq, last_wall, i, last_k = 0, perf(), 0, -1
        due_timeout = s.start_timeout_s
        dead_after = s.dead_after_periods * dt
        next_alive_check = 0.0
        while True:
            # ---- wait for a new state: sleep, then spin on the sequence counter
            due = last_wall + dt
            rest = due - perf() - s.spin_s
            if rest > 0:
                sleep(rest)
            spins, late = 0, due + s.spin_s
            while st.seq == last_seq:
                spins += 1
                if spins & 63 == 0 and perf() > late:
                    yield_cpu()  # late state (driver preempted): let others run
                if spins & 1023 == 0:
                    next_alive_check = _check_waiting(
                        link, is_alive, rep, due, last_wall, dt, dead_after, due_timeout, next_alive_check
                    )
                    if next_alive_check < 0.0:
                        break
            if st.seq == last_seq:  # ended while waiting
                rep.ended_by = (
                    "interrupted"
                    if interrupt.requested() is not None
                    else rt.STATUS_NAMES.get(link.driver_status, "?")
                )
                break
            seq = st.read()
            if seq < 0:
                rep.read_failures += 1
                continue
            last_seq = seq
            k = int(st.local[0])
            if k <= last_k:  # the driver's frame counter did not advance: the same frame twice
                fault = SensorFault(
                    "stale_frame",
                    f"stale_frame: the driver's frame counter did not advance (frame {k} after frame {last_k}, "
                    f"t = {st.local[1]:.4f} s): a stale state, not answered",
                )
                fault.t = float(st.local[1])
                rep.ended_by = "stale frame"
                raise fault
            last_k = k
            wall = st.local[2]
            rep.last_state_wall = wall
            # ---- the controller's step, on copies (a law may keep the arrays it is given)
            for dst, src in sensed:
                np.copyto(dst, src)
            if on_frame is not None:
                on_frame(k, wall, sent_k, sent_wall)
            c0 = perf()
            tau = controller(st.local[1], st.q.copy(), st.v.copy())
            c1 = perf()
            if i == 0:  # (before the first answer: the driver's clock has not started)
                _first_cycle_buffers(controller, reporter, st.local[1], n_cycles, records, rep, s, capture)
                c1 = perf()  # (the torque's age counts from its send)
            cmd.send(k, tau, c1)
            sent_k, sent_wall = k, c1
            # ---- bookkeeping (after the send: not on the latency path)
            if k < n_cycles:
                lat[k] = (c1 - wall) * 1e6
                comp[k] = (c1 - c0) * 1e6
                wake[k] = (c0 - wall) * 1e6
            seen += 1
            answered[0] = seen
            if k < n_cycles and (reporter is not None or capture):
                _record_cycle(controller, reporter, st.local[1], k, rep, capture)
            last_wall = wall
            i += 1
            if i == s.warmup:
                gen0 = gc.get_count()[0]
                if tracing:
                    mem0 = tracemalloc.get_traced_memory()[0]
            due_timeout = s.timeout_s
            if link.driver_status not in running:
                rep.ended_by = rt.STATUS_NAMES.get(link.driver_status, "?")
                break
            if interrupt.requested() is not None:
                link.request_stop()
    except BaseException as exc:
        link.request_stop()
        if not rep.ended_by:
            rep.ended_by = f"error ({type(exc).__name__})"
        raise
    finally:
        rep.cycles = seen
        _close_gc_count(rep, s, i, gen0, mem0 if tracing else None, gcs[0], on_gc)
    if interrupt.requested() is not None:
        link.request_stop()
        rep.ended_by = "interrupted"
    rep.cycles = seen
    return rep


# ------------------------------------------------------------------------------- the whole run
def percentiles(values: ArrayLike) -> dict[str, float]:
    """p50, p99, p99.9, max and mean of the finite values of ``values`` (NaN when there are none), and
    their number ``n``."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if not x.size:
        return {k: float("nan") for k in ("p50", "p99", "p99.9", "max", "mean")} | {"n": 0}
    p = np.percentile(x, [50, 99, 99.9])
    return {
        "p50": float(p[0]),
        "p99": float(p[1]),
        "p99.9": float(p[2]),
        "max": float(x.max()),
        "mean": float(x.mean()),
        "n": int(x.size),
    }


@dataclass
class RtResult:
    """Both sides of an rt run: the driver's report (with its per-cycle log) and the loop's."""

    rate_hz: float
    driver: DriverReport
    loop: LoopReport
    setup: list = field(default_factory=list)
    transport: str = "shm"
    #: the controller side's prediction (sim/rt_predict.py): mode, predictions, failures, ...; or why none
    predict: dict = field(default_factory=lambda: {"mode": "none"})

    @property
    def misses(self) -> int:
        return self.driver.misses

    def timing(self) -> dict:
        """The figures of timing.json (cycle 0, answered before the clock starts, is left out of the
        percentiles)."""
        d, L = self.driver, self.loop
        n = max(d.cycles, 1)
        log = d.log
        wall = log["wall"]
        period = np.diff(wall[1:]) * 1e6 if wall.size > 2 else np.zeros(0)  # from tick 1 on (tick 0: start)
        age = log["age"][1:] * 1e6
        late = log["late"][1:] * 1e6
        return {
            "rate_hz": self.rate_hz,
            "period_target_us": 1e6 / self.rate_hz,
            "transport": self.transport,
            "cycles": d.cycles,
            "status": d.status,
            "reason": d.reason,
            "stops": int(d.status == "stopped"),
            "misses": d.misses,
            "misses_per_million": d.misses / n * 1e6,
            "max_consecutive_misses": d.max_consecutive_misses,
            "driver_overruns": d.overruns,
            "driver_overruns_per_million": d.overruns / n * 1e6,
            "driver_slip_s": d.slip_s,
            "period_us": percentiles(period),
            "tick_lateness_us": percentiles(late),
            "latency_us": percentiles(L.latency_us[1:]),
            "compute_us": percentiles(L.compute_us[1:]),
            "wake_us": percentiles(L.wake_us[1:]),
            "torque_age_us": percentiles(age),
            "controller_cycles": L.cycles,
            "states_skipped": max(0, d.cycles - L.cycles),
            "read_failures": L.read_failures,
            "gc_collections": L.gc_collections,
            "gc_gen0_growth": L.gc_gen0_growth,
            "traced_growth_bytes": L.traced_growth_bytes,
            "steady_cycles": L.steady_cycles,
            "loop_ended_by": L.ended_by,
            "stop_cycle": d.stop_cycle,
            "driver_lost_after_last_state_ms": (
                L.driver_lost_after_s * 1e3 if np.isfinite(L.driver_lost_after_s) else None
            ),
            "torque_saturations": d.saturated,
            "predict": self.predict,
            "setup": self.setup + d.setup + L.setup,
            "log_bytes_per_cycle": {"driver": d.log.bytes_per_cycle, "controller": L.bytes_per_cycle},
        }


@dataclass
class RtRun(Run):
    """A :class:`~cmstack.sim.runner.Run` from :func:`run_rt`, plus ``rt`` (the :class:`RtResult`)."""

    rt: RtResult | None = None

    def timing(self) -> dict:
        out = super().timing()
        if self.rt is not None:
            t = self.rt.timing()
            out.update(
                rt_misses=t["misses"],
                rt_stops=t["stops"],
                rt_latency_us_p999=t["latency_us"]["p99.9"],
                rt_gc_collections=t["gc_collections"],
                rt_predict=t["predict"]["mode"],
            )
        return out

    def save(self, out: str | Path) -> Path:
        path = super().save(out)
        if self.rt is not None:
            from cmstack.sim.logger import atomic_write

            atomic_write(path / "timing.json", json.dumps(self.rt.timing(), indent=1))
        return path


def _checked_settings(
    plant: Plant,
    duration: float,
    control_dt: float,
    transport: str,
    driver: DriverSettings | None,
    loop: LoopSettings | None,
) -> tuple[DriverSettings, LoopSettings, int]:
    """:func:`run_rt`'s arguments checked (one-line ``ConfigError``s): the driver's settings at 1 / ``control_dt``
    Hz, the loop's, and the number of cycles in ``duration`` (s)."""
    if not duration > 0:
        raise ConfigError(f"duration must be > 0 s, got {duration}")
    if transport not in TRANSPORTS:
        raise ConfigError(f"transport='{transport}' is not one of {sorted(TRANSPORTS)}")
    ds = dataclasses.replace(driver or DriverSettings(), rate_hz=1.0 / control_dt).check()
    substeps(control_dt, plant.dt)
    return ds, loop or LoopSettings(), int(round(duration / control_dt))


def run_rt(
    plant: Plant,
    controller: Controller,
    *,
    duration: float,
    control_dt: float,
    record: Callable[[float, np.ndarray, np.ndarray, np.ndarray], None] | None = None,
    disturbances: Sequence[Disturbance] = (),
    viewer: object = None,
    progress: bool = False,
    desc: str = "rt",
    log: Logger | None = None,
    task_errors: bool = True,
    driver: DriverSettings | None = None,
    loop: LoopSettings | None = None,
    transport: str = "shm",
    on_loop_end: Callable[[RtRun], None] | None = None,
    on_start: Callable[[], None] | None = None,
    on_orphan: Callable[[RtRun], None] | None = None,
    frame: Any = None,
    servo: Any = None,
    predict: str = "none",
) -> RtRun:
    """:func:`~cmstack.sim.runner.simulate`'s contract, run across a process boundary in wall-clock time
    at 1 / ``control_dt`` Hz: the plant goes to a driver process (sim/rt_driver.py, forked: it keeps the
    plant as built), this process runs ``controller`` against it (:func:`control_loop`).  After the
    loop, ``record(t, q, v, tau)`` is called once per cycle with the driver's log (the state it
    published, the torque it applied over [t, t + control_dt]), the plant's ``data.qpos``/``qvel`` set
    to that cycle's, and ``controller.info`` replaced by the fields captured at the step whose torque
    was applied (when ``info`` can be assigned); the log then holds what the in-process run's would.
    ``task_errors``: a ReportsErrors controller's errors are kept in ``run.errors``, one row per cycle:
    evaluated after the loop at each cycle's measured state with the controller's model
    (``controller.robot.update(q, v)``; UK's ``errors`` leaves cyclic garbage, which would grow with the
    GC off), or, for a controller without ``robot``, recorded in the loop after the send (a state the
    controller never saw gets those of the last one it did).
    ``viewer`` and ``progress`` are ignored (nothing but the loop runs in the loop).
    ``driver``/``loop``: settings (the rate is 1 / ``control_dt``); ``transport``: "shm" (shared memory,
    sequence locks) or "udp" (datagrams on the loopback, sim/rt_transport.py); ``on_loop_end(run)`` is
    called when both processes are done, before the replay (which a Ctrl-C may cut short);
    ``on_start()`` once everything is checked, just before the driver process starts.
    A :class:`SensesPlant` controller must name the ``plant.data`` arrays it reads (``sensed_data``): it is
    given this process's plant, whose arrays the loop refreshes from each published state.

    **What a crash leaves.**  With a ``log`` that checkpoints to a run directory (``Logger(checkpoint=
    DIR/log.npz)``, every scenario run's), the loop's per-cycle records are files in ``DIR/.rt/``
    (:func:`record_array`), in the page cache as each cycle writes them.  A driver that dies (``kill
    -9``, a crash) is seen a few periods after its last state (:class:`DriverDied`, naming its pid, the
    signal and the cycle); the cycles it ran (its log is a shared mapping) are then replayed into
    ``log`` as after a normal run, ``on_loop_end`` is called, and the error is raised.  A controller
    exception likewise (the driver brakes first).  A controller process that dies is seen by the driver
    at its next miss: it brakes, then, in the driver process, writes the cycles run as checkpoint parts
    of ``log`` (:func:`~cmstack.sim.logger.write_parts`: t, q, v, tau, plant_qpos, plant_qvel and the
    ``controller.info`` fields captured at each applied torque's step, read back from ``.rt/``), calls
    ``on_orphan(run)`` (the run's ``rt`` built from both sides' records: ``cmstack rt`` writes timing.json
    there), and unlinks the shared memory.

    ``frame``: what the driver publishes instead of the plant's whole state (``sim/sensors.ActuatedFrame``: the
    motors' encoders, NaN elsewhere; ``simulate(sensors="actuated")`` passes it); the log keeps the plant's state.
    ``servo``: a position-controlled robot (``sim/sensors.JointServo``): ``controller`` returns its packed
    command (q_des, v_des, τ_ff) (``PositionCommanding``), which the driver's copy of ``servo`` runs as the
    robot's joint PD at the plant's rate; the log's τ is the torque the PD applied (averaged over the period).
    ``predict``: "none", "one-step" or "latency" (sim/rt_predict.py): the law answers the state predicted at the
    time its torque will be applied, one period after the state it is given (the driver's delay), by the law's
    model's forward dynamics; timing.json's ``predict`` says what was done (or why nothing: a position command, a
    floating base, a law without a model)."""
    ds, ls, n_cycles = _checked_settings(plant, duration, control_dt, transport, driver, loop)
    sensed = _sensed_names(controller)
    sense_into = sensor_views(plant.data, sensed)  # the parent's copy of the arrays, refreshed every cycle
    nq, nv = (len(x) for x in plant.state())
    controller, not_predicted = with_prediction(
        controller, predict, control_dt, n_cycles, (nq, nv), partial_state=frame is not None
    )
    log, record = _log_and_record(plant, log, record)
    res = RtRun(duration=n_cycles * control_dt, control_dt=control_dt, log=log)
    reports = task_errors and isinstance(controller, ReportsErrors)
    model = getattr(controller, "robot", None)
    posthoc = reports and callable(getattr(model, "update", None))  # errors from the model, after the loop
    records = _loop_records(log)
    orphaned = _orphan_handler(res, log, ds, transport, records, on_orphan)
    link = TRANSPORTS[transport](
        nq, nv, ns=sum(a.size for a in sense_into), nc=None if servo is None else servo.nc
    )
    proc = None
    rep = LoopReport()  # filled by the loop however it ends
    failure: BaseException | None = None
    w0 = time.perf_counter()
    try:
        if on_start is not None:
            on_start()
        if isinstance(controller, SensesPlant):
            controller.attach_plant(plant)  # this process's plant, its sensed arrays kept current
        proc = DriverProcess.start(
            plant,
            link,
            n_cycles,
            ds,
            disturbances,
            sensed,
            on_orphan=orphaned,
            records=None if records is None else records.parent / "driver",
            frame=frame,
            servo=servo,
        )
        try:
            control_loop(
                link,
                controller,
                n_cycles,
                control_dt,
                ls,
                is_alive=proc.is_alive,
                errors=reports and not posthoc,
                sense_into=sense_into,
                report=rep,
                records=records,
            )
        except Exception as exc:  # (the cycles done are kept: replayed below, then it is raised)
            failure = exc
        finally:
            report = proc.finish(timeout_s=max(10.0, ds.brake_s + 5.0))
        res.wall_s = time.perf_counter() - w0
    finally:
        if proc is not None and proc.proc.is_alive():
            proc.proc.kill()
        link.close()
        if proc is None and records is not None:  # (refused before the driver started: nothing to keep)
            shutil.rmtree(records.parent, ignore_errors=True)
    res.rt = RtResult(rate_hz=ds.rate_hz, driver=report, loop=rep, transport=transport)
    res.rt.predict = prediction_stats(controller, predict, not_predicted)
    if servo is not None and math.isfinite(report.pd_torque_max):  # (the driver's copy ran the PD)
        servo.pd_torque_max = report.pd_torque_max
    failure = _run_failure(failure, report, rep)
    if on_loop_end is not None:
        on_loop_end(res)
    try:  # what was run is logged, also when the run failed (the log then ends where it did)
        _replay(res, report, rep, plant, controller, record, model if posthoc else None)
    except Exception:
        if failure is None:
            raise
    finally:
        if records is not None:  # (the arrays stay mapped: rt_timing.npz is written from them)
            shutil.rmtree(records.parent, ignore_errors=True)
    if failure is not None:
        raise failure
    return res


def _log_and_record(
    plant: Plant,
    log: Logger | None,
    record: Callable[[float, np.ndarray, np.ndarray, np.ndarray], None] | None,
) -> tuple[Logger, Callable[[float, np.ndarray, np.ndarray, np.ndarray], None]]:
    """The run's log (a new ``Logger`` when none is given) and what is recorded each cycle: ``record``, or t, q,
    v, τ and the plant's qpos into the log (with a MuJoCo plant's MJCF in its meta, what the viewer replays)."""
    log = Logger() if log is None else log
    if record is None:

        def record(t, q, v, tau):
            log.append(t=t, q=q, v=v, tau=tau, plant_qpos=plant.data.qpos)

        path = getattr(plant, "path", None)
        if path is not None:
            log.meta.setdefault("mjcf_path", str(path))
    return log, record


def _loop_records(log: Logger) -> Path | None:
    """The controller loop's record directory ``DIR/.rt/controller`` of a log that checkpoints to ``DIR``, made
    empty (a previous run's removed) with the log's meta beside it; None for a log without a checkpoint."""
    ckpt = getattr(log, "checkpoint_path", None)
    records = None if ckpt is None else Path(ckpt).parent / RECORDS / "controller"
    if records is not None:
        shutil.rmtree(records.parent, ignore_errors=True)  # (a previous run's, in the same directory)
        records.mkdir(parents=True)
        write_meta(records.parent, log.meta)
    return records


def _sensed_names(controller: Controller) -> tuple[str, ...]:
    """The ``plant.data`` arrays a :class:`SensesPlant` controller reads (its ``sensed_data``; () for any other),
    refused when it does not name them."""
    if not isinstance(controller, SensesPlant):
        return ()
    sensed = tuple(getattr(controller, "sensed_data", None) or ())
    if not sensed:
        raise ConfigError(
            f"{type(controller).__name__} reads a sensor of the plant in its own process "
            "(SensesPlant) and does not name it: it cannot run across a process boundary "
            "(cmstack rt) until it names the plant.data arrays it reads (sensed_data, e.g. "
            "('qfrc_constraint',)), which the driver then publishes with each state"
        )
    return sensed


def _orphan_handler(
    res: RtRun,
    log: Logger,
    ds: DriverSettings,
    transport: str,
    records: Path | None,
    on_orphan: Callable[[RtRun], None] | None,
) -> Callable[[dict, Any], None]:
    """What the driver process does when its controller process died (:func:`run_rt`, "What a crash leaves"):
    the run's ``rt`` from both sides' records, the log's checkpoint parts, ``on_orphan(res)``, the records
    removed."""
    ckpt = getattr(log, "checkpoint_path", None)

    def orphaned(fields: dict, dlog) -> None:  # in the driver process, its controller process dead
        report = DriverReport(cycles=dlog.cycles, log=dlog, **fields)
        loop_rep = read_loop_records(records) if records is not None else LoopReport()
        loop_rep.ended_by = "controller process died"
        res.rt = RtResult(rate_hz=ds.rate_hz, driver=report, loop=loop_rep, transport=transport)
        res.steps = report.cycles
        if ckpt is not None:
            L = report.log
            driver = {k: L[k] for k in ("t", "q", "v", "tau", "qpos", "qvel", "answers")}
            write_parts(ckpt, log_series(driver, loop_rep.info), dict(log.meta), max(1, round(ds.rate_hz)))
        if on_orphan is not None:
            on_orphan(res)
        if records is not None:
            shutil.rmtree(records.parent, ignore_errors=True)

    return orphaned


def _run_failure(
    failure: BaseException | None, report: DriverReport, rep: LoopReport
) -> BaseException | None:
    """The error a run ends with, and the driver report's reason: a dead driver named with when it was seen, a
    controller-side failure appended to the driver's reason, a failed driver as an :class:`RtError`."""
    if isinstance(failure, DriverDied):  # the driver's own account of its end, and when it was seen
        failure = DriverDied(
            f"{report.reason}; seen {rep.driver_lost_after_s * 1e3:.1f} ms after its last state"
        )
        report.reason = str(failure)
    elif failure is not None and report.status != "failed":
        report.reason += f" (the controller side failed: {type(failure).__name__}: {failure})"
    elif failure is None and report.status == "failed":
        failure = RtError(f"rt run failed: {report.reason}")
    return failure


def _replay(res: RtRun, report: DriverReport, rep: LoopReport, plant, controller, record, model=None) -> None:
    """Call ``record`` once per driver cycle (see :func:`run_rt`) and fill the run's step figures;
    with ``model`` (the controller's Robot), its errors at each cycle's measured state."""
    L = report.log
    n = report.cycles
    res.steps = n
    res.step_us = [float(x) for x in rep.compute_us[np.isfinite(rep.compute_us)]]
    res.cpu_s = float("nan")
    if rep.errors:  # row k: the errors at the last state answered up to k
        valid = np.isfinite(rep.latency_us[:n])
        valid[0] = True
        last = np.maximum.accumulate(np.where(valid, np.arange(n), 0))
        res.errors = {name: list(buf[last]) for name, buf in rep.errors.items()}
    try:
        plant.saturated = report.saturated  # counted where the torques were applied: the driver
    except AttributeError:
        pass
    data = plant.data
    answers = L["answers"].astype(int)
    qpos, qvel, ts, qs, vs, taus = (L[k] for k in ("qpos", "qvel", "t", "q", "v", "tau"))
    proxy, original = None, getattr(controller, "info", None)
    if rep.info:

        class CapturedInfo:  # the captured fields; anything else from the last report
            def __getattr__(self, name):
                return getattr(original, name)

        proxy = CapturedInfo()
        try:
            controller.info = proxy
        except AttributeError:
            proxy = None
    try:
        for k in range(n):
            data.qpos[:] = qpos[k]
            data.qvel[:] = qvel[k]
            if proxy is not None:
                a = int(answers[k])
                for name, buf in rep.info.items():
                    setattr(proxy, name, _captured(buf, a))
            t, q, v = float(ts[k]), qs[k].copy(), vs[k].copy()
            if model is not None:
                for group in controller.errors(model.update(q, v), t):
                    for name, e in group.items():
                        res.errors.setdefault(name, []).append(np.array(e, dtype=float))
            record(t, q, v, taus[k].copy())
    finally:
        if proxy is not None:
            controller.info = original
    if n:
        data.qpos[:] = qpos[n - 1]
        data.qvel[:] = qvel[n - 1]
        try:
            data.time = float(ts[n - 1])
        except (AttributeError, TypeError):
            pass

"""``cmstack rt NAME|PATH.py``: run a scenario as it would run on a real robot, the plant in a driver
process advancing in wall-clock time at a fixed rate and the controller in this process across shared
memory (sim/rt_driver.py, sim/rt_loop.py, sim/rt_transport.py).

    cmstack rt yumi_dual_arm --rate 1000 --duration 60 [--transport shm|udp] [--fifo] [--pin 1,0]
               [--max-misses 20] [--set key=value ...] [--config F.toml] [--out DIR] [--no-compare]

The scenario builds its plant and controller exactly as ``cmstack run`` does (its ``simulate`` call is
handed to :func:`~cmstack.sim.rt_loop.run_rt` through ``sim.runner.LOOP_OVERRIDE``); its config's
``control_dt`` is set to 1 / rate.  The run directory is the usual one (config.toml, metrics.json,
log.npz, plots/, replay.html) plus

* ``timing.json``: cycle period, controller latency (state published → torque sent), compute time,
  torque age when applied (p50, p99, p99.9, max), misses (and per million cycles), stops and their
  reason, driver overruns, GC collections in the loop, the real-time set-up, the machine's load
  average, and ``closed_loop``: the scenario's metrics beside the in-process run's (same config and
  duration, run after it into ``inprocess/``; ``--no-compare`` skips it), their ratio, and whether the
  error metrics are within 2× of the in-process ones;
* ``rt_timing.npz``: the per-cycle figures; ``plots/rt_timing.png``: their histograms.

Exit codes: those of ``cmstack run`` (0 every target met, 1 a target missed, 2 usage or configuration
error, 3 the run failed, 130 interrupted); a run the driver stopped (misses) exits 1.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from functools import partial
from pathlib import Path

import numpy as np

from cmstack.models.errors import ConfigError

#: metric-name fragments that are not closed-loop behaviour (speed, bookkeeping): left out of the comparison
NOT_CLOSED_LOOP = (
    "realtime_factor",
    "wall_s",
    "_us",
    "duration",
    "control_dt",
    "rt_",
    "saturations",
    "simulated_s",
)
#: timing.json's reason while the run lasts (left by a run whose two processes were both killed)
UNFINISHED = (
    "the run did not finish: still running, or both processes were killed (the log is in the records "
    ".rt/: cmstack view and read_log read them)"
)
#: closed-loop metrics judged against the in-process run ("within 2×" of it, issue 25)
JUDGED = ("error", "settling_time")


def add_arguments(sub) -> None:
    """The ``cmstack rt`` sub-command (``sub``: the subparsers of ``cmstack``)."""
    from cmstack.scenarios._common import EXIT_CODES_HELP

    p = sub.add_parser(
        "rt",
        help="run a scenario in real time across a process boundary (driver + controller)",
        description="Run a scenario's controller against its plant in a driver process at a fixed "
        "rate in wall-clock time, as on a real robot; writes the run directory plus "
        "timing.json and plots/rt_timing.png, and compares the closed-loop metrics "
        "with the in-process run's (docs/realtime.md).",
        epilog=EXIT_CODES_HELP + "\n  (a run stopped by the driver after consecutive misses exits 1)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("scenario", help="a shipped scenario name (cmstack list) or a scenario file PATH.py")
    p.add_argument(
        "--rate", type=float, default=1000.0, help="control rate [Hz] (default 1000); sets control_dt"
    )
    p.add_argument("--duration", type=float, help="seconds of wall-clock time = simulated time")
    p.add_argument(
        "--transport",
        choices=["shm", "udp"],
        default="shm",
        help="shm: shared memory with sequence locks (default); udp: datagrams on the loopback",
    )
    p.add_argument("--config", help="TOML file overriding keys of the default config")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override one config key")
    p.add_argument(
        "--sensors",
        choices=["full", "actuated"],
        help="what the robot measures (the scenario's 'sensors' key, e.g. closed_chain's): actuated = its motors "
        "only, the controller side reconstructs the passive joints (docs/realtime.md)",
    )
    p.add_argument(
        "--command",
        choices=["torque", "position"],
        help="what the robot takes (the scenario's 'command' key, e.g. closed_chain's): position = (q_des, v_des, "
        "tau_ff) per actuated joint, the driver runs the robot's joint PD (docs/realtime.md)",
    )
    p.add_argument(
        "--predict",
        choices=["none", "one-step", "latency"],
        default="latency",
        help="the controller side answers the state predicted when its torque is applied (the law's model's "
        "forward dynamics; torque commands, fixed base): latency (default: the torque held meanwhile the one the "
        "driver holds, from the send and publication times, the horizon one period plus half the measured extra "
        "hold of a command), one-step (one period, the last torque sent) or none (docs/realtime.md)",
    )
    p.add_argument("--out", help="run directory (default ./runs/<name>/<timestamp>-rt/)")
    p.add_argument(
        "--max-misses",
        type=int,
        default=20,
        help="consecutive misses after which the driver stops the robot (default 20)",
    )
    p.add_argument(
        "--brake-damping", type=float, default=5.0, help="D of the stop's brake τ = -D v [N·m·s/rad]"
    )
    p.add_argument("--fifo", action="store_true", help="SCHED_FIFO for both processes when the OS allows it")
    p.add_argument(
        "--pin", metavar="CTRL,DRIVER", help="pin the controller and the driver to these CPUs, e.g. 1,0"
    )
    p.add_argument("--no-compare", action="store_true", help="do not run the in-process reference")
    p.add_argument("--no-plots", action="store_true", help="write no plots")
    p.add_argument("--no-html", action="store_true", help="do not write replay.html")
    p.add_argument("--debug", action="store_true", help="show the full traceback on failure")
    p.set_defaults(func=cmd_rt)


def _settings(args):
    from cmstack.sim.rt_driver import DriverSettings
    from cmstack.sim.rt_loop import LoopSettings

    if not (math.isfinite(args.rate) and 1.0 <= args.rate <= 20_000.0):
        raise ConfigError(f"--rate must be a finite number in [1, 20000] Hz, got {args.rate}")
    if args.duration is not None and not (math.isfinite(args.duration) and 0 < args.duration <= 86_400):
        raise ConfigError(f"--duration must be a finite number of seconds in (0, 86400], got {args.duration}")
    cpus = (None, None)
    if args.pin:
        try:
            cpus = tuple(int(x) for x in args.pin.split(","))
        except ValueError:
            cpus = ()
        if len(cpus) != 2 or min(cpus) < 0:
            raise ConfigError(f"--pin must be two CPU numbers CTRL,DRIVER (e.g. 1,0), got '{args.pin}'")
    drv = DriverSettings(
        rate_hz=args.rate,
        max_misses=args.max_misses,
        brake_damping=args.brake_damping,
        fifo=args.fifo,
        cpu=cpus[1],
    ).check()
    return drv, LoopSettings(fifo=args.fifo, cpu=cpus[0])


def orphan_record(out: Path, run) -> None:
    """What the driver process writes when the controller process (this one) died during the run:
    timing.json and rt_timing.npz (the cycles run, the status and the reason) and metrics.json's
    reason (the log's parts are written by ``run_rt``)."""
    from cmstack.sim.metrics import write_metrics

    timing = timing_report(run)
    save_timing(out, run, timing, plots=False)
    try:
        scenario = json.loads((out / "metrics.json").read_text()).get("scenario")
    except (OSError, ValueError):
        scenario = None
    write_metrics(
        out / "metrics.json",
        {
            "scenario": scenario,
            "ok": False,
            "reason": f"{timing['reason']}; the log so far is .log.npz.parts/ (cmstack view and read_log "
            "read it), the timing timing.json",
            "error_kind": "run",
        },
    )


def _drop_placeholder(out: Path) -> None:
    """Remove the timing.json written when the driver started (status "running") when no timing follows
    (the run stopped before its loop, on a usage or configuration error)."""
    f = out / "timing.json"
    try:
        if json.loads(f.read_text()).get("status") == "running":
            f.unlink()
    except (OSError, ValueError):
        pass


def _rt_loop(
    runs: list, rate: float, drv, loop, transport: str, plant, controller, out=None, predict="none", **kw
):
    """The ``LOOP_OVERRIDE`` of an rt run: :func:`run_rt` at ``rate``, its Run kept in ``runs``; ``out``:
    the run directory (where the driver leaves the record if this process dies)."""
    from cmstack.sim.rt_loop import run_rt

    dt = kw.pop("control_dt")
    if abs(dt * rate - 1.0) > 1e-9:
        raise ConfigError(
            f"the scenario runs its loop at control_dt = {dt:g} s, not 1/--rate = {1 / rate:g} s "
            "(it has no config key control_dt that cmstack rt could set)"
        )

    def start():
        if out is not None:  # replaced at the end, by this process or (if this one dies) the driver
            from cmstack.sim.logger import atomic_write

            atomic_write(
                out / "timing.json",
                json.dumps(
                    {"rate_hz": rate, "transport": transport, "status": "running", "reason": UNFINISHED}
                ),
            )
        print(
            f"rt: {kw['duration']:g} s at {rate:g} Hz over {transport}: the driver process starts "
            "(Ctrl-C stops the robot)",
            flush=True,
        )

    return run_rt(
        plant,
        controller,
        control_dt=dt,
        driver=drv,
        loop=loop,
        transport=transport,
        on_start=start,
        on_loop_end=runs.append,
        on_orphan=None if out is None else partial(orphan_record, out),
        predict=predict,
        **kw,
    )  # kept before the replay, which a Ctrl-C may cut short


def compare(rt_metrics: dict, ref: dict) -> dict:
    """Per closed-loop metric in both runs: rt, in-process, rt / in-process and, for the error and
    settling metrics, whether |rt| ≤ 2 |in-process| (None where not judged)."""
    out = {}
    for key, a in rt_metrics.items():
        b = ref.get(key)
        if any(f in key for f in NOT_CLOSED_LOOP) or isinstance(a, bool) or isinstance(b, bool):
            continue
        if not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
            continue
        ratio = a / b if b not in (0, 0.0) and math.isfinite(b) else float("nan")
        judged = any(f in key for f in JUDGED)
        within = (
            (abs(a) <= 2.0 * abs(b) + 1e-12) if judged and math.isfinite(a) and math.isfinite(b) else None
        )
        out[key] = {"rt": a, "inprocess": b, "ratio": ratio, "within_2x": within}
    return out


def _load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def timing_report(run, closed_loop: dict | None = None) -> dict:
    """timing.json's content for an RtRun ``run``."""
    t = run.rt.timing()
    t["load_average_1_5_15"] = _load_average()
    t["cpus"] = os.cpu_count()
    if closed_loop is not None:
        t["closed_loop"] = closed_loop
        judged = [v["within_2x"] for v in closed_loop.values() if v["within_2x"] is not None]
        t["closed_loop_within_2x"] = bool(judged) and all(judged)
    return t


def save_timing(out: Path, run, timing: dict, plots: bool) -> list[Path]:
    """Write timing.json, rt_timing.npz and (``plots``) plots/rt_timing.png; returns the paths."""
    from cmstack.sim.logger import atomic_write

    paths = [out / "timing.json"]
    atomic_write(paths[0], json.dumps(timing, indent=1, default=float))
    d, L = run.rt.driver.log, run.rt.loop
    n = run.rt.driver.cycles
    arrays = dict(
        wall=d["wall"],
        late=d["late"],
        age=d["age"],
        miss=d["miss"],
        answers=d["answers"],
        t=d["t"],
        latency_us=L.latency_us[:n],
        compute_us=L.compute_us[:n],
        wake_us=L.wake_us[:n],
    )
    tmp = out / ".rt_timing.partial.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, out / "rt_timing.npz")
    paths.append(out / "rt_timing.npz")
    if plots:
        paths.append(plot_timing(out, arrays, timing))
    return paths


def plot_timing(out: Path, a: dict, timing: dict) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def stats(key):
        s = timing[key]
        return f"p50 {s['p50']:.1f}  p99 {s['p99']:.1f}  p99.9 {s['p99.9']:.1f}  max {s['max']:.1f} µs"

    period = np.diff(a["wall"][1:]) * 1e6
    fig, ax = plt.subplots(2, 2, figsize=(12, 8))
    target = timing["period_target_us"]
    for axis, data, key, title in (
        (ax[0, 0], period, "period_us", "cycle period (driver ticks)"),
        (ax[0, 1], a["latency_us"], "latency_us", "controller latency (state → τ sent)"),
        (ax[1, 0], a["age"][1:] * 1e6, "torque_age_us", "torque age when applied"),
    ):
        x = data[np.isfinite(data)]
        if x.size:
            axis.hist(x, bins=np.geomspace(max(x.min(), 0.5), max(x.max(), 1.0) * 1.01, 120), log=True)
            axis.set_xscale("log")
        axis.axvline(target, color="k", ls="--", lw=0.8, label=f"period {target:g} µs")
        axis.set_title(f"{title}\n{stats(key)}", fontsize=9)
        axis.set_xlabel("µs")
        axis.set_ylabel("cycles")
        axis.legend(fontsize=8)
    c = a["compute_us"][np.isfinite(a["compute_us"])]
    if c.size:
        ax[0, 1].hist(
            c,
            bins=np.geomspace(max(c.min(), 0.5), max(c.max(), 1.0) * 1.01, 120),
            log=True,
            alpha=0.5,
            label="compute (the controller call)",
        )
        ax[0, 1].legend(fontsize=8)
    miss = a["miss"]
    ax[1, 1].plot(a["t"], np.cumsum(miss), label="misses (cumulative)")
    ax[1, 1].set_xlabel("t [s]")
    ax[1, 1].set_ylabel("misses")
    load = timing.get("load_average_1_5_15")
    ax[1, 1].set_title(
        f"misses: {timing['misses']} ({timing['misses_per_million']:.0f} per million cycles), "
        f"stops {timing['stops']}\nload average {load}, {timing['cpus']} CPUs",
        fontsize=9,
    )
    ax[1, 1].legend(fontsize=8)
    fig.suptitle(
        f"cmstack rt at {timing['rate_hz']:g} Hz: {timing['cycles']} cycles, status {timing['status']}"
    )
    fig.tight_layout()
    p = out / "plots"
    p.mkdir(exist_ok=True)
    tmp = p / ".rt_timing.partial.png"
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, p / "rt_timing.png")
    return p / "rt_timing.png"


def summary_lines(timing: dict) -> list[str]:
    t = timing
    lines = [
        f"rt: {t['cycles']} cycles at {t['rate_hz']:g} Hz over {t['transport']}, status {t['status']}"
        + (f" ({t['reason']})" if t["reason"] else ""),
        f"  misses {t['misses']} ({t['misses_per_million']:.0f} per million cycles, longest run "
        f"{t['max_consecutive_misses']}), stops {t['stops']}, driver overruns {t['driver_overruns']} "
        f"(clock slipped {t['driver_slip_s'] * 1e3:.1f} ms), states skipped {t['states_skipped']}",
    ]
    for key, what in (
        ("period_us", "cycle period"),
        ("latency_us", "latency"),
        ("compute_us", "compute"),
        ("torque_age_us", "torque age"),
    ):
        s = t[key]
        lines.append(
            f"  {what + ' [µs]':<20} p50 {s['p50']:9.1f}  p99 {s['p99']:9.1f}  p99.9 {s['p99.9']:9.1f}  "
            f"max {s['max']:9.1f}"
        )
    lines.append(
        f"  GC collections in the loop: {t['gc_collections']} (gen-0 growth after warm-up: "
        f"{t['gc_gen0_growth']}); load average {t['load_average_1_5_15']} on {t['cpus']} CPUs"
    )
    b = t["log_bytes_per_cycle"]
    lines.append(
        f"  log: {b['driver'] + b['controller']} bytes per cycle (driver {b['driver']}, controller {b['controller']})"
    )
    pr = t.get("predict") or {"mode": "none"}
    if pr["mode"] == "none":
        lines.append("  predict: none" + (f" ({pr['note']})" if pr.get("note") else ""))
    else:
        lines.append(
            f"  predict: {pr['mode']} ({pr['predictions']} predictions, {pr['failures']} failed, median "
            f"{pr['predict_us_median']:.0f} µs)"
        )
    lines += [f"  {s}" for s in t["setup"]]
    if "closed_loop" in t:
        lines.append("  closed loop, rt vs in-process (ratio; error metrics judged within 2×):")
        for key, v in t["closed_loop"].items():
            mark = "" if v["within_2x"] is None else ("  within 2×" if v["within_2x"] else "  NOT within 2×")
            lines.append(f"    {key:<30} {v['rt']:12.5g} {v['inprocess']:12.5g}  {v['ratio']:8.3g}{mark}")
    return lines


def cmd_rt(args) -> int:
    from cmstack.scenarios._common import (
        EXIT_FAILED,
        EXIT_INTERRUPTED,
        EXIT_TARGET_MISSED,
        EXIT_USAGE,
        _default_out,
        default_config,
        execute,
        run_scenario,
    )
    from cmstack.scenarios.loader import is_user_file, load_scenario
    from cmstack.sim.runner import LOOP_OVERRIDE

    try:
        drv, loop = _settings(args)
        name, mod, defaults = load_scenario(args.scenario)
        if is_user_file(mod) and defaults is None:
            if not args.config:
                raise ConfigError(
                    f"scenario file {args.scenario} has no default config: give --config FILE.toml"
                )
            defaults = Path(args.config).expanduser().resolve()
        cfg = default_config(name, defaults)
    except ConfigError as exc:
        print(f"error: ConfigError: {exc}", file=sys.stderr)
        return EXIT_USAGE
    sets = list(args.set)
    if args.sensors is not None:
        sets.append(f"sensors={args.sensors!r}")
    if args.command is not None:
        sets.append(f"command={args.command!r}")
    if "control_dt" in cfg:
        sets.append(f"control_dt={1.0 / args.rate!r}")
    out = Path(args.out).expanduser() if args.out else Path(f"{_default_out(name)}-rt")
    ns = argparse.Namespace(
        out=str(out),
        config=args.config,
        set=sets,
        duration=args.duration,
        viewer=None,
        no_progress=True,
        debug=args.debug,
        no_wait=True,
        no_html=args.no_html,
        no_plots=args.no_plots,
    )
    runs: list = []
    token = LOOP_OVERRIDE.set(
        partial(_rt_loop, runs, args.rate, drv, loop, args.transport, out=out, predict=args.predict)
    )
    try:
        code = execute(name, mod.run, ns, defaults=defaults)
    finally:
        LOOP_OVERRIDE.reset(token)
    if not runs or code in (EXIT_USAGE,):
        _drop_placeholder(out)  # (no loop ran to the end: no timing to report)
        return code
    run = runs[-1]
    closed = None
    # interrupted, or failed (a driver or controller that died or raised): timing.json still written (the
    # cycles done, the status and the reason), no reference run, no plot
    interrupted = code in (EXIT_INTERRUPTED, EXIT_FAILED)
    if not args.no_compare and not interrupted and (out / "metrics.json").is_file():
        print("in-process reference run (same config and duration) ...", flush=True)
        try:
            ref, _ = run_scenario(
                name,
                mod.run,
                out=out / "inprocess",
                config_file=args.config,
                sets=sets,
                duration=args.duration,
                progress=False,
                echo=False,
                defaults=defaults,
                html=False,
                plots=False,
                schema=getattr(sys.modules.get(mod.run.__module__), "CONFIG_SCHEMA", None),
            )
            closed = compare(json.loads((out / "metrics.json").read_text()), ref)
        except Exception as exc:  # the rt run stands on its own; say why there is no comparison
            print(
                f"in-process reference failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            )
    timing = timing_report(run, closed)
    paths = save_timing(out, run, timing, plots=not (args.no_plots or interrupted))
    print("\n".join(summary_lines(timing)))
    print("timing: " + ", ".join(str(p) for p in paths))
    if code == 0 and timing["stops"]:
        return EXIT_TARGET_MISSED
    return code

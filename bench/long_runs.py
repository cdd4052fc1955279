"""Long runs (issue 21, item 5): peak memory against simulated duration, and how fast Ctrl-C returns.

    python -m bench.long_runs [--durations 10 160 640] [--interrupt-after 3 15] [--quick]

* **Peak RSS** of ``cmstack run yumi_dual_arm --no-plots --no-progress --duration D`` for each D, each in
  its own child process (``os.wait4``: the child's own ``ru_maxrss``, build, loop, post-loop work,
  log.npz and replay.html included).  Target: the longest run's peak ≤ 1.2× the shortest run's.
* **Ctrl-C latency**: a child run of ``--duration 100000`` (so that the signal always lands in the
  loop) gets SIGINT ``W`` s of wall time after its loop started (the first log checkpoint part appears after
  1 s of simulated time); the latency is the wall
  time from the signal to the child's exit.  Target: ≤ 2 s whatever W (i.e. whatever was simulated).
* The end-to-end real-time factor (simulated time / the child's whole wall time) beside the loop-only
  ``realtime_factor`` of metrics.json, and ``realtime_factor_end_to_end`` as the run itself measured it.

``--quick``: durations 5 and 40, one interrupt after 3 s.  Writes bench/results/long_runs.json.
Timings are machine-dependent and never asserted in tests."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cmstack.bench import results_dir

#: peak RSS of the longest run / that of the shortest (issue 21)
RSS_RATIO_TARGET = 1.2
#: wall seconds from SIGINT to the run's exit (issue 21)
CTRL_C_TARGET_S = 2.0
SCENARIO = "yumi_dual_arm"


def _command(duration: float, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "cmstack.cli",
        "run",
        SCENARIO,
        "--no-plots",
        "--no-progress",
        "--duration",
        f"{duration:g}",
        "--out",
        str(out),
    ]


def _metrics(out: Path) -> dict:
    try:
        return json.loads((out / "metrics.json").read_text())
    except (OSError, ValueError):
        return {}


def peak_rss(duration: float) -> dict:
    """One child run of ``duration`` simulated seconds: its peak RSS (MB), wall time and metrics."""
    with tempfile.TemporaryDirectory(prefix="bench_long_") as tmp:
        out = Path(tmp) / "run"
        w0 = time.perf_counter()
        p = subprocess.Popen(_command(duration, out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - w0
        p.returncode = os.waitstatus_to_exitcode(status)
        err = p.stderr.read().decode(errors="replace").strip().splitlines()[-1:] if p.stderr else []
        p.stderr.close()
        m = _metrics(out)
        log_mb = (out / "log.npz").stat().st_size / 1e6 if (out / "log.npz").exists() else None
    return {
        "duration_s": duration,
        "exit_code": p.returncode,
        "peak_rss_mb": ru.ru_maxrss / 1024.0,
        "wall_s": wall,
        "realtime_factor": m.get("realtime_factor"),
        "realtime_factor_end_to_end": m.get("realtime_factor_end_to_end"),
        "realtime_factor_measured_outside": duration / wall,
        "log_npz_mb": log_mb,
        "stderr_tail": err[0] if err else "",
    }


def ctrl_c_latency(after_loop_s: float, duration: float = 100000.0, timeout_s: float = 120.0) -> dict:
    """SIGINT a child run ``after_loop_s`` wall seconds after its loop started; time until it exits."""
    with tempfile.TemporaryDirectory(prefix="bench_long_int_") as tmp:
        out = Path(tmp) / "run"
        parts = out / ".log.npz.parts"
        p = subprocess.Popen(_command(duration, out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            t_end = time.perf_counter() + timeout_s
            while not (parts.is_dir() and any(parts.glob("*.npz"))):  # the loop has done 1 s simulated
                if p.poll() is not None or time.perf_counter() > t_end:
                    raise RuntimeError(f"the run ended or stalled before its loop started (exit {p.poll()})")
                time.sleep(0.05)
            time.sleep(after_loop_s)
            t_sig = time.perf_counter()
            p.send_signal(signal.SIGINT)
            code = p.wait(timeout=timeout_s)
            latency = time.perf_counter() - t_sig
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        err = p.stderr.read().decode(errors="replace").strip().splitlines()
        p.stderr.close()
        m = _metrics(out)
        has_log = (out / "log.npz").is_file()
    return {
        "signal_after_loop_start_s": after_loop_s,
        "exit_code": code,
        "latency_s": latency,
        "reason": m.get("reason"),
        "log_npz_written": has_log,
        "stderr_tail": err[-1] if err else "",
    }


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.long_runs", description=__doc__.splitlines()[0])
    ap.add_argument("--durations", type=float, nargs="+", default=[10.0, 160.0, 640.0])
    ap.add_argument(
        "--interrupt-after",
        type=float,
        nargs="*",
        default=[3.0, 15.0],
        help="wall seconds after the loop started at which to send SIGINT (one run each)",
    )
    ap.add_argument("--quick", action="store_true", help="durations 5 and 40 s, one interrupt after 3 s")
    args = ap.parse_args(list(argv) if argv is not None else [])
    durations = [5.0, 40.0] if args.quick else args.durations
    interrupts = [3.0] if args.quick else args.interrupt_after
    load0 = os.getloadavg()[0]
    rss = []
    for d in durations:
        r = peak_rss(d)
        rss.append(r)
        print(
            f"  --duration {d:>6g}: peak RSS {r['peak_rss_mb']:7.1f} MB, wall {r['wall_s']:6.1f} s, exit "
            f"{r['exit_code']}, realtime_factor {r['realtime_factor'] or float('nan'):.1f} (loop) / "
            f"{r['realtime_factor_end_to_end'] or float('nan'):.1f} (end to end, run's own) / "
            f"{r['realtime_factor_measured_outside']:.1f} (from outside)"
            + (f"  [{r['stderr_tail']}]" if r["exit_code"] not in (0, 1) else ""),
            flush=True,
        )
    ratio = rss[-1]["peak_rss_mb"] / rss[0]["peak_rss_mb"]
    print(
        f"  peak RSS {durations[-1]:g} s / {durations[0]:g} s: {ratio:.2f}  (target ≤ {RSS_RATIO_TARGET}: "
        f"{'met' if ratio <= RSS_RATIO_TARGET else 'missed'})"
    )
    lat = []
    for w in interrupts:
        r = ctrl_c_latency(w)
        lat.append(r)
        print(
            f"  SIGINT {w:g} s into the loop: exit {r['exit_code']} after {r['latency_s']:.2f} s "
            f"(target ≤ {CTRL_C_TARGET_S:g} s: {'met' if r['latency_s'] <= CTRL_C_TARGET_S else 'missed'}); "
            f"log.npz {'written' if r['log_npz_written'] else 'MISSING'}; reason: {r['reason']}",
            flush=True,
        )
    res = {
        "scenario": SCENARIO,
        "peak_rss": rss,
        "rss_ratio_longest_to_shortest": ratio,
        "rss_ratio_target": RSS_RATIO_TARGET,
        "ctrl_c": lat,
        "ctrl_c_target_s": CTRL_C_TARGET_S,
        "loadavg_1min": [load0, os.getloadavg()[0]],
    }
    (results_dir() / "long_runs.json").write_text(json.dumps(res, indent=2))
    return res


if __name__ == "__main__":
    main(sys.argv[1:])

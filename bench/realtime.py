"""Real-time factors of the scenarios (issue 12): simulated time / wall time of the closed loop(s),
as each scenario reports it in metrics.json (``realtime_factor``: logging included, imports and plots
excluded), headless, default configs; for the balloon, the wall time of the whole run.  Never asserted.

    python -m bench.realtime [--quick] [NAME ...]

``--quick`` shortens every run (durations in QUICK_DURATION_S; the factor of a short run is that of its
first seconds) and skips the balloon's whole-run wall time, which only the default run measures.
Writes bench/results/realtime.json."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import tempfile
import time

from cmstack.bench import results_dir

#: scenario -> realtime_factor target (issue 12)
RTF_TARGETS = {
    "yumi_dual_arm": 10.0,
    "series_parallel": 5.0,
    "slider_crank": 5.0,
    "chain_open_loop": 2.0,
    "chain_task_space": 2.0,
}
#: balloon: the whole run (default config) within this wall time [s]
BALLOON_WALL_TARGET_S = 60.0
#: simulated seconds of the --quick runs
QUICK_DURATION_S = {
    "yumi_dual_arm": 0.5,
    "series_parallel": 1.0,
    "slider_crank": 1.5,
    "chain_open_loop": 0.2,
    "chain_task_space": 0.2,
}


def run_one(name: str, duration: float | None) -> dict:
    """Run scenario ``name`` headless (no progress bar, no html) for ``duration`` s (None: its default)."""
    from cmstack.scenarios._common import run_scenario
    from cmstack.sim import runner

    mod = importlib.import_module(f"cmstack.scenarios.{name}")
    for k in runner.LOOP_TOTALS:
        runner.LOOP_TOTALS[k] = 0.0
    with tempfile.TemporaryDirectory(prefix=f"bench_{name}_") as out:
        w0 = time.perf_counter()
        try:
            m, _ = run_scenario(name, mod.run, duration=duration, out=out, html=False, progress=False)
        except Exception as exc:  # reported in the table, the other scenarios still run
            return {"scenario": name, "duration_s": duration, "error": f"{type(exc).__name__}: {exc}"}
        wall = time.perf_counter() - w0
    tot = runner.LOOP_TOTALS
    return {
        "scenario": name,
        "duration_s": duration if duration is not None else "default",
        "realtime_factor": m.get("realtime_factor"),
        "whole_run_wall_s": wall,
        # the same ratio over the loops' own CPU time (all the scenario's loops): what the factor
        # would be on an idle core; on a loaded machine the wall-clock factor is lower by the waits
        "realtime_factor_cpu": tot["simulated_s"] / tot["cpu_s"] if tot["cpu_s"] > 0 else float("nan"),
        "loop_cpu_s": tot["cpu_s"],
        "loop_wall_s": tot["wall_s"],
        "loadavg_1min": os.getloadavg()[0],
    }


def measure(quick: bool, names=None) -> dict:
    res = {}
    for name in names or [*RTF_TARGETS, "balloon"]:
        if name == "balloon" and quick:
            res[name] = {"scenario": name, "skipped": "--quick (the target is the whole default run)"}
            continue
        res[name] = run_one(name, QUICK_DURATION_S.get(name) if quick else None)
    return res


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.realtime", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args(argv if argv is not None else [])
    res = measure(args.quick, args.names)
    for name, r in res.items():
        if "realtime_factor" in r:
            tgt = RTF_TARGETS.get(name)
            print(
                f"  {name:<18} realtime_factor {r['realtime_factor']:8.3f}"
                + (f" (target ≥ {tgt})" if tgt else "")
                + f", over loop CPU time {r['realtime_factor_cpu']:.3f}"
                + f"; whole run {r['whole_run_wall_s']:.1f} s wall, {r['duration_s']} s simulated, "
                f"load {r['loadavg_1min']:.1f}"
            )
        else:
            print(f"  {name:<18} {r.get('error') or r.get('skipped')}")
    (results_dir() / "realtime.json").write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])

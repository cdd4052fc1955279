"""Run-to-run differences: the measurement behind the default tolerances of ``cmstack baseline check``.

    python -m cmstack.bench.determinism [--quick] [--repeat N]

Each configuration below runs with the same seed (its config's ``seed``) in three ways, and every
numeric series of the two logs (one row per control step) is compared: the largest |a − b| per
series, and the same divided by the series' peak |a| (what the default band, atol + rtol·peak, is
measured against):

* ``processes``: two fresh processes one after the other (``cmstack run``);
* ``concurrent``: two fresh processes at the same time (a loaded machine);
* ``in-process``: twice in one process (``run_scenario``, as the pytest fixture's in-process mode);

and, to see how far the closed loop carries a difference of the size ProxSuite's cold start is known to
make (6.1e-7 between two identical controllers, tests/test_uk_kernels.py), the flagship against itself
with a force of 6.1e-7 N per axis on the left flange during the first step (``response, one step``) and
during the whole run (``response, every step``).

Prints one row per configuration and mode and writes ``bench/results/determinism.json``.  Never
asserted in tests (tests/test_baseline.py asserts that an identical rerun passes the default check).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

#: (label, scenario, duration s, --set overrides)
CONFIGS = [
    ("yumi weighted (thesis)", "yumi_dual_arm", 2.0, []),
    ("yumi strict 1 kHz", "yumi_dual_arm", 2.0, ["priority=strict", "control_dt=0.001"]),
    ("yumi bar plant", "yumi_dual_arm", 2.0, ["plant=bar"]),
    ("yumi PIDC + force, bar", "yumi_dual_arm", 2.0, ["plant=bar", "controller=pidc_force"]),
    (
        "yumi uk_robust, perturbed",
        "yumi_dual_arm",
        2.0,
        [
            "controller=uk_robust",
            "perturbation.mass_rel=0.2",
            "perturbation.noise_q=1e-4",
            "perturbation.delay_steps=1",
        ],
    ),
    ("yumi torque clipped 0.3", "yumi_dual_arm", 2.0, ["perturbation.torque_limit_fraction=0.3"]),
    ("series_parallel", "series_parallel", 2.0, []),
    ("slider_crank pidc_qp", "slider_crank", 2.0, ["controller=pidc_qp"]),
    ("chain_task_space", "chain_task_space", 1.0, []),
]
#: (label, scenario, duration s, --set overrides of the second run only): the closed loop's response
RESPONSE = [
    (
        f"flagship + 6.1e-7 N, {what}",
        "yumi_dual_arm",
        2.0,
        [
            "perturbation.wrench_body=yumi_link_7_l",
            "perturbation.wrench_force=[6.1e-7, 6.1e-7, 6.1e-7]",
            "perturbation.wrench_t0=0.0",
            f"perturbation.wrench_t1={t1}",
        ],
    )
    for what, t1 in (("one step", 0.005), ("every step", 2.0))
]
QUICK = {"yumi weighted (thesis)", "yumi strict 1 kHz", "series_parallel"}


def _cmd(scenario, duration, sets, out):
    argv = [
        sys.executable,
        "-W",
        "ignore",
        "-m",
        "cmstack.cli",
        "run",
        scenario,
        "--duration",
        str(duration),
        "--no-plots",
        "--no-html",
        "--no-progress",
        "--out",
        str(out),
    ]
    for s in sets:
        argv += ["--set", s]
    return argv


def _env():
    return dict(os.environ, MPLBACKEND="Agg")


def compare_logs(a: Path, b: Path) -> dict[str, tuple[float, float]]:
    """Per numeric series of two run logs: (max |a − b|, that / max |a|).  NaN at the same place is equal."""
    from cmstack.sim.logger import read_log

    la, lb = read_log(a), read_log(b)
    n = len(la.get("t", ()))
    out = {}
    for k, x in la.items():
        y = lb.get(k)
        if y is None or x.ndim == 0 or len(x) != n or x.dtype.kind not in "fiub" or x.shape != y.shape:
            continue
        x, y = np.asarray(x, float), np.asarray(y, float)
        d = np.abs(x - y)
        d = np.where(np.isnan(x) & np.isnan(y), 0.0, d)
        peak = float(np.nanmax(np.abs(x))) if x.size else 0.0
        dm = float(np.nanmax(d)) if d.size else 0.0
        out[k] = (dm, dm / peak if peak > 0 else (0.0 if dm == 0 else float("inf")))
    return out


def _pair(mode, label, scenario, duration, sets, tmp: Path, sets_b=()) -> dict:
    a, b = tmp / f"{label}-{mode}-a", tmp / f"{label}-{mode}-b"
    if mode == "processes":
        for o, extra in ((a, []), (b, list(sets_b))):
            subprocess.run(
                _cmd(scenario, duration, [*sets, *extra], o), capture_output=True, env=_env(), timeout=900
            )
    elif mode == "concurrent":
        ps = [
            subprocess.Popen(
                _cmd(scenario, duration, sets, o),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=_env(),
            )
            for o in (a, b)
        ]
        for p in ps:
            p.wait(timeout=900)
    else:
        code = (
            "import sys; from cmstack.scenarios.loader import load_scenario; from cmstack.scenarios._common import run_scenario\n"  # noqa: E501
            f"name, mod, _ = load_scenario({scenario!r})\n"
            f"for o in {[str(a), str(b)]!r}:\n"
            f"    run_scenario(name, mod.run, out=o, sets={sets!r}, duration={duration!r}, html=False, plots=False)\n"
        )
        subprocess.run(
            [sys.executable, "-W", "ignore", "-c", code], capture_output=True, env=_env(), timeout=900
        )
    diffs = compare_logs(a, b)
    worst = max(diffs.items(), key=lambda kv: kv[1][0], default=("-", (0.0, 0.0)))
    worst_rel = max(diffs.items(), key=lambda kv: kv[1][1], default=("-", (0.0, 0.0)))
    return {
        "config": label,
        "mode": mode,
        "series": len(diffs),
        "max_abs": worst[1][0],
        "max_abs_series": worst[0],
        "max_rel_to_peak": worst_rel[1][1],
        "max_rel_series": worst_rel[0],
        "nonzero": sorted(k for k, v in diffs.items() if v[0] > 0),
        "per_series": {k: {"max_abs": v[0], "rel_to_peak": v[1]} for k, v in diffs.items()},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m cmstack.bench.determinism", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--quick", action="store_true", help="three configurations only")
    ap.add_argument("--repeat", type=int, default=1, help="pairs per configuration and mode")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="cmstack-determinism-") as tmp:
        for label, scenario, duration, sets in CONFIGS:
            if args.quick and label not in QUICK:
                continue
            for mode in ("processes", "concurrent", "in-process"):
                for r in range(args.repeat):
                    row = _pair(mode, f"{label.replace(' ', '_')}-{r}", scenario, duration, sets, Path(tmp))
                    row["config"] = label
                    rows.append(row)
                    print(
                        f"{label:<28} {mode:<11} {row['series']:>3} series  max |a-b| {row['max_abs']:.3g} "
                        f"({row['max_abs_series']})  max |a-b|/peak {row['max_rel_to_peak']:.3g} "
                        f"({row['max_rel_series']})",
                        flush=True,
                    )
        for label, scenario, duration, sets_b in RESPONSE:
            row = _pair("processes", label.replace(" ", "_"), scenario, duration, [], Path(tmp), sets_b)
            row["config"], row["mode"] = label, "response"
            rows.append(row)
            print(
                f"{label:<40} {row['series']:>3} series  max |a-b| {row['max_abs']:.3g} ({row['max_abs_series']})  "
                f"max |a-b|/peak {row['max_rel_to_peak']:.3g} ({row['max_rel_series']})",
                flush=True,
            )
    from cmstack.bench import results_dir

    p = results_dir() / "determinism.json"
    p.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"written: {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""python -m bench [--quick] [NAME ...] (or ``cmstack bench``) — run the benchmarks in bench/, print
their numbers, and end with one summary table: every ratio and real-time factor of issue 12 beside its
target, the peer (TSID) and closed-chain ratios of issues 22 and 23, the long-run figures of issue 21 when
bench.long_runs has run, and the fixed-rate loop's figures
of issue 25 (one group of rows per set-up bench.rt has measured) (bench/results/summary.json).  Never asserted in tests.

``--quick`` runs only the issue-12 benchmarks, with fewer repeats and short scenario runs (a few
minutes); the summary then says which numbers come from short runs.  With NAMEs, only those run and the
summary is built from their fresh results plus any earlier ones found in bench/results/."""

import argparse
import importlib
import json
import os
import pkgutil
import sys
import time
from pathlib import Path

from cmstack.bench import results_dir
from cmstack.models.errors import StackError

#: the benchmarks behind issue 12's targets, and their arguments under --quick
QUICK_ARGS = {
    "yumi_uk": ["--repeat", "1"],
    "series_parallel": ["--repeat", "1", "--duration", "1"],
    "chain": ["--repeat", "1", "--duration", "0.5"],
    "projection": ["--repeat", "1", "--quick"],
    "realtime": ["--quick"],
}


def _load(name):
    p = results_dir() / f"{name}.json"
    return json.loads(p.read_text()) if p.exists() else None


def _python_floor_note(e: dict) -> str:
    """The least Python controller around the same Pinocchio call (bench.python_floor), if measured."""
    if "python_floor_ratio" not in e:
        return ""
    return (
        f"no Python controller goes below {e['python_floor_ratio']:.2f}× (bench.python_floor); "
        f"this step is {e['step_over_python_floor']:.2f}× that"
    )


def summary(quick: bool) -> list[dict]:
    """Rows {what, value, unit, target, met} from bench/results/*.json (value None: not measured)."""
    rows = []

    def add(what, value, unit, target, met, note=""):
        rows.append(
            {
                "what": what,
                "value": value,
                "unit": unit,
                "target": target,
                "met": None if value is None else met,
                "note": note,
            }
        )

    uk = _load("yumi_uk")
    for key, what, tgt in (
        ("uk_weighted", "YuMi UK step (weighted, limits) / floor", 0.6),
        ("uk_3_levels", "YuMi UK step (3 strict levels) / floor", 0.6),
        ("panda_circle", "Panda circle UK step / (computeAllTerms + frame Jacobian)", 1.5),
    ):
        r = uk["ratio_of_medians"].get(key) if uk else None
        add(what, r, "×", f"≤ {tgt}", r is not None and r <= tgt)
    for key, e in ((uk or {}).get("against_tsid") or {}).items():  # issue 22: the peer, when TSID is built
        tgt = (uk.get("tsid_targets") or {}).get(key)
        r = e["ratio_of_medians"]
        add(
            f"{key} UK step / TSID's ({e['tsid']}, same states)",
            r,
            "×",
            "—" if tgt is None else f"≤ {tgt:g}",
            None if tgt is None else r <= tgt,
            f"per-state median {e['median_of_ratios']:.3g}×",
        )
    cc = _load("closed_chain") or {}  # issue 23: a control step against pin.constraintDynamics
    for model, e in sorted(cc.items()):
        if not isinstance(e, dict):
            continue
        for law in ("pidc", "uk"):
            if law in e:
                r = e[law]["ratio"]
                add(
                    f"{Path(model).stem} {law.upper()} step / constraintDynamics",
                    r,
                    "×",
                    "≤ 2",
                    r <= 2.0,
                    f"{e[law]['control_step_us']:.1f} / {e[law]['constraint_dynamics_us']:.1f} µs",
                )
    # issue 31: the legged step against constraintDynamics with loops and stance contacts (bench/legged.py, and
    # bench/legged.py --config legged_biped)
    for stem, robot in (("legged", "five-bar quadruped"), ("legged_biped", "biped, parallel ankles")):
        lg = _load(stem)
        if lg:
            add(
                f"legged ({robot}) contact UK step / constraintDynamics",
                lg["ratio"],
                "×",
                "≤ 3",
                lg["ratio"] <= 3.0,
                f"{lg['control_step_us']:.0f} / {lg['constraint_dynamics_us']:.0f} µs",
            )
    pr = (_load("projection") or {}).get("pidc_ratio", {})
    for key, what in (
        ("slider_crank_pidc", "PIDC step (slider-crank) / floor"),
        ("series_parallel_pidc", "PIDC step (series-parallel) / floor"),
    ):
        e = pr.get(key, {})
        r = e.get("ratio")
        add(what, r, "×", "≤ 1.5", r is not None and r <= 1.5, _python_floor_note(e))
    sp = _load("series_parallel")
    r = sp[0]["ratio_to_floor"] if sp else None
    add(
        "robust law (18) step / floor (one RNEA)",
        r,
        "×",
        "≤ 1.5",
        r is not None and r <= 1.5,
        _python_floor_note(sp[0]) if sp else "",
    )
    ch = _load("chain") or {}
    med = ch.get("law3_closed_form_us_median")
    add(
        "DAC law III step, median",
        med,
        "µs",
        "≤ 250",
        med is not None and med <= 250.0,
        f"{ch['law3_step_over_floor']:.1f}× its floor" if "law3_step_over_floor" in ch else "",
    )
    from cmstack.bench.realtime import BALLOON_WALL_TARGET_S, RTF_TARGETS

    rt = _load("realtime") or {}
    for name, tgt in RTF_TARGETS.items():
        r = rt.get(name, {})
        f = r.get("realtime_factor")
        note = r.get("error", "") or (f"{r['duration_s']} s simulated" if "duration_s" in r else "")
        add(f"{name} realtime_factor", f, "", f"≥ {tgt:g}", f is not None and f >= tgt, note)
    b = rt.get("balloon", {})
    w = b.get("whole_run_wall_s")
    add(
        "balloon whole run (default config), wall",
        w,
        "s",
        f"≤ {BALLOON_WALL_TARGET_S:g}",
        w is not None and w <= BALLOON_WALL_TARGET_S,
        b.get("error") or b.get("skipped", ""),
    )
    lr = _load("long_runs")  # issue 21: long runs
    if lr:
        r = lr["rss_ratio_longest_to_shortest"]
        d = [x["duration_s"] for x in lr["peak_rss"]]
        add(
            f"YuMi peak RSS {d[-1]:g} s / {d[0]:g} s",
            r,
            "×",
            f"≤ {lr['rss_ratio_target']:g}",
            r <= lr["rss_ratio_target"],
            " / ".join(f"{x['peak_rss_mb']:.0f} MB" for x in lr["peak_rss"]),
        )
        if lr["ctrl_c"]:
            w = max(x["latency_s"] for x in lr["ctrl_c"])
            add(
                "YuMi Ctrl-C to exit, worst",
                w,
                "s",
                f"≤ {lr['ctrl_c_target_s']:g}",
                w <= lr["ctrl_c_target_s"],
                f"{len(lr['ctrl_c'])} runs",
            )
    lim = _load("limits")  # issue 21: limits that bind never stall the step
    if lim:
        cases = lim["cases"]
        bound = [c for c in cases if c != "free"]
        w = max(cases[c]["step_us_max"] for c in bound)
        wc = max(cases[c]["cpu_us_max"] for c in bound)
        add(
            "UK step with binding limits, worst (wall)",
            w,
            "µs",
            f"≤ {lim['target_worst_step_us']:g}",
            w <= lim["target_worst_step_us"],
            f"CPU {wc:.0f} µs; normal step {lim['normal_step_us']:.0f} µs; load {lim['load_avg']:.1f}",
        )
        lift = cases.get("lift_two_arms", {})
        if lift.get("coupling_max_m") is not None:
            add(
                "lift into a joint bound: plant overrun",
                lift["overrun_rad"],
                "rad",
                f"≤ {lim['target_overrun_rad']:g}",
                lift["overrun_rad"] <= lim["target_overrun_rad"],
                f"coupling {lift['coupling_max_m']:.1e} m (≤ {lim['target_coupling_m']:g})",
            )
    from cmstack.bench.rt import TARGETS as RT_TARGETS
    from cmstack.bench.rt import rows as rt_rows

    rtb = _load("rt")  # issue 25: the fixed-rate loop across a process boundary
    for setup, e in sorted((rtb or {}).items()):  # one entry per set-up (transport, scheduler)
        ld = e.get("load_1min_during") or {}
        note = (
            f"{e['duration_s']:g} s at {e['rate_hz']:g} Hz; load {ld.get('mean') or float('nan'):.1f} "
            f"(max {ld.get('max') or float('nan'):.1f}) on {e.get('cpus')} CPUs"
        )
        for what, value, target, met in rt_rows(e["timing"]):
            add(f"rt {setup}: {what}", value, "", target, met, note)
    if not rtb:
        add(
            "rt: misses per million cycles",
            None,
            "",
            f"≤ {RT_TARGETS['misses_per_million']:g} (quiet machine)",
            False,
            "python -m bench.rt",
        )
    return rows


def print_summary(rows, quick: bool, load) -> None:
    print(
        f"\n=== summary (issue 12){' --quick' if quick else ''}; load average {load[0]:.1f} → "
        f"{os.getloadavg()[0]:.1f} (ratios are interleaved in one process, so load hits both sides) ==="
    )
    w = max(len(r["what"]) for r in rows)
    for r in rows:
        v = (
            "not measured"
            if r["value"] is None
            else ("yes" if r["value"] else "no")
            if isinstance(r["value"], bool)
            else f"{r['value']:.3g} {r['unit']}".strip()
        )
        met = "—" if r["met"] is None else ("yes" if r["met"] else "no")
        print(f"  {r['what']:<{w}}  {v:>14}  target {r['target']:<7} {met:<4} {r['note']}")


#: modules of the optional extras (``pip install 'cmstack[dev]'``, ``[peers]``, ``[cluster]``) and of
#: TSID (built by hand, docs/speed.md); a benchmark that needs one is skipped without it
OPTIONAL_MODULES = {
    "example_robot_data": "dev",
    "dask": "cluster",
    "distributed": "cluster",
    "pink": "peers",
    "mink": "peers",
    "tsid": "docs/speed.md",
    "websockets": "dev",
}


def missing_extra(exc: BaseException) -> str | None:
    """The one-line reason a benchmark cannot run in this install (an optional package missing), or None
    for any other error (which then propagates)."""
    from cmstack.models.errors import MissingExtraError

    if isinstance(exc, MissingExtraError):
        return f"{exc.package or 'an optional package'} is not installed (pip install 'cmstack[{exc.extra}]')"
    if isinstance(exc, ModuleNotFoundError):
        top = (exc.name or "").split(".")[0]
        if top in OPTIONAL_MODULES:
            extra = OPTIONAL_MODULES[top]
            how = f"see {extra}" if extra.endswith(".md") else f"pip install 'cmstack[{extra}]'"
            return f"the module {top} is not installed ({how})"
    return None


def run_one(name: str, argv: list[str]) -> bool:
    """Run bench.NAME's main(argv); a benchmark that needs an optional package that is missing is skipped
    with one line.  Returns whether it ran."""
    mod = importlib.import_module(f"cmstack.bench.{name}")
    if not hasattr(mod, "main"):
        return False
    print(f"\n=== bench.{name} ===", flush=True)
    try:
        mod.main(argv)
    except (ImportError, StackError) as exc:
        why = missing_extra(exc)
        if why is None:
            raise
        print(f"bench.{name}: skipped: {why}", flush=True)
        return False
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="issue-12 benchmarks only, short runs (minutes)")
    ap.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    args = ap.parse_args(list(argv) if argv is not None else [])
    here = Path(__file__).resolve().parent
    available = sorted(m.name for m in pkgutil.iter_modules([str(here)]) if not m.name.startswith("_"))
    unknown = [n for n in args.names if n not in available]
    if unknown:
        print(f"error: no benchmark named {unknown}; benchmarks: {available}", file=sys.stderr)
        return 2
    names = args.names or ([n for n in available if n in QUICK_ARGS] if args.quick else available)
    load = os.getloadavg()
    t0 = time.perf_counter()
    for name in names:
        run_one(name, QUICK_ARGS.get(name, []) if args.quick else [])
    rows = summary(args.quick)
    print_summary(rows, args.quick, load)
    print(f"  ({time.perf_counter() - t0:.0f} s)")
    (results_dir() / "summary.json").write_text(
        json.dumps(
            {"quick": args.quick, "loadavg_start": load, "loadavg_end": os.getloadavg(), "rows": rows},
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A campaign's outputs from its records: ``campaign.csv``, ``summary.json`` (``summary``), ``table.md``,
the breakdown points, the verdict in words, and ``plots/`` (every axis with its unit)."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import numpy as np

from cmstack.campaign.spec import _REDUCE, Spec, _jsonable, _meets

#: keys of campaign.csv before the swept keys and the metrics
LEAD_COLUMNS = ("id", "index", "status")


# ------------------------------------------------------------------------------------- outputs
def _success(rec: dict, spec: Spec) -> bool:
    if rec["status"] == "failed":
        return False
    if spec.success:
        return all(_meets(rec["metrics"].get(k), op, lim) for k, (op, lim) in spec.success.items())
    return rec["status"] == "ok"


def _cell(x) -> str:
    if x is None:
        return ""
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, float):
        return repr(x)
    if isinstance(x, (list, dict)):
        return json.dumps(x, sort_keys=True)
    return str(x)


def csv_text(spec: Spec, records: dict) -> str:
    """campaign.csv: one row per finished variant, in variant order; a function of the records only."""
    recs = [records[v.id] for v in spec.variants if v.id in records]
    mkeys: list[str] = []
    for r in recs:
        for k in r["metrics"]:
            if k not in mkeys and k != "scenario":
                mkeys.append(k)
    fixed = list(LEAD_COLUMNS) + spec.swept_keys + ["success", "reason"]
    cols = fixed + [f"{k} (metric)" if k in fixed else k for k in mkeys]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for r in recs:
        row = [r["id"], r["index"], r["status"]] + [r["swept"].get(k) for k in spec.swept_keys]
        row += [_success(r, spec), r["reason"]] + [r["metrics"].get(k) for k in mkeys]
        w.writerow([_cell(x) for x in row])
    return buf.getvalue()


def _values(recs, key):
    out = []
    for r in recs:
        x = r["metrics"].get(key)
        if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x):
            out.append(float(x))
    return out


def _stats(recs: list[dict], spec: Spec) -> dict:
    n = len(recs)
    good = sum(_success(r, spec) for r in recs)
    s = dict(
        n=n,
        ok=sum(r["status"] == "ok" for r in recs),
        missed=sum(r["status"] == "missed" for r in recs),
        failed=sum(r["status"] == "failed" for r in recs),
        success=good,
        success_rate=(good / n) if n else float("nan"),
    )
    for k in spec.metrics:
        x = _values(recs, k)
        s[f"{k}_median"] = float(np.median(x)) if x else float("nan")
        s[f"{k}_p95"] = float(np.percentile(x, 95)) if x else float("nan")
    for k, how in spec.report.items():
        x = _values(recs, k)
        s[f"{k}_{how}"] = float(_REDUCE[how](x)) if x else float("nan")
    return s


def groups(spec: Spec, records: dict) -> list[tuple[dict, list[dict]]]:
    """Variants grouped by everything but the seed, in variant order: (swept keys, records)."""
    keys = [k for k in spec.swept_keys if k != spec.seed_key]
    out: dict = {}
    for v in spec.variants:
        if v.id in records:
            g = tuple(json.dumps(_jsonable(v.swept[k])) for k in keys)
            out.setdefault(g, ({k: v.swept[k] for k in keys}, []))[1].append(records[v.id])
    return list(out.values())


def breakdown(spec: Spec, records: dict) -> dict:
    """Breakdown points: for each label of the axis ``spec.breakdown_by`` (or "all") and each family
    F → key K of ``[breakdown]``, the variants that set K and no other family's key, grouped by the
    level x = overrides[K].  A level *holds* when every seed of it finished and met the success
    criterion.  With the levels sorted x_1 < x_2 < …, the breakdown point is the largest x_j such that
    every level up to x_j holds (None when x_1 does not); ``first_fail`` is the smallest level that
    does not hold (None: every tested level holds).  A level with seeds still to run is "pending" and
    ends the scan (``complete`` false).  Returns {label: {family: {key, breakdown, first_fail,
    complete, levels: [[x, success rate, finished, seeds]]}}}."""
    fam_keys = set(spec.breakdown.values())
    labels = list(spec.axes[spec.breakdown_by]) if spec.breakdown_by else ["all"]
    out: dict = {}
    for lbl in labels:
        per: dict = {}
        for fam, key in spec.breakdown.items():
            levels: dict = {}
            for v in spec.variants:
                if spec.breakdown_by and v.swept[spec.breakdown_by] != lbl:
                    continue
                if key not in v.overrides or any(k in v.overrides for k in fam_keys - {key}):
                    continue
                levels.setdefault(v.overrides[key], []).append(records.get(v.id))
            last, first_fail, complete, rows = None, None, True, []
            for x in sorted(levels):
                rs = levels[x]
                done = [r for r in rs if r is not None]
                good = sum(_success(r, spec) for r in done)
                rows.append([x, good / len(done) if done else float("nan"), len(done), len(rs)])
                if first_fail is not None or not complete:
                    continue
                if good < len(done):
                    first_fail = x
                elif len(done) < len(rs):
                    complete = False
                else:
                    last = x
            per[fam] = dict(key=key, breakdown=last, first_fail=first_fail, complete=complete, levels=rows)
        out[lbl] = per
    return out


def breakdown_md(spec: Spec, records: dict) -> str:
    """The breakdown table (markdown): one row per label, one column per family; a cell is the
    breakdown point and the first level that fails, "none" when the smallest level already fails."""
    if not spec.breakdown:
        return ""
    bd = breakdown(spec, records)
    head = [spec.breakdown_by or "campaign"] + [f"{f} ({k})" for f, k in spec.breakdown.items()]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for lbl, per in bd.items():
        cells = [str(lbl)]
        for fam in spec.breakdown:
            b = per[fam]
            if not b["levels"]:
                cells.append("not tested")
                continue
            txt = "none" if b["breakdown"] is None and b["first_fail"] is not None else _fmt(b["breakdown"])
            if b["first_fail"] is not None:
                txt += f" (fails at {_fmt(b['first_fail'])})"
            elif b["complete"]:
                txt += " (all tested levels hold)"
            if not b["complete"]:
                txt = "runs pending" if b["breakdown"] is None else f"≥ {_fmt(b['breakdown'])} (runs pending)"
            cells.append(txt)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def by_swept_value(spec: Spec, records: dict) -> dict[str, dict[str, list]]:
    """The finished variants' records grouped by each swept key's value (the seed key left out): key -> {the
    value as JSON -> its records, in the spec's variant order}, a key with no finished variant mapping to {}."""
    out: dict[str, dict[str, list]] = {}
    for k in spec.swept_keys:
        if k == spec.seed_key:
            continue
        vals = out[k] = {}
        for v in spec.variants:
            if v.id in records:
                vals.setdefault(json.dumps(_jsonable(v.swept[k])), []).append(records[v.id])
    return out


def summary(spec: Spec, records: dict, extra: dict) -> dict:
    recs = [records[v.id] for v in spec.variants if v.id in records]
    per_key = {
        k: {val: _stats(rs, spec) for val, rs in vals.items()}
        for k, vals in by_swept_value(spec, records).items()
    }
    return dict(
        campaign=spec.name,
        scenario=spec.scenario,
        spec=str(spec.path),
        variants=len(spec.variants),
        finished=len(recs),
        **{k: v for k, v in _stats(recs, spec).items() if k != "n"},
        success_criteria={k: f"{op} {lim:g}" for k, (op, lim) in spec.success.items()} or "scenario targets",
        per_key=per_key,
        groups=[dict(**g, **_stats(rs, spec)) for g, rs in groups(spec, records)],
        failures=[
            dict(id=r["id"], swept=r["swept"], reason=r["reason"]) for r in recs if r["status"] == "failed"
        ],
        **({"breakdown": breakdown(spec, records)} if spec.breakdown else {}),
        **extra,
    )


def summary_text(s: dict) -> str:
    """The campaign's verdict in words, from :func:`summary`'s dict.  One criterion decides: *success*
    (the success rate, the exit code, the table's "success" column) is the spec's ``[success]``
    thresholds when it has them, else the scenario's own targets (``"ok"`` in the variant's
    metrics.json); a failed variant (raised, or its process died) never succeeds.  With ``[success]``,
    the scenario's own verdicts are printed after it, named as such, for reference."""
    crit = s["success_criteria"]
    n = s["finished"]
    rate = f"{s['success_rate'] * 100:.1f} %" if n else "n/a"
    lines = [
        f"{n}/{s['variants']} variants finished ({s['skipped_finished']} from an earlier call); "
        f"{s['failed']} failed (raised or died)"
    ]
    if isinstance(crit, dict):
        lines.append(
            f"success: {s['success']} of {n} ({rate}); success = the spec's [success] criteria: "
            + ", ".join(f"{k} {c}" for k, c in crit.items())
        )
        lines.append(
            f'  for reference, the scenario\'s own targets ("ok" in each metrics.json): met by {s["ok"]}, '
            f"missed by {s['missed']} (not the campaign's success criterion)"
        )
    else:
        lines.append(
            f"success: {s['success']} of {n} ({rate}); success = every target of the scenario met "
            f'("ok" in the variant\'s metrics.json); {s["missed"]} missed a target'
        )
    return "\n".join(lines)


def _fmt(x) -> str:
    if isinstance(x, float):
        if not math.isfinite(x):
            return "n/a"
        return f"{x:.3g}" if x != 0 else "0"
    return str(x)


def table_md(spec: Spec, records: dict) -> str:
    """One markdown row per group (a variant without its seed): success rate, median and p95 of each
    error metric, and the report metrics."""
    keys = [k for k in spec.swept_keys if k != spec.seed_key]
    head = keys + ["seeds", "success"]
    for k in spec.metrics:
        head += [f"{k} median", f"{k} p95"]
    head += [f"{k} ({how})" for k, how in spec.report.items()]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for g, rs in groups(spec, records):
        s = _stats(rs, spec)
        row = [_fmt(g[k]) for k in keys] + [str(s["n"]), f"{s['success_rate'] * 100:.0f} %"]
        for k in spec.metrics:
            row += [_fmt(s[f"{k}_median"]), _fmt(s[f"{k}_p95"])]
        row += [_fmt(s[f"{k}_{how}"]) for k, how in spec.report.items()]
        if s["failed"]:
            row[len(keys) + 1] += f" ({s['failed']} failed)"
        lines.append("| " + " | ".join(row) + " |")
    text = "\n".join(lines) + "\n"
    if spec.breakdown:
        text += "\nBreakdown points (largest level at which every seed meets the success criterion):\n\n"
        text += breakdown_md(spec, records)
    return text


#: unit of a metric or config key by the end of its name (the run contract's metric suffixes), and of
#: the perturbation keys (sim/perturb.py)
_UNIT_SUFFIX = (
    ("_nm", "N·m"),
    ("_us", "µs"),
    ("_rad", "rad"),
    ("_rel", "relative"),
    ("_m", "m"),
    ("_s", "s"),
    ("_n", "N"),
)
_KEY_UNITS = {
    "noise_q": "rad",
    "noise_v": "rad/s",
    "delay_steps": "control steps",
    "torque_limit_fraction": "fraction of the motor limit",
    "com_shift_m": "m",
    "wrench_force": "N",
    "wrench_moment": "N·m",
}


def unit_of(name: str, spec: Spec) -> str:
    """The unit of a metric or swept key on a plot axis ("" when none is known)."""
    if name in spec.units:
        return spec.units[name]
    leaf = name.rsplit(".", 1)[-1]
    for agg in ("_median", "_mean", "_max", "_min", "_p90", "_p95"):  # control_step_us_median: µs
        leaf = leaf.removesuffix(agg)
    if leaf in _KEY_UNITS:
        return _KEY_UNITS[leaf]
    return next((u for suf, u in _UNIT_SUFFIX if leaf.endswith(suf)), "")


def _label(name: str, spec: Spec) -> str:
    u = unit_of(name, spec)
    return f"{name} [{u}]" if u else name


def _threshold_lines(ax, metric: str, spec: Spec) -> None:
    """The [success] threshold and the spec's named thresholds of ``metric``, dashed, with a legend."""
    lines = []
    if metric in spec.success:
        op, lim = spec.success[metric]
        lines.append((f"success: {op} {lim:g}", lim))
    lines += [(f"{lbl}: {x:g}", float(x)) for lbl, x in spec.thresholds.get(metric, {}).items()]
    for i, (lbl, y) in enumerate(lines):
        ax.axhline(
            y, ls="--", lw=1.2, color=("tab:red", "tab:purple", "tab:orange", "tab:brown")[i % 4], label=lbl
        )
    if lines:
        ax.legend(fontsize=7, loc="best")


def plot(spec: Spec, records: dict, out: Path) -> list[Path]:
    """plots/<key>.png for each swept key: success rate per value, and each error metric's distribution
    per value (box plots; a scatter against the value for a random key).  With two or more named axes,
    also plots/arena.png: the first error metric per group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pdir = out / "plots"
    pdir.mkdir(exist_ok=True)
    paths = []
    metrics = spec.metrics or [k for k in _metric_names(records) if "error" in k or "rmse" in k][:3]
    for key, vals in by_swept_value(spec, records).items():
        if not vals:
            continue
        fig, axs = plt.subplots(
            1 + len(metrics),
            1,
            figsize=(max(6, 0.9 * len(vals) + 3), 2.6 * (1 + len(metrics))),
            squeeze=False,
        )
        labels = [json.loads(s) for s in vals]
        rate = [sum(_success(r, spec) for r in rs) / len(rs) for rs in vals.values()]
        xs = np.arange(len(vals))
        continuous = key in spec.random and all(isinstance(x, (int, float)) for x in labels)
        if continuous:
            xv = np.array(labels, dtype=float)
            ok = np.array([_success(rs[0], spec) for rs in vals.values()], dtype=float)
            axs[0, 0].plot(xv, ok, "o", alpha=0.6)
            axs[0, 0].set_ylabel("success (1) / not (0)", fontsize=8)
        else:
            axs[0, 0].bar(xs, rate, color="tab:green")
            axs[0, 0].set_ylim(0, 1.05)
            axs[0, 0].set_ylabel("success rate\n[fraction of seeds]", fontsize=8)
            axs[0, 0].set_xticks(xs, [str(x) for x in labels], rotation=20, fontsize=8)
        for i, m in enumerate(metrics, start=1):
            ax = axs[i, 0]
            data = [_values(rs, m) for rs in vals.values()]
            if continuous:
                for x, d in zip(labels, data):
                    ax.plot([x] * len(d), d, "o", color="tab:blue", alpha=0.6)
            else:
                ax.boxplot([d if d else [np.nan] for d in data], positions=xs, widths=0.5)
                ax.set_xticks(xs, [str(x) for x in labels], rotation=20, fontsize=8)
            if any(d and min(d) > 0 for d in data):
                ax.set_yscale("log")
            ax.set_ylabel(_label(m, spec), fontsize=8)
            ax.grid(True, which="both", alpha=0.3)
            _threshold_lines(ax, m, spec)
        axs[-1, 0].set_xlabel(key if key in spec.axes else _label(key, spec))
        fig.suptitle(f"{spec.name}: success and errors against {key}", fontsize=10)
        fig.tight_layout()
        p = pdir / f"{key.replace('/', '_')}.png"
        fig.savefig(p, dpi=100)
        plt.close(fig)
        paths.append(p)
    if len(spec.axes) >= 2 and metrics:
        paths.append(_arena_figure(spec, records, metrics, pdir, plt))
    return paths


def _metric_names(records: dict) -> list[str]:
    names: list[str] = []
    for r in records.values():
        for k, x in r["metrics"].items():
            if k not in names and isinstance(x, (int, float)) and not isinstance(x, bool):
                names.append(k)
    return names


def _arena_figure(spec, records, metrics, pdir, plt):
    """Groups of the first axis (e.g. the law) side by side within each value of the second (e.g. the
    perturbation set): the distribution of each error metric over the seeds."""
    a1, a2 = list(spec.axes)[:2]
    l1, l2 = list(spec.axes[a1]), list(spec.axes[a2])
    fig, axs = plt.subplots(
        len(metrics), 1, figsize=(max(8, 1.6 * len(l2) * len(l1) / 2), 3.2 * len(metrics)), squeeze=False
    )
    width = 0.8 / len(l1)
    for i, m in enumerate(metrics):
        ax = axs[i, 0]
        for j, lab1 in enumerate(l1):
            data, pos = [], []
            for k, lab2 in enumerate(l2):
                rs = [
                    records[v.id]
                    for v in spec.variants
                    if v.id in records and v.swept[a1] == lab1 and v.swept[a2] == lab2
                ]
                d = _values(rs, m)
                data.append(d if d else [np.nan])
                pos.append(k + (j - (len(l1) - 1) / 2) * width)
            bp = ax.boxplot(data, positions=pos, widths=width * 0.85, patch_artist=True, manage_ticks=False)
            for b in bp["boxes"]:
                b.set_facecolor(plt.cm.tab10(j))
            ax.plot([], [], "s", color=plt.cm.tab10(j), label=lab1)
        ax.set_xticks(range(len(l2)), l2, fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel(_label(m, spec), fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
        _threshold_lines(ax, m, spec)
        ax.legend(fontsize=7, ncol=min(4, len(l1) + 2))
    axs[-1, 0].set_xlabel(a2)
    fig.suptitle(f"{spec.name}: {a1} × {a2}", fontsize=10)
    fig.tight_layout()
    p = pdir / "arena.png"
    fig.savefig(p, dpi=100)
    plt.close(fig)
    return p

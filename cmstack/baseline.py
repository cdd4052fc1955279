"""Closed-loop regression baselines: store a run compactly, compare a later run with it.

    cmstack baseline save RUN_DIR [--to DIR]              # a baseline of a finished run
    cmstack baseline check RUN_DIR --against DIR          # 0 within tolerance, 1 outside, 2 mismatch

A **baseline** is a directory of four files:

* ``metrics.json`` and ``config.toml``: the run's own, copied;
* ``signals.npz``: the chosen signals (by default the task/constraint errors ``error__*``, ``e``,
  ``e_*``, the joint positions ``q``, the torques ``tau`` and the loop residuals ``*violation*``,
  ``*residual*``, ``viol`` that the log has) on a uniform time grid ``t``: every ``stride``-th
  control step, so that at most ``max_samples`` (2000) rows are kept (a 10 s YuMi run: 2000 steps,
  kept whole, 0.31 MB).  Stored as float32 (``np.savez_compressed``): its relative rounding, 6e-8,
  is 1/1600 of the default band (1e-4 of the signal's peak); give ``dtype="float64"`` for bands
  below ~1e-6 of the peak;
* ``baseline.toml``: what is compared and how closely; edit it to change the tolerances (below).

**check** compares a run with a baseline:

* metrics, per kind: ``timing`` (wall-clock keys: ``*_us*``, ``realtime_factor*``, ``wall_*``,
  ``cpu_*``; not reproducible, skipped), ``count`` (integer metrics and ``*_steps``, ``*failures``,
  ``*saturations``, ``*crossings``, …: exact), ``error`` (every other number: |run − base| ≤
  atol + rtol·|base|), ``exact`` (bools, strings, lists: equal); ``reason`` is skipped (it follows
  ``ok``, ``failed_targets`` and ``not_evaluated``, which are compared);
* signals, on the baseline's grid (the run is interpolated onto it, linearly, per column): each must
  stay within its band |run − base| ≤ atol + rtol·max|base| (the peak of the whole signal over the
  baseline, so that a column that stays near zero gets the signal's band, not a vanishing one).

The default tolerances (``DEFAULT_TOLERANCES``) come from a measurement of run-to-run differences
(docs/regression_testing.md, ``python -m cmstack.bench.determinism``): two runs of the shipped
scenarios with the same seed on one machine are bitwise identical (27 of 27 pairs); the one
non-repeatable path known (ProxSuite's cold-started sequential QPs: 6.1e-7 N·m between two identical
controllers) moves the flagship's signals by at most 3.1e-9 of their peak in closed loop, so rtol = 1e-4
is 3e4 times that and 1600 times float32's rounding, while a 1 % change of one gain moves the
flagship's torques by 2.9 % of their peak.

``baseline.toml`` (written by ``save``; every key optional)::

    [metrics]
    error = {rtol = 1e-4, atol = 1e-9}      # defaults per kind; "skip" skips the kind
    count = {rtol = 0.0, atol = 0.0}
    timing = "skip"
    [metrics.keys]                          # per metric: {rtol, atol}, "exact" or "skip"
    settling_time_s = {rtol = 0.0, atol = 0.01}
    [signals]
    default = {rtol = 1e-4, atol = 1e-9}    # band = atol + rtol * max|baseline signal|
    [signals.keys]                          # per signal: {rtol, atol} or "skip"
    tau = {rtol = 1e-3, atol = 0.0}

The result is ``check.md`` in the run directory and, for each signal that left its band, a PNG in
``check_plots/`` (baseline, run and band; below, run − baseline against ± band; the first crossing
marked).  Exit codes: 0 within tolerance; 1 outside (the message names the first signal to leave its
band and the time, or the first metric outside); 2 the baseline does not match the run (another
scenario, a signal or metric the run lacks, a shorter run, another signal shape) or cannot be read
(one line naming the file and key).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tomllib

from cmstack.models.errors import StackError

EXIT_OK, EXIT_OUTSIDE, EXIT_MISMATCH = 0, 1, 2

#: log keys kept by default (fnmatch patterns): task/constraint errors, q, τ, loop residuals
DEFAULT_SIGNALS = ("error__*", "e", "e_*", "q", "tau", "*violation*", "*residual*", "viol")
#: at most this many rows per signal in a baseline (every stride-th control step)
MAX_SAMPLES = 2000
#: the tolerances ``save`` writes into baseline.toml and ``check`` uses for what it does not name
#: (from the determinism measurement: docs/regression_testing.md)
DEFAULT_TOLERANCES = {
    "metrics": {"error": {"rtol": 1e-4, "atol": 1e-9}, "count": {"rtol": 0.0, "atol": 0.0}, "timing": "skip"},
    "signals": {"default": {"rtol": 1e-4, "atol": 1e-9}},
}
#: metric keys that are wall-clock measurements (not reproducible): regex on the key
TIMING_RE = re.compile(r"(^|_)(us|realtime|wall|cpu)(_|$)")
#: metric keys that count events (compared exactly), besides every integer-valued metric
COUNT_RE = re.compile(r"(_steps|failures|saturations|crossings|_count|retries|_iters?)$|^n_")
#: metric keys never compared (derived from the compared ones)
SKIPPED_METRICS = ("reason",)
FILES = ("metrics.json", "config.toml", "signals.npz", "baseline.toml")


class BaselineError(StackError):
    """A baseline that does not match the run, or a file that cannot be read (exit 2)."""


# ------------------------------------------------------------------------------------------ reading
def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise BaselineError(f"{path}: file not found") from None
    except (OSError, ValueError) as exc:
        raise BaselineError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise BaselineError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _read_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise BaselineError(f"{path}: file not found") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise BaselineError(f"{path}: not valid TOML ({exc})") from None


def _run_dir(run_dir) -> Path:
    p = Path(run_dir).expanduser()
    if p.is_file() and p.name in ("log.npz", "metrics.json"):
        p = p.parent
    if not p.is_dir():
        raise BaselineError(f"{p}: no such run directory")
    if not (p / "metrics.json").is_file():
        raise BaselineError(f"{p / 'metrics.json'}: file not found (not a run directory)")
    return p


def _log_keys(run: Path) -> list[str]:
    from cmstack.sim.logger import log_keys

    try:
        return log_keys(run)
    except FileNotFoundError:
        raise BaselineError(f"{run / 'log.npz'}: file not found (and no checkpoint parts)") from None


def _read_series(run: Path, keys) -> dict[str, np.ndarray]:
    from cmstack.sim.logger import read_log_rows

    try:
        return read_log_rows(run, list(keys))
    except (OSError, ValueError, KeyError) as exc:
        raise BaselineError(f"{run / 'log.npz'}: not readable ({exc})") from None


def _is_series(x: np.ndarray, n: int) -> bool:
    return x.ndim >= 1 and len(x) == n and x.dtype.kind in "fiub" and x.dtype != object


def _columns(x: np.ndarray) -> np.ndarray:
    """A series as rows × columns (float64)."""
    return np.asarray(x, dtype=float).reshape(len(x), -1)


# ------------------------------------------------------------------------------------------ save
def _choose(keys, patterns) -> list[str]:
    return [k for k in keys if k != "t" and any(fnmatch.fnmatchcase(k, p) for p in patterns)]


def _toml_value(v) -> str:
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(v)


def _baseline_toml(
    scenario: str, signals: list[str], stride: int, dt: float, dtype: str, source: Path, keep: dict | None
) -> str:
    """The text of baseline.toml: the defaults spelt out (with comments), and the per-key entries of
    ``keep`` (an earlier baseline.toml's, preserved when a baseline is rewritten)."""
    tol = DEFAULT_TOLERANCES
    keep = keep or {}
    mk = keep.get("metrics") or {}
    sk = keep.get("signals") or {}
    lines = [
        "# cmstack baseline: what `cmstack baseline check` compares and how closely (edit freely).",
        f"# scenario {scenario}; from run {source.name}; signals every {stride} control step(s) (dt = {dt:.6g} s), {dtype}.",  # noqa: E501
        '# metrics: per kind {rtol, atol}: |run - base| <= atol + rtol*|base|; "skip" skips the kind.',
        "# kinds: error (floats), count (integers, *_steps, *failures, ...), timing (wall clock: not reproducible).",
        "[metrics]",
        *(f"{k} = {_toml_value(mk.get(k, v))}" for k, v in tol["metrics"].items()),
        "",
        '# per metric key: {rtol, atol}, "exact" or "skip"; e.g. settling_time_s = {rtol = 0.0, atol = 0.01}',
        "[metrics.keys]",
        *(f"{k} = {_toml_value(v)}" for k, v in (mk.get("keys") or {}).items()),
        "",
        "# signals: band = atol + rtol * max|baseline signal| around the baseline, on its time grid.",
        "[signals]",
        f"compare = {_toml_value(signals)}",
        f"default = {_toml_value(sk.get('default', tol['signals']['default']))}",
        "",
        '# per signal: {rtol, atol} or "skip"; e.g. tau = {rtol = 1e-3, atol = 0.0}',
        "[signals.keys]",
        *(f"{k} = {_toml_value(v)}" for k, v in (sk.get("keys") or {}).items()),
        "",
    ]
    return "\n".join(lines)


def save(run_dir, to=None, signals=None, max_samples: int = MAX_SAMPLES, dtype: str = "float32") -> Path:
    """Write a baseline of the run in ``run_dir`` into ``to`` (default ``RUN_DIR/baseline``) and return
    its path.  ``signals``: log keys or fnmatch patterns (default :data:`DEFAULT_SIGNALS`, those the log
    has).  An existing baseline.toml in ``to`` keeps its tolerance entries (``compare`` is rewritten).
    Refuses (BaselineError) a run that did not finish, failed with an error or was interrupted, and a
    log without ``t`` or without any of the signals."""
    from cmstack.sim.logger import atomic_write

    run = _run_dir(run_dir)
    to = Path(to).expanduser() if to is not None else run / "baseline"
    metrics = _read_json(run / "metrics.json")
    bad = (
        "error"
        if metrics.get("error")
        else "interrupted"
        if metrics.get("interrupted")
        else "did not finish"
        if "did not finish" in str(metrics.get("reason", ""))
        else None
    )
    if bad:
        raise BaselineError(
            f"{run / 'metrics.json'}: the run {bad} ({str(metrics.get('reason', ''))[:120]}); "
            "a baseline needs a finished run"
        )
    if not (run / "config.toml").is_file():
        raise BaselineError(f"{run / 'config.toml'}: file not found")
    keys = _log_keys(run)
    if "t" not in keys:
        raise BaselineError(f"{run / 'log.npz'}: no 't' series (a baseline needs the time of every row)")
    t = _read_series(run, ["t"])["t"].astype(float)
    patterns = tuple(signals) if signals else DEFAULT_SIGNALS
    chosen = _choose(keys, patterns)
    data = _read_series(run, chosen + ["joint_names"])
    series = {k: data[k] for k in chosen if k in data and _is_series(data[k], len(t))}
    if signals:
        missing = [p for p in patterns if not any(fnmatch.fnmatchcase(k, p) for k in series)]
        if missing:
            raise BaselineError(
                f"{run / 'log.npz'}: no time series matches {missing}; series: "
                f"{sorted(k for k in keys if k != 't')}"
            )
    if not series:
        raise BaselineError(
            f"{run / 'log.npz'}: none of the default signals {list(DEFAULT_SIGNALS)} is logged; "
            "name some with signals=[...] (--signal KEY)"
        )
    if len(t) < 2 or not np.all(np.diff(t) > 0):
        raise BaselineError(f"{run / 'log.npz'}: 't' must increase and have at least 2 rows")
    stride = max(1, math.ceil(len(t) / max_samples))
    idx = np.arange(0, len(t), stride)
    arrays = {"t": t[idx]}
    for k, x in series.items():
        arrays[k] = np.asarray(x, dtype=float)[idx].astype(dtype)
    names = data.get("joint_names")
    if names is not None and getattr(names, "ndim", 0) == 1:
        arrays["joint_names"] = np.asarray(names).astype(str)
    to.mkdir(parents=True, exist_ok=True)
    import io

    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    atomic_write(to / "signals.npz", buf.getvalue())
    shutil.copyfile(run / "config.toml", to / ".config.toml.tmp")
    (to / ".config.toml.tmp").replace(to / "config.toml")
    atomic_write(to / "metrics.json", json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    keep = _read_toml(to / "baseline.toml") if (to / "baseline.toml").is_file() else None
    dt = float(np.median(np.diff(arrays["t"]))) if len(idx) > 1 else 0.0
    atomic_write(
        to / "baseline.toml",
        _baseline_toml(str(metrics.get("scenario", "?")), sorted(series), stride, dt, dtype, run, keep),
    )
    return to


# ------------------------------------------------------------------------------------------ tolerances
@dataclass
class Tol:
    rtol: float
    atol: float


def _tol(spec, where: str) -> Tol | str:
    """A tolerance entry of baseline.toml: {rtol, atol} (either may be left out: 0), "skip" or "exact"."""
    if spec in ("skip", "exact"):
        return spec
    if not isinstance(spec, dict):
        raise BaselineError(f'{where}: expected {{rtol = …, atol = …}}, "skip" or "exact", got {spec!r}')
    unknown = set(spec) - {"rtol", "atol"}
    if unknown:
        raise BaselineError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: rtol, atol")
    vals = {}
    for k in ("rtol", "atol"):
        v = spec.get(k, 0.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise BaselineError(f"{where}.{k}: must be a finite number >= 0, got {v!r}")
        vals[k] = float(v)
    return Tol(**vals)


@dataclass
class Settings:
    kinds: dict
    metric_keys: dict
    compare: list
    signal_default: Tol | str
    signal_keys: dict


def _settings(path: Path, metrics: dict) -> Settings:
    raw = _read_toml(path) if path.is_file() else {}
    unknown = set(raw) - {"metrics", "signals"}
    if unknown:
        raise BaselineError(f"{path}: unknown table(s) {sorted(unknown)}; allowed: metrics, signals")
    m, s = raw.get("metrics", {}), raw.get("signals", {})
    for name, tab, allowed in (
        ("metrics", m, {"error", "count", "timing", "keys"}),
        ("signals", s, {"compare", "default", "keys"}),
    ):
        if not isinstance(tab, dict):
            raise BaselineError(f"{path}: [{name}] must be a table")
        bad = set(tab) - allowed
        if bad:
            raise BaselineError(f"{path}: unknown key {name}.{sorted(bad)[0]}; allowed: {sorted(allowed)}")
    kinds = {k: _tol(m.get(k, v), f"{path}: metrics.{k}") for k, v in DEFAULT_TOLERANCES["metrics"].items()}
    mkeys = {k: _tol(v, f"{path}: metrics.keys.{k}") for k, v in (m.get("keys") or {}).items()}
    for k in mkeys:
        if k not in metrics:
            raise BaselineError(f"{path}: metrics.keys.{k}: no metric '{k}' in the baseline's metrics.json")
    compare = s.get("compare")
    if compare is not None and (
        not isinstance(compare, list) or not all(isinstance(x, str) for x in compare)
    ):
        raise BaselineError(f"{path}: signals.compare must be a list of signal names")
    return Settings(
        kinds,
        mkeys,
        compare,
        _tol(s.get("default", DEFAULT_TOLERANCES["signals"]["default"]), f"{path}: signals.default"),
        {k: _tol(v, f"{path}: signals.keys.{k}") for k, v in (s.get("keys") or {}).items()},
    )


def metric_kind(key: str, value) -> str:
    """'timing', 'count', 'error' or 'exact' (see the module docstring)."""
    if key in SKIPPED_METRICS:
        return "skip"
    if TIMING_RE.search(key):
        return "timing"
    if isinstance(value, bool) or isinstance(value, (str, list, dict)) or value is None:
        return "exact"
    if isinstance(value, int) or COUNT_RE.search(key):
        return "count"
    return "error"


# ------------------------------------------------------------------------------------------ check
@dataclass
class MetricResult:
    key: str
    kind: str
    base: object
    run: object
    ok: bool
    note: str = ""


@dataclass
class SignalResult:
    key: str
    ok: bool
    max_diff: float
    band: float
    t_first: float | None = None  # first time outside the band
    column: int | None = None  # the column that left first
    column_name: str = ""
    plot: Path | None = None


@dataclass
class CheckResult:
    """The outcome of :func:`check`: ``code`` 0 within tolerance, 1 outside, 2 mismatch; ``message``
    one line; ``report``: the check.md written (None on a mismatch)."""

    code: int
    message: str
    metrics: list[MetricResult] = field(default_factory=list)
    signals: list[SignalResult] = field(default_factory=list)
    config_changes: list[str] = field(default_factory=list)
    report: Path | None = None

    @property
    def ok(self) -> bool:
        return self.code == EXIT_OK

    def __bool__(self) -> bool:
        return self.ok


def _num(x):
    return None if x is None else float(x)


def _compare_metric(key, kind, tol, b, r) -> MetricResult:
    if tol == "exact" or kind == "exact":
        return MetricResult(key, kind, b, r, b == r)
    fb, fr = _num(b), _num(r)
    if fb is None or fr is None:
        return MetricResult(
            key, kind, b, r, fb is None and fr is None, "null (NaN) on one side" if fb != fr else ""
        )
    lim = tol.atol + tol.rtol * abs(fb)
    d = abs(fr - fb)
    return MetricResult(key, kind, b, r, d <= lim, f"|Δ| = {d:.3g}, allowed {lim:.3g}")


def _flat(cfg: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in cfg.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _config_changes(base: Path, run: Path) -> list[str]:
    try:
        a, b = _flat(_read_toml(base)), _flat(_read_toml(run))
    except BaselineError:
        return []
    return [
        f"{k}: {a.get(k, '(absent)')!r} → {b.get(k, '(absent)')!r}"
        for k in sorted({*a, *b})
        if a.get(k) != b.get(k) and k != "duration"
    ]


#: the unit of a signal by its log key (fnmatch patterns, first match): the stack's logs keep joint
#: coordinates in rad (revolute) or m (prismatic), torques in N·m or N, task errors in m (positions) or rad
#: (rotations), loop and weld violations in m (rad for a rotation row)
SIGNAL_UNITS = (
    ("q", "rad or m"),
    ("v", "rad/s or m/s"),
    ("tau", "N·m or N"),
    ("Qc", "N·m or N"),
    ("*violation*", "m"),
    ("viol", "m"),
    ("*residual*", "m or rad"),
    ("error__*", "m or rad"),
    ("e", "m or rad"),
    ("e_*", "m or rad"),
)


def signal_unit(key: str) -> str:
    """The unit of signal ``key`` for a plot's axis (``SIGNAL_UNITS``), or "as logged" for another."""
    from fnmatch import fnmatchcase

    return next((u for pat, u in SIGNAL_UNITS if fnmatchcase(key, pat)), "as logged")


def _column_name(key: str, j: int, width: int, names) -> str:
    if names is not None and width == len(names) and key in ("q", "tau", "v", "Qc"):
        return f"{key}[{names[j]}]"
    return f"{key}[{j}]" if width > 1 else key


def check(run_dir, against, out=None, plots: bool = True) -> CheckResult:
    """Compare the run in ``run_dir`` with the baseline in ``against``; write ``check.md`` (into ``out``,
    default the run directory) and a PNG per signal outside its band (``check_plots/``).  Returns a
    :class:`CheckResult` (``code``: 0, 1 or 2).  A mismatch (code 2) writes nothing."""
    try:
        return _check(run_dir, against, out, plots)
    except BaselineError as exc:
        return CheckResult(EXIT_MISMATCH, str(exc))


def _check(run_dir, against, out, plots) -> CheckResult:
    base = Path(against).expanduser()
    if not base.is_dir():
        raise BaselineError(f"{base}: no such baseline directory")
    for f in ("metrics.json", "signals.npz"):
        if not (base / f).is_file():
            raise BaselineError(
                f"{base / f}: file not found (not a baseline: cmstack baseline save RUN_DIR --to DIR)"
            )
    run = _run_dir(run_dir)
    bm, rm = _read_json(base / "metrics.json"), _read_json(run / "metrics.json")
    if bm.get("scenario") != rm.get("scenario"):
        raise BaselineError(
            f"{run / 'metrics.json'}: scenario {rm.get('scenario')!r} does not match the baseline's "
            f"{bm.get('scenario')!r} ({base / 'metrics.json'})"
        )
    st = _settings(base / "baseline.toml", bm)
    try:
        with np.load(base / "signals.npz") as z:
            bs = {k: z[k] for k in z.files}
    except (OSError, ValueError) as exc:
        raise BaselineError(f"{base / 'signals.npz'}: not readable ({exc})") from None
    if "t" not in bs:
        raise BaselineError(f"{base / 'signals.npz'}: no 't'")
    names = bs.pop("joint_names", None)
    tb = bs.pop("t").astype(float)
    compare = st.compare if st.compare is not None else sorted(bs)
    for k in compare:
        if k not in bs:
            raise BaselineError(
                f"{base / 'baseline.toml'}: signals.compare names '{k}', which is not in signals.npz"
            )
    compare = [k for k in compare if st.signal_keys.get(k) != "skip"]
    for k in st.signal_keys:
        if k not in bs:
            raise BaselineError(f"{base / 'baseline.toml'}: signals.keys.{k}: no signal '{k}' in signals.npz")

    # metrics: every baseline metric must be in the run (mismatch otherwise)
    mres = []
    for k in sorted(bm):
        kind = metric_kind(k, bm[k])
        tol = st.metric_keys.get(k, st.kinds.get(kind, "exact" if kind == "exact" else None))
        if kind == "skip" or tol == "skip":
            continue
        if k not in rm:
            raise BaselineError(
                f"{run / 'metrics.json'}: no metric '{k}' (the baseline has it: {base / 'metrics.json'})"
            )
        mres.append(_compare_metric(k, kind, tol, bm[k], rm[k]))

    # signals on the baseline's grid
    keys = _log_keys(run)
    missing = [k for k in compare if k not in keys]
    if missing:
        raise BaselineError(f"{run / 'log.npz'}: no signal '{missing[0]}' (the baseline compares {compare})")
    if "t" not in keys:
        raise BaselineError(f"{run / 'log.npz'}: no 't' series")
    data = _read_series(run, ["t", *compare])
    tr = np.asarray(data["t"], dtype=float)
    if len(tr) < 2 or tr[0] > tb[0] + 1e-9 or tr[-1] < tb[-1] - 1e-9:
        raise BaselineError(
            f"{run / 'log.npz'}: the run covers t = {tr[0]:.4g}…{tr[-1]:.4g} s, the baseline "
            f"{tb[0]:.4g}…{tb[-1]:.4g} s ({base / 'signals.npz'}); run at least as long"
        )
    sres = []
    for k in compare:
        b = _columns(bs[k])
        x = data[k]
        if not _is_series(x, len(tr)) or x.shape[1:] != bs[k].shape[1:]:
            raise BaselineError(
                f"{run / 'log.npz'}: signal '{k}' has rows of shape {tuple(np.shape(x)[1:])}, the "
                f"baseline {tuple(bs[k].shape[1:])}"
            )
        r = _columns(x)
        ri = np.column_stack([np.interp(tb, tr, r[:, j]) for j in range(r.shape[1])])
        tol = st.signal_keys.get(k, st.signal_default)
        finite = np.isfinite(b)
        peak = float(np.max(np.abs(b[finite]))) if finite.any() else 0.0
        band = tol.atol + tol.rtol * peak
        d = np.abs(ri - b)
        d = np.where(np.isnan(ri) & np.isnan(b), 0.0, d)
        d = np.where(np.isnan(d), np.inf, d)
        out_rows = np.any(d > band, axis=1)
        res = SignalResult(k, not out_rows.any(), float(d.max()) if d.size else 0.0, band)
        if out_rows.any():
            i = int(np.argmax(out_rows))
            j = int(np.argmax(d[i] > band))
            res.t_first, res.column = float(tb[i]), j
            res.column_name = _column_name(k, j, b.shape[1], names)
            res._arrays = (tb, b[:, j], ri[:, j], i)  # for the plot
        else:
            res.column_name = k
        sres.append(res)

    out = Path(out).expanduser() if out is not None else run
    out.mkdir(parents=True, exist_ok=True)
    bad_s = sorted((s for s in sres if not s.ok), key=lambda s: (s.t_first, s.key))
    bad_m = [m for m in mres if not m.ok]
    if plots and bad_s:
        pdir = out / "check_plots"
        if pdir.is_dir():
            shutil.rmtree(pdir)
        pdir.mkdir()
        for s in bad_s:
            s.plot = _plot(s, pdir / f"{s.key}.png")
    elif (out / "check_plots").is_dir():
        shutil.rmtree(out / "check_plots")
    if bad_s:
        s = bad_s[0]
        msg = (
            f"outside tolerance: signal {s.column_name} left its band first, at t = {s.t_first:.4f} s "
            f"(|run − baseline| up to {s.max_diff:.3g}, band {s.band:.3g}); {len(bad_s)} of {len(sres)} signals "
            f"and {len(bad_m)} of {len(mres)} metrics outside"
        )
        if bad_m:
            msg += f" (first metric: {bad_m[0].key}: {bad_m[0].base!r} → {bad_m[0].run!r})"
        code = EXIT_OUTSIDE
    elif bad_m:
        m = bad_m[0]
        msg = (
            f"outside tolerance: metric {m.key} ({m.kind}): baseline {m.base!r}, run {m.run!r}"
            + (f" ({m.note})" if m.note else "")
            + f"; {len(bad_m)} of {len(mres)} metrics outside, "
            f"every signal within its band"
        )
        code = EXIT_OUTSIDE
    else:
        msg = f"within tolerance: {len(mres)} metrics and {len(sres)} signals on {len(tb)} samples"
        code = EXIT_OK
    result = CheckResult(code, msg, mres, sres, _config_changes(base / "config.toml", run / "config.toml"))
    result.report = _write_report(out / "check.md", result, run, base, tb)
    return result


def _plot(s: SignalResult, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t, b, r, i = s._arrays
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    a1.fill_between(t, b - s.band, b + s.band, color="tab:green", alpha=0.3, label=f"band ±{s.band:.3g}")
    a1.plot(t, b, color="tab:green", lw=1.2, label="baseline")
    a1.plot(t, r, color="tab:red", lw=1.0, ls="--", label="run")
    a1.plot([t[i]], [r[i]], "ko", ms=6, mfc="none", mew=1.5, label=f"first crossing, t = {t[i]:.4f} s")
    unit = signal_unit(s.key)
    a1.set_ylabel(f"{s.column_name} [{unit}]")
    a1.legend(loc="best", fontsize=8)
    a1.set_title(f"{s.column_name}: run against baseline")
    d = r - b
    a2.fill_between(t, -s.band, s.band, color="tab:green", alpha=0.3, label="band")
    a2.plot(t, d, color="tab:red", lw=1.0, label="run − baseline")
    a2.axvline(t[i], color="k", lw=0.8, ls=":")
    a2.plot([t[i]], [d[i]], "ko", ms=6, mfc="none", mew=1.5)
    a2.set_xlabel("t [s]")
    a2.set_ylabel(f"run − baseline [{unit}]")
    a2.legend(loc="best", fontsize=8)
    fig.tight_layout()
    import io

    from cmstack.sim.logger import atomic_write

    buf = io.BytesIO()
    fig.savefig(buf, dpi=100)
    plt.close(fig)
    atomic_write(path, buf.getvalue(), fsync=False)
    return path


def _fmt(x) -> str:
    if isinstance(x, float):
        return f"{x:.6g}"
    return json.dumps(x) if not isinstance(x, str) else x


def _write_report(path: Path, res: CheckResult, run: Path, base: Path, tb: np.ndarray) -> Path:
    from cmstack.sim.logger import atomic_write

    verdict = {0: "PASS", 1: "FAIL"}[res.code]
    lines = [
        f"# Baseline check: {verdict}",
        "",
        f"- run: `{run}`",
        f"- baseline: `{base}`",
        f"- grid: {len(tb)} samples, t = {tb[0]:.4g} … {tb[-1]:.4g} s",
        f"- result: {res.message}",
        "",
    ]
    if res.config_changes:
        lines += (
            ["## Config differences (baseline → run)", ""] + [f"- `{c}`" for c in res.config_changes] + [""]
        )
    lines += [
        "## Signals",
        "",
        "| signal | within band | max abs(run − baseline) | band | first crossing |",
        "| --- | --- | --- | --- | --- |",
    ]
    for s in sorted(res.signals, key=lambda s: (s.ok, s.t_first or 0, s.key)):
        first = f"{s.column_name} at t = {s.t_first:.4f} s" if s.t_first is not None else ""
        if s.plot is not None:
            first += f" ([plot]({s.plot.relative_to(path.parent)}))"
        lines.append(
            f"| `{s.key}` | {'yes' if s.ok else '**no**'} | {s.max_diff:.3g} | {s.band:.3g} | {first} |"
        )
    lines += [
        "",
        "## Metrics",
        "",
        "| metric | kind | baseline | run | within | note |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for m in sorted(res.metrics, key=lambda m: (m.ok, m.key)):
        lines.append(
            f"| `{m.key}` | {m.kind} | {_fmt(m.base)} | {_fmt(m.run)} | {'yes' if m.ok else '**no**'} | {m.note} |"
        )
    lines.append("")
    atomic_write(path, "\n".join(lines), fsync=False)
    return path


# ------------------------------------------------------------------------------------------ command line
def add_arguments(sub) -> None:
    """The ``cmstack baseline {save,check}`` sub-commands (``sub``: the subparsers of ``cmstack``)."""
    p = sub.add_parser(
        "baseline",
        help="store a run as a regression baseline, or check a run against one",
        description="Closed-loop regression baselines (docs/regression_testing.md). Exit codes of "
        "check: 0 within tolerance, 1 outside, 2 the baseline does not match the run.",
    )
    bsub = p.add_subparsers(dest="baseline_cmd", required=True, metavar="{save,check}")
    s = bsub.add_parser("save", help="write a compact baseline of a finished run")
    s.add_argument("run", help="run directory")
    s.add_argument("--to", help="baseline directory (default RUN_DIR/baseline)")
    s.add_argument(
        "--signal",
        action="append",
        metavar="KEY",
        help=f"log key or pattern to keep (repeatable; default: {' '.join(DEFAULT_SIGNALS)})",
    )
    s.add_argument("--float64", action="store_true", help="store the signals as float64 (default float32)")
    s.set_defaults(func=cmd_baseline)
    c = bsub.add_parser("check", help="compare a run with a baseline; writes check.md and plots into RUN_DIR")
    c.add_argument("run", help="run directory")
    c.add_argument("--against", required=True, metavar="DIR", help="baseline directory")
    c.add_argument("--no-plots", action="store_true", help="no PNG per signal outside its band")
    c.set_defaults(func=cmd_baseline)


def cmd_baseline(args) -> int:
    if args.baseline_cmd == "save":
        try:
            to = save(args.run, args.to, signals=args.signal, dtype="float64" if args.float64 else "float32")
        except BaselineError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_MISMATCH
        size = sum(f.stat().st_size for f in to.iterdir() if f.is_file())
        print(
            f"baseline written: {to} ({size / 1e3:.0f} kB); check a run: cmstack baseline check RUN_DIR --against {to}"
        )
        return EXIT_OK
    res = check(args.run, args.against, plots=not args.no_plots)
    if res.code == EXIT_MISMATCH:
        print(f"error: {res.message}", file=sys.stderr)
    else:
        print(res.message)
        print(f"report: {res.report}")
    return res.code


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cmstack.baseline")
    add_arguments(ap.add_subparsers(dest="cmd", required=True))
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

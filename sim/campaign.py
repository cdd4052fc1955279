"""Campaigns: one scenario, many variants, one table — on a local process pool or a Dask cluster.

    cmstack campaign SPEC.toml [--scheduler tcp://HOST:PORT] [--workers N] [--out DIR]
                               [--retry-failed] [--no-progress]

A campaign spec (TOML) names a base scenario and the configuration keys to vary::

    [campaign]
    name = "yumi_masses"             # optional; default: the spec file's stem
    scenario = "yumi_dual_arm"       # a shipped scenario, or PATH.py relative to the spec
    seeds = 4                        # N (seeds 0..N-1) or a list of seeds, set on `seed_key`
    seed_key = "seed"
    samples = 0                      # size of the random sample drawn from [random]
    sample_seed = 0
    metrics = ["constraint_error_converged"]           # error metrics: median and p95 per group, plots
    report = { max_torque_nm = "max", control_step_us_median = "median" }   # other table columns
    plots = false          # each variant's own plots/ (default off: drawing is most of a short run's cost)
    units = { constraint_error_converged = "m" }       # axis units of metrics/keys the name does not tell
    thresholds = { constraint_error_converged = { "scenario target" = 1e-3 } }   # lines on the plots

    [base]                           # overrides of the scenario's default config, for every variant
    duration = 1.0
    [grid]                           # key → values; the cartesian product of all of them
    "perturbation.mass_rel" = [0.0, 0.2]
    [axes.law]                       # a named axis: label → table of overrides (several keys at once)
    uk_weighted = { controller = "uk", priority = "weighted" }
    [random]                         # key → {uniform = [lo, hi]} | {loguniform = [lo, hi]} | {normal = [mu, sd]}
    "perturbation.noise_q" = { loguniform = [1e-5, 1e-3] }    #   | {integers = [lo, hi]} | {choice = [...]}
    [success]                        # optional: metric → "<= x" | "< x" | ">= x" | "> x"; replaces the
    constraint_error_converged = "<= 2e-4"   # scenario's own "ok" as the success criterion
    [breakdown]                      # optional: breakdown points, one per label of the axis `by`
    by = "law"                       #   (omitted: one for the whole campaign)
    mass = "perturbation.mass_rel"   #   family → the config key whose value is the family's level
    delay = "perturbation.delay_steps"

The variants are axes × grid × random samples × seeds (seeds innermost), each a set of config
overrides.  Each variant runs in its OWN process (so MuJoCo, Pinocchio and ProxSuite objects are never
shared) through ``run_scenario`` with those overrides, into ``OUT/variants/<index>-<hash>/`` (the
usual run contract: config.toml, metrics.json, log.npz, and plots/ with ``plots = true``), and ends with ``result.json``
(status ok | missed | failed, reason, swept keys, metrics) written atomically.  A variant that raises,
or whose process dies (exit, signal, out of memory), is recorded as failed with its reason; the others
go on.  The campaign is resumable: a second call skips every variant that has a ``result.json`` whose
hash matches its overrides (``--retry-failed`` also re-runs the failed ones).  If the driver is killed,
its local workers die with it (Linux parent-death signal) and their partial run directories are redone.

Outputs, rewritten atomically after each result: ``campaign.csv`` (one row per variant, in variant
order: id, status, swept keys, seed, reason, metrics), ``summary.json`` (counts, success rates and
error statistics per swept key and per group), ``table.md`` (one row per group = variant without its
seed), and at the end ``plots/<key>.png`` (success rate and error distributions against each key).
Every plot axis carries its unit: ``units`` in ``[campaign]``, else the unit the name ends with
(``_m`` m, ``_rad`` rad, ``_s`` s, ``_us`` µs, ``_n`` N, ``_nm`` N·m, ``_rel`` relative; the perturbation
keys: ``noise_v`` rad/s, ``delay_steps`` control steps, ...).  Every error plot draws, as dashed lines
with a legend, the ``[success]`` threshold of its metric and the ``thresholds`` of ``[campaign]`` (named
reference levels, e.g. the scenario's own targets when they depend on the variant).

Execution: a local pool of ``--workers`` processes (default: all cores; a fresh forked process per
variant), or ``--scheduler tcp://HOST:PORT``: an existing Dask distributed cluster, each task running
its variant in a process forked from a "fork server" of its worker thread (started on the thread's first
task; it has imported the scenario, so a variant starts in milliseconds instead of a fresh interpreter's
seconds, and a variant that kills its process does not kill the Dask worker; see ``run_job_forked``).
With a scheduler the campaign directory must be at the same path on every worker (shared file system).
"""
from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import math
import multiprocessing as mp
import multiprocessing.connection
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import tomllib
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cmstack.models.errors import ConfigError
from cmstack.sim.logger import atomic_write   # the one atomic write (temporary file, fsync, rename)

RESULT = "result.json"


def shipped_dir() -> Path:
    """The shipped campaign specs (the arena, package data): ``cmstack campaign NAME`` finds them by name."""
    import cmstack.scenarios

    return Path(cmstack.scenarios.__file__).resolve().parent / "campaigns"
#: keys of campaign.csv before the swept keys and the metrics
LEAD_COLUMNS = ("id", "index", "status")


# ------------------------------------------------------------------------------------- files
def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return repr(x)          # "nan", "inf": JSON has no such literals
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return str(x)


def _dumps(obj) -> str:
    return json.dumps(_jsonable(obj), indent=1, sort_keys=False) + "\n"


# ------------------------------------------------------------------------------------- the spec
@dataclass
class Variant:
    """One run of the campaign: its position, the swept keys' values (for the table) and the config
    overrides they stand for."""

    index: int
    swept: dict            # column → value (an axis' label, a grid/random key's value, the seed)
    overrides: dict        # dotted config key → value, base overrides included

    @property
    def hash(self) -> str:
        blob = json.dumps(_jsonable(self.overrides), sort_keys=True, separators=(",", ":"))
        return hashlib.sha1(blob.encode()).hexdigest()[:10]

    @property
    def id(self) -> str:
        return f"{self.index:04d}-{self.hash}"


@dataclass
class Spec:
    """A parsed campaign spec (see the module docstring for the file format)."""

    path: Path
    name: str
    scenario: str
    base: dict
    axes: dict              # axis name → {label → overrides}
    grid: dict              # key → list of values
    random: dict            # key → distribution table
    samples: int
    sample_seed: int
    seeds: list
    seed_key: str
    metrics: list
    report: dict            # metric → "max" | "median" | "mean" | "min"
    success: dict           # metric → criterion string
    plots: bool = False     # each variant's own plots (off: drawing is most of a short variant's cost)
    breakdown_by: str | None = None    # the axis with one breakdown point per label (None: the whole campaign)
    breakdown: dict = field(default_factory=dict)   # family → config key whose value is its level
    units: dict = field(default_factory=dict)       # metric or swept key → unit of its plot axis
    thresholds: dict = field(default_factory=dict)  # metric → {label → value}: reference lines on the plots
    variants: list = field(default_factory=list)

    @property
    def swept_keys(self) -> list[str]:
        """Every column that varies across variants, in order, the seed last."""
        return list(self.axes) + list(self.grid) + list(self.random) + [self.seed_key]


def _flatten(table: dict, prefix: str = "") -> dict:
    """{"a": {"b": 1}} → {"a.b": 1}; a dotted key in the TOML ("a.b" = 1, quoted) is kept as is."""
    out = {}
    for k, v in table.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


_DISTS = ("uniform", "loguniform", "normal", "integers", "choice")
_REDUCE = {"max": np.max, "min": np.min, "median": np.median, "mean": np.mean}


def _draw(rng: np.random.Generator, key: str, dist: dict, where: str):
    if not isinstance(dist, dict) or len(dist) != 1 or next(iter(dist)) not in _DISTS:
        raise ConfigError(f"{where}: [random] '{key}' must be one of "
                          + ", ".join(f"{{{d} = ...}}" for d in _DISTS) + f", got {dist!r}")
    kind, arg = next(iter(dist.items()))
    if kind == "choice":
        if not isinstance(arg, list) or not arg:
            raise ConfigError(f"{where}: [random] '{key}': choice needs a non-empty list, got {arg!r}")
        return arg[int(rng.integers(len(arg)))]
    if not (isinstance(arg, list) and len(arg) == 2 and all(isinstance(a, (int, float)) for a in arg)):
        raise ConfigError(f"{where}: [random] '{key}': {kind} needs [a, b], got {arg!r}")
    a, b = arg
    if kind == "uniform":
        return float(rng.uniform(a, b))
    if kind == "loguniform":
        if not 0 < a <= b:
            raise ConfigError(f"{where}: [random] '{key}': loguniform needs 0 < lo <= hi, got {arg}")
        return float(np.exp(rng.uniform(np.log(a), np.log(b))))
    if kind == "normal":
        return float(rng.normal(a, b))
    return int(rng.integers(int(a), int(b) + 1))


def _criterion(text: str, where: str):
    s = str(text).strip().replace("≤", "<=").replace("≥", ">=")
    for op in ("<=", ">=", "<", ">"):
        if s.startswith(op):
            try:
                lim = float(s[len(op):])
            except ValueError:
                break
            return op, lim
    raise ConfigError(f"{where}: [success] criterion must look like '<= 2e-4', got {text!r}")


def _meets(value, op: str, lim: float) -> bool:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return False
    return {"<=": value <= lim, ">=": value >= lim, "<": value < lim, ">": value > lim}[op]


def _flag(x, key: str, where: str) -> bool:
    if not isinstance(x, bool):
        raise ConfigError(f"{where}: [campaign] {key} must be true or false, got {x!r}")
    return x


def load_spec(path: str | Path) -> Spec:
    """Parse a campaign spec and expand its variants.  Every override is checked against the
    scenario's default config here (unknown key, wrong type), before anything runs."""
    path = Path(path).expanduser()
    shipped = shipped_dir() / f"{path.name}.toml"
    if not path.exists() and path.suffix == "" and shipped.is_file():    # a shipped spec by name
        path = shipped
    where = f"campaign spec {path}"
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        names = sorted(p.stem for p in shipped_dir().glob("*.toml"))
        raise ConfigError(f"{where}: file not found; give a spec file or a shipped spec by name: "
                          f"{', '.join(names)} (in {shipped_dir()})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: not valid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:             # a directory, no permission, not text
        raise ConfigError(f"{where}: cannot be read ({type(exc).__name__}: {exc})") from None
    unknown = set(raw) - {"campaign", "base", "grid", "axes", "random", "success", "breakdown"}
    if unknown:
        raise ConfigError(f"{where}: unknown table(s) {sorted(unknown)}; "
                          "expected [campaign], [base], [grid], [axes.NAME], [random], [success], [breakdown]")
    c = raw.get("campaign", {})
    known = {"name", "scenario", "seeds", "seed_key", "samples", "sample_seed", "metrics", "report", "plots",
             "units", "thresholds"}
    if set(c) - known:
        raise ConfigError(f"{where}: unknown key(s) {sorted(set(c) - known)} in [campaign]; known: {sorted(known)}")
    if "scenario" not in c:
        raise ConfigError(f"{where}: [campaign] needs scenario = \"NAME\" (a shipped scenario or PATH.py)")
    scenario = str(c["scenario"])
    if scenario.endswith(".py") and not Path(scenario).is_absolute():
        scenario = str((path.parent / scenario).resolve())
    seeds = c.get("seeds", 1)
    seeds = list(range(seeds)) if isinstance(seeds, int) else seeds
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds):
        raise ConfigError(f"{where}: [campaign] seeds must be a positive count or a list of integers, got {seeds!r}")
    axes = {}
    for ax, labels in raw.get("axes", {}).items():
        if not isinstance(labels, dict) or not labels or not all(isinstance(v, dict) for v in labels.values()):
            raise ConfigError(f"{where}: [axes.{ax}] must map labels to tables of overrides, e.g. "
                              f"lbl = {{ controller = \"uk\" }}")
        axes[ax] = {lbl: _flatten(ov) for lbl, ov in labels.items()}
    grid = _flatten(raw.get("grid", {}))
    for k, vals in grid.items():
        if not isinstance(vals, list) or not vals:
            raise ConfigError(f"{where}: [grid] '{k}' must be a non-empty list of values, got {vals!r}")
    rnd = {}
    for k, v in raw.get("random", {}).items():     # distributions are tables: do not flatten them
        rnd[k] = v
    samples = int(c.get("samples", 0))
    if rnd and samples < 1:
        raise ConfigError(f"{where}: [random] needs [campaign] samples = N (N >= 1)")
    report = c.get("report", {"max_torque_nm": "max", "control_step_us_median": "median"})
    for k, how in report.items():
        if how not in _REDUCE:
            raise ConfigError(f"{where}: [campaign] report.{k} = {how!r}: not one of {sorted(_REDUCE)}")
    success = {k: _criterion(v, where) for k, v in raw.get("success", {}).items()}
    bd = dict(raw.get("breakdown", {}))
    by = bd.pop("by", None)
    if by is not None and by not in raw.get("axes", {}):
        raise ConfigError(f"{where}: [breakdown] by = {by!r} is not an axis; axes: {sorted(raw.get('axes', {}))}")
    for fam, key in bd.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f"{where}: [breakdown] {fam} must name a config key (e.g. \"perturbation.mass_rel\"), "
                              f"got {key!r}")
    units = c.get("units", {})
    if not isinstance(units, dict) or not all(isinstance(u, str) for u in units.values()):
        raise ConfigError(f"{where}: [campaign] units must map names to unit strings, e.g. {{ e_m = \"m\" }}, "
                          f"got {units!r}")
    thresholds = c.get("thresholds", {})
    for k, lines in (thresholds.items() if isinstance(thresholds, dict) else [("", None)]):
        if not isinstance(lines, dict) or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                  and math.isfinite(x) for x in lines.values()):
            raise ConfigError(f"{where}: [campaign] thresholds.{k} must map labels to finite numbers, e.g. "
                              f"{{ \"target\" = 1e-3 }}, got {lines!r}")
    spec = Spec(path=path.resolve(), name=str(c.get("name", path.stem)), scenario=scenario,
                base=_flatten(raw.get("base", {})), axes=axes, grid=grid, random=rnd, samples=samples,
                sample_seed=int(c.get("sample_seed", 0)), seeds=seeds, seed_key=str(c.get("seed_key", "seed")),
                metrics=list(c.get("metrics", [])), report=dict(report), success=success,
                breakdown_by=by, breakdown=bd, plots=_flag(c.get("plots", False), "plots", where),
                units=dict(units), thresholds={k: dict(v) for k, v in thresholds.items()})
    spec.variants = expand(spec, where)
    check_overrides(spec)
    return spec


def expand(spec: Spec, where: str = "campaign spec") -> list[Variant]:
    """axes × grid × random samples × seeds, in that nesting order (seeds innermost)."""
    ax_items = [[(ax, lbl, ov) for lbl, ov in labels.items()] for ax, labels in spec.axes.items()]
    grid_items = [[(k, v) for v in vals] for k, vals in spec.grid.items()]
    rng = np.random.default_rng(spec.sample_seed)
    samples = [{k: _draw(rng, k, d, where) for k, d in spec.random.items()}
               for _ in range(spec.samples if spec.random else 1)]
    out = []
    for axes_pick in itertools.product(*ax_items):
        for grid_pick in itertools.product(*grid_items):
            for sample in samples:
                for seed in spec.seeds:
                    ov = dict(spec.base)
                    swept = {}
                    for ax, lbl, axov in axes_pick:
                        ov.update(axov)
                        swept[ax] = lbl
                    for k, v in grid_pick:
                        ov[k] = v
                        swept[k] = v
                    ov.update(sample)
                    swept.update(sample)
                    ov[spec.seed_key] = seed
                    swept[spec.seed_key] = seed
                    out.append(Variant(len(out), swept, ov))
    return out


def _load_target(target: str):
    from cmstack.cli import load_scenario

    return load_scenario(target)


def check_overrides(spec: Spec) -> None:
    """Resolve every variant's config once (no run): unknown keys and wrong types fail here, naming the key."""
    from cmstack.scenarios._common import resolve_config

    name, _mod, defaults = _load_target(spec.scenario)
    seen = set()
    for v in spec.variants:
        keyset = tuple(sorted(v.overrides))
        if keyset in seen and not spec.random:
            continue
        seen.add(keyset)
        try:
            resolve_config(name, overrides=v.overrides, defaults=defaults)
        except ConfigError as exc:
            raise ConfigError(f"campaign spec {spec.path}: variant {v.id} ({v.swept}): {exc}") from None


# ------------------------------------------------------------------------------------- one variant
def make_job(spec: Spec, v: Variant, out: Path) -> dict:
    """Everything a worker needs to run one variant (JSON-serialisable)."""
    return dict(campaign=spec.name, scenario=spec.scenario, id=v.id, index=v.index, hash=v.hash,
                swept=_jsonable(v.swept), overrides=_jsonable(v.overrides),
                run_dir=str((out / "variants" / v.id).resolve()), plots=spec.plots)


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when the process that started it dies (prctl PR_SET_PDEATHSIG), so that
    a killed campaign leaves no orphan still writing into a run directory."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)   # PR_SET_PDEATHSIG = 1
    except OSError:
        pass


def _record(job: dict, status: str, reason: str = "", metrics: dict | None = None, wall_s: float = float("nan")):
    return dict(id=job["id"], index=job["index"], hash=job["hash"], status=status, reason=reason,
                swept=job["swept"], overrides=job["overrides"], metrics=metrics or {}, wall_s=wall_s,
                host=socket.gethostname(), pid=os.getpid())


def run_job(job: dict) -> dict:
    """Run one variant in THIS process (a fresh one: the caller forks or spawns it); write its run
    directory and ``result.json`` atomically; return the record.  Never raises."""
    t0 = time.perf_counter()
    run_dir = Path(job["run_dir"])
    try:
        if run_dir.exists():                    # a partial directory of a run that was killed
            shutil.rmtree(run_dir)
        run_dir.mkdir(parents=True)
        from cmstack.scenarios._common import run_scenario

        name, mod, defaults = _load_target(job["scenario"])
        import inspect

        params = inspect.signature(run_scenario).parameters
        extra = {"html": False} if "html" in params else {}
        if "plots" in params:
            extra["plots"] = bool(job.get("plots", False))
        metrics, _ = run_scenario(name, mod.run, overrides=job["overrides"], out=run_dir, progress=False,
                                  defaults=defaults, **extra)     # no replay.html per variant: log.npz replays
        rec = _record(job, "ok" if metrics.get("ok") else "missed",
                      "" if metrics.get("ok") else str(metrics.get("reason", "a target was missed")),
                      metrics, time.perf_counter() - t0)
    except BaseException as exc:   # noqa: BLE001 — a variant's failure is data, not the campaign's end
        rec = _record(job, "failed", f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:500],
                      wall_s=time.perf_counter() - t0)
        try:
            (run_dir / "campaign_error.txt").write_text(traceback.format_exc())
        except OSError:
            pass
    atomic_write(run_dir / RESULT, _dumps(rec))
    return rec


def _child_main(job: dict) -> None:
    """Entry point of a forked local worker: die with the driver, send output to the run directory."""
    _die_with_parent()
    run_dir = Path(job["run_dir"])
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    log = os.open(run_dir.parent / f".{job['id']}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    run_job(job)


def _modules_file(job: dict) -> Path:
    return Path(job["run_dir"]).parent / f".{job['id']}.modules"


def _local_child(job: dict) -> None:
    """A local pool's variant (``_child_main``), then the names of the modules it imported lazily into
    ``_modules_file(job)``, for the driver to import before it forks the next ones (``learn_modules``)."""
    base = set(sys.modules)
    _child_main(job)
    try:
        _modules_file(job).write_text("\n".join(m for m in list(sys.modules) if m not in base))
    except OSError:
        pass


def learn_modules(names: str) -> bool:
    """Import, in a process that forks variants (the local pool's driver, a Dask fork server), the
    modules a finished variant imported lazily (numba and its cached kernels, scipy, matplotlib, the
    controllers: ~1.5 s of every YuMi variant otherwise), so that the next children start with them.
    A module that does not import here is skipped.  Returns False if an import started a Python thread:
    forking is then unsafe, and the caller must stop forking from this process or stop learning (the
    driver of a local pool only learns while it is single-threaded)."""
    import importlib

    for name in names.split():
        if name not in sys.modules and not name.startswith(("__", "_cy", "cmstack_user_scenario")):
            try:
                importlib.import_module(name)
            except BaseException:  # noqa: BLE001 — a module that will not import here is skipped
                pass
    return threading.active_count() == 1


def read_result(job: dict) -> dict | None:
    p = Path(job["run_dir"]) / RESULT
    try:
        rec = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return rec if rec.get("hash") == job["hash"] else None


def died(job: dict, how: str, output: str | None = None) -> dict:
    """The record of a variant whose process ended without writing its result; ``output``: what the
    process printed (default: its log file beside the run directory), whose last line is quoted."""
    if output is None:
        log = Path(job["run_dir"]).parent / f".{job['id']}.log"
        output = log.read_text(errors="replace") if log.is_file() else ""
    lines = [ln for ln in output.splitlines() if ln.strip()]
    tail = f"; last output: {lines[-1][:300]}" if lines else ""
    return _record(job, "failed", f"worker process died ({how}){tail}")


def result_or_death(job: dict, how: str, output: str | None = None, wall_s: float | None = None) -> dict:
    """The variant's ``result.json`` if its process wrote one, else the record of its death (``died``),
    written atomically in its place.  Every executor ends a variant with this."""
    rec = read_result(job)
    if rec is None:
        rec = died(job, how, output)
        if wall_s is not None:
            rec["wall_s"] = wall_s
        Path(job["run_dir"]).mkdir(parents=True, exist_ok=True)
        atomic_write(Path(job["run_dir"]) / RESULT, _dumps(rec))
    return rec


def _exit_text(code: int | None) -> str:
    if code is None:
        return "no exit code"
    if code < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def run_job_subprocess(job: dict) -> dict:
    """Run one variant in a fresh ``python -m cmstack.sim.campaign --child`` process and return its
    record (the Dask task: a variant that kills its process does not take the Dask worker with it)."""
    t0 = time.perf_counter()
    Path(job["run_dir"]).parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "cmstack.sim.campaign", "--child"], input=json.dumps(job),
                          text=True, capture_output=True)
    rec = result_or_death(job, _exit_text(proc.returncode), proc.stderr or "", time.perf_counter() - t0)
    rec["task_wall_s"] = time.perf_counter() - t0
    return rec


# ------------------------------------------------------------------------------------- fork server
# A Dask task runs its variant in a process forked from a long-lived, single-threaded "fork server" of
# the task's worker thread, which has imported this module, cmstack.scenarios._common and the job's
# scenario (numpy, Pinocchio, MuJoCo, ProxSuite, ...) once: a child starts in milliseconds, as in the
# local pool, instead of a fresh interpreter importing everything again.
#
# Protocol (one JSON object per line; the worker's end is _ForkServer):
#   worker → server  {"job": JOB, "learn": BOOL}
#   server → worker  {"stale": true, "threads": BOOL}   (it will not fork: the code changed since it started,
#                                                        or a Python thread runs in it; it exits, ask a new one)
#                    | {"started": PID} then {"pid": PID, "code": EXIT}   (EXIT < 0: killed by signal −EXIT)
# The server forks one child per job and waits for it; the child runs _child_main(job) (result.json
# written atomically by run_job) and leaves with os._exit.  A server dies with the thread that started it
# (PR_SET_PDEATHSIG; the worker thread pool's threads live as long as the worker) and exits on EOF on its
# stdin, which the kernel gives it when the worker process is gone however it ended, killing its running
# child first; each child dies with the server in the same way.  So neither outlives the Dask worker.
_SERVE = "import sys; from cmstack.sim.campaign import _serve; _serve(int(sys.argv[1]))"


def _code_files() -> dict:
    """{file: mtime_ns} of the loaded cmstack modules (the package, shipped and user scenarios)."""
    out = {}
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None) if name.startswith("cmstack") else None
        if f:
            try:
                out[f] = os.stat(f).st_mtime_ns
            except OSError:
                pass
    return out


def _stale(stamp: dict) -> bool:
    for f, m in stamp.items():
        try:
            if os.stat(f).st_mtime_ns != m:
                return True
        except OSError:
            return True
    return False


def _serve(parent: int) -> None:
    """The fork server's loop: ``python -c _SERVE WORKER_PID``, started by _ForkServer (see above).

    Before forking a job's child it has imported the job's scenario and resolved one config (pydantic
    schemas); after a child that ran to its end it imports the modules that child imported lazily
    (numba, scipy, matplotlib, the controllers, ... : about 1.5 s per YuMi variant otherwise), so that
    later children start with them.  An import that starts a Python thread would make forking unsafe:
    the server then exits (answering "stale") and the client starts one that learns nothing.  The only
    other threads are native BLAS pools, fork-safe as in the local pool's driver."""
    import select
    import signal

    _die_with_parent()
    if os.getppid() != parent:            # the thread that started us is already gone
        return
    rfd, wfd = os.dup(0), os.dup(1)       # the protocol's pipes, off fds 0 and 1: a child reads no job
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)                         # and stray output goes to the worker's stderr, not the protocol
    buf = bytearray()

    def recv():
        while b"\n" not in buf:
            chunk = os.read(rfd, 1 << 16)
            if not chunk:
                return None               # EOF: the worker closed our stdin, or is gone
            buf.extend(chunk)
        i = buf.index(b"\n")
        line = bytes(buf[:i])
        del buf[:i + 1]
        return json.loads(line)

    def send(obj) -> None:
        data = (json.dumps(obj) + "\n").encode()
        while data:
            data = data[os.write(wfd, data):]

    def wait(pid: int, mfd: int):
        """(the child's exit code as subprocess gives it, what it wrote on ``mfd``), or None on EOF from
        the worker meanwhile."""
        try:
            pfd = os.pidfd_open(pid)       # Linux ≥ 5.3: readable when the child ends
        except (AttributeError, OSError):
            pfd = None
        out = bytearray()
        fds = [rfd, mfd] + ([] if pfd is None else [pfd])
        try:
            while True:
                r, _, _ = select.select(fds, [], [], 0.05 if pfd is None else None)
                if rfd in r:
                    chunk = os.read(rfd, 1 << 16)
                    if not chunk:
                        return None
                    buf.extend(chunk)
                if mfd in r:
                    chunk = os.read(mfd, 1 << 16)
                    out.extend(chunk)
                    if not chunk:
                        fds.remove(mfd)
                if pfd is None or pfd in r:
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        if mfd in fds:        # what is left in the pipe (a grandchild may hold it open)
                            os.set_blocking(mfd, False)
                            try:
                                while chunk := os.read(mfd, 1 << 16):
                                    out.extend(chunk)
                            except BlockingIOError:
                                pass
                        return os.waitstatus_to_exitcode(status), out.decode(errors="replace")
        finally:
            if pfd is not None:
                os.close(pfd)

    import cmstack.scenarios._common  # noqa: F401 — what every scenario needs
    from cmstack.scenarios._common import resolve_config

    stamp = _code_files()
    loaded: set = set()
    child = None
    me = os.getpid()
    try:
        while True:
            msg = recv()
            if msg is None:
                return
            job = msg["job"]
            if _stale(stamp) or threading.active_count() > 1:
                send({"stale": True, "threads": threading.active_count() > 1})
                return                    # code changed under an editable install, or unsafe to fork
            if job["scenario"] not in loaded:
                loaded.add(job["scenario"])
                try:
                    name, _mod, defaults = _load_target(job["scenario"])   # its children inherit the imports
                    resolve_config(name, overrides=job["overrides"], defaults=defaults)
                except Exception:  # noqa: BLE001 — the child imports it again and records the error
                    pass
                for f, m in _code_files().items():
                    stamp.setdefault(f, m)
            sys.stdout.flush()
            sys.stderr.flush()
            mr, mw = os.pipe()
            child = os.fork()
            if child == 0:                # the variant's process
                code = 70
                try:
                    os.close(rfd)
                    os.close(wfd)
                    os.close(mr)
                    _die_with_parent()
                    if os.getppid() == me:        # else the server died before prctl: do not run orphaned
                        base = set(sys.modules)
                        _child_main(job)
                        code = 0
                        new = "\n".join(m for m in list(sys.modules) if m not in base)
                        with os.fdopen(mw, "w") as fh:
                            fh.write(new)
                except BaseException:  # noqa: BLE001 — run_job records the variant's errors; this is ours
                    traceback.print_exc()
                finally:
                    try:
                        sys.stdout.flush()
                        sys.stderr.flush()
                    finally:
                        os._exit(code)
            os.close(mw)
            try:
                send({"started": child})
                got = wait(child, mr)
            finally:
                os.close(mr)
            if got is None:
                return
            pid, child = child, None
            code, new = got
            send({"pid": pid, "code": code})
            if code == 0 and msg.get("learn", True):
                learn_modules(new)            # after the reply: this task is not delayed by it
                stamp.update({f: m for f, m in _code_files().items() if f not in stamp})
    except OSError:                       # the worker is gone (broken pipe)
        return
    finally:
        if child is not None:             # never leave the variant behind
            try:
                os.kill(child, signal.SIGKILL)
                os.waitpid(child, 0)
            except OSError:
                pass


class _ForkServer:
    """The worker's end of one fork server: a ``python -c _SERVE`` child of the calling thread."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVE, str(os.getpid())],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def send(self, obj) -> bool:
        try:
            self.proc.stdin.write((json.dumps(obj) + "\n").encode())
            self.proc.stdin.flush()
            return True
        except (OSError, ValueError):     # broken pipe: it died
            return False

    def recv(self) -> dict | None:
        try:
            line = self.proc.stdout.readline()
        except (OSError, ValueError):
            return None
        return json.loads(line) if line.strip() else None

    def close(self) -> int:
        """Close its stdin (it exits at EOF), reap it; its exit code."""
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


_SERVERS = threading.local()      # one fork server per worker thread, started on its first task


def _server() -> _ForkServer:
    srv = getattr(_SERVERS, "server", None)
    if srv is None or srv.proc.poll() is not None:
        if srv is not None:
            srv.close()
        srv = _SERVERS.server = _ForkServer()
    return srv


def _drop_server() -> int | None:
    srv = getattr(_SERVERS, "server", None)
    _SERVERS.server = None
    return None if srv is None else srv.close()


def run_job_forked(job: dict) -> dict:
    """Run one variant in a process forked from this thread's fork server (started on first use) and
    return its record: the Dask task.  As with :func:`run_job_subprocess`, every variant has its own
    process, and one that dies (exit, signal) is recorded as failed without harming the Dask worker;
    a variant that kills the fork server itself is recorded as failed too ("fork server killed by
    SIGKILL") and the next task starts a new server.  Falls back to run_job_subprocess where there is
    no ``os.fork`` or no server can be started.

    Caveat: a server keeps the modules it imported.  It checks the modification times of the cmstack
    modules it loaded (scenario files included) before each job and is replaced when one changed, but
    an edit to another module (a third-party package, a helper module a scenario file imports) reaches
    the variants only through a new Dask worker; so does an edit to this client code, which the Dask
    worker imported once (as it did run_job_subprocess before).  The check costs one stat per loaded
    cmstack module per job.  Each server's warm-up (start, imports: a few seconds for YuMi) is paid once
    per worker thread."""
    if not hasattr(os, "fork"):
        return run_job_subprocess(job)
    t0 = time.perf_counter()
    Path(job["run_dir"]).parent.mkdir(parents=True, exist_ok=True)
    how = server_pid = None
    for _attempt in range(3):
        try:
            srv = _server()
        except OSError:
            break
        server_pid = srv.proc.pid
        r = srv.recv() if srv.send({"job": job, "learn": getattr(_SERVERS, "learn", True)}) else None
        if r is None or "started" not in r:      # gone while idle, or stale: the job did not start
            if r is not None and r.get("threads"):
                _SERVERS.learn = False           # a learned import started a thread: learn nothing more
            _drop_server()
            continue
        r = srv.recv()
        if r is None:                            # the server died while the variant ran
            how = f"fork server {_exit_text(_drop_server())}"
        else:
            how = _exit_text(r["code"])
        break
    if how is None:
        return run_job_subprocess(job)
    rec = result_or_death(job, how, wall_s=time.perf_counter() - t0)
    rec["task_wall_s"] = time.perf_counter() - t0
    rec["fork_server_pid"] = server_pid
    rec["worker_pid"] = os.getpid()
    return rec


#: the function each Dask task runs (run_job_subprocess: a fresh interpreter per variant, as before the
#: fork server; bench.campaign --dask-fresh compares the two)
DASK_TASK = run_job_forked


# ------------------------------------------------------------------------------------- executors
def run_local(jobs: list[dict], workers: int, on_result) -> None:
    """At most ``workers`` variants at once, each in a freshly forked process (the parent has imported
    the scenario, so a child starts in milliseconds; it builds its own MuJoCo/Pinocchio/ProxSuite
    objects).  After a variant that ran to its end, the driver imports the modules it loaded lazily
    (``learn_modules``), so that later children inherit them instead of importing them each (as long as
    the driver stays single-threaded, which forking needs).  A single-threaded loop waits on the
    process sentinels."""
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    ctx = mp.get_context(method)
    pending = list(jobs)
    running: dict = {}
    learn = method == "fork" and threading.active_count() == 1
    try:
        while pending or running:
            while pending and len(running) < workers:
                job = pending.pop(0)
                p = ctx.Process(target=_local_child, args=(job,), name=f"variant-{job['id']}")
                p.start()
                running[p.sentinel] = (p, job)
            for s in mp.connection.wait(list(running)):
                p, job = running.pop(s)
                p.join()
                mods = _modules_file(job)
                if learn and p.exitcode == 0 and mods.is_file():
                    learn = learn_modules(mods.read_text())
                mods.unlink(missing_ok=True)
                on_result(result_or_death(job, _exit_text(p.exitcode)))
    finally:
        for p, _ in running.values():    # interrupted (Ctrl-C): take the workers down with us
            p.kill()
            p.join()


def run_dask(jobs: list[dict], scheduler: str, on_result) -> None:
    """Submit every variant to an existing Dask distributed scheduler, each task running ``DASK_TASK``
    (run_job_forked); records come back as they finish."""
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise ConfigError("--scheduler needs Dask distributed: pip install 'cmstack[cluster]'") from None
    try:
        client = Client(scheduler, timeout=20)
    except (OSError, TimeoutError) as exc:
        raise ConfigError(f"--scheduler {scheduler}: cannot connect ({type(exc).__name__}: {exc})") from None
    try:
        futs = {client.submit(DASK_TASK, job, key=f"cmstack-{job['campaign']}-{job['id']}-{os.getpid()}",
                              pure=False): job for job in jobs}
        for fut in as_completed(futs):
            job = futs[fut]
            try:
                rec = fut.result()
            except Exception as exc:  # noqa: BLE001 — the task itself failed (worker lost, …)
                rec = _record(job, "failed", f"Dask task failed: {type(exc).__name__}: {exc}")
            Path(job["run_dir"]).mkdir(parents=True, exist_ok=True)
            atomic_write(Path(job["run_dir"]) / RESULT, _dumps(rec))
            on_result(rec)
    finally:
        client.close()


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
    s = dict(n=n, ok=sum(r["status"] == "ok" for r in recs), missed=sum(r["status"] == "missed" for r in recs),
             failed=sum(r["status"] == "failed" for r in recs), success=good,
             success_rate=(good / n) if n else float("nan"))
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


def summary(spec: Spec, records: dict, extra: dict) -> dict:
    recs = [records[v.id] for v in spec.variants if v.id in records]
    per_key = {}
    for k in spec.swept_keys:
        if k == spec.seed_key:
            continue
        vals: dict = {}
        for v in spec.variants:
            if v.id in records:
                vals.setdefault(json.dumps(_jsonable(v.swept[k])), []).append(records[v.id])
        per_key[k] = {val: _stats(rs, spec) for val, rs in vals.items()}
    return dict(campaign=spec.name, scenario=spec.scenario, spec=str(spec.path), variants=len(spec.variants),
                finished=len(recs), **{k: v for k, v in _stats(recs, spec).items() if k != "n"},
                success_criteria={k: f"{op} {lim:g}" for k, (op, lim) in spec.success.items()} or "scenario targets",
                per_key=per_key, groups=[dict(**g, **_stats(rs, spec)) for g, rs in groups(spec, records)],
                failures=[dict(id=r["id"], swept=r["swept"], reason=r["reason"]) for r in recs
                          if r["status"] == "failed"],
                **({"breakdown": breakdown(spec, records)} if spec.breakdown else {}), **extra)


def summary_text(s: dict) -> str:
    """The campaign's verdict in words, from :func:`summary`'s dict.  One criterion decides: *success*
    (the success rate, the exit code, the table's "success" column) is the spec's ``[success]``
    thresholds when it has them, else the scenario's own targets (``"ok"`` in the variant's
    metrics.json); a failed variant (raised, or its process died) never succeeds.  With ``[success]``,
    the scenario's own verdicts are printed after it, named as such, for reference."""
    crit = s["success_criteria"]
    n = s["finished"]
    rate = f"{s['success_rate'] * 100:.1f} %" if n else "n/a"
    lines = [f"{n}/{s['variants']} variants finished ({s['skipped_finished']} from an earlier call); "
             f"{s['failed']} failed (raised or died)"]
    if isinstance(crit, dict):
        lines.append(f"success: {s['success']} of {n} ({rate}); success = the spec's [success] criteria: "
                     + ", ".join(f"{k} {c}" for k, c in crit.items()))
        lines.append(f"  for reference, the scenario's own targets (\"ok\" in each metrics.json): met by {s['ok']}, "
                     f"missed by {s['missed']} (not the campaign's success criterion)")
    else:
        lines.append(f"success: {s['success']} of {n} ({rate}); success = every target of the scenario met "
                     f"(\"ok\" in the variant's metrics.json); {s['missed']} missed a target")
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
_UNIT_SUFFIX = (("_nm", "N·m"), ("_us", "µs"), ("_rad", "rad"), ("_rel", "relative"), ("_m", "m"), ("_s", "s"),
                ("_n", "N"))
_KEY_UNITS = {"noise_q": "rad", "noise_v": "rad/s", "delay_steps": "control steps", "torque_limit_fraction":
              "fraction of the motor limit", "com_shift_m": "m", "wrench_force": "N", "wrench_moment": "N·m"}


def unit_of(name: str, spec: Spec) -> str:
    """The unit of a metric or swept key on a plot axis ("" when none is known)."""
    if name in spec.units:
        return spec.units[name]
    leaf = name.rsplit(".", 1)[-1]
    for agg in ("_median", "_mean", "_max", "_min", "_p90", "_p95"):     # control_step_us_median: µs
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
        ax.axhline(y, ls="--", lw=1.2, color=("tab:red", "tab:purple", "tab:orange", "tab:brown")[i % 4], label=lbl)
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
    for key in spec.swept_keys:
        if key == spec.seed_key:
            continue
        vals: dict = {}
        for v in spec.variants:
            if v.id in records:
                vals.setdefault(json.dumps(_jsonable(v.swept[key])), []).append(records[v.id])
        if not vals:
            continue
        fig, axs = plt.subplots(1 + len(metrics), 1, figsize=(max(6, 0.9 * len(vals) + 3), 2.6 * (1 + len(metrics))),
                                squeeze=False)
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
    fig, axs = plt.subplots(len(metrics), 1, figsize=(max(8, 1.6 * len(l2) * len(l1) / 2), 3.2 * len(metrics)),
                            squeeze=False)
    width = 0.8 / len(l1)
    for i, m in enumerate(metrics):
        ax = axs[i, 0]
        for j, lab1 in enumerate(l1):
            data, pos = [], []
            for k, lab2 in enumerate(l2):
                rs = [records[v.id] for v in spec.variants if v.id in records
                      and v.swept[a1] == lab1 and v.swept[a2] == lab2]
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


# ------------------------------------------------------------------------------------- driver
def run_campaign(spec_path: str | Path, *, out: str | Path | None = None, workers: int | None = None,
                 scheduler: str | None = None, retry_failed: bool = False, progress: bool = True,
                 report_only: bool = False) -> dict:
    """Run (or resume) a campaign; returns its summary.  See the module docstring."""
    spec = load_spec(spec_path)
    out = Path(out) if out is not None else Path.cwd() / "runs" / "campaigns" / spec.name
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "spec.toml", spec.path.read_text())
    workers = int(workers or os.cpu_count() or 1)
    if workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {workers}")
    if scheduler is not None and not scheduler.startswith(("tcp://", "tls://", "ws://", "wss://", "inproc://")):
        raise ConfigError(f"--scheduler {scheduler}: expected an address like tcp://HOST:PORT")

    jobs = [make_job(spec, v, out) for v in spec.variants]
    records: dict = {}
    todo = []
    for job in jobs:
        rec = read_result(job)
        if rec is not None and (report_only or not (retry_failed and rec["status"] == "failed")):
            records[job["id"]] = rec
        else:
            todo.append(job)
    skipped = len(records)
    if report_only:                  # tables and plots from the results so far; nothing runs
        todo = []
    _load_target(spec.scenario)      # import the scenario here: forked workers inherit it

    bar = None
    if progress:
        from tqdm import tqdm

        tqdm.monitor_interval = 0    # no monitor thread: the local pool forks from this process
        bar = tqdm(total=len(jobs), initial=skipped, desc=f"campaign {spec.name}", unit="run")
    t0 = time.perf_counter()
    extra = dict(out=str(out), workers=workers if scheduler is None else None, scheduler=scheduler,
                 skipped_finished=skipped)

    def write_tables(final: bool = False):
        atomic_write(out / "campaign.csv", csv_text(spec, records))
        atomic_write(out / "table.md", table_md(spec, records))
        atomic_write(out / "summary.json", _dumps(summary(spec, records, dict(extra, complete=final and
                                                                                len(records) == len(jobs)))))

    def on_result(rec):
        records[rec["id"]] = rec
        write_tables()
        if bar is not None:
            bar.update(1)
            bar.set_postfix(failed=sum(r["status"] == "failed" for r in records.values()), refresh=False)

    try:
        if todo:
            if scheduler is None:
                run_local(todo, min(workers, len(todo)), on_result)
            else:
                run_dask(todo, scheduler, on_result)
    finally:
        if bar is not None:
            bar.close()
    extra["wall_s_this_call"] = time.perf_counter() - t0
    extra["ran_this_call"] = len(todo)
    write_tables(final=True)
    extra["plots"] = [str(p) for p in plot(spec, records, out)]
    write_tables(final=True)
    return summary(spec, records, dict(extra, complete=len(records) == len(jobs)))


def main(argv=None) -> int:
    """``cmstack campaign`` (and ``python -m cmstack.sim.campaign``).  Exit codes: 0 every variant met
    its success criterion, 1 some did not (missed or failed), 2 spec or usage error, 3 the campaign
    could not run."""
    import argparse

    ap = argparse.ArgumentParser(prog="cmstack campaign", description="Run a campaign of scenario variants "
                                 "on a local process pool or a Dask cluster (resumable).")
    add_arguments(ap)
    return execute(ap.parse_args(argv))


def add_arguments(ap) -> None:
    ap.add_argument("spec", help="campaign spec (TOML; see cmstack.sim.campaign)")
    ap.add_argument("--scheduler", help="Dask scheduler address tcp://HOST:PORT (default: local process pool)")
    ap.add_argument("--workers", type=int, help="local worker processes (default: all cores)")
    ap.add_argument("--out", help="campaign directory (default ./runs/campaigns/<name>/)")
    ap.add_argument("--retry-failed", action="store_true", help="re-run the variants recorded as failed")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite campaign.csv, summary.json, table.md and plots/ from the results so far; run nothing")


def execute(args) -> int:
    from cmstack.models.errors import StackError

    try:
        s = run_campaign(args.spec, out=args.out, workers=args.workers, scheduler=args.scheduler,
                         retry_failed=args.retry_failed, progress=not args.no_progress,
                         report_only=args.report_only)
    except ConfigError as exc:
        print(f"error: ConfigError: {exc}", file=sys.stderr)
        return 2
    except StackError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    out = Path(s["out"])
    print((out / "table.md").read_text())
    print(summary_text(s))
    for f in s["failures"][:10]:
        print(f"  failed {f['id']} {f['swept']}: {f['reason']}")
    print(f"campaign directory: {out}  (campaign.csv, summary.json, table.md, plots/)")
    return 0 if s["failures"] == [] and s["success_rate"] == 1.0 else 1


if __name__ == "__main__":
    if sys.argv[1:] == ["--child"]:           # a Dask task's fresh process: one job as JSON on stdin
        _die_with_parent()
        run_job(json.loads(sys.stdin.read()))
        sys.exit(0)
    sys.exit(main())

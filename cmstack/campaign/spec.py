"""A campaign's spec: the TOML file parsed into a :class:`Spec`, its variants (axes × grid × random samples
× seeds, each a set of config overrides with a hash), every override checked against the scenario's
default config before anything runs.  The file format is in the docstring of ``cmstack.campaign``."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tomllib

from cmstack.models.errors import ConfigError
from cmstack.scenarios.loader import load_scenario


def shipped_dir() -> Path:
    """The shipped campaign specs (the arena, package data): ``cmstack campaign NAME`` finds them by name."""
    import cmstack.scenarios

    return Path(cmstack.scenarios.__file__).resolve().parent / "campaigns"


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
        return repr(x)  # "nan", "inf": JSON has no such literals
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
    swept: dict  # column → value (an axis' label, a grid/random key's value, the seed)
    overrides: dict  # dotted config key → value, base overrides included

    @property
    def hash(self) -> str:
        blob = json.dumps(_jsonable(self.overrides), sort_keys=True, separators=(",", ":"))
        return hashlib.sha1(blob.encode()).hexdigest()[:10]

    @property
    def id(self) -> str:
        return f"{self.index:04d}-{self.hash}"


@dataclass
class Spec:
    """A parsed campaign spec (the file format is in the docstring of ``cmstack.campaign``)."""

    path: Path
    name: str
    scenario: str
    base: dict
    axes: dict  # axis name → {label → overrides}
    grid: dict  # key → list of values
    random: dict  # key → distribution table
    samples: int
    sample_seed: int
    seeds: list
    seed_key: str
    metrics: list
    report: dict  # metric → "max" | "median" | "mean" | "min"
    success: dict  # metric → criterion string
    plots: bool = False  # each variant's own plots (off: drawing is most of a short variant's cost)
    breakdown_by: str | None = None  # the axis with one breakdown point per label (None: the whole campaign)
    breakdown: dict = field(default_factory=dict)  # family → config key whose value is its level
    units: dict = field(default_factory=dict)  # metric or swept key → unit of its plot axis
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
        raise ConfigError(
            f"{where}: [random] '{key}' must be one of "
            + ", ".join(f"{{{d} = ...}}" for d in _DISTS)
            + f", got {dist!r}"
        )
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
                lim = float(s[len(op) :])
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
    if not path.exists() and path.suffix == "" and shipped.is_file():  # a shipped spec by name
        path = shipped
    where = f"campaign spec {path}"
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        names = sorted(p.stem for p in shipped_dir().glob("*.toml"))
        raise ConfigError(
            f"{where}: file not found; give a spec file or a shipped spec by name: "
            f"{', '.join(names)} (in {shipped_dir()})"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: not valid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:  # a directory, no permission, not text
        raise ConfigError(f"{where}: cannot be read ({type(exc).__name__}: {exc})") from None
    unknown = set(raw) - {"campaign", "base", "grid", "axes", "random", "success", "breakdown"}
    if unknown:
        raise ConfigError(
            f"{where}: unknown table(s) {sorted(unknown)}; "
            "expected [campaign], [base], [grid], [axes.NAME], [random], [success], [breakdown]"
        )
    c = raw.get("campaign", {})
    known = {
        "name",
        "scenario",
        "seeds",
        "seed_key",
        "samples",
        "sample_seed",
        "metrics",
        "report",
        "plots",
        "units",
        "thresholds",
    }
    if set(c) - known:
        raise ConfigError(
            f"{where}: unknown key(s) {sorted(set(c) - known)} in [campaign]; known: {sorted(known)}"
        )
    if "scenario" not in c:
        raise ConfigError(f'{where}: [campaign] needs scenario = "NAME" (a shipped scenario or PATH.py)')
    scenario = str(c["scenario"])
    if scenario.endswith(".py") and not Path(scenario).is_absolute():
        scenario = str((path.parent / scenario).resolve())
    seeds = c.get("seeds", 1)
    seeds = list(range(seeds)) if isinstance(seeds, int) else seeds
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds):
        raise ConfigError(
            f"{where}: [campaign] seeds must be a positive count or a list of integers, got {seeds!r}"
        )
    axes = {}
    for ax, labels in raw.get("axes", {}).items():
        if (
            not isinstance(labels, dict)
            or not labels
            or not all(isinstance(v, dict) for v in labels.values())
        ):
            raise ConfigError(
                f"{where}: [axes.{ax}] must map labels to tables of overrides, e.g. "
                f'lbl = {{ controller = "uk" }}'
            )
        axes[ax] = {lbl: _flatten(ov) for lbl, ov in labels.items()}
    grid = _flatten(raw.get("grid", {}))
    for k, vals in grid.items():
        if not isinstance(vals, list) or not vals:
            raise ConfigError(f"{where}: [grid] '{k}' must be a non-empty list of values, got {vals!r}")
    rnd = {}
    for k, v in raw.get("random", {}).items():  # distributions are tables: do not flatten them
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
        raise ConfigError(
            f"{where}: [breakdown] by = {by!r} is not an axis; axes: {sorted(raw.get('axes', {}))}"
        )
    for fam, key in bd.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(
                f'{where}: [breakdown] {fam} must name a config key (e.g. "perturbation.mass_rel"), '
                f"got {key!r}"
            )
    units = c.get("units", {})
    if not isinstance(units, dict) or not all(isinstance(u, str) for u in units.values()):
        raise ConfigError(
            f'{where}: [campaign] units must map names to unit strings, e.g. {{ e_m = "m" }}, got {units!r}'
        )
    thresholds = c.get("thresholds", {})
    for k, lines in thresholds.items() if isinstance(thresholds, dict) else [("", None)]:
        if not isinstance(lines, dict) or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
            for x in lines.values()
        ):
            raise ConfigError(
                f"{where}: [campaign] thresholds.{k} must map labels to finite numbers, e.g. "
                f'{{ "target" = 1e-3 }}, got {lines!r}'
            )
    spec = Spec(
        path=path.resolve(),
        name=str(c.get("name", path.stem)),
        scenario=scenario,
        base=_flatten(raw.get("base", {})),
        axes=axes,
        grid=grid,
        random=rnd,
        samples=samples,
        sample_seed=int(c.get("sample_seed", 0)),
        seeds=seeds,
        seed_key=str(c.get("seed_key", "seed")),
        metrics=list(c.get("metrics", [])),
        report=dict(report),
        success=success,
        breakdown_by=by,
        breakdown=bd,
        plots=_flag(c.get("plots", False), "plots", where),
        units=dict(units),
        thresholds={k: dict(v) for k, v in thresholds.items()},
    )
    spec.variants = expand(spec, where)
    check_overrides(spec)
    return spec


def expand(spec: Spec, where: str = "campaign spec") -> list[Variant]:
    """axes × grid × random samples × seeds, in that nesting order (seeds innermost)."""
    ax_items = [[(ax, lbl, ov) for lbl, ov in labels.items()] for ax, labels in spec.axes.items()]
    grid_items = [[(k, v) for v in vals] for k, vals in spec.grid.items()]
    rng = np.random.default_rng(spec.sample_seed)
    samples = [
        {k: _draw(rng, k, d, where) for k, d in spec.random.items()}
        for _ in range(spec.samples if spec.random else 1)
    ]
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


def check_overrides(spec: Spec) -> None:
    """Resolve every variant's config once (no run): unknown keys and wrong types fail here, naming the key."""
    from cmstack.scenarios._common import resolve_config

    name, _mod, defaults = load_scenario(spec.scenario)
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

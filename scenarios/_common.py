"""The scenario contract (docs/design.md), shared by every scenario:

    python -m scenarios.<name> [--config FILE.toml] [--set key=value ...] [--duration S]
                               [--out DIR] [--viewer meshcat] [--no-progress] [--debug]

* Every parameter lives in ``scenarios/configs/<name>.toml``; its defaults reproduce the paper.
  ``--config`` and ``--set`` may only change keys that exist there (unknown keys are an error);
  values are parsed as TOML literals and must keep the default's type (an int is accepted for a
  float).  Nested tables are addressed with dots: ``--set gains.kp=500``.
* A run writes to ``--out`` (default ``runs/<name>/<timestamp>/``): ``config.toml`` (resolved),
  ``metrics.json``, ``log.npz``, ``plots/*.png``, and prints the metrics beside the paper's.
* A run that fails still writes ``log.npz`` (what was logged), ``metrics.json`` with
  ``"ok": false`` and ``"error"``, and ``error.txt`` with the traceback; it exits with status 1 and a
  one-line reason.

A scenario module defines ``NAME``, a docstring whose first line describes it, and
``run(ctx) -> Outcome``; ``python -m scenarios.NAME`` runs ``scenario_main(NAME, run)``.
"""

from __future__ import annotations

import argparse
import copy
import difflib
import os
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import tomli_w
import tomllib

from cmstack.models.errors import (
    ConfigError,
    FrameNotFoundError,
    JointMapError,
    ModelFileError,
    SensorFault,
    StackError,
)
from cmstack.sim import interrupt
from cmstack.sim.logger import Logger, atomic_write
from cmstack.sim.metrics import format_table, with_contract, write_metrics
from cmstack.sim.perturb import Perturbation, PerturbedPlant, perturb_plant
from cmstack.sim.plant import MujocoPlant

if TYPE_CHECKING:
    from cmstack.sim.runner import Run

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
#: plots are drawn here and moved into plots/ when the scenario returns (atomic publication)
STAGING = ".plots.partial"


@dataclass
class Row:
    """One line of the printed table: our value beside the paper's and the target."""

    key: str
    ours: object
    paper: object = None
    target: str | None = None
    ok: bool | None = None

    @classmethod
    def at_most(cls, key: str, ours: float, bound: str, note: str = "") -> Row:
        """The row of a value whose target is an upper bound, written once: ``bound`` as printed ("1e-6"), the
        target "<= {bound}{note}", ok when ours <= float(bound)."""
        return cls(key, ours, None, f"<= {bound}{note}", ours <= float(bound))


@dataclass
class Outcome:
    metrics: dict
    rows: list[Row] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)


def equal_aspect_3d(ax, points) -> None:
    """Give a matplotlib 3-D axis equal scales on x, y, z: a cube of limits around ``points`` (any
    array of shape (..., 3), metres), so that spheres look like spheres."""
    pts = np.asarray(points, dtype=float).reshape(-1, 3)
    pts = pts[np.all(np.isfinite(pts), axis=1)]
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    c, r = 0.5 * (lo + hi), 0.5 * float(np.max(hi - lo)) or 1.0
    ax.set_xlim(c[0] - r, c[0] + r)
    ax.set_ylim(c[1] - r, c[1] + r)
    ax.set_zlim(c[2] - r, c[2] + r)
    ax.set_box_aspect((1.0, 1.0, 1.0))


def load_kernels(make_controller, t: float, q, v) -> None:
    """Load a controller's compiled kernels (numba: machine code from the on-disk cache, compiled if
    absent) before a timed loop: one call of a throwaway controller ``make_controller()`` (same
    configuration as the run's) at (t, q, v).  A start-up cost like an import (0.05–2 s per process),
    not a control step's; the run's own controller and its state are untouched.  Warnings and errors
    are left for the run itself to raise and report."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            make_controller()(t, q, v)
        except Exception:
            pass


@dataclass
class Context:
    name: str
    cfg: dict
    out: Path
    logger: Logger
    viewer: str | None = None
    viewer_host: str | None = None  # where the viewer's web server listens (None: the loopback)
    progress: bool = True
    viewers: list = field(default_factory=list)  # the Meshcat viewers this run started (closed at its end)
    plots: bool = True  # False: save_figure draws nothing (campaign variants)

    @property
    def drawing(self) -> bool:
        """Whether the scenario should build its figures: plots are on (not ``--no-plots``, not a
        campaign variant) and the run was not interrupted (after a Ctrl-C the figures are skipped, so
        that the run returns within ~2 s).  A scenario builds no figure at all when this is False."""
        return self.plots and interrupt.requested() is None

    def plot_path(self, stem: str) -> Path:
        """Where to save plot ``stem``: a staging folder; the run moves the file into ``plots/`` when the
        scenario returns, so ``plots/`` never holds a half-written PNG."""
        p = self.out / STAGING
        p.mkdir(parents=True, exist_ok=True)
        return p / f"{stem}.png"

    @staticmethod
    def pyplot():
        """matplotlib.pyplot on the file-only Agg backend (imported on first use: runs without plots
        never pay for it)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        return plt

    def save_figure(self, fig, stem: str, dpi: int = 110) -> Path | None:
        """Write ``fig`` to ``plots/<stem>.png`` at ``dpi`` dots per inch, cropped to everything drawn
        (no clipped labels or legends), close it, return the path.  With ``plots=False`` (``--no-plots``,
        campaign variants) close it unsaved and return None: drawing is most of a short run's cost
        (1.6 of 1.8 s for a 0.05 s YuMi run); a scenario builds its figures only when ``ctx.drawing``."""
        if not self.plots:
            self.pyplot().close(fig)
            return None
        path = self.plot_path(stem)
        fig.savefig(path, dpi=dpi, bbox_inches="tight")  # nothing clipped (outside legends, long labels)
        self.pyplot().close(fig)
        return path

    def simulate(
        self, plant: Any, controller: Any, record: Any, *, desc: str | None = None, **kw: Any
    ) -> Run:
        """The scenario's closed loop (``sim.runner.simulate``): ``controller`` on ``plant`` for the config's
        ``duration`` [s] at its ``control_dt`` [s] (unless ``kw`` gives them), ``record(t, q, v, tau)`` each step,
        with this run's progress bar labelled ``desc`` (the scenario's name by default); ``kw``: simulate's
        other keyword arguments (log, viewer, disturbances, ...).  Returns simulate's Run."""
        from cmstack.sim.runner import simulate

        for key in ("duration", "control_dt"):
            if key not in kw:
                kw[key] = self.cfg[key]
        return simulate(
            plant, controller, record=record, progress=self.progress, desc=desc or self.name, **kw
        )

    def make_viewer(self, mj_model):
        """A Meshcat viewer of the plant if --viewer meshcat was given, else None."""
        if self.viewer is None:
            return None
        if self.viewer != "meshcat":
            raise ConfigError(f"--viewer {self.viewer}: only 'meshcat' is supported")
        from cmstack.sim.viewer import VIEWER_HOST, MeshcatViewer

        v = MeshcatViewer(  # the server's output: never a pipe
            mj_model, log=self.out / "meshcat.log", host=self.viewer_host or VIEWER_HOST
        )
        self.viewers.append(v)
        print(f"Meshcat: open {v.url()} in a browser to watch the run", flush=True)
        return v

    def close_viewers(self, wait: bool = False) -> None:
        """With ``wait``, keep the live scene up until Ctrl-C/SIGTERM; then stop every server."""
        try:
            if wait and self.viewers:
                self.viewers[-1].wait()
        finally:
            for v in self.viewers:
                v.close()
            self.viewers.clear()


# ---------------------------------------------------------------------------------------- config
def default_config(name: str, path: str | Path | None = None) -> dict:
    """The default config of scenario ``name``: ``scenarios/configs/<name>.toml``, or ``path`` for a
    scenario that lives outside the package."""
    path = Path(path) if path is not None else CONFIG_DIR / f"{name}.toml"
    if not path.is_file():
        raise ConfigError(f"no default config for scenario '{name}': {path} is missing")
    return _read_toml(path)


def shipped_configs() -> list[str]:
    """The names of the shipped configs (``scenarios/configs/<name>.toml``), sorted."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.toml"))


def config_path(arg: str | Path) -> Path:
    """The file ``--config ARG`` names: ARG when it is a file; else, when ARG is a bare name (no directory, with or
    without ``.toml``), the shipped ``scenarios/configs/ARG.toml`` (``--config legged_biped`` from anywhere).  A bare
    name that is neither is a ConfigError listing the shipped configs; a missing path is left to the reader."""
    path = Path(arg).expanduser()
    if path.is_file() or path.name != str(arg):  # a file, or a path with a directory (./x, dir/x, ~/x)
        return path
    stem = path.name.removesuffix(".toml")
    shipped = CONFIG_DIR / f"{stem}.toml"
    if stem and shipped.is_file():
        return shipped
    raise ConfigError(
        f"--config {arg}: no such file here, and not a shipped config (shipped: {', '.join(shipped_configs())})"
    )


def _read_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


def _coerce(key: str, new, old):
    if isinstance(old, bool):
        if not isinstance(new, bool):
            raise ConfigError(f"config key '{key}' must be true or false, got {new!r}")
        return new
    if isinstance(old, float) and isinstance(new, int) and not isinstance(new, bool):
        return float(new)
    if isinstance(old, (int, float)) and not isinstance(old, bool):
        if not isinstance(new, (int, float)) or isinstance(new, bool):
            raise ConfigError(f"config key '{key}' must be a number, got {new!r}")
        if isinstance(old, int) and isinstance(new, float):
            raise ConfigError(f"config key '{key}' must be an integer, got {new!r}")
        return new
    if isinstance(old, str) and not isinstance(new, str):
        raise ConfigError(f"config key '{key}' must be a string, got {new!r}")
    if isinstance(old, list) and not isinstance(new, list):
        raise ConfigError(f"config key '{key}' must be a list, got {new!r}")
    if isinstance(old, dict) and not isinstance(new, dict):
        raise ConfigError(f"config key '{key}' is a table; set its entries as '{key}.<name>=...'")
    return new


def set_key(cfg: dict, dotted: str, value, source: str = "--set", check_types: bool = True) -> None:
    """Set the existing key ``dotted`` (dots address tables) of ``cfg``; unknown keys are a ConfigError
    that suggests the closest.  With ``check_types`` the value must keep the default's type (a typed
    schema, when the scenario has one, checks types and ranges instead)."""
    parts = dotted.split(".")
    node = cfg
    for i, p in enumerate(parts):
        if not isinstance(node, dict) or p not in node:
            keys = list(node) if isinstance(node, dict) else []
            close = difflib.get_close_matches(p, keys, n=3)
            where = ".".join(parts[:i]) or "top level"
            raise ConfigError(
                f"{source}: unknown config key '{dotted}' ('{p}' is not in {where})"
                + (f"; did you mean {close}?" if close else f"; keys there: {keys}")
            )
        if i == len(parts) - 1:
            if isinstance(node[p], dict) and isinstance(value, dict):
                for sub, val in value.items():
                    set_key(cfg, f"{dotted}.{sub}", val, source, check_types)
            else:
                node[p] = _coerce(dotted, value, node[p]) if check_types else value
        else:
            node = node[p]


def parse_value(text: str):
    """A --set value is a TOML literal (1, 1.5, true, "s", [1, 2]); a bare word is a string."""
    try:
        return tomllib.loads(f"x = {text}")["x"]
    except tomllib.TOMLDecodeError:
        return text


def resolve_config(
    name: str,
    config_file: str | None = None,
    sets: list[str] = (),
    overrides: dict | None = None,
    duration: float | None = None,
    defaults: str | Path | None = None,
    schema=None,
) -> dict:
    """The default config of ``name`` with the config file, ``--set``s, overrides and ``--duration``
    applied, checked against ``schema`` (a pydantic model, scenarios/schemas.py; None: the shipped
    scenario's schema if ``name`` is one).  Raises ConfigError naming the key, range and value."""
    from cmstack.scenarios.schemas import SCHEMAS, validate

    schema = schema if schema is not None else (SCHEMAS.get(name) if defaults is None else None)
    typed = schema is None
    cfg = add_perturbation_defaults(default_config(name, defaults))  # [perturbation], all off
    if config_file:
        config_file = config_path(config_file)
    if config_file and (defaults is None or config_file.resolve() != Path(defaults).resolve()):
        for k, v in _read_toml(config_file).items():
            set_key(cfg, k, v, source=f"config file {config_file}", check_types=typed)
    for s in sets:
        if "=" not in s:
            raise ConfigError(f"--set expects key=value, got '{s}'")
        k, v = s.split("=", 1)
        set_key(cfg, k.strip(), parse_value(v.strip()), check_types=typed)
    for k, v in (overrides or {}).items():
        set_key(cfg, k, v, source="overrides", check_types=typed)
    if duration is not None:
        set_key(cfg, "duration", float(duration), source="--duration", check_types=typed)
    return validate(name, cfg, schema)


# ---------------------------------------------------------------------------------------- running
def _default_out(name: str) -> Path:
    return Path.cwd() / "runs" / name / time.strftime("%Y%m%d-%H%M%S")


def _is_target(target) -> bool:
    """A pass/fail target — a comparison ("<= 1e-4", "> 0", "≤ …") or "within 1 %" — as opposed to
    "report …", "—", "(info …)", a plain remark or None (the Row's target strings across scenarios)."""
    return isinstance(target, str) and target.lstrip()[:1] in ("<", ">", "≤", "≥", "w")


#: simulated seconds between two checkpoints of log.npz (at most this much is lost to a ``kill -9``)
CHECKPOINT_EVERY_S = 1.0
#: reason written into metrics.json when a run starts, replaced at its end (left by a ``kill -9``)
UNFINISHED = "the run did not finish: still running, or killed before its final save"


def prepare_out(out: str | Path) -> Path:
    """Create the run directory ``out`` (and its parents); a path under a regular file, or a
    directory that cannot be created or written, is a ConfigError naming ``--out`` and the culprit."""
    out = Path(out).expanduser()
    p = out
    while not p.exists() and p != p.parent:
        p = p.parent
    if p.exists() and not p.is_dir():
        raise ConfigError(f"--out {out}: {p} is a regular file, not a directory; choose another --out")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot create the run directory ({exc.strerror})") from None
    try:
        fd, probe = tempfile.mkstemp(dir=out, prefix=".write-probe.")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(f"--out {out}: the run directory is not writable ({exc.strerror})") from None
    return out


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def _failure(out: Path, name: str, exc: BaseException, logger: Logger | None, kind: str) -> None:
    """Write what a failed run has: log.npz (if anything was logged), error.txt, metrics.json."""
    if logger is not None:  # what was logged (maybe nothing), as the contract says
        logger.save(out / "log.npz")
    _publish_plots(out, [], complete_only=True)
    atomic_write(out / "error.txt", "".join(traceback.format_exception(exc)))
    try:
        exc.run_dir = out  # execute() points the user at error.txt
    except AttributeError:
        pass
    write_metrics(
        out / "metrics.json",
        {
            "scenario": name,
            "ok": False,
            "reason": _one_line(exc),
            "error": f"{type(exc).__name__}: {exc}",
            "error_kind": kind,
            **(exc.fields() if isinstance(exc, SensorFault) else {}),
        },
    )


#: the last 12 bytes of every complete PNG file (the IEND chunk and its CRC)
_PNG_END = bytes.fromhex("0000000049454e44ae426082")


def _publish_plots(out: Path, plots: list[Path], complete_only: bool = False) -> list[Path]:
    """Move the finished plots from the staging folder into plots/ (one rename each: a reader never
    sees a half-written PNG) and remove the folder; returns the final paths of ``plots``.  With
    ``complete_only`` (a run that stopped or failed, perhaps inside a save), a PNG is published only
    if it ends with its IEND chunk; others are dropped."""
    stage, final = out / STAGING, out / "plots"
    moved = {}
    if stage.is_dir():
        for f in sorted(stage.iterdir()):
            if complete_only and not (f.suffix == ".png" and f.read_bytes()[-12:] == _PNG_END):
                continue
            final.mkdir(exist_ok=True)
            os.replace(f, final / f.name)
            moved[f] = final / f.name
        shutil.rmtree(stage, ignore_errors=True)
    return [moved.get(Path(p), Path(p)) for p in plots]


def _interrupted_reason(signame: str, t: float | None) -> str:
    return (
        f"interrupted at t = {t:.3f} s ({signame})"
        if t is not None
        else f"interrupted ({signame}) before the first logged step"
    )


#: appended to the reason of an interrupted run (what it skipped to return within ~2 s)
SKIPPED_AFTER_INTERRUPT = "plots and replay.html skipped after the interrupt"
#: an interrupted run assembles log.npz from at most this many checkpoint parts (~1 s of work); a longer
#: one leaves its log as the parts (read by ``cmstack view`` and ``read_log``; ``sim.logger.assemble``)
INTERRUPT_ASSEMBLE_MAX_PARTS = 2000


def _save_interrupted(logger: Logger, out: Path) -> str:
    """Save an interrupted run's log within the Ctrl-C bound; returns what to add to its reason."""
    logger.flush()
    if len(logger.parts) > INTERRUPT_ASSEMBLE_MAX_PARTS:
        return (
            f"log.npz not assembled ({len(logger.parts)} checkpoint parts): the log is "
            f".log.npz.parts/ (cmstack view and read_log read it; cmstack.sim.logger.assemble writes log.npz)"
        )
    logger.save(out / "log.npz", compress=False)
    return "log.npz stored uncompressed"


def process_age_s() -> float | None:
    """Wall seconds since this process started (Linux: /proc/self/stat against CLOCK_BOOTTIME, 10 ms
    resolution), or None where that cannot be read."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        start = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime, clock ticks after boot
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - start)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def _end_to_end(metrics: dict, t0: float, loops0: dict) -> dict:
    """``realtime_factor_end_to_end``: the simulated time of the run's loops (``sim/runner.simulate``)
    over the wall time since ``t0`` (``time.perf_counter()`` at the start of the run: the process's
    start for ``cmstack run``), building, loop and post-loop work included; only for a run that reports
    the loop-only ``realtime_factor``."""
    from cmstack.sim.runner import LOOP_TOTALS

    simulated = LOOP_TOTALS["simulated_s"] - loops0["simulated_s"]
    if "realtime_factor" not in metrics or not simulated > 0:
        return metrics
    wall = time.perf_counter() - t0
    return {**metrics, "realtime_factor_end_to_end": simulated / wall, "wall_s_end_to_end": wall}


#: the config table every scenario accepts (added to its defaults by :func:`resolve_config`): the fields of the
#: library's typed ``sim.perturb.Perturbation``, all off
PERTURBATION_TABLE = "perturbation"
PERTURBATION_DEFAULTS = asdict(Perturbation())


def perturbation_of(cfg: dict) -> Perturbation:
    """The config's ``[perturbation]`` table as the library's ``Perturbation`` (checked there; an unknown key
    is refused here, naming it)."""
    table = cfg.get(PERTURBATION_TABLE, {})
    unknown = set(table) - set(PERTURBATION_DEFAULTS)
    if unknown:
        raise ConfigError(
            f"unknown key(s) {sorted(unknown)} in [{PERTURBATION_TABLE}]; "
            f"known: {sorted(PERTURBATION_DEFAULTS)}"
        )
    return Perturbation(**{**PERTURBATION_DEFAULTS, **table})


def add_perturbation_defaults(cfg: dict) -> dict:
    """Give a scenario config the ``[perturbation]`` table (all off) if it has none; returns cfg."""
    table = cfg.setdefault(PERTURBATION_TABLE, {})
    for k, v in PERTURBATION_DEFAULTS.items():
        table.setdefault(k, list(v) if isinstance(v, list) else v)
    return cfg


def apply_perturbation(plant: MujocoPlant, cfg: dict) -> MujocoPlant | PerturbedPlant:
    """The plant seen through ``cfg['perturbation']`` (seeded by ``cfg['seed']``); the plant itself when
    every key is off.  Call it right after building the plant, before ``reset``."""
    return perturb_plant(plant, perturbation_of(cfg), seed=int(cfg.get("seed", 0)))


def check_perturbation_applied(name: str, run, cfg: dict) -> None:
    """Refuse an active ``[perturbation]`` (sim/perturb.py) for a scenario whose module does not apply it
    (declared by ``APPLIES_PERTURBATION = True`` beside its one ``apply_perturbation`` line): never a
    silent no-op."""
    mod = sys.modules.get(getattr(run, "__module__", ""), None)
    if perturbation_of(cfg).active and not getattr(mod, "APPLIES_PERTURBATION", False):
        on = {k: v for k, v in cfg[PERTURBATION_TABLE].items() if PERTURBATION_DEFAULTS.get(k) != v}
        raise ConfigError(
            f"scenario '{name}' does not apply the [{PERTURBATION_TABLE}] table yet (set: {on}); "
            f"perturbations are wired into yumi_dual_arm and series_parallel"
        )


def run_scenario(
    name: str,
    run,
    *,
    overrides: dict | None = None,
    out: str | Path | None = None,
    config_file: str | None = None,
    sets: list[str] = (),
    duration: float | None = None,
    viewer: str | None = None,
    viewer_host: str | None = None,
    progress: bool = False,
    echo: bool = False,
    defaults: str | Path | None = None,
    wait: bool = False,
    html: bool = True,
    schema=None,
    plots: bool = True,
    t0: float | None = None,
):
    """Programmatic entry (tests, notebooks): returns (metrics, out_dir).  ``schema``: the pydantic
    model of the configuration (default: the shipped scenario's, scenarios/schemas.py).  With ``html``,
    the run directory also gets ``replay.html`` (the run as one standalone page); with ``wait`` and a
    viewer, the live scene stays up at the end until Ctrl-C.  Any exit stops the viewer's server.
    ``plots=False`` builds and writes no plots (``Context.drawing``).  ``t0``: the
    ``time.perf_counter()`` instant the run counts its end-to-end wall time from (default: now).
    ``viewer_host``: where the live viewer's web server listens (None: 127.0.0.1, this machine only).

    The run directory is created first (a bad ``out`` raises ConfigError and writes nothing).  A
    configuration error, a failed run or an interrupt (SIGINT/SIGTERM, :class:`Interrupted`) raise
    after writing error.txt (errors) and metrics.json with ``"ok": false`` and the reason; every file
    is written atomically and log.npz is checkpointed every ``CHECKPOINT_EVERY_S`` simulated seconds."""
    from cmstack.sim.runner import LOOP_TOTALS

    t0 = time.perf_counter() if t0 is None else t0
    loops0 = dict(LOOP_TOTALS)
    out = prepare_out(out if out is not None else _default_out(name))
    with interrupt.handle_signals() as sig:
        try:
            cfg = resolve_config(name, config_file, sets, overrides, duration, defaults, schema)
            check_perturbation_applied(name, run, cfg)
        except BaseException as exc:
            with interrupt.deferred():
                _failure(out, name, exc, None, "config")
            raise
        atomic_write(out / "config.toml", tomli_w.dumps(cfg))
        write_metrics(out / "metrics.json", {"scenario": name, "ok": False, "reason": UNFINISHED})
        logger = Logger(checkpoint=out / "log.npz", checkpoint_every_s=CHECKPOINT_EVERY_S)
        ctx = Context(
            name=name,
            cfg=copy.deepcopy(cfg),
            out=out,
            logger=logger,
            viewer=viewer,
            viewer_host=viewer_host,
            progress=progress,
            plots=plots,
        )
        try:
            try:
                outcome: Outcome = run(ctx)
            except BaseException as exc:
                with interrupt.deferred():
                    signame = sig.signame or (
                        exc.signame
                        if isinstance(exc, interrupt.Interrupted)
                        else "SIGINT"
                        if isinstance(exc, KeyboardInterrupt)
                        else None
                    )
                    if signame is None:
                        _failure(out, name, exc, logger, "config" if isinstance(exc, USAGE_ERRORS) else "run")
                        raise
                    # stopped by a signal (or failed while stopping): keep what was logged, no traceback
                    reason = _interrupted_reason(signame, logger.last_t)
                    if getattr(exc, "post_loop_cut", False):
                        reason += (
                            f"; the scenario's work after the loop was cut {interrupt.POST_LOOP_S:g} s after "
                            f"the signal: no metrics; {SKIPPED_AFTER_INTERRUPT}"
                        )
                    if len(logger):
                        reason += f"; {_save_interrupted(logger, out)}"
                    _publish_plots(out, [], complete_only=True)
                    write_metrics(
                        out / "metrics.json",
                        {"scenario": name, "ok": False, "reason": reason, "interrupted": True},
                    )
                raise interrupt.Interrupted(signame, reason.split("; ")[0], out) from None
            stopped = sig.signame
            with interrupt.deferred():
                metrics = _finish(name, out, logger, outcome, stopped, t0, loops0)
            if stopped is not None:
                raise interrupt.Interrupted(stopped, metrics["reason"].split("; ")[0], out)
            if sig.signame is not None:  # arrived during the final save, which was completed
                raise interrupt.Interrupted(
                    sig.signame,
                    f"interrupted ({sig.signame}) during the final save, which was completed",
                    out,
                )
        except BaseException:
            ctx.close_viewers()  # any exit: no Meshcat server left behind
            raise
    if echo:
        print(format_table([(r.key, r.ours, r.paper, r.target, r.ok) for r in outcome.rows]))
        if metrics["not_evaluated"]:
            print(
                f"\nnot evaluated (n/a): {', '.join(metrics['not_evaluated'])} — the run has no data in their window"
            )
        if not metrics["ok"]:
            print(f"\nnot ok: {metrics['reason']}")
        print(f"\nrun directory: {out}")
        if viewer is not None:
            print(f"watch it again: cmstack view {out}")
        if outcome.plots:
            print("plots:\n" + "\n".join(f"  {p}" for p in outcome.plots))
    if html and _write_replay_html(out, echo):
        metrics = _end_to_end(metrics, t0, loops0)  # its wall time included
        write_metrics(out / "metrics.json", metrics)
    ctx.close_viewers(wait=wait)
    return metrics, out


def _finish(
    name: str, out: Path, logger: Logger, outcome: Outcome, signame: str | None, t0: float, loops0: dict
) -> dict:
    """Save the log (uncompressed after an interrupt: fast), publish the plots and write metrics.json
    with the contract keys and the end-to-end real-time factor."""
    saved = _save_interrupted(logger, out) if signame is not None else logger.save(out / "log.npz")
    outcome.plots = _publish_plots(out, [p for p in outcome.plots if p is not None])
    metrics = {"scenario": name, **outcome.metrics}
    failed = [r.key for r in outcome.rows if r.ok is False]
    # a target that could not be evaluated (nan: e.g. the run ended before the window it is taken over)
    # is not met: "ok" must never be true by omission
    unevaluated = [
        r.key
        for r in outcome.rows
        if r.ok is None and _is_target(r.target) and isinstance(r.ours, float) and np.isnan(r.ours)
    ]
    metrics["failed_targets"] = failed + [k for k in metrics.get("failed_targets") or [] if k not in failed]
    metrics["not_evaluated"] = unevaluated
    reasons = []
    if signame is not None:
        reasons.append(_interrupted_reason(signame, logger.last_t))
        metrics["interrupted"] = True
    if failed:
        reasons.append(f"targets missed: {failed}")
    if unevaluated:
        reasons.append(f"targets not evaluated (no data in their window; run longer?): {unevaluated}")
    if metrics.get("reason"):
        reasons.append(str(metrics["reason"]))
    if signame is not None:
        reasons += [SKIPPED_AFTER_INTERRUPT, saved]
    ok = bool(metrics.get("ok", True)) and not failed and not unevaluated and signame is None
    if not ok and not reasons:
        reasons.append("the scenario reported ok = false")
    metrics["ok"] = ok
    metrics["reason"] = "; ".join(reasons)
    metrics = _end_to_end(metrics, t0, loops0)
    write_metrics(out / "metrics.json", metrics)
    return with_contract(metrics)


def _write_replay_html(out: Path, echo: bool) -> bool:
    """``replay.html`` beside the log; a run whose log cannot be replayed just goes without it.
    Returns whether it was written."""
    from cmstack.sim.viewer import write_html

    tmp = out / ".replay.html.partial"
    try:
        write_html(out, tmp)
        p = out / "replay.html"
        os.replace(tmp, p)  # atomic, like every file of the run directory
    except Exception as exc:  # the run itself is done: a page it cannot make is only noted
        print(f"replay.html not written: {type(exc).__name__}: {exc}")
        return False
    if echo:
        print(f"replay (no server needed): {p} ({p.stat().st_size / 1e6:.1f} MB)")
    return True


#: exit codes of every scenario run (README, "Exit codes")
EXIT_OK, EXIT_TARGET_MISSED, EXIT_USAGE, EXIT_FAILED = 0, 1, 2, 3
#: exit code of a run stopped by SIGINT or SIGTERM (128 + SIGINT, the shell's convention)
EXIT_INTERRUPTED = 130
#: the exit codes as ``--help`` prints them (``cmstack run`` and ``python -m scenarios.NAME``)
EXIT_CODES_HELP = f"""exit codes:
  {EXIT_OK}    the run finished and every target was met ("ok": true)
  {EXIT_TARGET_MISSED}    a target was missed or could not be evaluated ("ok": false)
  {EXIT_USAGE}    usage or configuration error (bad key, value, model file, joint names, --out)
  {EXIT_FAILED}    the run failed (infeasible constraints, solver failure, diverged state, an exception)
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C / SIGTERM): the log, metrics.json and its reason are still written"""
#: errors the user fixes in the command line, the config or the model files (exit 2)
USAGE_ERRORS = (ConfigError, ModelFileError, FrameNotFoundError, JointMapError)


def add_run_arguments(ap: argparse.ArgumentParser) -> None:
    """The scenario contract's options, shared by ``python -m scenarios.NAME`` and ``cmstack run``."""
    ap.add_argument(
        "--config",
        help="TOML file overriding keys of the default config, or a shipped config's name (e.g. legged_biped: "
        "scenarios/configs/legged_biped.toml) when no such file is here",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config key (repeatable), e.g. --set controller=uk",
    )
    ap.add_argument("--duration", type=float, help="simulated seconds (overrides the config's 'duration')")
    ap.add_argument("--out", help="run directory (default ./runs/<name>/<timestamp>/)")
    ap.add_argument("--viewer", choices=["meshcat"], help="stream the run live to Meshcat")
    ap.add_argument(
        "--viewer-host",
        default=None,
        metavar="HOST",
        help="with --viewer: address the Meshcat web server listens on (default 127.0.0.1: this "
        "machine only; 0.0.0.0 opens it to every interface, with a warning)",
    )
    ap.add_argument(
        "--no-wait",
        action="store_true",
        help="with --viewer: exit at the end instead of keeping the scene up until Ctrl-C",
    )
    ap.add_argument("--no-html", action="store_true", help="do not write replay.html into the run directory")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument(
        "--no-plots", action="store_true", help="write no plots (the log, metrics and replay as usual)"
    )
    ap.add_argument("--debug", action="store_true", help="show the full traceback on failure")


def execute(name: str, run, args: argparse.Namespace, defaults: str | Path | None = None) -> int:
    """Run one scenario from parsed arguments; print its table (or one line on error); return the exit
    code: 0 every target met, 1 a target missed, 2 usage or configuration error, 3 the run failed,
    130 interrupted (SIGINT/SIGTERM)."""
    age = process_age_s()  # the run's wall time counts from the process's start
    t0 = time.perf_counter() - age if age is not None else None
    try:
        metrics, _ = run_scenario(
            name,
            run,
            t0=t0,
            out=args.out,
            config_file=args.config,
            sets=args.set,
            duration=args.duration,
            viewer=args.viewer,
            viewer_host=getattr(args, "viewer_host", None),
            progress=not args.no_progress,
            echo=True,
            defaults=defaults,
            wait=not getattr(args, "no_wait", False),
            html=not getattr(args, "no_html", False),
            plots=not getattr(args, "no_plots", False),
            schema=getattr(sys.modules.get(run.__module__), "CONFIG_SCHEMA", None),
        )
    except KeyboardInterrupt as exc:  # interrupt.Interrupted, or a Ctrl-C outside the handlers
        reason = getattr(exc, "reason", "interrupted (SIGINT)")
        where = getattr(exc, "out", None)
        print(f"{reason}; the run so far is in {where}" if where else reason, file=sys.stderr)
        return EXIT_INTERRUPTED
    except USAGE_ERRORS as exc:
        if args.debug:
            raise
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:
        if args.debug:
            raise
        where = getattr(exc, "run_dir", None)
        more = f" (full message and traceback in {where / 'error.txt'})" if where else ""
        kind = "" if isinstance(exc, StackError) else "unexpected "
        print(f"error: {kind}{_one_line(exc)}{more}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK if metrics.get("ok") else EXIT_TARGET_MISSED


def scenario_main(name: str, run, argv=None) -> int:
    """A scenario module's command line (``python -m scenarios.NAME``): the contract's options
    (``add_run_arguments``) parsed from ``argv`` (the process's when None), then the run; the exit code."""
    ap = argparse.ArgumentParser(
        prog=f"python -m scenarios.{name}",
        description=(sys.modules[run.__module__].__doc__ or "").strip().splitlines()[0],
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_arguments(ap)
    return execute(name, run, ap.parse_args(argv))


def script_settings(file: str, doc: str | None, argv: list[str] | None = None) -> tuple[dict, Path, float]:
    """A scenario file's command line when it runs as a plain script (``python examples/X.py [--duration S]
    [--out DIR]``): its settings from X.toml beside ``file`` (SystemExit naming it when missing), ``--duration``
    [s] (default: the settings') and ``--out`` (default ``runs/X_script``, created), parsed from ``argv`` (the
    process's when None); ``doc``: the script's docstring, whose first line describes it.
    Returns (settings, the output directory, the duration [s])."""
    script = Path(file)
    settings = script.with_suffix(".toml")
    if not settings.is_file():
        raise SystemExit(
            f"{script.name}: its settings file {settings} is missing (copy it beside the script)"
        )
    cfg = tomllib.loads(settings.read_text())
    parser = argparse.ArgumentParser(description=doc.strip().splitlines()[0] if doc and doc.strip() else None)
    parser.add_argument("--duration", type=float, default=cfg["duration"], help="simulated time [s]")
    parser.add_argument(
        "--out", default=f"runs/{script.stem}_script", help="where to save the log (cmstack view DIR)"
    )
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    return cfg, out, args.duration

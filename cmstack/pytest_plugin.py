"""pytest plugin: closed-loop regression tests of your own controllers (docs/regression_testing.md).

Registered through the ``pytest11`` entry point, so installing cmstack is enough (no conftest)::

    def test_my_controller(cmstack_run, cmstack_baseline):
        run = cmstack_run("my_scenario.py", overrides={"task_kp": 500.0}, duration=2.0)
        assert run.metrics["ok"]                  # your physics assertions
        cmstack_baseline.check(run)               # the closed loop did not change

* ``cmstack_run(scenario, overrides=None, duration=None, config=None, timeout=600, plots=False,
  in_process=False)`` runs a shipped scenario (by name) or a scenario file of yours (a path, relative
  to the test file's directory or absolute) with ``overrides`` (``--set``-style: dotted keys, TOML
  values) into a fresh directory under ``tmp_path`` and returns a :class:`ScenarioRun` (``dir``,
  ``metrics``, ``exit_code``, ``log(*keys)``).  By default the run is a child process
  (``cmstack run``) killed after ``timeout`` wall-clock seconds (the test then fails saying so);
  exit codes 2 (configuration) and 3 (the run failed) fail the test with the run's one-line error
  unless ``expect_failure=True``.
* ``cmstack_baseline.check(run, name=None)`` compares the run (a :class:`ScenarioRun` or a run
  directory) with the baseline beside the test file, ``baselines/<test name>[-<name>]/``, and fails
  the test with the first signal and time (or metric) outside tolerance, or with the mismatch;
  ``check.md`` and the plots are in the run directory.
* ``pytest --cmstack-update-baselines`` (re)writes the baselines of the tests that run instead of
  comparing (tolerance edits in an existing ``baseline.toml`` are kept).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

UPDATE_OPTION = "--cmstack-update-baselines"


def pytest_addoption(parser):
    group = parser.getgroup("cmstack", "cmstack closed-loop regression baselines")
    group.addoption(
        UPDATE_OPTION,
        action="store_true",
        default=False,
        help="write the cmstack baselines (baselines/<test>/ beside each test file) instead of "
        "comparing runs with them",
    )


def pytest_configure(config):
    config._cmstack_written = []


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    written = getattr(config, "_cmstack_written", [])
    if written:
        terminalreporter.write_line(
            f"cmstack: {len(written)} baseline(s) written: " + ", ".join(map(str, written))
        )


@dataclass
class ScenarioRun:
    """A finished run: its directory, metrics.json, the exit code of ``cmstack run`` (0 every target
    met, 1 a target missed, 2 configuration error, 3 the run failed) and its output."""

    scenario: str
    dir: Path
    exit_code: int
    metrics: dict = field(default_factory=dict)
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return bool(self.metrics.get("ok"))

    def log(self, *keys) -> dict:
        """The run's log (``log.npz``, or its checkpoint parts): all entries, or only ``keys``."""
        from cmstack.sim.logger import read_log, read_log_rows

        return read_log_rows(self.dir, list(keys)) if keys else read_log(self.dir)

    def __fspath__(self) -> str:
        return str(self.dir)


def _literal(v) -> str:
    """A value as the TOML literal ``--set`` parses."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (int, float)):
        return repr(float(v)) if isinstance(v, float) else str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_literal(x) for x in v) + "]"
    if hasattr(v, "tolist"):
        return _literal(v.tolist())
    raise TypeError(f"cmstack_run: override value {v!r} is not a TOML value (bool, number, string, list)")


def _sets(overrides: dict | None, prefix: str = "") -> list[str]:
    out = []
    for k, v in (overrides or {}).items():
        if isinstance(v, dict):
            out += _sets(v, f"{prefix}{k}.")
        else:
            out.append(f"{prefix}{k}={_literal(v)}")
    return out


def _safe(name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", name).strip("_") or "run"


def _resolve(scenario, base: Path) -> str:
    s = str(scenario)
    if s.endswith(".py") or os.sep in s:
        p = Path(s).expanduser()
        if not p.is_absolute():  # beside the test file first, else from the current directory
            p = base / p if (base / p).exists() else p.resolve()
        return str(p)
    return s


class _Runner:
    def __init__(self, request, tmp_path: Path):
        self._base = Path(str(request.path)).parent
        self._tmp = tmp_path
        self._n = itertools.count()

    def __call__(
        self,
        scenario,
        overrides: dict | None = None,
        duration: float | None = None,
        config=None,
        *,
        timeout: float = 600.0,
        plots: bool = False,
        in_process: bool = False,
        expect_failure: bool = False,
        out=None,
    ) -> ScenarioRun:
        target = _resolve(scenario, self._base)
        i = next(self._n)
        out = Path(out) if out is not None else self._tmp / f"{_safe(Path(target).stem)}-{i}"
        sets = _sets(overrides)
        cfg = None if config is None else str(config if Path(config).is_absolute() else self._base / config)
        if in_process:
            code, so, se = self._in_process(target, sets, duration, cfg, out, plots)
        else:
            argv = [
                sys.executable,
                "-m",
                "cmstack.cli",
                "run",
                target,
                "--out",
                str(out),
                "--no-html",
                "--no-progress",
            ] + ([] if plots else ["--no-plots"])
            for s in sets:
                argv += ["--set", s]
            if duration is not None:
                argv += ["--duration", repr(float(duration))]
            if cfg is not None:
                argv += ["--config", cfg]
            try:
                r = subprocess.run(
                    argv,
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                    env=dict(os.environ, MPLBACKEND="Agg"),
                    cwd=str(self._tmp),
                )
            except subprocess.TimeoutExpired:
                r = None  # (failed below, outside the handler: no chained traceback)
            if r is None:
                pytest.fail(
                    f"cmstack run {scenario} did not finish within {timeout:g} s of wall-clock time "
                    f"(killed; the run so far is in {out})",
                    pytrace=False,
                )
            code, so, se = r.returncode, r.stdout, r.stderr
        metrics = {}
        if (out / "metrics.json").is_file():
            metrics = json.loads((out / "metrics.json").read_text())
        run = ScenarioRun(str(scenario), out, code, metrics, so, se)
        if code not in (0, 1) and not expect_failure:
            last = (se.strip().splitlines() or [f"exit code {code}"])[-1]
            pytest.fail(f"cmstack run {scenario} exited {code}: {last}", pytrace=False)
        return run

    @staticmethod
    def _in_process(target, sets, duration, cfg, out, plots):
        import argparse
        import contextlib
        import io

        from cmstack.scenarios._common import execute
        from cmstack.scenarios.loader import is_user_file, load_scenario

        name, mod, defaults = load_scenario(target)
        if is_user_file(mod) and defaults is None:
            defaults = cfg
        args = argparse.Namespace(
            out=str(out),
            config=cfg,
            set=sets,
            duration=duration,
            viewer=None,
            no_progress=True,
            no_wait=True,
            no_html=True,
            no_plots=not plots,
            debug=False,
        )
        so, se = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(so), contextlib.redirect_stderr(se):
            code = execute(name, mod.run, args, defaults=defaults)
        return code, so.getvalue(), se.getvalue()


@pytest.fixture
def cmstack_run(request, tmp_path):
    """Run a scenario (a shipped name or your scenario file) into ``tmp_path``; returns a ScenarioRun."""
    return _Runner(request, tmp_path)


class BaselineChecker:
    """``check(run, name=None)``: compare with ``baselines/<test name>[-<name>]/`` beside the test file,
    or (``--cmstack-update-baselines``) write it."""

    def __init__(self, request):
        self._request = request
        self.update = bool(request.config.getoption(UPDATE_OPTION))

    def path(self, name: str | None = None) -> Path:
        """The baseline directory of this test (and ``name``)."""
        stem = _safe(self._request.node.name) + (f"-{_safe(name)}" if name else "")
        return Path(str(self._request.path)).parent / "baselines" / stem

    def check(self, run, name: str | None = None, signals=None):
        """Fail the test unless the run is within tolerance of its baseline; returns the CheckResult
        (or, when updating, the baseline's path)."""
        from cmstack.baseline import BaselineError, check, save

        run_dir = run.dir if isinstance(run, ScenarioRun) else Path(run)
        base = self.path(name)
        if self.update:
            try:
                save(run_dir, base, signals=signals)
            except BaselineError as exc:
                pytest.fail(f"cmstack baseline not written: {exc}", pytrace=False)
            self._request.config._cmstack_written.append(base)
            return base
        if not (base / "signals.npz").is_file():
            pytest.fail(f"no cmstack baseline at {base}: write it with pytest {UPDATE_OPTION}", pytrace=False)
        res = check(run_dir, base)
        if res.code == 2:
            pytest.fail(f"cmstack baseline does not match the run: {res.message}", pytrace=False)
        if res.code != 0:
            pytest.fail(f"cmstack baseline {base.name}: {res.message}\n  report: {res.report}", pytrace=False)
        return res


@pytest.fixture
def cmstack_baseline(request):
    """Compare runs with the baselines stored beside the test (``baselines/<test name>/``)."""
    return BaselineChecker(request)

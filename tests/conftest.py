import os

import pytest


def pytest_addoption(parser, pluginmanager):
    # cmstack's pytest plugin (fixtures cmstack_run, cmstack_baseline) comes through the pytest11 entry point of
    # the installed package; a venv installed before that entry point existed gets it here (`make install`
    # reinstalls when pyproject.toml changes)
    if not pluginmanager.has_plugin("cmstack"):
        import cmstack.pytest_plugin as plugin

        pluginmanager.register(plugin, "cmstack")


os.environ.setdefault("MPLBACKEND", "Agg")
# no "cmstack: compiling ..." line on stderr in the tests' child processes (a worktree whose kernels
# changed compiles them; tests that count stderr lines would see it): models/_compile_notice.py, whose
# own test (tests/test_compile_notice.py) turns it back on
os.environ.setdefault("CMSTACK_QUIET_COMPILE", "1")

# Longest test modules first, each module's tests kept together and in their order: with
# `pytest -n 2 --dist loadscope --no-loadscope-reorder` (make test) every module runs on one worker, so a
# module-scoped fixture (one closed-loop run shared by several tests, one Chromium) is built once, and
# the long modules start first so that no worker is left alone with one at the end while the other idles.
# (--dist loadgroup with xdist_group marks would not do: pytest-xdist 3.8 renames item._nodeid, which
# pytest 9 no longer reads, so the groups are ignored.)  The cost of a module is the sum of its tests'
# durations in the previous run of this checkout (pytest's cache, written at the end of every run); on a
# clean clone, the seconds below (only the order matters).  Nothing here asserts a time.
# The table: the seconds per module of the last clean-clone CI run (2026-11-28, `make test`, load ~2), less
# what the suite's own changes since took off (test_typing/test_public_api/test_protocols_static share one
# mypy run, test_long_runs' balloon and slider-crank diagnostics shortened).  Every module of 1.5 s or more
# is listed: one left out costs 0 and runs last, in file order (test_typing, 46 s, used to start last).
# To refresh it: after a full run, sum .pytest_cache/v/cmstack/durations by module.
MODULE_HINT_S = {  # seconds per module, clean-clone CI (the cache of a previous run wins)
    "test_campaign.py": 67,
    "test_pytest_plugin.py": 52,
    "test_viewer.py": 48,
    "test_baseline.py": 42,
    "test_cli_small.py": 38,
    "test_doc_blocks.py": 38,
    "test_rt_loop.py": 38,
    "test_sensors.py": 35,
    "test_browser.py": 30,
    "test_rt_cli.py": 30,
    "test_typing.py": 30,
    "test_browser_series_parallel.py": 26,
    "test_chain_closed_loop.py": 26,
    "test_browser_chain.py": 25,
    "test_limits_bind.py": 25,
    "test_yumi_closed_loop.py": 23,
    "test_closed_chain.py": 21,
    "test_interrupt.py": 19,
    "test_rt_crash.py": 19,
    "test_dac.py": 17,
    "test_joint_coords.py": 17,
    "test_series_parallel_closed_loop.py": 17,
    "test_series_parallel_report.py": 17,
    "test_limit_kernels.py": 15,
    "test_examples.py": 13,
    "test_first_hour_defects.py": 13,
    "test_model_checks.py": 13,
    "test_uk_kernels.py": 13,
    "test_pidc_yumi.py": 12,
    "test_slider_crank.py": 12,
    "test_balloon.py": 11,
    "test_cli_first_hour.py": 11,
    "test_compile_notice.py": 11,
    "test_run_contract.py": 11,
    "test_stewart_ball.py": 11,
    "test_bad_inputs.py": 10,
    "test_legged.py": 10,
    "test_campaign_uk_robust.py": 9,
    "test_chain_open_loop.py": 8,
    "test_docs_site.py": 8,
    "test_import_contract.py": 8,
    "test_long_runs.py": 8,
    "test_kernel_cache.py": 5,
    "test_forkserver.py": 5,
    "test_pidc_series_parallel.py": 5,
    "test_urdf_plant_contacts.py": 5,
    "test_kernels.py": 4,
    "test_pidc_kernels.py": 4,
    "test_series_parallel_plant.py": 4,
    "test_campaign_perturb.py": 3,
    "test_closed_chain_view.py": 3,
    "test_pidc.py": 3,
    "test_pidc_closed_chain.py": 3,
    "test_plant_loop_metrics.py": 3,
    "test_public_api.py": 3,
    "test_uk_solver.py": 3,
    "test_com_task.py": 2,
    "test_coupling.py": 2,
    "test_estimator.py": 2,
    "test_loop_kernels.py": 2,
    "test_partition.py": 2,
    "test_pidc_adapters.py": 2,
    "test_pidc_fast.py": 2,
    "test_robot_compose.py": 2,
    "test_udwadia_kalaba.py": 2,
}
_CACHE_KEY = "cmstack/durations"


def _module(nodeid: str) -> str:
    return nodeid.split("::")[0]


def pytest_collection_modifyitems(config, items):
    cache = getattr(config, "cache", None)  # None with -p no:cacheprovider
    cached = cache.get(_CACHE_KEY, {}) if cache is not None else {}
    cost: dict[str, float] = {}
    for it in items:
        if it.nodeid in cached:
            m = _module(it.nodeid)
            cost[m] = cost.get(m, 0.0) + cached[it.nodeid]
    first: dict[str, int] = {}
    for i, it in enumerate(items):
        m = _module(it.nodeid)
        first.setdefault(m, i)
        if m not in cost:
            cost[m] = MODULE_HINT_S.get(m.rsplit("/", 1)[-1], 0.0)
    order = {it.nodeid: i for i, it in enumerate(items)}
    items.sort(key=lambda it: (-cost[_module(it.nodeid)], first[_module(it.nodeid)], order[it.nodeid]))


_durations: dict[str, float] = {}


def pytest_runtest_logreport(report):
    _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    # the controller (or a run without xdist) sees every report; workers do not write the cache
    cache = getattr(session.config, "cache", None)
    if hasattr(session.config, "workerinput") or cache is None or not _durations:
        return
    cached = cache.get(_CACHE_KEY, {})
    cached.update({k: round(v, 2) for k, v in _durations.items()})
    cache.set(_CACHE_KEY, cached)


@pytest.fixture(autouse=True)
def _pinocchio_seeded():
    """Pinocchio's own generator (pin.randomConfiguration, pin.SE3.Random, ...) seeded per test, so that a test
    draws the same states on every run and a failure reproduces (unseeded, a tight check once failed on a state
    near the log's θ = π and passed on the rerun)."""
    import pinocchio as pin

    pin.seed(0)


@pytest.fixture(autouse=True, scope="session")
def _plugin_children_forked():
    """The cmstack_run fixture's ``cmstack run`` children (cmstack/pytest_plugin.py) forked from this worker's
    fork server (tests/_forkserver.py: same argv, cwd, environment, output, exit code and wall-clock limit,
    without ~3 s of interpreter and import start-up each).  The plugin as a user meets it, with real child
    processes, is tests/test_pytest_plugin.py's: its pytest children do not load this conftest."""
    import subprocess
    import types

    import _forkserver

    import cmstack.pytest_plugin as plugin

    mp = pytest.MonkeyPatch()
    shim = types.SimpleNamespace(run=_forkserver.run, TimeoutExpired=subprocess.TimeoutExpired)
    mp.setattr(plugin, "subprocess", shim)
    yield
    mp.undo()


@pytest.fixture(scope="session")
def typecheck(tmp_path_factory):
    """The one mypy run of the typing tests (tests/_mypy.py): run by the first test that needs it, read
    by the others; under pytest-xdist the workers share it through the session's temporary directory."""
    pytest.importorskip("mypy")
    from _mypy import shared_typecheck

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # .../pytest-N/popen-gwK: pytest-N is this session's
        base = base.parent
    return shared_typecheck(base / "cmstack-typecheck")


@pytest.fixture(scope="session")
def chromium():
    """One headless Chromium per test process (tests/_chromium.py), shared by the browser tests
    (test_browser*.py, one scenario per module): started on first use, closed at the end of the session."""
    from _chromium import Chromium

    with Chromium() as b:
        yield b

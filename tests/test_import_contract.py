"""Two tiers (issue 22 item 2): the library (models, controllers, sim) never imports the
application (scenarios, campaign, bench, the command line and cmstack rt, the kernels' warm-up).

The contract is ``.importlinter`` at the repository root, checked by import-linter's ``lint-imports`` in a
subprocess.  import-linter finds a package by walking its folder, and the repository maps its folders
into ``cmstack`` (pyproject.toml, ``[tool.setuptools.package-dir]``): each run here first copies the
package's Python files as installed (``cmstack/models/...``) into a temporary folder.  The mutation tests
add one upward import to such a copy and require ``lint-imports`` to fail naming it, so a contract that
checks nothing (a module renamed, a path not found) cannot pass."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / ".importlinter"
LINT = Path(sys.executable).with_name("lint-imports")

LIBRARY = {
    "cmstack.models",
    "cmstack.controllers",
    "cmstack.sim",
    "cmstack.tasks",
    "cmstack.limits",
    "cmstack.plants",
}
APPLICATION = {
    "cmstack.scenarios",
    "cmstack.scenario",
    "cmstack.campaign",
    "cmstack.bench",
    "cmstack.cli",
    "cmstack.rt",
    "cmstack.warmup",
    "cmstack.baseline",
    "cmstack.pytest_plugin",
}


def installed_tree(dest: Path) -> Path:
    """Copy every ``.py`` file of the packages pyproject.toml installs to where ``import`` finds it
    (``models/lie.py`` -> ``dest/cmstack/models/lie.py``); returns ``dest``."""
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    for pkg in setup["packages"]:
        src = ROOT / setup["package-dir"].get(pkg, pkg.replace(".", "/"))
        out = dest.joinpath(*pkg.split("."))
        for f in src.rglob("*.py"):
            if "__pycache__" in f.parts:
                continue
            target = out / f.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, target)
    return dest


def lint(tree: Path) -> subprocess.CompletedProcess:
    """``lint-imports .importlinter`` on the copy ``tree`` (found first on PYTHONPATH), no cache."""
    if not LINT.exists():
        pytest.fail(f"{LINT} is missing: install the dev extra (pip install -e '.[dev]'; make install does)")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT), str(CONTRACT), "--no-cache"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture()
def tree(tmp_path) -> Path:
    return installed_tree(tmp_path / "site")


def test_library_tier_never_imports_the_application_tier(tree):
    res = lint(tree)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "The library tier never imports the application tier KEPT" in out, out
    assert "Nothing imports the command line KEPT" in out, out
    assert "Contracts: 2 kept, 0 broken." in out, out


def test_contract_names_both_tiers():
    """The contract covers the whole library and forbids the whole application (no module dropped)."""
    ini = configparser.ConfigParser()
    ini.read(CONTRACT, encoding="utf-8")
    c = ini["importlinter:contract:tiers"]
    assert c["type"] == "forbidden"
    assert set(c["source_modules"].split()) >= LIBRARY | {"cmstack.sim.*"}
    assert set(c["forbidden_modules"].split()) >= APPLICATION
    # nothing is exempt: the campaign, application tier, lives in cmstack/campaign/ (issue 29), not in sim/
    assert "ignore_imports" not in c


@pytest.mark.parametrize(
    "module, line, expect",
    [
        (
            "models/lie.py",
            "from cmstack.scenarios import _common",
            "cmstack.models.lie -> cmstack.scenarios._common",
        ),
        ("controllers/base.py", "import cmstack.warmup", "cmstack.controllers.base -> cmstack.warmup"),
        (
            "sim/runner.py",
            "from cmstack.campaign import execute",
            "cmstack.sim.runner -> cmstack.campaign",
        ),
        (
            "sim/metrics.py",
            "from cmstack.campaign.report import csv_text",
            "cmstack.sim.metrics -> cmstack.campaign.report",
        ),
        ("sim/rt_loop.py", "from cmstack import rt", "cmstack.sim.rt_loop -> cmstack.rt"),
        ("sim/plant.py", "import cmstack.cli", "cmstack.sim.plant -> cmstack.cli"),
        ("sim/logger.py", "from cmstack.baseline import check", "cmstack.sim.logger -> cmstack.baseline"),
        ("sim/viewer.py", "from cmstack.bench import viewer", "cmstack.sim.viewer -> cmstack.bench.viewer"),
        ("tasks.py", "from cmstack.scenario import Outcome", "cmstack.tasks -> cmstack.scenario"),
        (
            "plants.py",
            "from cmstack.scenarios.yumi_dual_arm import build_problem",
            "cmstack.plants -> cmstack.scenarios.yumi_dual_arm",
        ),
    ],
)
def test_contract_fails_on_an_upward_import(tree, module, line, expect):
    """One upward import added to a copy of the package breaks the contract, and the report names it."""
    path = tree / "cmstack" / module
    assert path.is_file(), path
    path.write_text(path.read_text(encoding="utf-8") + f"\n{line}  # an upward import\n", encoding="utf-8")
    res = lint(tree)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert "The library tier never imports the application tier BROKEN" in out, out
    assert expect in out, out


@pytest.mark.parametrize(
    "module, line, expect",
    [
        ("campaign/spec.py", "from cmstack.cli import main", "cmstack.campaign.spec -> cmstack.cli"),
        ("rt.py", "from cmstack.cli import build_parser", "cmstack.rt -> cmstack.cli"),
        ("scenarios/loader.py", "import cmstack.cli", "cmstack.scenarios.loader -> cmstack.cli"),
    ],
)
def test_contract_fails_when_the_application_imports_the_command_line(tree, module, line, expect):
    """The command line imports the campaign and cmstack rt: either importing it back (the cycle that
    the campaign's spec.py had through cmstack.cli.load_scenario) breaks the second contract, named."""
    path = tree / "cmstack" / module
    assert path.is_file(), path
    path.write_text(
        path.read_text(encoding="utf-8") + f"\n{line}  # a cycle through the command line\n", encoding="utf-8"
    )
    res = lint(tree)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert "Nothing imports the command line BROKEN" in out, out
    assert expect in out, out


def test_contract_fails_on_an_indirect_upward_import(tree):
    """A library module that reaches the application through another module is refused too."""
    mod = tree / "cmstack" / "models" / "_relay.py"
    mod.write_text("import cmstack.scenarios.yumi_dual_arm\n", encoding="utf-8")
    lie = tree / "cmstack" / "models" / "lie.py"
    lie.write_text(
        lie.read_text(encoding="utf-8") + "\nfrom cmstack.models import _relay  # noqa\n", encoding="utf-8"
    )
    res = lint(tree)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert "cmstack.models._relay -> cmstack.scenarios.yumi_dual_arm" in out, out

"""A newcomer's first hour with the command line (issue 33, item 3): ``cmstack --version``, ``cmstack config
NAME`` (a scenario's default TOML with its comments), and ``cmstack bench`` after a plain ``pip install``
(a benchmark that needs an optional package is skipped with one line, not a traceback).  Commands run in a
child process with a wall-clock limit, or through the command line's own functions."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from importlib import metadata

import _forkserver
import pytest
import tomllib

import cmstack
from cmstack.models.errors import MissingExtraError, ModelFileError
from cmstack.scenarios._common import CONFIG_DIR, default_config
from cmstack.scenarios.loader import shipped_scenarios


def _cli(*argv, cwd, timeout=120) -> subprocess.CompletedProcess:
    return _forkserver.run(
        [sys.executable, "-m", "cmstack.cli", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=dict(os.environ, MPLBACKEND="Agg"),
        timeout=timeout,
    )


def test_version_names_the_release_and_where_it_is_installed(tmp_path):
    r = _cli("--version", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip()
    assert line.startswith(f"cmstack {cmstack.__version__} (") and line.count("\n") == 0, line
    assert os.path.isdir(line.split("(", 1)[1].rstrip(")")), line


@pytest.mark.parametrize("name", shipped_scenarios())
def test_config_prints_the_default_toml_with_its_comments(name, tmp_path):
    r = _cli("config", name, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    text = (CONFIG_DIR / f"{name}.toml").read_text(encoding="utf-8")
    assert text in r.stdout  # verbatim: every key, value and comment
    assert sum(line.lstrip().startswith("#") for line in text.splitlines()) >= 1
    assert tomllib.loads(r.stdout) == default_config(name)  # what `run --config` would read
    (tmp_path / "mine.toml").write_text(r.stdout, encoding="utf-8")
    assert tomllib.loads((tmp_path / "mine.toml").read_text()) == default_config(name)


def test_config_of_a_scenario_file_and_a_bad_name(tmp_path):
    (tmp_path / "my_scn.py").write_text("def run(ctx):\n    pass\n")
    (tmp_path / "my_scn.toml").write_text("# my gain\nkp = 3.0\n")
    r = _cli("config", "my_scn.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "# my gain\nkp = 3.0\n" in r.stdout
    r = _cli("config", "yumi_dual_armm", cwd=tmp_path)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr
    assert "yumi_dual_armm" in r.stderr and "yumi_dual_arm" in r.stderr.split("did you mean", 1)[1]


@pytest.fixture
def no_example_robot_data(monkeypatch):
    """This process as after a plain ``pip install cmstack`` (no dev extra): example-robot-data absent."""
    real = metadata.distribution

    def distribution(name):
        if name == "example-robot-data":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "distribution", distribution)


def test_a_dev_extra_file_is_a_named_missing_extra(no_example_robot_data):
    from cmstack import example_robot_data_path

    with pytest.raises(MissingExtraError, match=r"example-robot-data package, which is not installed") as e:
        example_robot_data_path("panda_description/urdf/panda.urdf")
    assert isinstance(e.value, ModelFileError)  # what it was before it had its own type
    assert (e.value.package, e.value.extra) == ("example-robot-data", "dev")


def _fake_bench(monkeypatch, name, main):
    mod = types.ModuleType(f"cmstack.bench.{name}")
    mod.main = main
    monkeypatch.setitem(sys.modules, mod.__name__, mod)


def test_bench_skips_what_needs_an_extra_with_one_line(no_example_robot_data, monkeypatch, capsys):
    from cmstack.bench.__main__ import run_one
    from cmstack.models.robot import Robot, example_robot_data_path

    ran = []

    def needs_panda(argv):
        Robot.from_urdf(example_robot_data_path("panda_description/urdf/panda.urdf"))
        ran.append(argv)

    def needs_tsid(argv):
        raise ModuleNotFoundError("No module named 'tsid'", name="tsid")

    def plain(argv):
        ran.append(argv)

    _fake_bench(monkeypatch, "fake_panda", needs_panda)
    _fake_bench(monkeypatch, "fake_tsid", needs_tsid)
    _fake_bench(monkeypatch, "fake_plain", plain)
    assert run_one("fake_panda", ["--quick"]) is False
    assert run_one("fake_tsid", []) is False
    assert run_one("fake_plain", ["--x"]) is True
    assert ran == [["--x"]]
    out = capsys.readouterr().out
    skipped = [line for line in out.splitlines() if "skipped" in line]
    assert skipped == [
        "bench.fake_panda: skipped: example-robot-data is not installed (pip install 'cmstack[dev]')",
        "bench.fake_tsid: skipped: the module tsid is not installed (see docs/speed.md)",
    ], out


def test_bench_still_raises_what_is_not_a_missing_extra(monkeypatch):
    from cmstack.bench.__main__ import run_one

    def broken(argv):
        raise ModuleNotFoundError("No module named 'cmstack.nothing'", name="cmstack.nothing")

    _fake_bench(monkeypatch, "fake_broken", broken)
    with pytest.raises(ModuleNotFoundError, match="cmstack.nothing"):
        run_one("fake_broken", [])

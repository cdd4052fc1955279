"""Every model file in the repository's data folders ships in the wheel.

A user's ``pip install cmstack`` (not editable) must carry the files the scenarios and docs load: the
URDFs, the MJCF mechanisms and the loops sidecars beside the URDFs (``Robot.from_urdf(path, loops=...)``).
pyproject.toml's ``[tool.setuptools.package-data]`` lists them by glob; a file that no glob matches would
be missing from a non-editable install only, where no test of the source tree would notice.
"""

from __future__ import annotations

import fnmatch
import subprocess
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
DATA_DIRS = {"urdf": "cmstack.urdf", "mjcf": "cmstack.mjcf"}


def _tracked(folder: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", folder], cwd=ROOT, capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if line]


def unshipped(files: list[str], package_data: dict[str, list[str]]) -> list[str]:
    """The data files (not Python modules) that no package-data glob of their folder's package matches."""
    missing = []
    for f in files:
        folder, name = f.split("/", 1)
        if name.endswith(".py") or "/" in name:
            continue
        globs = package_data.get(DATA_DIRS[folder], [])
        if not any(fnmatch.fnmatch(name, g) for g in globs):
            missing.append(f)
    return missing


def test_every_model_file_is_package_data():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package_data = cfg["tool"]["setuptools"]["package-data"]
    files = [f for d in DATA_DIRS for f in _tracked(d)]
    assert any(f.endswith(".loops.toml") for f in files)  # the sidecars exist and are looked at
    assert unshipped(files, package_data) == []


def test_a_file_outside_the_globs_is_reported():
    assert unshipped(
        ["urdf/arm.urdf", "urdf/arm.loops.toml", "urdf/make.py"], {"cmstack.urdf": ["*.urdf"]}
    ) == ["urdf/arm.loops.toml"]

"""The examples of examples/: each runs both ways a user would run it, shortened to
``CMSTACK_EXAMPLE_DURATION`` seconds (default 1.5 s; their full 5 s runs meet the same targets):

* through the command line (``cmstack run examples/X.py --duration S --out DIR``): exit 0, its target
  met over t > 1 s, a run directory that replays;
* as a plain script (``python examples/X.py --duration S --out DIR``, in a fresh interpreter): exit 0,
  the same metric printed and within the same target, a log that replays.

Both import only the public namespaces (cmstack, cmstack.tasks, cmstack.limits, cmstack.controllers,
cmstack.plants, cmstack.scenario)."""

from __future__ import annotations

import ast
import json
import os
import re
import sys
from pathlib import Path

import _forkserver
import mujoco
import numpy as np
import pytest

from cmstack.cli import main as cli
from cmstack.models.errors import ModelFileError
from cmstack.models.robot import example_robot_data_path
from cmstack.sim.viewer import Recorder, replay

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
DURATION = os.environ.get("CMSTACK_EXAMPLE_DURATION", "1.5")
try:
    example_robot_data_path("panda_description/urdf/panda.urdf")
    HAVE_PANDA = True
except ModelFileError:
    HAVE_PANDA = False

# example → (metric, target): the numbers
TARGETS = {"panda_circle": ("ee_error_max_m", 1e-3), "dual_panda_carry": ("constraint_error_max", 1e-4)}
PUBLIC = {
    "cmstack",
    "cmstack.tasks",
    "cmstack.limits",
    "cmstack.controllers",
    "cmstack.plants",
    "cmstack.scenario",
}


def cmstack_imports(path: Path) -> set[str]:
    """The cmstack modules a file imports from (``from M import ...`` and ``import M``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m == "cmstack" or m.startswith("cmstack.")}


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_example_imports_only_public_namespaces(name):
    used = cmstack_imports(EXAMPLES / f"{name}.py")
    assert used and used <= PUBLIC, sorted(used - PUBLIC)


def test_public_namespace_check_can_fail(tmp_path):
    f = tmp_path / "x.py"
    f.write_text(
        "from cmstack.scenarios._common import Outcome\nimport cmstack.models.coupling\nimport numpy\n"
    )
    assert cmstack_imports(f) - PUBLIC == {"cmstack.scenarios._common", "cmstack.models.coupling"}


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_PANDA, reason="example-robot-data (dev extra) is not installed")
@pytest.mark.parametrize("name", sorted(TARGETS))
def test_example_runs_meets_its_target_and_replays(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # runs from anywhere, not only the repository root
    out = tmp_path / "run"
    rc = cli(
        ["run", str(EXAMPLES / f"{name}.py"), "--duration", DURATION, "--out", str(out), "--no-progress"]
    )
    metrics = json.loads((out / "metrics.json").read_text())
    key, target = TARGETS[name]
    assert rc == 0, metrics
    assert metrics["ok"] is True and metrics["scenario"] == name
    assert 0 < metrics[key] <= target
    assert (out / "config.toml").read_text().count(f"duration = {float(DURATION)}") == 1
    with np.load(out / "log.npz") as z:
        mjcf, t, qpos = str(z["mjcf_path"]), z["t"], z["plant_qpos"]
    assert Path(mjcf) == (out / "plant.xml").resolve()
    model = mujoco.MjModel.from_xml_path(mjcf)
    assert qpos.shape == (t.size, model.nq) and t.size == round(float(DURATION) / 0.001)
    rec = Recorder()  # what `cmstack view RUN_DIR` does, without a browser
    replay(out, visualizer=rec, realtime=False, progress=False)
    bodies = {k.split("/")[1] for k in rec.objects if k.startswith("plant/")}  # the links' collision meshes
    assert all(any(b.endswith(link) for b in bodies) for link in ("panda_link0", "panda_link7", "panda_hand"))


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_PANDA, reason="example-robot-data (dev extra) is not installed")
@pytest.mark.parametrize("name", sorted(TARGETS))
def test_example_runs_as_a_plain_script(name, tmp_path):
    """``python examples/X.py --duration S --out DIR`` in a fresh interpreter, from another directory."""
    out = tmp_path / "script_run"
    res = _forkserver.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), "--duration", DURATION, "--out", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "MPLBACKEND": "Agg"},
    )
    assert res.returncode == 0, res.stdout + res.stderr
    key, target = TARGETS[name]
    m = re.search(rf"^{key} = (\S+) ", res.stdout, flags=re.MULTILINE)
    assert m, res.stdout
    assert 0 < float(m.group(1)) <= target
    with np.load(out / "log.npz") as z:
        t, qpos, mjcf = z["t"], z["plant_qpos"], str(z["mjcf_path"])
    assert t.size == round(float(DURATION) / 0.001)
    assert Path(mjcf) == (out / "plant.xml").resolve() and qpos.shape[0] == t.size
    rec = Recorder()  # the saved log replays (cmstack view DIR)
    replay(out, visualizer=rec, realtime=False, progress=False)
    assert any(k.startswith("plant/") for k in rec.objects)


@pytest.mark.parametrize("name", ["panda_circle", "dual_panda_carry"])
def test_plain_script_without_its_settings_file_says_so(tmp_path, name):
    """A user who copies the script without its TOML gets one line naming the missing file (exit 1), not a
    traceback."""
    script = tmp_path / f"{name}.py"
    script.write_text((EXAMPLES / f"{name}.py").read_text())
    r = _forkserver.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 1
    assert r.stderr.strip() == (
        f"{name}.py: its settings file {tmp_path / (name + '.toml')} is missing (copy it beside the script)"
    )

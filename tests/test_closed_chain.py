"""The generic closed_chain scenario (issue 23 item 6) on the shipped mechanisms at 1 kHz, and its one-line
errors through the command line."""

from __future__ import annotations

import json
import os
import sys

import _forkserver
import mujoco
import pytest

from cmstack.scenarios import closed_chain
from cmstack.scenarios._common import run_scenario

TARGETS = closed_chain.TARGETS


def _run(tmp_path, sets, duration=2.0):
    return run_scenario(
        closed_chain.NAME,
        closed_chain.run,
        sets=sets,
        duration=duration,
        out=tmp_path / "r",
        html=False,
        plots=False,
    )


@pytest.mark.parametrize("law", ["pidc", "uk"])
@pytest.mark.parametrize(
    "model,coords,dof",
    [("mjcf/five_bar.xml", "ee", 2), ("mjcf/four_bar.xml", "joints", 1), ("mjcf/delta.xml", "ee", 3)],
)
def test_targets_on_every_shipped_mechanism(tmp_path, model, coords, dof, law, cmstack_baseline):
    m, out = _run(tmp_path, [f"model='{model}'", f"law='{law}'"])
    assert m["ok"] is True, m.get("reason")
    assert m["coords"] == coords and m["dof"] == dof
    for key, bound in TARGETS.items():
        assert m[key] <= bound, (key, m[key])
    assert m["unsolvable_steps"] == 0 and m["constraint_force_max_n"] > 0.1  # the loop carries load
    saved = mujoco.MjModel.from_xml_path(str(out / "plant.xml"))  # the closed mechanism, replayable
    assert saved.neq >= 1 and saved.opt.timestep == 0.00025
    cmstack_baseline.check(out)  # q, tau, loop residual and metrics: tests/baselines/<this test>/


def test_urdf_with_its_sidecar_is_the_mjcf_run(tmp_path):
    a, _ = _run(tmp_path / "a", ["model='mjcf/five_bar.xml'"], duration=1.2)
    b, out = _run(
        tmp_path / "b",
        ["model='urdf/five_bar.urdf'", "loops='urdf/five_bar.loops.toml'", "ee_frame='tool'"],
        duration=1.2,
    )
    assert b["ok"] is True and b["passive_joints"] == a["passive_joints"]
    for key in ("ee_error_max_m", "loop_residual_max_m", "constraint_force_max_n"):
        assert b[key] == pytest.approx(a[key], rel=1e-6), key
    assert mujoco.MjModel.from_xml_path(str(out / "plant.xml")).neq == 1


def _cli(tmp_path, *sets):
    env = dict(os.environ, MPLBACKEND="Agg")
    argv = [
        sys.executable,
        "-m",
        "cmstack.cli",
        "run",
        "closed_chain",
        "--out",
        str(tmp_path / "r"),
        "--no-progress",
    ]
    for s in sets:
        argv += ["--set", s]
    return _forkserver.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)


def test_errors_are_one_line_exit_2(tmp_path):
    from cmstack.models.robot import PACKAGE_ROOT

    text = (PACKAGE_ROOT / "mjcf" / "five_bar.xml").read_text()
    bad = tmp_path / "open.xml"  # a connect of two sites 2 m apart on links that cannot reach so far
    bad.write_text(
        text.replace(
            '<weld name="tip_loop" body1="tool" body2="dist_r"/>',
            '<connect name="far" site1="ee" site2="far_site"/>',
        ).replace(
            '<geom fromto="0 0 0 0.1 0 -0.12" rgba="0.8 0.3 0.2 1"/>',
            '<geom fromto="0 0 0 0.1 0 -0.12" rgba="0.8 0.3 0.2 1"/><site name="far_site" pos="2 0 0"/>',
        )
    )
    side = tmp_path / "bad.toml"
    side.write_text('[[loop]]\nframe_a = "tool"\nframe_b = "dist_x"\nkind = "weld"\n')
    cases = [
        ([f"model='{bad}'"], ["ModelFileError", "open.xml", "loop 'far'", "residual"]),
        (["model='urdf/five_bar.urdf'", f"loops='{side}'"], ["ConfigError", "bad.toml", "'dist_x'"]),
        (["law='lqr'"], ["law", "lqr"]),
    ]
    for sets, needles in cases:
        r = _cli(tmp_path, *sets)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1, r.stderr
        for n in needles:
            assert n in lines[0], (n, lines[0])
        assert json.loads((tmp_path / "r" / "metrics.json").read_text())["ok"] is False

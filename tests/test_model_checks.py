"""Models checked on load (issue 21, item 4): a URDF whose masses or inertias are not physical is refused
with one ModelFileError line naming the file and the link, through the Python API and through
``cmstack run`` (exit 2, no C++ noise from urdfdom on stderr); a URDF that only changes the inertial values
keeps the thesis' targets of yumi_dual_arm.

The bad URDFs are written here from the shipped urdf/yumi.urdf, never committed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from _cli import cli

from cmstack.models.errors import ModelFileError
from cmstack.models.robot import PACKAGE_ROOT, Robot

YUMI = PACKAGE_ROOT / "urdf" / "yumi.urdf"


def _edit(links: dict[str, dict]) -> str:
    """yumi.urdf with the <inertial> of some links changed: {link: {"mass": value, "inertia": {ixx: ...}}}."""
    src = YUMI.read_text()
    for link, change in links.items():
        i = src.index(f'<link name="{link}">')
        j = src.index("</link>", i)
        block = src[i:j]
        if "mass" in change:
            block = re.sub(r'mass value="[^"]*"', f'mass value="{change["mass"]}"', block)
        if "inertia" in change:
            attrs = " ".join(f'{k}="{v}"' for k, v in change["inertia"].items())
            block = re.sub(r"<inertia [^>]*/>", f"<inertia {attrs}/>", block)
        src = src[:i] + block + src[j:]
    return src


def _inertia(ixx, iyy, izz, ixy=0.0):
    return dict(ixx=ixx, ixy=ixy, ixz=0.0, iyy=iyy, iyz=0.0, izz=izz)


#: case → (links to change, the link the message must name, words the message must contain)
BAD = {
    "negative_mass": ({"yumi_link_7_l": {"mass": -2}}, "yumi_link_7_l", ["mass -2 kg", ">= 0"]),
    "nan_mass": ({"yumi_link_7_l": {"mass": "nan"}}, "yumi_link_7_l", ["'nan'", "not a finite number"]),
    "zero_mass_moving": (
        {"yumi_link_6_l": {"mass": 0}},
        "yumi_link_6_l",
        ["mass 0 kg", "yumi_joint_5_l", "> 0"],
    ),
    "not_positive_definite": (
        {"yumi_link_4_r": {"inertia": _inertia(0.1, 0.1, 0.1, ixy=0.2)}},
        "yumi_link_4_r",
        ["not positive definite", "-0.1"],
    ),
    "triangle": (
        {"yumi_link_4_r": {"inertia": _inertia(0.1, 0.1, 0.3)}},
        "yumi_link_4_r",
        ["triangle inequality", "0.1 + 0.1 < 0.3"],
    ),
}


def _write(tmp_path: Path, name: str, links: dict) -> Path:
    p = tmp_path / f"{name}.urdf"
    p.write_text(_edit(links))
    return p


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_inertials_are_refused_by_the_python_api(case, tmp_path, capfd):
    links, link, words = BAD[case]
    path = _write(tmp_path, case, links)
    loaders = {
        "Robot": lambda: Robot(path),
        "from_urdf": lambda: Robot.from_urdf(path),
        "compose": lambda: Robot.compose([(YUMI, "a_", [0, 0, 0]), (path, "b_", [0, 1, 0])]),
    }
    for how, load in loaders.items():
        with pytest.raises(ModelFileError) as info:
            load()
        msg = str(info.value)
        assert "\n" not in msg, (how, msg)
        assert str(path) in msg and f"'{link}'" in msg, (how, msg)
        for w in words:
            assert w in msg, (how, w, msg)
    err = capfd.readouterr().err
    assert "urdfdom" not in err and "link.cpp" not in err and "Error" not in err, err


def _run_yumi(urdf, out, *argv, timeout=300):
    """``cmstack run yumi_dual_arm`` with the controller's model ``urdf``, into ``out`` (warnings shown)."""
    return cli(
        "run",
        "yumi_dual_arm",
        "--set",
        f"urdf={urdf}",
        "--out",
        str(out),
        "--no-progress",
        *argv,
        timeout=timeout,
        quiet=False,
    )


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_inertials_exit_2_from_the_command_line(case, tmp_path):
    links, link, words = BAD[case]
    path = _write(tmp_path, case, links)
    out = tmp_path / "run"
    r = _run_yumi(path, out, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr  # one line, no urdfdom C++ output
    assert lines[0].startswith("error: ModelFileError:") and str(path) in lines[0] and f"'{link}'" in lines[0]
    for w in words:
        assert w in lines[0]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["ok"] is False and f"'{link}'" in metrics["reason"]


def test_urdfdom_output_is_folded_into_the_message_not_printed(tmp_path, capfd):
    """A file urdfdom refuses (no robot name): its own lines, which it writes to fd 2, are in the error."""
    path = tmp_path / "noname.urdf"
    path.write_text(YUMI.read_text().replace('<robot name="yumi"', "<robot", 1))
    with pytest.raises(ModelFileError) as info:
        Robot(path)
    msg = str(info.value)
    assert str(path) in msg and "urdfdom: Error: No name given for the robot" in msg and "\n" not in msg
    assert capfd.readouterr().err == ""


def test_a_massless_link_welded_to_a_body_with_mass_is_fine(tmp_path):
    """Only the combined body matters: yumi_link_7_l at 0 kg carries the gripper (0.22 kg) welded to it.
    Without the gripper's mass the body is massless (refused, naming the welded links), unless its joint
    is locked, which welds it to link 6."""
    ok = _write(tmp_path, "tip0", {"yumi_link_7_l": {"mass": 0}})
    robot = Robot(ok)
    assert robot.model.inertias[robot.model.getJointId("yumi_joint_6_l")].mass == pytest.approx(0.22)
    massless = {
        n: {"mass": 0}
        for n in ("yumi_link_7_l", "gripper_l_base", "gripper_l_finger_r", "gripper_l_finger_l")
    }
    bad = _write(tmp_path, "hand0", massless)
    with pytest.raises(
        ModelFileError,
        match=r"links \['yumi_link_7_l', 'gripper_l_base'.*moved by joint "
        r"'yumi_joint_6_l', has mass 0 kg",
    ):
        Robot(bad)
    locked = Robot.from_urdf(bad, locked_joints={"yumi_joint_6_l": 0.0})
    assert "yumi_joint_6_l" not in locked.joint_names


def test_shipped_and_example_urdfs_load():
    for name in ("yumi.urdf", "slider_crank.urdf", "series_parallel.urdf"):
        Robot(PACKAGE_ROOT / "urdf" / name)
    from cmstack.models.robot import example_robot_data_path

    try:
        example_robot_data_path("panda_description/urdf/panda.urdf")
    except ModelFileError:
        pytest.skip("example-robot-data (dev extra) is not installed")
    for rel in (
        "panda_description/urdf/panda.urdf",
        "xarm_description/urdf/xarm7.urdf",
        "kinova_description/robots/kinova.urdf",
        "talos_data/robots/talos_reduced.urdf",
    ):
        Robot(example_robot_data_path(rel))


# ------------------------------------------------------------------------ the targets of a changed urdf
def _rows(**sets):
    from cmstack.scenarios._common import resolve_config
    from cmstack.scenarios.yumi_dual_arm import _target_rows

    cfg = resolve_config("yumi_dual_arm", overrides=sets)
    m = dict(
        constraint_error_initial=0.2839,
        task_error_initial=0.3447,
        constraint_error_converged=0.042,
        task_error_converged=0.003,
    )
    return {r.key: r for r in _target_rows(cfg, m)}


def test_a_urdf_with_other_inertials_keeps_the_thesis_targets(tmp_path):
    heavier = _write(tmp_path, "heavier", {"yumi_link_7_l": {"mass": 0}, "yumi_link_3_r": {"mass": 2.5}})
    r = _rows(urdf=str(heavier))
    assert (
        r["constraint_error_converged"].target == "<= 0.0001" and r["constraint_error_converged"].ok is False
    )
    assert r["task_error_converged"].target == "<= 0.0062" and r["task_error_converged"].ok is True
    assert r["task_error_initial"].target == "within 1 %"
    longer = tmp_path / "longer.urdf"  # another forearm length: other kinematics, other errors
    longer.write_text(YUMI.read_text().replace('xyz="0.0405 0.16461 0"', 'xyz="0.0405 0.18 0"'))
    r = _rows(urdf=str(longer))
    for k in ("constraint_error_initial", "constraint_error_converged", "task_error_converged"):
        assert r[k].target.startswith("report") and r[k].ok is None, (k, r[k].target)


def test_zero_mass_on_the_coupled_tip_fails_its_targets(tmp_path):
    """The issue's case: the controller's model with a massless yumi_link_7_l (gripper still welded to it)
    left a 4 mm coupling error and still said ok: true; the coupling target now applies: exit 1."""
    path = _write(tmp_path, "tip0", {"yumi_link_7_l": {"mass": 0}})
    out = tmp_path / "run"
    r = _run_yumi(path, out, "--no-plots", "--no-html")
    metrics = json.loads((out / "metrics.json").read_text())
    assert r.returncode == 1, r.stderr
    assert "constraint_error_converged" in metrics["failed_targets"]
    assert metrics["constraint_error_converged"] > 1e-4 and np.isfinite(metrics["task_error_converged"])

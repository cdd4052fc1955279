"""MJCF ``<include>`` read as MuJoCo reads it (issue 33 item 6): the shipped five-bar split over four files
(defaults, a branch inside <worldbody>, the loop and, included from the included file, the motors) is the same
robot as the one-file five-bar, and MuJoCo compiles the same mechanism; the lookup order (the main file's folder,
then the including file's) is MuJoCo's; a missing, repeated or malformed include is one line naming the files."""

from __future__ import annotations

import re

import mujoco
import numpy as np
import pytest

from cmstack.models.errors import ModelFileError
from cmstack.models.robot import PACKAGE_ROOT, Robot
from cmstack.sim.mjcf_plant import plant_from_mjcf

FIVE_BAR = (PACKAGE_ROOT / "mjcf" / "five_bar.xml").read_text()


def _cut(text: str, start: str, end: str) -> tuple[str, str]:
    """(text with the block from ``start`` to ``end`` inclusive removed, the block)."""
    i = text.index(start)
    j = text.index(end, i) + len(end)
    return text[:i] + "{HOLE}" + text[j:], text[i:j]


def _split_five_bar(tmp_path):
    text, defaults = _cut(FIVE_BAR, "<default>", "</default>")
    text = text.replace("{HOLE}", '<include file="parts/defaults.xml"/>')
    i, j = text.index('<body name="prox_l"'), text.index('<body name="prox_r"')
    text, left = text[:i] + "{HOLE}\n    " + text[j:], text[i:j]
    text = text.replace("{HOLE}", '<include file="parts/left.xml"/>')
    text, loop = _cut(text, "<equality>", "</equality>")
    text, motors = _cut(text.replace("{HOLE}", ""), "<actuator>", "</actuator>")
    text = text.replace("{HOLE}", '<include file="parts/closure.xml"/>')
    parts = tmp_path / "parts"
    parts.mkdir()
    (parts / "defaults.xml").write_text(f"<mujoco>{defaults}</mujoco>")
    (parts / "left.xml").write_text(f"<mujoco>{left}</mujoco>")
    # motors.xml is found beside closure.xml (the including file's folder), not beside main.xml
    (parts / "closure.xml").write_text(f'<mujoco>{loop}<include file="motors.xml"/></mujoco>')
    (parts / "motors.xml").write_text(f"<mujoco>{motors}</mujoco>")
    main = tmp_path / "main.xml"
    main.write_text(text)
    assert "<include" in text and 'name="prox_l"' not in text and "<weld" not in text and "<motor" not in text
    return main


def test_included_five_bar_is_the_five_bar(tmp_path):
    main = _split_five_bar(tmp_path)
    a, b = Robot.from_mjcf("mjcf/five_bar.xml"), Robot.from_mjcf(main)
    assert b.joint_names == a.joint_names
    assert b.passive_joints == a.passive_joints
    np.testing.assert_array_equal(b.effort_limit, a.effort_limit)
    np.testing.assert_array_equal(b.damping, a.damping)
    np.testing.assert_array_equal(b.model.lowerPositionLimit, a.model.lowerPositionLimit)
    assert [(c.name, c.kind, c.frame_a, c.frame_b) for c in b.loops] == [
        (c.name, c.kind, c.frame_a, c.frame_b) for c in a.loops
    ]
    np.testing.assert_array_equal(b.q_initial, a.q_initial)
    for i in range(1, a.model.njoints):
        assert b.model.inertias[i].isApprox(a.model.inertias[i], 0.0)
        assert b.model.jointPlacements[i].isApprox(a.model.jointPlacements[i], 0.0)
    q = a.assemble(a.q_initial + 0.1)
    np.testing.assert_array_equal(b.loops[0].phi(q), a.loops[0].phi(q))
    # MuJoCo compiles the same mechanism from the split files
    pa, pb = plant_from_mjcf(a, sim_dt=1e-3), plant_from_mjcf(b, sim_dt=1e-3)
    assert pb.model.njnt == pa.model.njnt and pb.model.neq == pa.model.neq and pb.model.nu == pa.model.nu
    np.testing.assert_array_equal(pb.model.body_mass, pa.model.body_mass)


def test_lookup_order_is_mujocos(tmp_path):
    """An included file that includes 'opt.xml', present beside the main file and beside the including file
    with different gravities: MuJoCo takes the main file's folder's; so does cmstack."""
    (tmp_path / "sub").mkdir()
    body = (
        '<body name="b"><joint name="j" type="hinge" axis="0 1 0"/>'
        '<inertial pos="0 0 -0.1" mass="1" diaginertia="0.01 0.01 0.01"/></body>'
    )
    (tmp_path / "main.xml").write_text(
        f'<mujoco><include file="sub/a.xml"/><worldbody>{body}</worldbody></mujoco>'
    )
    (tmp_path / "sub" / "a.xml").write_text('<mujoco><include file="opt.xml"/></mujoco>')
    (tmp_path / "opt.xml").write_text('<mujoco><option gravity="0 0 -1"/></mujoco>')
    (tmp_path / "sub" / "opt.xml").write_text('<mujoco><option gravity="0 0 -2"/></mujoco>')
    mj = mujoco.MjModel.from_xml_path(str(tmp_path / "main.xml"))
    r = Robot.from_mjcf(tmp_path / "main.xml")
    np.testing.assert_array_equal(r.model.gravity.linear, mj.opt.gravity)
    assert mj.opt.gravity[2] == -1.0
    (tmp_path / "opt.xml").unlink()  # only beside the including file: both fall back to it
    mj = mujoco.MjModel.from_xml_path(str(tmp_path / "main.xml"))
    r = Robot.from_mjcf(tmp_path / "main.xml")
    assert mj.opt.gravity[2] == -2.0 == r.model.gravity.linear[2]


@pytest.mark.parametrize(
    "case, files, said",
    [
        ("missing", {}, r"file 'parts/motors\.xml' not found in "),
        (
            "twice",
            {"parts/motors.xml": "<mujoco/>", "extra": '<include file="parts/motors.xml"/>'},
            r"file 'parts/motors\.xml' is already included",
        ),
        (
            "malformed",
            {"parts/motors.xml": "<mujoco><actuator></mujoco>"},
            r"motors\.xml is not well-formed XML",
        ),
    ],
)
def test_bad_include_is_one_line_naming_the_files(tmp_path, case, files, said):
    (tmp_path / "parts").mkdir()
    extra = files.pop("extra", "")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    main = tmp_path / "main.xml"
    main.write_text(FIVE_BAR.replace("<equality>", f'<include file="parts/motors.xml"/>{extra}<equality>', 1))
    with pytest.raises(ModelFileError, match=said) as e:
        Robot.from_mjcf(main)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"MJCF {main}") and re.search(r"<include> in main\.xml", msg)
    with pytest.raises(ValueError):  # MuJoCo refuses the file too
        mujoco.MjModel.from_xml_path(str(main))

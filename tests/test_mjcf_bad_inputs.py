"""Every MJCF loader error names the model file and says MJCF (issue 33 item 6).

Each case is the shipped five-bar with one defect; ``Robot.from_mjcf`` must raise ``ModelFileError`` whose one
line starts with ``MJCF <path>`` (the file at fault: the main file, and the included file where it is one),
never says URDF, and names what is wrong."""

from __future__ import annotations

import pytest

from cmstack.models.errors import ModelFileError
from cmstack.models.robot import PACKAGE_ROOT, Robot

FIVE_BAR = (PACKAGE_ROOT / "mjcf" / "five_bar.xml").read_text()
WELD = '<weld name="tip_loop" body1="tool" body2="dist_r"/>'

CASES = {
    # name: ((old, new) replacements, what the message must name)
    "root_not_mujoco": ([("<mujoco model", "<robot model"), ("</mujoco>", "</robot>")], "<robot>"),
    "no_worldbody": ([("<worldbody>", "<notworldbody>"), ("</worldbody>", "</notworldbody>")], "worldbody"),
    "joint_without_name": ([('<joint name="elbow_l"/>', "<joint/>")], "no name"),
    "joint_ref_not_a_number": ([('<joint name="elbow_l"/>', '<joint name="elbow_l" ref="abc"/>')], "elbow_l"),
    "joint_ref_not_zero": ([('<joint name="elbow_l"/>', '<joint name="elbow_l" ref="0.3"/>')], "ref=0.3"),
    "massless_body": ([('mass="0.05"', 'mass="0"')], "tip"),
    "no_moving_joint": (
        [(f'<joint name="{j}"/>', "") for j in ("base_l", "elbow_l", "tip", "base_r", "elbow_r")]
        + [("<equality>", "<!--"), ("</equality>", "-->"), ("<actuator>", "<!--"), ("</actuator>", "-->")],
        "no movable joint",
    ),
    "actuator_on_unknown_joint": ([('joint="base_r" ctrlrange', 'joint="base_q" ctrlrange')], "base_q"),
    "actuator_on_a_site": ([('joint="base_r" ctrlrange', 'site="ee" ctrlrange')], "base_r_motor"),
    "ctrlrange_not_numbers": (
        [('ctrlrange="-5 5"/>\n  </actuator>', 'ctrlrange="a b"/>\n  </actuator>')],
        "ctrlrange",
    ),
    "gear_not_a_number": ([('joint="base_r" ctrlrange', 'joint="base_r" gear="x" ctrlrange')], "gear"),
    "keyframe_wrong_size": (
        [("</actuator>", '</actuator><keyframe><key qpos="0 0 0"/></keyframe>')],
        "keyframe",
    ),
    "gravity_not_numbers": ([('gravity="0 0 -9.81"', 'gravity="0 0"')], "gravity"),
    "equality_on_a_tendon": ([(WELD, '<tendon name="t" tendon1="x"/>')], "<tendon>"),
    "equality_unknown_body": ([('body2="dist_r"', 'body2="dist_q"')], "dist_q"),
    "connect_without_anchor_or_sites": (
        [(WELD, '<connect name="c" body1="tool" body2="dist_r"/>')],
        "anchor",
    ),
    "weld_relpose_six_numbers": (
        [(WELD, '<weld name="w" body1="tool" body2="dist_r" relpose="0 0 0 1 0 0"/>')],
        "relpose",
    ),
    "torquescale_not_a_number": (
        [(WELD, '<weld name="w" body1="tool" body2="dist_r" torquescale="big"/>')],
        "torquescale",
    ),
    "include_missing": ([("<equality>", '<include file="nope.xml"/><equality>')], "nope.xml"),
    "loop_cannot_close": (
        [
            (WELD, '<connect name="far" site1="ee" site2="far_site"/>'),
            ("<light pos", '<site name="far_site" pos="2 0 0"/><light pos'),
        ],
        "loop 'far'",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_mjcf_loader_error_names_the_file(case, tmp_path):
    edits, what = CASES[case]
    text = FIVE_BAR
    for old, new in edits:
        assert old in text, (case, old)
        text = text.replace(old, new)
    p = tmp_path / f"{case}.xml"
    p.write_text(text)
    with pytest.raises(ModelFileError) as err:
        Robot.from_mjcf(p)
    msg = str(err.value)
    assert "\n" not in msg, msg
    assert msg.startswith(f"MJCF {p}"), msg
    assert "URDF" not in msg, msg
    assert what in msg, msg

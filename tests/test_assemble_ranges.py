"""``assemble`` inside the joint ranges (issue 33 item 6).

The loader closes a model file's loops from the file's pose (``Robot._assemble_initial``).  It used to ignore
the ranges: a site moved 5 m "closed" with slides at +4.7 m (range ±0.1 m), then a later JointMapError named
neither the file nor the loop.  Now the Newton steps stay in the ranges (``loops._bounded_step``): what cannot
close inside them is refused in one line naming the file, the loop and the joints held on their limits; a joint
moved more than 0.05 rad or m from the file's pose is warned about once (``ModelFileWarning``), naming the file,
the loop and the moves; an unlimited hinge ends within π of its guess.

The probe mechanism: two slides in series along x (x: range ±0.1 m, x2: ±1 m) carrying a two-hinge arm
(h1, h2 about y, 0.3 m links, ±1 rad), its tip site connected to a world site ``target``.
"""

from __future__ import annotations

import warnings

import mujoco
import numpy as np
import pytest

from cmstack.models.errors import ModelFileError, ModelFileWarning
from cmstack.models.lie import svd_rank
from cmstack.models.loops import joint_ranges
from cmstack.models.robot import Robot

INERTIAL = '<inertial pos="0 0 -0.1" mass="1" diaginertia="0.01 0.01 0.01"/>'
ARM = f"""<mujoco>
  <compiler angle="radian" autolimits="true"/>
  <worldbody>
    <site name="target" pos="{{tx}} 0 -0.6"/>
    <body name="s1"><joint name="x" type="slide" axis="1 0 0" {{rx}}/>{INERTIAL}
      <body name="s2"><joint name="x2" type="slide" axis="1 0 0" {{rx2}}/>{INERTIAL}
        <body name="l1"><joint name="h1" type="hinge" axis="0 1 0" {{rh}}/>{INERTIAL}
          <body name="l2" pos="0 0 -0.3"><joint name="h2" type="hinge" axis="0 1 0" {{rh}}/>{INERTIAL}
            <site name="tip" pos="0 0 -0.3"/>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator><motor joint="x"/></actuator>
  <equality><connect name="reach" site1="tip" site2="target"/></equality>
</mujoco>"""
RANGED = {"rx": 'range="-0.1 0.1"', "rx2": 'range="-1 1"', "rh": 'range="-1 1"'}
FREE = {"rx": "", "rx2": "", "rh": ""}


def _load(tmp_path, tx, ranges):
    p = tmp_path / "arm.xml"
    p.write_text(ARM.format(tx=tx, **ranges))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        robot = Robot.from_mjcf(p)
    return p, robot, [w for w in seen if issubclass(w.category, ModelFileWarning)]


def _mujoco_residual(path, robot, q):
    m = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(m)
    for n in robot.joint_names:
        d.qpos[m.jnt_qposadr[m.joint(n).id]] = q[robot.joint_index(n)]
    mujoco.mj_forward(m, d)
    return np.max(np.abs(d.efc_pos[d.efc_type == mujoco.mjtConstraint.mjCNSTR_EQUALITY]))


def test_closes_inside_the_ranges_and_warns_once(tmp_path):
    """Target 0.5 m along x: the unbounded minimum-norm Newton step splits it over x and x2 (x ≈ 0.25 m,
    out of its ±0.1 m); inside the ranges x stays at most 0.1 m and x2 takes the rest."""
    p, robot, seen = _load(tmp_path, 0.5, RANGED)
    q = robot.q_initial
    lo, hi, _ = joint_ranges(robot)
    assert np.all(q >= lo) and np.all(q <= hi), q
    assert robot.loops[0].residual(q) <= 1e-12
    assert _mujoco_residual(p, robot, q) < 1e-9
    assert q[robot.joint_index("x")] <= 0.1 and q[robot.joint_index("x2")] > 0.39
    # the unbounded Newton of before leaves the range
    c, qq = robot.loops[0], np.zeros(robot.nq)
    for _ in range(50):  # (linear convergence: the arm hangs straight, its z row is singular there)
        qq -= svd_rank(c.jacobian(qq), rtol=1e-10).pinv() @ c.phi(qq)
    assert c.residual(qq) <= 1e-9 and qq[robot.joint_index("x")] > 0.24
    assert len(seen) == 1
    msg = str(seen[0].message)
    assert "\n" not in msg and msg.startswith(f"MJCF {p}:") and "['reach']" in msg
    assert "x2 +0.4" in msg and "h1" not in msg and "h2" not in msg


def test_cannot_close_inside_the_ranges_is_one_line(tmp_path):
    """Target 5 m away, ranges ±0.1 m, ±1 m, ±1 rad: refused at load, naming the file, loop and joints."""
    p = tmp_path / "arm.xml"
    p.write_text(ARM.format(tx=5.0, **RANGED))
    with pytest.raises(ModelFileError) as err:
        Robot.from_mjcf(p)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"MJCF {p}:") and "loop 'reach'" in msg
    assert "inside the joint ranges" in msg
    for held in ("x = 0.1 m (range [-0.1, 0.1])", "x2 = 1 m (range [-1, 1])", "h1 = ", "h2 = "):
        assert held in msg, msg


def test_without_ranges_it_closes_far_and_says_so(tmp_path):
    p, robot, seen = _load(tmp_path, 5.0, FREE)
    assert robot.loops[0].residual(robot.q_initial) <= 1e-12
    assert _mujoco_residual(p, robot, robot.q_initial) < 1e-9
    assert len(seen) == 1 and "x +2.5 m" in str(seen[0].message) and "x2 +2.5 m" in str(seen[0].message)


def test_a_small_move_is_silent(tmp_path):
    _, robot, seen = _load(tmp_path, 0.02, RANGED)
    assert seen == []
    assert np.max(np.abs(robot.q_initial)) <= 0.05 and robot.loops[0].residual(robot.q_initial) <= 1e-12


@pytest.mark.parametrize(
    "path",
    [
        "mjcf/five_bar.xml",
        "mjcf/four_bar.xml",
        "mjcf/delta.xml",
        "mjcf/slider_crank.xml",
        "mjcf/series_parallel.xml",
    ],
)
def test_shipped_mechanisms_load_silently(path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ModelFileWarning)
        robot = Robot.from_mjcf(path)
    lo, hi, _ = joint_ranges(robot)
    assert np.all(robot.q_initial >= lo) and np.all(robot.q_initial <= hi)


def test_an_unlimited_hinge_ends_within_pi_of_its_guess(tmp_path):
    """The two-hinge arm without slides or ranges: from guess g = (0.822, -1.381) the Newton iterates end at
    h1 = 4.374 (3.55 rad from its guess); assemble returns the same closure with h1 − 2π, within π."""
    text = ARM.format(tx=0.3, **FREE).replace('pos="0.3 0 -0.6"', 'pos="0.3 0 -0.2"')
    for j in ("x", "x2"):
        text = text.replace(f'<joint name="{j}" type="slide" axis="1 0 0" />', "")
    text = text.replace('<motor joint="x"/>', '<motor joint="h1"/>')
    p = tmp_path / "arm2.xml"
    p.write_text(text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ModelFileWarning)
        robot = Robot.from_mjcf(p)
    assert robot.joint_names == ["h1", "h2"]
    c, g = robot.loops[0], np.array([0.822, -1.381])
    qq = g.copy()
    for _ in range(50):
        qq -= svd_rank(c.jacobian(qq), rtol=1e-10).pinv() @ c.phi(qq)
    assert c.residual(qq) <= 1e-12 and np.max(np.abs(qq - g)) > np.pi
    q = robot.assemble(g)
    assert c.residual(q) <= 1e-12 and np.all(np.abs(q - g) <= np.pi)
    turns = (qq - q) / (2 * np.pi)
    np.testing.assert_allclose(turns, np.round(turns), atol=1e-9)
    assert np.any(np.round(turns) != 0)

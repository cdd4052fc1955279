"""MJCF equalities read as MuJoCo reads them (issue 33 item 6): a probe against MuJoCo's own residual.

For every form of ``<connect>`` and ``<weld>`` (weld with/without ``relpose``, with/without ``anchor``, to the
world, torquescale 0 and 2, the site form; connect's body and site forms; sites of <worldbody>) a small MJCF
is built, read by ``Robot.from_mjcf``, and at random configurations MuJoCo's constraint residual of that
equality (``data.efc_pos``, rows with ``efc_type == mjCNSTR_EQUALITY`` and ``efc_id`` = the equality, after
``mj_forward``) is compared with the closure's φ(q) (MuJoCo's qpos mapped to Pinocchio's q by joint name).

What is compared (MuJoCo: ``engine_core_constraint.c``, ``mj_instantiateEquality``):

* Position rows: MuJoCo's ``pos1 − pos2`` (body1's point minus body2's point, world axes) is −φ_p of cmstack's
  ``p_b − p_A``: ``efc_pos[:3] = −φ[:3]``, to 1e-12 m; also its Jacobian rows: ``efc_J[:3] = −J[:3]``.
* Rotation rows (weld): MuJoCo's ``torquescale · Im(q_b⁻¹ q_A)`` (q_A = q1·relpose or site1's, q_b = q2 or site2's)
  is ``torquescale · sin(θ/2) u_b`` with R_bᵀ R_A = exp(θ u_b), and cmstack's φ_R = Log(R_b R_Aᵀ) = −θ R_b u_b, so
  ``efc_pos[3:] = −s · torquescale · sin(θ/2)/θ · R_bᵀ φ_R``, θ = |φ_R|, s = ±1 the sign of the real part of
  MuJoCo's product quaternion (q and −q are one rotation; MuJoCo does not canonicalise it).  On the sampled
  configurations (joints ~ U(−1.2, 1.2)) s is +1 every time, so the test requires the rows themselves to agree
  to 1e-12, sign included.
* torquescale = 0: MuJoCo keeps 6 rows whose rotation part is exactly zero; cmstack reads a ``point`` closure.

And the file's pose is closed for MuJoCo: at ``robot.q_initial`` (assembled by the loader) MuJoCo's rows are
below 1e-9: the plant starts on its own constraint manifold (the old reading of weld relpose + anchor left
0.1 m there).
"""

from __future__ import annotations

import mujoco
import numpy as np
import pinocchio as pin
import pytest

from cmstack.models.robot import Robot

BODIES = """
<mujoco model="probe">
  <compiler angle="radian" autolimits="true"/>
  <option jacobian="dense"><flag contact="disable" gravity="disable"/></option>
  <default><joint damping="0.1"/></default>
  <worldbody>
    <site name="w0" pos="0.5 0.1 0.4" euler="0.1 0.2 0.3"/>
    <body name="base" pos="0.1 0.2 0.3" euler="0.2 -0.1 0.3">
      <joint name="j0" type="hinge" axis="0 0 1"/>
      <inertial pos="0 0 0" mass="1" diaginertia="0.01 0.01 0.01"/>
      <body name="arm" pos="0.3 0 0.05" euler="0.1 0.4 -0.2">
        <joint name="j1" type="hinge" axis="0 1 0"/>
        <inertial pos="0.1 0 0" mass="1" diaginertia="0.01 0.01 0.01"/>
        <site name="s1" pos="0.12 -0.03 0.05" euler="0.3 0.2 -0.5"/>
      </body>
    </body>
    <body name="c0" pos="0.4 -0.1 0.2">
      <joint name="x" type="slide" axis="1 0 0"/>
      <inertial pos="0 0 0" mass="1" diaginertia="0.01 0.01 0.01"/>
      <body name="c1">
        <joint name="y" type="slide" axis="0 1 0"/>
        <inertial pos="0 0 0" mass="1" diaginertia="0.01 0.01 0.01"/>
        <body name="c2">
          <joint name="z" type="slide" axis="0 0 1"/>
          <inertial pos="0 0 0" mass="1" diaginertia="0.01 0.01 0.01"/>
          <body name="c3" euler="0.2 0.1 0">
            <joint name="rz" type="hinge" axis="0 0 1"/>
            <inertial pos="0 0 0" mass="1" diaginertia="0.01 0.01 0.01"/>
            <body name="c4">
              <joint name="ry" type="hinge" axis="0 1 0"/>
              <inertial pos="0 0 0" mass="1" diaginertia="0.01 0.01 0.01"/>
              <body name="tip" pos="0.05 0 0" euler="0 0.3 0.1">
                <joint name="rx" type="hinge" axis="1 0 0"/>
                <inertial pos="0.02 0 0" mass="1" diaginertia="0.01 0.01 0.01"/>
                <site name="s2" pos="-0.04 0.06 0.02" euler="-0.2 0.1 0.4"/>
                <body name="bracket" pos="0.03 -0.02 0.05" euler="0.4 -0.3 0.2">
                  <site name="s3" pos="0.02 0.01 -0.03" euler="0.1 0.5 -0.2"/>
                </body>
              </body>
            </body>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator><motor joint="j0"/><motor joint="j1"/></actuator>
  <equality>
    {eq}
  </equality>
</mujoco>
"""

RELPOSE = "0.1 0.05 -0.08 0.9 0.2 -0.3 0.25"  # an unnormalised quaternion: MuJoCo normalises it
FORMS = {
    "weld": '<weld name="e" body1="arm" body2="tip"/>',
    "weld_anchor": '<weld name="e" body1="arm" body2="tip" anchor="0.05 -0.02 0.1"/>',
    "weld_relpose": f'<weld name="e" body1="arm" body2="tip" relpose="{RELPOSE}"/>',
    "weld_relpose_anchor": f'<weld name="e" body1="arm" body2="tip" relpose="{RELPOSE}" anchor="0.05 -0.02 0.1"/>',
    "weld_relpose_anchor_swapped": (
        f'<weld name="e" body1="tip" body2="arm" relpose="{RELPOSE}" anchor="0.03 0.04 -0.05"/>'
    ),
    "weld_world_relpose_anchor": f'<weld name="e" body1="tip" relpose="{RELPOSE}" anchor="0.03 0.04 -0.05"/>',
    "weld_torquescale2": (
        f'<weld name="e" body1="arm" body2="tip" relpose="{RELPOSE}" anchor="0.05 -0.02 0.1" torquescale="2"/>'
    ),
    "weld_torquescale0": (
        f'<weld name="e" body1="arm" body2="tip" relpose="{RELPOSE}" anchor="0.05 -0.02 0.1" torquescale="0"/>'
    ),
    "weld_sites": '<weld name="e" site1="s1" site2="s2"/>',
    "weld_sites_torquescale2": '<weld name="e" site1="s1" site2="s2" torquescale="2"/>',
    "connect_body": '<connect name="e" body1="arm" body2="tip" anchor="0.05 -0.02 0.1"/>',
    "connect_body_world": '<connect name="e" body1="tip" anchor="0.05 -0.02 0.1"/>',
    "connect_sites": '<connect name="e" site1="s1" site2="s2"/>',
    # a site of <worldbody> (Pinocchio's parser drops it; the loader adds it where MuJoCo compiles it)
    "weld_world_site": '<weld name="e" site1="s2" site2="w0"/>',
    "connect_world_site": '<connect name="e" site1="w0" site2="s2"/>',
    # a site of a joint-less body, and that body itself
    "weld_fixed_body_site": '<weld name="e" site1="s1" site2="s3"/>',
    "weld_fixed_body": f'<weld name="e" body1="arm" body2="bracket" relpose="{RELPOSE}" anchor="0.01 0.02 0.03"/>',
}
TS = {"weld_torquescale2": 2.0, "weld_sites_torquescale2": 2.0, "weld_torquescale0": 0.0}


def _mujoco_rows(m, d, robot, q):
    """MuJoCo's rows (efc_pos, efc_J with columns in the robot's order) of equality 0 at the robot's q."""
    for name in robot.joint_names:
        d.qpos[m.jnt_qposadr[m.joint(name).id]] = q[robot.joint_index(name)]
    mujoco.mj_forward(m, d)
    rows = (d.efc_type == mujoco.mjtConstraint.mjCNSTR_EQUALITY) & (d.efc_id == 0)
    J = d.efc_J.reshape(d.nefc, m.nv)[rows]
    cols = [m.jnt_dofadr[m.joint(n).id] for n in robot.joint_names]
    return d.efc_pos[rows].copy(), J[:, cols]


@pytest.mark.filterwarnings(
    "ignore::cmstack.models.errors.ModelFileWarning"
)  # (poses not assembled in the file)
@pytest.mark.parametrize("form", list(FORMS))
def test_closure_residual_is_mujocos(form, tmp_path):
    p = tmp_path / f"{form}.xml"
    p.write_text(BODIES.replace("{eq}", FORMS[form]))
    robot = Robot.from_mjcf(p)
    assert len(robot.loops) == 1
    c = robot.loops[0]
    ts = TS.get(form, 1.0)
    assert c.kind == ("point" if form.startswith("connect") or ts == 0.0 else "weld")
    m = mujoco.MjModel.from_xml_path(str(p))
    d = mujoco.MjData(m)
    n_rows = 3 if form.startswith("connect") else 6

    # the file's pose as the loader assembled it is closed for MuJoCo too
    pos, _ = _mujoco_rows(m, d, robot, robot.q_initial)
    assert pos.shape == (n_rows,)
    assert np.max(np.abs(pos)) < 1e-9, (form, pos)

    rng = np.random.default_rng(7)
    data = robot.model.createData()
    for _ in range(25):
        q = rng.uniform(-1.2, 1.2, robot.nq)
        pos, J_mj = _mujoco_rows(m, d, robot, q)
        phi, J = c.phi(q), c.jacobian(q)
        np.testing.assert_allclose(pos[:3], -phi[:3], rtol=0, atol=1e-12)
        np.testing.assert_allclose(J_mj[:3], -J[:3], rtol=0, atol=1e-12)
        if n_rows == 3:
            continue
        if ts == 0.0:  # MuJoCo's rotation rows vanish; cmstack's closure is the point
            assert phi.shape == (3,)
            assert np.all(pos[3:] == 0.0)
            continue
        pin.framesForwardKinematics(robot.model, data, q)
        Rb = data.oMf[c.fb].rotation
        th = np.linalg.norm(phi[3:])
        expected = -ts * (np.sin(th / 2) / th if th > 1e-12 else 0.5) * (Rb.T @ phi[3:])
        np.testing.assert_allclose(pos[3:], expected, rtol=0, atol=1e-12)


def test_active_from_a_default_class_is_mujocos(tmp_path):
    """``<default><equality active="false"/>`` deactivates every equality without its own class; a class that sets
    active="true" turns one back on: MuJoCo's eq_active0, and cmstack's loops are exactly the active ones."""
    text = BODIES.replace(
        '<default><joint damping="0.1"/></default>',
        '<default><joint damping="0.1"/><equality active="false"/>'
        '<default class="on"><equality active="true"/></default></default>',
    ).replace(
        "{eq}",
        '<connect name="off" site1="s1" site2="s2"/><weld name="on" class="on" body1="arm" body2="tip"/>'
        '<connect name="off2" class="on" active="false" body1="arm" body2="tip" anchor="0 0 0"/>',
    )
    p = tmp_path / "defaults.xml"
    p.write_text(text)
    m = mujoco.MjModel.from_xml_path(str(p))
    assert list(m.eq_active0) == [False, True, False]
    robot = Robot.from_mjcf(p)
    assert [c.name for c in robot.loops] == ["on"]

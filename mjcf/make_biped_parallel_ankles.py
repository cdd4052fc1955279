"""Writes mjcf/biped_parallel_ankles.xml: a biped lower body whose ankles are parallel mechanisms.

A pelvis on a free joint; per leg (l: y > 0, r: y < 0) hip yaw (z), hip roll (x) and hip pitch (y) hinges, a
thigh (0.4 m), a knee hinge (y), a shank (0.4 m), and the foot on the shank through a **passive 2-DoF ankle**: pitch
(y) then roll (x), two hinges in one body (an MJCF universal joint).  The ankle is driven from the shank by **two
cranks** (motors ``<s>_crank_o`` / ``<s>_crank_i``, hinges about y 0.1 m below the knee, 0.03 m out- and inboard,
arm 0.05 m pointing back); from each crank's end a **rod** (0.3 m, a universal joint at the crank: two hinges in
one body, x then y) goes down to the foot, where an ``<equality connect>`` closes it (a ball at the foot, on a heel
bracket 0.05 m behind the ankle, 0.03 m out- and inboard).  Moving both cranks together pitches the foot; moving
them apart rolls it.

Per leg: 6 motors (3 hip, knee, 2 cranks), 6 passive joints (the ankle's 2, the rods' 4), 2 loops.  Whole robot:
nq = 31, nv = 30 (the free joint: 7 / 6), 12 motors, 18 passive coordinates (the free joint's 6 with the ankles and
rods), 4 loops (12 rows).

The feet are flat (0.24 m x 0.09 m, from 0.10 m behind the ankle to 0.14 m ahead): at each corner a small contact
sphere (2 mm radius, contype 1) with a site of the same name at its centre (``<s>_toe_out``, ``<s>_toe_in``,
``<s>_heel_out``, ``<s>_heel_in``), the frames of the point contacts; a floor plane; friction 1.0 and a contact
time constant of 2 steps (0.5 ms) in the file, as mjcf/quadruped_five_bar.xml.  Masses: pelvis 10 kg, each leg
9.6 kg (hip yaw 1.0, hip roll 1.5, thigh 4.0, shank 2.0, foot 0.8, cranks 0.1, rods 0.05), 29.2 kg in all,
inertias of boxes and rods.  The crank arm equals the heel bracket and the rod the crank axis' height above the
ankle, so each crank, rod, heel bracket and shank form a parallelogram in the sagittal plane (a crank turns as
much as the foot pitches; rolling the foot moves the two cranks apart).

qpos0 (all joints zero: legs straight, feet level, rods vertical, cranks level) defines the loops' anchors (as MuJoCo
does).  The keyframe ``stand`` bends the knees (hip pitch -0.35, knee 0.7, ankle pitch -0.35: the feet level under
the hips), the pelvis at the height where the spheres touch the floor, and the cranks and rods closed by a Newton
solve on MuJoCo's own equality residual (``efc_pos``) over the crank and rod joints only (the ankle stays where it was
put), to 1e-13 m.

    python mjcf/make_biped_parallel_ankles.py mjcf/biped_parallel_ankles.xml
"""

import sys

import mujoco
import numpy as np

L_THIGH, L_SHANK = 0.4, 0.4  # m
HIP_Y = 0.1  # m, the hips' lateral offset from the pelvis centre
HIP_DROP = 0.1  # m, the hip below the pelvis centre
CRANK_Z, CRANK_Y, CRANK_R = (
    -0.1,
    0.03,
    0.05,
)  # m: the cranks' axes below the knee, their lateral offset, the arm
ROD = L_SHANK + CRANK_Z  # m: the rod (crank end to the heel bracket at the ankle's height)
HEEL_X = -CRANK_R  # m: the heel bracket behind the ankle (under the crank's end: the rod vertical at qpos0)
SOLE_Z, TOE_X, HEEL_CX, FOOT_Y = -0.06, 0.14, -0.10, 0.045  # m: the sole below the ankle, the corners
RFOOT = 0.002  # m, the corner spheres
SOLREF = 2 * 0.00025  # s: the contacts' time constant, 2 steps of the file's timestep
STAND = dict(hip_pitch=-0.35, knee=0.7, ankle_pitch=-0.35)  # rad, the keyframe's legs (feet level)


def box(mass, sx, sy, sz, pos="0 0 0"):
    """An inertial of a uniform box of full sizes sx, sy, sz (m)."""
    ix, iy, iz = (mass / 12 * (b * b + c * c) for b, c in ((sy, sz), (sx, sz), (sx, sy)))
    return f'<inertial pos="{pos}" mass="{mass:g}" diaginertia="{ix:.6g} {iy:.6g} {iz:.6g}"/>'


def leg(s: str, sign: float) -> tuple[list[str], list[str]]:
    y = sign * HIP_Y
    body = [
        f'      <body name="{s}_hip_yaw_link" pos="0 {y:g} {-HIP_DROP:g}">',
        f'        <joint name="{s}_hip_yaw" type="hinge" axis="0 0 1" range="-0.8 0.8"/>',
        f"        {box(1.0, 0.08, 0.08, 0.06, '0 0 -0.02')}",
        '        <geom type="cylinder" fromto="0 0 0 0 0 -0.04" size="0.04"/>',
        f'        <body name="{s}_hip_roll_link" pos="0 0 -0.05">',
        f'          <joint name="{s}_hip_roll" type="hinge" axis="1 0 0" range="-0.6 0.6"/>',
        f"          {box(1.5, 0.1, 0.08, 0.08)}",
        '          <geom type="cylinder" fromto="-0.05 0 0 0.05 0 0" size="0.04"/>',
        f'          <body name="{s}_thigh" pos="0 0 -0.05">',
        f'            <joint name="{s}_hip_pitch" type="hinge" axis="0 1 0" range="-1.8 1.0"/>',
        f"            {box(4.0, 0.08, 0.08, L_THIGH, f'0 0 {-L_THIGH / 2:g}')}",
        f'            <geom type="capsule" fromto="0 0 0 0 0 {-L_THIGH:g}" size="0.035"/>',
        f'            <body name="{s}_shank" pos="0 0 {-L_THIGH:g}">',
        f'              <joint name="{s}_knee" type="hinge" axis="0 1 0" range="0 2.3"/>',
        f"              {box(2.0, 0.06, 0.06, L_SHANK, f'0 0 {-L_SHANK / 2:g}')}",
        f'              <geom type="capsule" fromto="0 0 0 0 0 {-L_SHANK:g}" size="0.025"/>',
    ]
    eqs = []
    for side, dy in (("o", sign * CRANK_Y), ("i", -sign * CRANK_Y)):
        body += [
            f'              <body name="{s}_crank_{side}_link" pos="0 {dy:g} {CRANK_Z:g}">',
            f'                <joint name="{s}_crank_{side}" type="hinge" axis="0 1 0" range="-1.4 1.4"/>',
            f"                {box(0.1, CRANK_R, 0.01, 0.01, f'{-CRANK_R / 2:g} 0 0')}",
            f'                <geom type="capsule" fromto="0 0 0 {-CRANK_R:g} 0 0" size="0.008" rgba=".8 .5 .2 1"/>',
            f'                <body name="{s}_rod_{side}" pos="{-CRANK_R:g} 0 0">',
            f'                  <joint name="{s}_rod_{side}_x" type="hinge" axis="1 0 0"/>',
            f'                  <joint name="{s}_rod_{side}_y" type="hinge" axis="0 1 0"/>',
            f"                  {box(0.05, 0.006, 0.006, ROD, f'0 0 {-ROD / 2:g}')}",
            f'                  <geom type="capsule" fromto="0 0 0 0 0 {-ROD:g}" size="0.004" rgba=".8 .5 .2 1"/>',
            "                </body>",
            "              </body>",
        ]
        eqs.append(
            f'    <connect name="{s}_ankle_{side}" body1="{s}_rod_{side}" body2="{s}_foot" anchor="0 0 {-ROD:g}"/>'
        )
    body += [
        f'              <body name="{s}_foot" pos="0 0 {-L_SHANK:g}">',
        f'                <joint name="{s}_ankle_pitch" type="hinge" axis="0 1 0" range="-1.0 1.0"/>',
        f'                <joint name="{s}_ankle_roll" type="hinge" axis="1 0 0" range="-0.6 0.6"/>',
        "                "
        + box(0.8, TOE_X - HEEL_CX, 2 * FOOT_Y, 0.03, f"{(TOE_X + HEEL_CX) / 2:g} 0 {SOLE_Z + 0.015:g}"),
        f'                <geom type="box" size="{(TOE_X - HEEL_CX) / 2:g} {FOOT_Y:g} 0.012"'
        f' pos="{(TOE_X + HEEL_CX) / 2:g} 0 {SOLE_Z + RFOOT + 0.012:g}" rgba=".3 .3 .3 1"/>',
        f'                <geom type="capsule" fromto="{HEEL_X:g} {-CRANK_Y:g} 0 {HEEL_X:g} {CRANK_Y:g} 0"'
        ' size="0.006"/>',  # the heel bracket
    ]
    for name, cx, cy in (
        ("toe_out", TOE_X, sign * FOOT_Y),
        ("toe_in", TOE_X, -sign * FOOT_Y),
        ("heel_out", HEEL_CX, sign * FOOT_Y),
        ("heel_in", HEEL_CX, -sign * FOOT_Y),
    ):
        p = f"{cx:g} {cy:g} {SOLE_Z + RFOOT:g}"
        body += [
            f'                <site name="{s}_{name}" pos="{p}" size="0.004"/>',
            f'                <geom name="{s}_{name}" type="sphere" size="{RFOOT:g}" pos="{p}" contype="1"'
            f' conaffinity="1" solref="{SOLREF:g} 1" rgba=".1 .1 .1 1"/>',
        ]
    body += [
        "              </body>",
        "            </body>",
        "          </body>",
        "        </body>",
        "      </body>",
    ]
    return body, eqs


def xml(key: str = "") -> str:
    out = [
        '<mujoco model="biped_parallel_ankles">',
        "  <!-- written by mjcf/make_biped_parallel_ankles.py -->",
        '  <compiler angle="radian"/>',
        '  <option gravity="0 0 -9.81" timestep="0.00025"/>',
        '  <default><joint damping="0.05"/><geom contype="0" conaffinity="0" rgba=".3 .5 .8 1"/></default>',
        "  <worldbody>",
        '    <geom name="floor" type="plane" size="3 3 0.1" contype="1" conaffinity="1" friction="1 0.005 0.0001"'
        f' solref="{SOLREF:g} 1" rgba=".8 .8 .8 1"/>',
        f'    <body name="pelvis" pos="0 0 {HIP_DROP + 0.1 + L_THIGH + L_SHANK - SOLE_Z:g}">',  # spheres on the floor
        '      <freejoint name="base"/>',
        f"      {box(10.0, 0.2, 0.3, 0.15)}",
        '      <geom type="box" size="0.1 0.15 0.075"/>',
        '      <site name="base_site" pos="0 0 0" size="0.01"/>',
    ]
    eqs = []
    for s, sign in (("l", 1.0), ("r", -1.0)):
        b, e = leg(s, sign)
        out += b
        eqs += e
    out += ["    </body>", "  </worldbody>", "  <equality>"] + eqs + ["  </equality>", "  <actuator>"]
    for s in "lr":
        for j, lim in (
            ("hip_yaw", 60),
            ("hip_roll", 120),
            ("hip_pitch", 150),
            ("knee", 200),
            ("crank_o", 80),
            ("crank_i", 80),
        ):
            out.append(f'    <motor name="{s}_m_{j}" joint="{s}_{j}" ctrlrange="-{lim} {lim}"/>')
    out += ["  </actuator>"]
    if key:
        out += ["  <keyframe>", f'    <key name="stand" qpos="{key}"/>', "  </keyframe>"]
    out += ["</mujoco>"]
    return "\n".join(out) + "\n"


def stand_qpos() -> str:
    """The keyframe: the legs bent (STAND), the cranks and rods closed on MuJoCo's equality residual, the pelvis at
    the height where the corner spheres touch the floor."""
    m = mujoco.MjModel.from_xml_string(xml())
    d = mujoco.MjData(m)
    q = m.qpos0.copy()
    jid = lambda n: mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, n)  # noqa: E731
    for s in "lr":
        for j, val in STAND.items():
            q[m.jnt_qposadr[jid(f"{s}_{j}")]] = val
    free = [
        m.jnt_dofadr[jid(f"{s}_{j}")]
        for s in "lr"
        for j in ("crank_o", "crank_i", "rod_o_x", "rod_o_y", "rod_i_x", "rod_i_y")
    ]
    qadr = [
        m.jnt_qposadr[jid(f"{s}_{j}")]
        for s in "lr"
        for j in ("crank_o", "crank_i", "rod_o_x", "rod_o_y", "rod_i_x", "rod_i_y")
    ]
    for _ in range(50):
        d.qpos[:] = q
        mujoco.mj_forward(m, d)
        eq = d.efc_type == mujoco.mjtConstraint.mjCNSTR_EQUALITY
        r = d.efc_pos[eq]
        if np.abs(r).max() < 1e-13:
            break
        J = d.efc_J.reshape(d.nefc, m.nv)[eq][:, free]
        q[qadr] -= np.linalg.lstsq(J, r, rcond=None)[0]
    else:
        raise SystemExit(f"the ankles did not close: residual {np.abs(r).max():.3g} m")
    d.qpos[:] = q
    mujoco.mj_kinematics(m, d)
    sid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, "l_toe_out")
    q[2] -= d.site_xpos[sid][2] - RFOOT  # the spheres' centres RFOOT above the floor
    return " ".join(f"{x:.12g}" for x in q)


if __name__ == "__main__":
    open(sys.argv[1], "w").write(xml(stand_qpos()))

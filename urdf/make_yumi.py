"""Write urdf/yumi.urdf, mjcf/yumi.xml and mjcf/yumi_bar.xml from the figures of
docs/models.md (ABB IRB 14000 kinematics; the thesis' coarse inertias: every arm link
2 kg, 0.1 kg·m²).  Run ``python urdf/make_yumi.py`` after changing a figure; the three outputs are
committed and are independent files afterwards (the plant may be edited to differ on purpose).

Visuals are primitive shapes: a sphere at every joint and a cylinder (capsule in MuJoCo) from a
link's joint to the next joint.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

# (name, origin xyz, origin rpy, lower, upper, velocity) — the IRB 14000's joints (right arm), see docs/models.md
ARM = [
    (
        "yumi_joint_1",
        (0.05355, -0.0725, 0.41492),
        (-0.9795, -0.5682, -2.3155),
        -2.94087978961,
        2.94087978961,
        3.14159265359,
    ),
    (
        "yumi_joint_2",
        (0.03, 0.0, 0.1),
        (1.57079632679, 0.0, 0.0),
        -2.50454747661,
        0.759218224618,
        3.14159265359,
    ),
    (
        "yumi_joint_7",
        (-0.03, 0.17283, 0.0),
        (-1.57079632679, 0.0, 0.0),
        -2.94087978961,
        2.94087978961,
        3.14159265359,
    ),
    (
        "yumi_joint_3",
        (-0.04188, 0.0, 0.07873),
        (1.57079632679, -1.57079632679, 0.0),
        -2.15548162621,
        1.3962634016,
        3.14159265359,
    ),
    (
        "yumi_joint_4",
        (0.0405, 0.16461, 0.0),
        (-1.57079632679, 0.0, 0.0),
        -5.06145483078,
        5.06145483078,
        6.98131700798,
    ),
    (
        "yumi_joint_5",
        (-0.027, 0.0, 0.10039),
        (1.57079632679, 0.0, 0.0),
        -1.53588974176,
        2.40855436775,
        6.98131700798,
    ),
    (
        "yumi_joint_6",
        (0.027, 0.029, 0.0),
        (-1.57079632679, 0.0, 0.0),
        -3.99680398707,
        3.99680398707,
        6.98131700798,
    ),
]
LINKS = [
    "yumi_link_1",
    "yumi_link_2",
    "yumi_link_3",
    "yumi_link_4",
    "yumi_link_5",
    "yumi_link_6",
    "yumi_link_7",
]
LEFT_J1_RPY = (0.9781, -0.5716, 2.3180)
LEFT_J1_XYZ = (0.05355, 0.0725, 0.41492)
EFFORT, DAMPING = 300.0, 0.5
LINK_MASS, LINK_I = 2.0, 0.1
LINK1_COM = (0.0, -0.03, 0.12)
BODY = dict(mass=15.0, I=(0.5, 0.6, 0.3))
GRIPPER = dict(xyz=(0.0, 0.0, 0.007), rpy=(0.0, 0.0, np.pi), mass=0.2, I=1e-4)
FINGERS = [
    ("finger_r", (-0.01, -0.0065, 0.0837), (0.0, 0.0, 0.0)),
    ("finger_l", (0.01, 0.0065, 0.0837), (0.0, 0.0, np.pi)),
]
FINGER = dict(mass=0.01, I=1e-6)
# The coupling body of thesis §4.4: T_A^B = (Rx(−90°), (0, −0.4, 0.12)) in E1 = yumi_link_7_l.
BAR = dict(mass=0.5, p=(0.0, -0.4, 0.12), quat_wxyz=(np.sqrt(0.5), -np.sqrt(0.5), 0.0, 0.0), radius=0.015)
# the thesis' initial pose (§4.4; scenarios/configs/yumi_dual_arm.toml: q0), rad: the guess that mjcf/yumi_bar.xml's
# keyframe closes (``assembled_key``), so that the file's initial pose is an assembled one
Q0_THESIS = {
    "yumi_joint_1_l": 0.9732, "yumi_joint_2_l": 1.6181, "yumi_joint_7_l": -2.9988, "yumi_joint_3_l": 0.5775,
    "yumi_joint_4_l": 0.1748, "yumi_joint_5_l": 0.6528, "yumi_joint_6_l": -0.1875,
    "yumi_joint_1_r": -0.7914, "yumi_joint_2_r": 1.1193, "yumi_joint_7_r": 3.4577, "yumi_joint_3_r": 0.2045,
    "yumi_joint_4_r": -1.0548, "yumi_joint_5_r": 1.7651, "yumi_joint_6_r": 1.4572,
}  # fmt: skip


def rpy_matrix(r, p, y):
    cr, sr, cp, sp, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
    Rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    Ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    Rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    return Rz @ Ry @ Rx


def quat_wxyz(R):
    w = np.sqrt(max(0.0, 1 + R[0, 0] + R[1, 1] + R[2, 2])) / 2
    x = np.sqrt(max(0.0, 1 + R[0, 0] - R[1, 1] - R[2, 2])) / 2
    y = np.sqrt(max(0.0, 1 - R[0, 0] + R[1, 1] - R[2, 2])) / 2
    z = np.sqrt(max(0.0, 1 - R[0, 0] - R[1, 1] + R[2, 2])) / 2
    x = np.copysign(x, R[2, 1] - R[1, 2])
    y = np.copysign(y, R[0, 2] - R[2, 0])
    z = np.copysign(z, R[1, 0] - R[0, 1])
    q = np.array([w, x, y, z])
    return q / np.linalg.norm(q)


def f(v):
    return " ".join(f"{float(x):.12g}" for x in v)


def cylinder_rpy(d):
    """rpy turning z onto direction d (for URDF cylinders)."""
    d = np.asarray(d, float) / np.linalg.norm(d)
    pitch = np.arctan2(np.hypot(d[0], d[1]), d[2])
    yaw = np.arctan2(d[1], d[0])
    return (0.0, pitch, yaw)


def arm(side):
    joints = []
    for i, (jn, xyz, rpy, lo, hi, vel) in enumerate(ARM):
        if i == 0 and side == "l":
            xyz, rpy = LEFT_J1_XYZ, LEFT_J1_RPY
        joints.append((f"{jn}_{side}", xyz, rpy, lo, hi, vel))
    links = [f"{ln}_{side}" for ln in LINKS]
    return joints, links


# ----------------------------------------------------------------------------------------- URDF
def urdf_inertial(mass, com, I):
    return (
        f'    <inertial><origin xyz="{f(com)}" rpy="0 0 0"/><mass value="{mass}"/>'
        f'<inertia ixx="{I[0]}" ixy="0" ixz="0" iyy="{I[1]}" iyz="0" izz="{I[2]}"/></inertial>\n'
    )


def urdf_visuals(next_xyz, color):
    s = f'    <visual><geometry><sphere radius="0.04"/></geometry><material name="{color}"/></visual>\n'
    if next_xyz is not None and np.linalg.norm(next_xyz) > 1e-9:
        mid = np.asarray(next_xyz) / 2
        L = float(np.linalg.norm(next_xyz))
        s += (
            f'    <visual><origin xyz="{f(mid)}" rpy="{f(cylinder_rpy(next_xyz))}"/>'
            f'<geometry><cylinder radius="0.03" length="{L:.6g}"/></geometry><material name="{color}"/></visual>\n'
        )
    return s


def write_urdf():
    out = [
        '<?xml version="1.0"?>',
        "<!-- ABB YuMi (IRB 14000), 14 revolute DoF, grippers and fingers fixed. Generated by urdf/make_yumi.py",
        "     from docs/models.md; inertias are the thesis' coarse placeholders. -->",
        '<robot name="yumi">',
        '  <material name="grey"><color rgba="0.7 0.7 0.72 1"/></material>',
        '  <material name="blue"><color rgba="0.3 0.45 0.8 1"/></material>',
        '  <material name="orange"><color rgba="0.9 0.55 0.2 1"/></material>',
        '  <link name="world"/>',
        '  <link name="yumi_base_link"/>',
        '  <joint name="yumi_base_link_joint" type="fixed"><parent link="world"/><child link="yumi_base_link"/>'
        '<origin xyz="0 0 0.1" rpy="0 0 0"/></joint>',
        '  <link name="yumi_body">\n'
        + urdf_inertial(BODY["mass"], (0, 0, 0), BODY["I"])
        + '    <visual><origin xyz="0 0 0.2" rpy="0 0 0"/><geometry><box size="0.3 0.4 0.4"/></geometry><material name="grey"/></visual>\n  </link>',  # noqa: E501
        '  <joint name="yumi_base_joint" type="fixed"><parent link="yumi_base_link"/><child link="yumi_body"/>'
        '<origin xyz="0 0 0" rpy="0 0 0"/></joint>',
    ]
    for side in ("r", "l"):
        joints, links = arm(side)
        parent = "yumi_body"
        for i, ((jn, xyz, rpy, lo, hi, vel), ln) in enumerate(zip(joints, links)):
            nxt = joints[i + 1][1] if i + 1 < len(joints) else GRIPPER["xyz"]
            com = LINK1_COM if i == 0 else (0, 0, 0)
            color = "blue" if side == "l" else "orange"
            out.append(
                f'  <link name="{ln}">\n'
                + urdf_inertial(LINK_MASS, com, (LINK_I,) * 3)
                + urdf_visuals(nxt, color)
                + "  </link>"
            )
            out.append(
                f'  <joint name="{jn}" type="revolute"><parent link="{parent}"/><child link="{ln}"/>'
                f'<origin xyz="{f(xyz)}" rpy="{f(rpy)}"/><axis xyz="0 0 1"/>'
                f'<limit lower="{lo}" upper="{hi}" effort="{EFFORT}" velocity="{vel}"/>'
                f'<dynamics damping="{DAMPING}" friction="0"/></joint>'
            )
            parent = ln
        g = f"gripper_{side}_base"
        out.append(
            f'  <link name="{g}">\n'
            + urdf_inertial(GRIPPER["mass"], (0, 0, 0), (GRIPPER["I"],) * 3)
            + '    <visual><origin xyz="0 0 0.04" rpy="0 0 0"/><geometry><box size="0.06 0.05 0.08"/></geometry>'
            '<material name="grey"/></visual>\n  </link>'
        )
        out.append(
            f'  <joint name="gripper_{side}_joint" type="fixed"><parent link="{parent}"/><child link="{g}"/>'
            f'<origin xyz="{f(GRIPPER["xyz"])}" rpy="{f(GRIPPER["rpy"])}"/></joint>'
        )
        for fn, xyz, rpy in FINGERS:
            fl = f"gripper_{side}_{fn}"
            out.append(
                f'  <link name="{fl}">\n'
                + urdf_inertial(FINGER["mass"], (0, 0, 0), (FINGER["I"],) * 3)
                + '    <visual><origin xyz="0 0 0.015" rpy="0 0 0"/><geometry><box size="0.01 0.01 0.03"/></geometry>'
                '<material name="grey"/></visual>\n  </link>'
            )
            out.append(
                f'  <joint name="gripper_{side}_{fn}_joint" type="fixed"><parent link="{g}"/><child link="{fl}"/>'
                f'<origin xyz="{f(xyz)}" rpy="{f(rpy)}"/></joint>'
            )
    out.append("</robot>\n")
    (ROOT / "urdf" / "yumi.urdf").write_text("\n".join(out))


# ----------------------------------------------------------------------------------------- MJCF
def mj_body_open(name, xyz, rpy, indent):
    return f'{indent}<body name="{name}" pos="{f(xyz)}" quat="{f(quat_wxyz(rpy_matrix(*rpy)))}">'


def write_mjcf(with_bar: bool):
    name = "yumi_bar" if with_bar else "yumi"
    head = f"""<!-- ABB YuMi plant for MuJoCo{", arms holding a rigid bar (a physical closed chain)" if with_bar else " (arms alone; the coupling exists only in the controller)"}.
     Generated by urdf/make_yumi.py from docs/models.md. Thesis §4.4 settings: time step 5 ms,
     gravity -9.81 z, joint damping 0.5, contacts and joint limits disabled, motors limited to the URDF effort. -->
<mujoco model="{name}">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="0.005" gravity="0 0 -9.81" integrator="Euler">
    <flag contact="disable"/>
  </option>
  <default>
    <joint type="hinge" axis="0 0 1" damping="{DAMPING}" limited="false"/>
    <geom contype="0" conaffinity="0" group="1"/>
    <motor ctrllimited="true" ctrlrange="-{EFFORT} {EFFORT}"/>
  </default>
  <worldbody>
    <light pos="0 0 3" dir="0 0 -1"/>
    <geom name="floor" type="plane" size="1 1 0.01" rgba="0.9 0.9 0.9 1" group="0"/>
    <body name="yumi_base_link" pos="0 0 0.1">
      <body name="yumi_body">
        <inertial pos="0 0 0" mass="{BODY["mass"]}" diaginertia="{f(BODY["I"])}"/>
        <geom type="box" pos="0 0 0.2" size="0.15 0.2 0.2" rgba="0.7 0.7 0.72 1"/>
"""
    body = [head]
    for side in ("r", "l"):
        joints, links = arm(side)
        indent = "        "
        rgba = "0.3 0.45 0.8 1" if side == "l" else "0.9 0.55 0.2 1"
        for i, ((jn, xyz, rpy, _lo, _hi, _vel), ln) in enumerate(zip(joints, links)):
            nxt = joints[i + 1][1] if i + 1 < len(joints) else GRIPPER["xyz"]
            com = LINK1_COM if i == 0 else (0, 0, 0)
            body.append(mj_body_open(ln, xyz, rpy, indent))
            body.append(f'{indent}  <joint name="{jn}"/>')
            body.append(
                f'{indent}  <inertial pos="{f(com)}" mass="{LINK_MASS}" diaginertia="{f((LINK_I,) * 3)}"/>'
            )
            body.append(f'{indent}  <geom type="sphere" size="0.04" rgba="{rgba}"/>')
            if np.linalg.norm(nxt) > 1e-9:
                body.append(
                    f'{indent}  <geom type="capsule" fromto="0 0 0 {f(nxt)}" size="0.03" rgba="{rgba}"/>'
                )
            indent += "  "
        # gripper and fingers: bodies with no joint (welded to link_7, same dynamics as the URDF)
        body.append(mj_body_open(f"gripper_{side}_base", GRIPPER["xyz"], GRIPPER["rpy"], indent))
        body.append(
            f'{indent}  <inertial pos="0 0 0" mass="{GRIPPER["mass"]}" diaginertia="{f((GRIPPER["I"],) * 3)}"/>'
        )
        body.append(
            f'{indent}  <geom type="box" pos="0 0 0.04" size="0.03 0.025 0.04" rgba="0.7 0.7 0.72 1"/>'
        )
        for fn, xyz, rpy in FINGERS:
            body.append(mj_body_open(f"gripper_{side}_{fn}", xyz, rpy, indent + "  "))
            body.append(
                f'{indent}    <inertial pos="0 0 0" mass="{FINGER["mass"]}" diaginertia="{f((FINGER["I"],) * 3)}"/>'
            )
            body.append(
                f'{indent}    <geom type="box" pos="0 0 0.015" size="0.005 0.005 0.015" rgba="0.7 0.7 0.72 1"/>'
            )
            body.append(f"{indent}  </body>")
        body.append(f"{indent}</body>")
        if with_bar and side == "l":
            # The bar: rigidly attached to E1 = yumi_link_7_l (its frame is E1), reaching to E1·T_A^B.
            p = np.asarray(BAR["p"])
            body.append(f'{indent}<body name="bar" pos="0 0 0">')
            body.append(
                f'{indent}  <inertial pos="{f(p / 2)}" mass="{BAR["mass"]}" '
                f'diaginertia="{f(bar_inertia())}" quat="{f(bar_axis_quat())}"/>'
            )
            body.append(
                f'{indent}  <geom type="capsule" fromto="0 0 0 {f(p)}" size="{BAR["radius"]}" rgba="0.2 0.7 0.3 1"/>'
            )
            body.append(
                f'{indent}  <site name="bar_end" pos="{f(p)}" quat="{f(BAR["quat_wxyz"])}" size="0.01"/>'
            )
            body.append(f"{indent}</body>")
        for _ in joints:
            indent = indent[:-2]
            body.append(f"{indent}</body>")
    body.append("      </body>\n    </body>\n  </worldbody>")
    if with_bar:
        # weld: the pose of yumi_link_7_r relative to the bar (whose frame is E1) is T_A^B.
        body.append("  <equality>")
        body.append(
            f'    <weld name="bar_weld" body1="bar" body2="yumi_link_7_r" '
            f'relpose="{f(BAR["p"])} {f(BAR["quat_wxyz"])}" solref="0.01 1" solimp="0.95 0.99 0.001"/>'
        )
        body.append("  </equality>")
    body.append("  <actuator>")
    for side in ("r", "l"):
        for jn, *_ in arm(side)[0]:
            body.append(f'    <motor name="{jn}" joint="{jn}"/>')
    body.append("  </actuator>")
    path = ROOT / "mjcf" / f"{name}.xml"
    if with_bar:  # the file without its keyframe first: the keyframe is that model's closed pose
        path.write_text("\n".join(body + ["</mujoco>\n"]))
        key = " ".join(repr(float(x)) for x in assembled_key(path))
        body += ["  <keyframe>", f'    <key name="assembled" qpos="{key}"/>', "  </keyframe>"]
    body.append("</mujoco>\n")
    path.write_text("\n".join(body))


def assembled_key(path: Path) -> np.ndarray:
    """The bar plant's keyframe qpos (MuJoCo's joint order, rad): the thesis' initial pose ``Q0_THESIS`` with
    the bar's weld closed (``models/loops.py: assemble``, Newton on the weld's residual to 1e-12) on the file's own
    model, so ``Robot.from_mjcf`` finds an assembled initial pose (no ``ModelFileWarning``)."""
    import warnings

    from cmstack.models.errors import ModelFileWarning
    from cmstack.models.loops import assemble
    from cmstack.models.robot import Robot

    with warnings.catch_warnings():  # the keyless file's qpos0 is not assembled: the warning this key removes
        warnings.simplefilter("ignore", ModelFileWarning)
        robot = Robot.from_mjcf(path)
    return assemble(robot, robot.q_from_names(Q0_THESIS))


def bar_inertia():
    """Thin rod of mass m, length L about its centre: (mL²/12, mL²/12, ~0) in its axis frame."""
    L = float(np.linalg.norm(BAR["p"]))
    m = BAR["mass"]
    return (m * L**2 / 12, m * L**2 / 12, 0.5 * m * BAR["radius"] ** 2)


def bar_axis_quat():
    """Quaternion turning the inertia frame's z axis onto the bar's axis."""
    d = np.asarray(BAR["p"], float) / np.linalg.norm(BAR["p"])
    z = np.array([0.0, 0.0, 1.0])
    axis = np.cross(z, d)
    s, c = np.linalg.norm(axis), float(z @ d)
    ang = np.arctan2(s, c)
    axis = axis / s if s > 1e-12 else np.array([1.0, 0.0, 0.0])
    return np.r_[np.cos(ang / 2), np.sin(ang / 2) * axis]


if __name__ == "__main__":
    write_urdf()
    write_mjcf(False)
    write_mjcf(True)
    print("wrote urdf/yumi.urdf, mjcf/yumi.xml, mjcf/yumi_bar.xml")

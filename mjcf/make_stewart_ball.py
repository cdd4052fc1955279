"""Writes mjcf/stewart_ball.xml: a 6-UPS Stewart platform, each leg a universal joint (two hinges in one body)
at the base, an actuated prismatic joint, and a ball joint at the platform; the platform rides on leg 0's
ball joint and legs 1-5 are welded to it (each weld after a ball joint: a spherical joint at the platform)."""

import sys

import numpy as np
import pinocchio as pin

rb, rp, h = 0.5, 0.3, 0.6
ab = [np.deg2rad(a) for a in (-15, 15, 105, 135, 225, 255)]
ap = [np.deg2rad(a) for a in (-45, 45, 75, 165, 195, 285)]
B = [np.array([rb * np.cos(a), rb * np.sin(a), 0.0]) for a in ab]
P = [np.array([rp * np.cos(a), rp * np.sin(a), h]) for a in ap]


def frame(z):
    z = z / np.linalg.norm(z)
    x = np.cross([0, 1, 0], z)
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    return np.column_stack([x, y, z])


def quat(R):
    q = pin.Quaternion(R)
    return f"{q.w:.12g} {q.x:.12g} {q.y:.12g} {q.z:.12g}"


out = [
    '<mujoco model="stewart_ball">',
    '  <compiler angle="radian"/>',
    '  <option gravity="0 0 -9.81" timestep="0.00025"/>',
    '  <default><geom contype="0" conaffinity="0"/><joint damping="0.01"/></default>',
    "  <worldbody>",
    '    <geom name="base" type="cylinder" size="0.55 0.01" pos="0 0 -0.01" rgba=".5 .5 .5 1"/>',
]
eqs = []
for i in range(6):
    d = P[i] - B[i]
    L = np.linalg.norm(d)
    R = frame(d)
    out += [
        f'    <body name="leg{i}" pos="{B[i][0]:.12g} {B[i][1]:.12g} {B[i][2]:.12g}" quat="{quat(R)}">',
        f'      <joint name="ua_{i}" type="hinge" axis="1 0 0"/>',
        f'      <joint name="ub_{i}" type="hinge" axis="0 1 0"/>',
        f'      <inertial pos="0 0 {0.275 * L:.6g}" mass="0.5" diaginertia="{0.5 * (0.55 * L) ** 2 / 12:.6g} {0.5 * (0.55 * L) ** 2 / 12:.6g} 1e-4"/>',  # noqa: E501
        f'      <geom type="cylinder" fromto="0 0 0 0 0 {0.55 * L:.6g}" size="0.02" rgba=".2 .4 .8 1"/>',
        f'      <body name="rod{i}">',
        f'        <joint name="act_{i}" type="slide" axis="0 0 1"/>',
        f'        <inertial pos="0 0 {0.725 * L:.6g}" mass="0.3" diaginertia="{0.3 * (0.55 * L) ** 2 / 12:.6g} {0.3 * (0.55 * L) ** 2 / 12:.6g} 2e-5"/>',  # noqa: E501
        f'        <geom type="cylinder" fromto="0 0 {0.45 * L:.6g} 0 0 {L:.6g}" size="0.012" rgba=".8 .6 .2 1"/>',
        f'        <body name="tip{i}" pos="0 0 {L:.12g}">',
        f'          <joint name="sph_{i}" type="ball"/>',
        '          <inertial pos="0 0 0" mass="0.1" diaginertia="1e-3 1e-3 1e-3"/>',
        '          <geom type="sphere" size="0.02"/>',
    ]
    if i == 0:
        Rp = R.T
        pp = -R.T @ (P[0] - np.array([0, 0, h]))  # platform (world: centre (0,0,h), identity) in tip0's frame
        out += [
            f'          <body name="platform" pos="{pp[0]:.12g} {pp[1]:.12g} {pp[2]:.12g}" quat="{quat(Rp)}">',
            '            <inertial pos="0 0 0" mass="2.0" diaginertia="0.045 0.045 0.09"/>',
            '            <geom type="cylinder" size="0.32 0.015" rgba=".3 .7 .3 1"/>',
            '            <site name="ee" pos="0 0 0.05" size="0.01"/>',
            "          </body>",
        ]
    else:
        eqs.append(f'    <weld name="sph{i}" body1="tip{i}" body2="platform"/>')
    out += ["        </body>", "      </body>", "    </body>"]
out += ["  </worldbody>", "  <equality>"] + eqs + ["  </equality>", "  <actuator>"]
out += [f'    <motor name="m{i}" joint="act_{i}" ctrlrange="-500 500"/>' for i in range(6)]
out += ["  </actuator>", "</mujoco>"]
open(sys.argv[1], "w").write("\n".join(out) + "\n")

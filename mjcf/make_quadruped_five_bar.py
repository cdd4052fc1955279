"""Writes mjcf/quadruped_five_bar.xml: a direct-drive quadruped (Minitaur-like) whose four legs are planar five-bars.

Each leg, in its x-z plane: two coaxial hip motors (hinges about y at the hip), two upper links (0.1 m) spread
+-40 deg about the vertical, two passive knees, two lower links (0.2 m) meeting at the foot, where an
``<equality connect>`` closes the loop (closed at qpos0 by MuJoCo's definition: the point of the second lower link
at the anchor); a point foot (a sphere of 1 mm radius for MuJoCo's contact, its centre the site ``<leg>_foot``: a
larger ball rolls as the lower link turns and its centre travels radius x angle, 4.9 mm on the legged circle with
15 mm).
The torso rides on a free joint; a floor plane.  8 motors, 8 passive knees, 4 loops, 4 feet.

    python mjcf/make_quadruped_five_bar.py mjcf/quadruped_five_bar.xml
"""

import math
import sys

L1, L2, SPREAD = 0.1, 0.2, 40.0  # m, m, deg
HIPS = {"fl": (0.2, 0.12), "fr": (0.2, -0.12), "hl": (-0.2, 0.12), "hr": (-0.2, -0.12)}

s = math.sin(math.radians(SPREAD))
c = math.cos(math.radians(SPREAD))
drop = L1 * c + math.sqrt(L2**2 - (L1 * s) ** 2)  # the foot's depth below the hip (the legs' symmetric pose)
knee = math.degrees(math.asin(L1 * s / L2))  # the lower link's angle from the vertical
RFOOT = 0.001  # m: a small sphere, so that its rolling as the lower link turns moves its centre by < 1 mm
z0 = drop + RFOOT
# the feet's contacts as stiff as the time step allows (time constant 2 steps, as the loops' solref): with MuJoCo's
# default 0.02 s the soft friction let the stance feet creep 1.75 mm in 1.5 s of the legged circle, 0.7 mm with this
SOLREF = 2 * 0.00025


def link(mass, length):
    i = mass * length**2 / 12
    return f'<inertial pos="0 0 {-length / 2:g}" mass="{mass:g}" diaginertia="{i:.6g} {i:.6g} {mass * 1e-4:.6g}"/>'


out = [
    '<mujoco model="quadruped_five_bar">',
    "  <!-- written by mjcf/make_quadruped_five_bar.py -->",
    '  <compiler angle="degree"/>',
    '  <option gravity="0 0 -9.81" timestep="0.00025"/>',
    '  <default><joint damping="0.01"/><geom contype="0" conaffinity="0" rgba=".3 .5 .8 1"/></default>',
    "  <worldbody>",
    '    <geom name="floor" type="plane" size="3 3 0.1" contype="1" conaffinity="1" friction="1 0.005 0.0001"'
    f' solref="{SOLREF:g} 1" rgba=".8 .8 .8 1"/>',
    f'    <body name="torso" pos="0 0 {z0:.6g}">',
    '      <freejoint name="base"/>',
    '      <inertial pos="0 0 0" mass="3.0" diaginertia="0.02 0.06 0.07"/>',
    '      <geom type="box" size="0.25 0.15 0.04"/>',
    '      <site name="base_site" pos="0 0 0" size="0.01"/>',
]
eqs = []
for leg, (x, y) in HIPS.items():
    for side, sign in (("a", -1), ("b", 1)):  # a: forward (+x), b: backward
        a_up = sign * SPREAD
        a_low = -sign * (SPREAD + knee)  # relative: the lower link's world angle is -sign*knee... see below
        out += [
            f'      <body name="{leg}_upper_{side}" pos="{x:g} {y:g} 0" euler="0 {a_up:g} 0">',
            f'        <joint name="{leg}_hip_{side}" type="hinge" axis="0 1 0"/>',
            f"        {link(0.15, L1)}",
            f'        <geom type="capsule" fromto="0 0 0 0 0 {-L1:g}" size="0.01"/>',
            f'        <body name="{leg}_lower_{side}" pos="0 0 {-L1:g}" euler="0 {a_low:.9g} 0">',
            f'          <joint name="{leg}_knee_{side}" type="hinge" axis="0 1 0"/>',
            f"          {link(0.1, L2)}",
            f'          <geom type="capsule" fromto="0 0 0 0 0 {-L2:g}" size="0.008"/>',
        ]
        if side == "a":
            out += [
                f'          <site name="{leg}_foot" pos="0 0 {-L2:g}" size="0.005"/>',
                f'          <geom name="{leg}_foot" type="sphere" size="{RFOOT:g}" pos="0 0 {-L2:g}" contype="1"'
                f' conaffinity="1" solref="{SOLREF:g} 1" rgba=".2 .2 .2 1"/>',
            ]
        out += ["        </body>", "      </body>"]
    eqs.append(
        f'    <connect name="{leg}_loop" body1="{leg}_lower_a" body2="{leg}_lower_b" anchor="0 0 {-L2:g}"/>'
    )
out += ["    </body>", "  </worldbody>", "  <equality>"] + eqs + ["  </equality>", "  <actuator>"]
for leg in HIPS:
    for side in "ab":
        out.append(f'    <motor name="{leg}_m{side}" joint="{leg}_hip_{side}" ctrlrange="-20 20"/>')
out += ["  </actuator>", "</mujoco>"]
open(sys.argv[1], "w").write("\n".join(out) + "\n")

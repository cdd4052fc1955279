"""A MuJoCo plant built from the same URDF(s) as the controller's robot: no hand-written MJCF.

    robot = Robot.from_urdf("panda.urdf", locked_joints={"panda_finger_joint1": 0.0, ...})
    plant = plant_from_urdf(robot, sim_dt=0.001)          # a MujocoPlant, joints mapped by name

Each URDF part of the robot (``Robot.sources``: file, prefix, base pose, locked joints) is parsed by
MuJoCo's own URDF importer (``mujoco.MjSpec.from_file``: links → bodies with the URDF inertials,
joints with the URDF position limits and ``<dynamics damping>``), then

* mesh files are resolved: ``package://PKG/sub/path`` is looked up in the URDF's folder and its
  parents (the folder named PKG first), a plain relative path from the URDF's folder, or by file name
  in ``mesh_dir`` when given;
* every locked joint is removed and its child body fixed at the locked value:
  a hinge of unit axis a through point p (body frame) at angle θ = value − ref moves the body by
  T = [R(a, θ), p − R(a, θ) p], so  pos ← pos + R_body (p − R(a, θ) p),  quat ← quat ⊗ q(a, θ);
  a slide joint moves it by  pos ← pos + R_body a (value − ref);
* the part is attached to the world at its base pose with its name prefix (``MjSpec.attach``), so
  MuJoCo's joint names are the robot's;
* every joint gets a motor (gear 1, ``ctrlrange`` = ± the URDF effort limit, the same limit the
  controller's model has), except those named in ``passive_joints``;
* a URDF ``<dynamics friction="f">`` becomes MuJoCo's dry friction ``frictionloss`` f (N·m or N): the
  plant resists motion with up to f, a force no controller of this stack models (they model the
  viscous ``damping``).  It is the "real" robot's, so it is kept by default; ``friction=False`` removes
  it for an ideal plant.  (Measured: the xArm7 of example-robot-data, f = 1 N·m on every joint, tracks a
  5 cm circle with the UK law to ~3 cm with it and ~1e-5 m without.)

Contacts are on by default (the URDF's collision geoms), with these pairs excluded (``add_exclude``):

* links that never move relative to each other (joined by fixed or locked joints), and their neighbours
  across one moving joint (parent and child links), as MuJoCo would have it after fusing fixed links;
* links at most two moving joints apart whose collision geoms touch in *every* configuration: the plant
  is compiled once, 33 configurations are sampled (q = 0 and 32 uniform draws within the joint limits,
  ±π for unlimited hinges, fixed seed) and a pair in contact in all of them is excluded (as MoveIt's
  setup assistant calls it, "always in collision").  Example: Talos' wrist links 5 and 7 turn about two
  hinges through one point, and their meshes overlap by 45 mm in every pose; without the exclusion the
  first step kicks the wrist at ~1500 rad/s² (tests/test_urdf_plant_contacts.py);
* the ``<disable_collisions link1= link2=>`` pairs of an SRDF, when ``srdf=`` is given (MoveIt's file;
  example-robot-data ships one for most of its robots).

``contacts=False`` disables the contact solver (``mjDSBL_CONTACT``).  When the initial state still
penetrates (a contact deeper than ``PENETRATION_WARN`` = 0.1 mm), ``plant_from_urdf`` warns with a
``UserWarning`` naming every geom pair and its depth: the contact solver would push the geoms apart in
the first steps, with accelerations no controller asked for.

**Integrator and joint damping.**  ``MujocoPlant`` keeps MuJoCo's default integrator, semi-implicit
Euler, unless ``integrator=`` says otherwise.  Euler treats the joint damping D (URDF ``<dynamics
damping>``) implicitly: the velocity update of a step of length h solves (M + h D) a = τ − c − D v, not
M a = τ − c − D v.  A controller that commands a* and sends τ = M a* + c + D v (its model including
the damping) therefore gets a = (M + h D)⁻¹ M a*: for one joint a = a* / (1 + h D / M_ii), *less* than
commanded, short by the fraction h D / (M_ii + h D) (a wrist with M_ii = 0.02 kg·m², D = 0.5 N·m·s/rad at h = 5 ms: 11 %
short; at h = 1 ms: 2.4 %).  The achieved motion lags, a braking curve computed from the commanded
deceleration overruns, and the effect vanishes as h → 0.  ``integrator="rk4"`` integrates the
continuous dynamics, in which the torque is held over the step while −D v grows with v (the same wrist
from v = 1 rad/s, a* = 20 rad/s²: 18.8 rad/s² over a 5 ms step, against 17.8 with Euler);
``"implicitfast"`` and ``"implicit"`` are implicit in the damping like Euler.

A URDF <mimic> joint (MuJoCo imports it as a joint equality) is refused unless it is locked: the
controller's Pinocchio model treats it as an independent joint, so the two models would differ.
"""

from __future__ import annotations

import warnings
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import mujoco
import numpy as np
import pinocchio as pin
from numpy.typing import ArrayLike

from cmstack.models.errors import ConfigError, FrameNotFoundError, ModelFileError
from cmstack.models.robot import Robot, URDFPart, _check_xml, resolve_asset
from cmstack.sim.plant import MujocoPlant


def _resolve_mesh(file: str, urdf: Path, mesh_dir: Path | None) -> Path:
    """Absolute path of a URDF mesh reference (see the module docstring for the search order)."""
    tried: list[Path] = []
    name = file.replace("\\", "/")
    if mesh_dir is not None:
        tried.append(mesh_dir / Path(name).name)
    if name.startswith("file://"):
        name = name[len("file://") :]
    if name.startswith("package://"):
        pkg, _, sub = name[len("package://") :].partition("/")
        ancestors = [urdf.parent, *urdf.parent.parents]
        tried += [a / sub for a in ancestors if a.name == pkg]
        tried += [a / pkg / sub for a in ancestors] + [a / sub for a in ancestors]
    else:
        p = Path(name)
        tried.append(p if p.is_absolute() else urdf.parent / p)
    for c in tried:
        if c.is_file():
            return c.resolve()
    raise ModelFileError(
        f"URDF {urdf}: mesh file '{file}' not found (looked at e.g. {[str(c) for c in tried[:3]]}); "
        "give mesh_dir=FOLDER holding the mesh files"
    )


def _lock_joint(spec: mujoco.MjSpec, name: str, value: float, urdf: Path) -> None:
    """Remove joint ``name`` and fix its child body at ``value`` (formulas in the module docstring)."""
    j = spec.joint(name)
    if j is None:
        raise FrameNotFoundError(f"locked joint '{name}' is not a joint of MuJoCo's import of {urdf}")
    body = j.parent
    a = np.array(j.axis, dtype=float)
    a /= np.linalg.norm(a)
    x = float(value) - float(j.ref)
    Rb9 = np.zeros(9)
    mujoco.mju_quat2Mat(Rb9, np.asarray(body.quat, dtype=float) / np.linalg.norm(body.quat))
    Rb = Rb9.reshape(3, 3)
    if j.type == mujoco.mjtJoint.mjJNT_HINGE:
        qa = np.zeros(4)
        mujoco.mju_axisAngle2Quat(qa, a, x)
        Ra = np.zeros(9)
        mujoco.mju_quat2Mat(Ra, qa)
        p = np.array(j.pos, dtype=float)
        body.pos = np.asarray(body.pos, dtype=float) + Rb @ (p - Ra.reshape(3, 3) @ p)
        qn = np.zeros(4)
        mujoco.mju_mulQuat(qn, np.asarray(body.quat, dtype=float), qa)
        body.quat = qn
    elif j.type == mujoco.mjtJoint.mjJNT_SLIDE:
        body.pos = np.asarray(body.pos, dtype=float) + Rb @ (a * x)
    else:
        raise ConfigError(
            f"locked joint '{name}' of {urdf.name} is not a hinge or slide joint in MuJoCo's import"
        )
    spec.delete(j)


def _part_spec(part: URDFPart, mesh_dir: Path | None, meshes: bool = True) -> mujoco.MjSpec:
    """MuJoCo's import of one URDF part: meshes resolved (or dropped, ``meshes=False``), locked joints
    removed, mimics checked."""
    _check_xml(part.path, "URDF")
    try:
        spec = mujoco.MjSpec.from_file(str(part.path))
    except Exception as exc:  # mujoco raises ValueError with the parser's message
        raise ModelFileError(f"URDF {part.path} could not be parsed by MuJoCo: {exc}") from None
    spec.compiler.fusestatic = False  # keep every link as a body (the viewer, wrenches by link name)
    if not meshes:  # the bodies keep their URDF <inertial>: the dynamics do not change
        for g in [g for g in spec.geoms if g.type == mujoco.mjtGeom.mjGEOM_MESH]:
            spec.delete(g)
        for m in list(spec.meshes):
            spec.delete(m)
    for m in spec.meshes:
        m.file = str(_resolve_mesh(m.file, part.path, mesh_dir))
    for name, value in part.locked.items():
        _lock_joint(spec, name, value, part.path)
    if getattr(
        part, "floating_base", False
    ):  # the root link on a free joint, as the robot's (Robot.from_urdf)
        roots = list(spec.worldbody.bodies)
        if len(roots) != 1:
            raise ModelFileError(
                f"URDF {part.path}: floating_base needs one root link; MuJoCo's import has {len(roots)} "
                f"bodies at the root ({[b.name for b in roots]})"
            )
        roots[0].add_freejoint(name="root_joint")
    for e in list(spec.equalities):
        if e.type != mujoco.mjtEq.mjEQ_JOINT:
            continue
        j1, j2 = e.name1, e.name2
        if j1 in part.locked or j2 in part.locked:
            spec.delete(e)
        else:
            raise ModelFileError(
                f"URDF {part.path}: joint '{j1}' mimics '{j2}'; the controller's model treats "
                f"them as independent joints: lock '{j1}' (locked_joints) or remove the <mimic>"
            )
    return spec


#: a contact deeper than this (m) in the initial state makes ``plant_from_urdf`` warn
PENETRATION_WARN = 1e-4
#: configurations sampled to find the pairs that touch in every configuration (q = 0 and this many draws)
ALWAYS_TOUCHING_SAMPLES = 32


def build_spec(
    robot: Robot,
    *,
    contacts: bool = True,
    mesh_dir: str | Path | None = None,
    passive_joints: tuple[str, ...] = (),
    friction: bool = True,
    meshes: bool = True,
    srdf: str | Path | Sequence[str | Path | None] | None = None,
    sim_dt: float | None = None,
) -> mujoco.MjSpec:
    """The MuJoCo model specification of ``robot`` (every URDF part attached at its base pose with
    its prefix, motors added); compile it with ``spec.compile()`` or use ``plant_from_urdf``.

    Args:
        robot: a Robot built from URDF (``Robot(path)``, ``Robot.from_urdf``, ``Robot.compose``).
        contacts: False disables contacts (MuJoCo's ``mjDSBL_CONTACT``).
        mesh_dir: folder with the mesh files, searched first by file name.
        passive_joints: joints that get no motor (besides ``robot.passive_joints``).
        friction: keep the URDF's dry joint friction (MuJoCo ``frictionloss``); False sets it to 0.
        meshes: False drops every mesh geom (e.g. COLLADA .dae files, which MuJoCo cannot read); the
            bodies keep their URDF inertials, so the dynamics are unchanged, but mesh contacts and the
            viewer's shapes are gone.
        srdf: an SRDF whose ``<disable_collisions link1= link2=>`` pairs are excluded from contact: one
            file for every URDF part (its link names get each part's prefix), or a list with one file
            (or None) per part.

    Contact exclusions: see the module docstring (rigidly joined and neighbouring links, links that
    touch in every configuration, the SRDF's pairs).
    """
    sources = getattr(robot, "sources", None)
    if not sources:
        raise ConfigError(
            "plant_from_urdf: the robot has no URDF sources (build it with Robot.from_urdf or Robot.compose)"
        )
    md = None if mesh_dir is None else resolve_asset(mesh_dir)
    if md is not None and not md.is_dir():
        raise ModelFileError(f"mesh_dir {md} is not a folder")
    for n in passive_joints:
        robot.joint_index(n)  # names the joint if it does not exist
    srdfs = _srdf_per_part(srdf, sources)
    spec = None
    for k, part in enumerate(sources):
        child = _part_spec(part, md, meshes)
        if k == 0 and not part.prefix:
            # the first, unprefixed part is the root specification (MuJoCo cannot attach with an empty
            # prefix and save the result): move its top-level bodies to the base pose T = (R, t):
            # pos ← R pos + t, quat ← q(R) ⊗ quat
            spec = child
            qR, R, t = _mat2quat(part.base.rotation), part.base.rotation, part.base.translation
            for b in spec.worldbody.bodies:
                b.pos = R @ np.asarray(b.pos, dtype=float) + t
                qn = np.zeros(4)
                mujoco.mju_mulQuat(qn, qR, np.asarray(b.quat, dtype=float))
                b.quat = qn
            continue
        if spec is None:
            spec = mujoco.MjSpec()
            spec.compiler.fusestatic = False
        frame = spec.worldbody.add_frame(pos=part.base.translation, quat=_mat2quat(part.base.rotation))
        spec.attach(child, prefix=part.prefix, frame=frame)
    assert spec is not None  # a Robot has one URDF part at least
    excluded = _exclude_rigid_neighbours(spec)
    for part, path in zip(sources, srdfs):
        if path is not None:
            excluded |= _exclude_srdf(spec, path, part, excluded)
    spec.modelname = robot.label
    spec.option.gravity = np.array(robot.model.gravity.linear, dtype=float)
    if not contacts:
        spec.option.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
    if not friction:
        for j in spec.joints:
            j.frictionloss = 0.0
    passive = set(passive_joints) | set(getattr(robot, "passive_joints", ()))
    for name in robot.joint_names:
        if name in passive:
            continue
        e = float(robot.effort_limit[robot.joint_index(name)])
        limited = bool(np.isfinite(e) and e > 0)
        spec.add_actuator(
            name=f"{name}_motor",
            trntype=mujoco.mjtTrn.mjTRN_JOINT,
            target=name,
            gear=[1, 0, 0, 0, 0, 0],
            ctrllimited=int(limited),
            ctrlrange=[-e, e] if limited else [0.0, 0.0],
        )
    if contacts:
        _exclude_always_touching(spec, excluded)
    if sim_dt is not None:
        spec.option.timestep = float(sim_dt)
    add_loops(spec, robot)
    return spec


#: the revolute closure's second connect sits this far (m) along the hinge axis from the first
HINGE_ARM = 0.05


def loop_solref(timestep: float) -> tuple[list[float], list[float]]:
    """(solref, solimp) of a loop equality for a plant stepping ``timestep`` (s): as stiff as the step allows.

    MuJoCo's equality is a soft constraint: its reference acceleration a_ref = −b ṙ − k r makes the residual
    r behave like a mass-spring-damper of time constant τ and damping ratio ζ (solref = (τ, ζ)), and the
    impedance d (solimp) is the fraction of the force that would cancel the violation in one step (d → 1:
    rigid; the rest is the regularizer (1 − d)/d of the constraint's inverse inertia).  An explicit step of
    h resolves that spring only if τ ≥ 2h (MuJoCo clamps a smaller τ to 2h: ``refsafe``), so the stiffest
    stable loop is τ = 2h with ζ = 1 (critically damped, no ringing) and d = 0.9999 flat over the residual
    (solimp = (0.9999, 0.9999, 0.001, 0.5, 2))."""
    return [2.0 * float(timestep), 1.0], [0.9999, 0.9999, 0.001, 0.5, 2.0]


def _body_of_frame(spec: mujoco.MjSpec, robot: Robot, fid: int) -> tuple[Any, pin.SE3]:
    """(MuJoCo body, placement of the Pinocchio frame in that body): the body is the child of the frame's
    parent joint (a URDF link's frame is its joint's frame), or the world."""
    f = robot.model.frames[fid]
    if f.parentJoint == 0:
        return spec.worldbody, f.placement
    j = spec.joint(robot.model.names[f.parentJoint])
    if j is None:
        raise ModelFileError(
            f"plant of {robot.label}: joint '{robot.model.names[f.parentJoint]}' (frame "
            f"'{f.name}') is not in the MuJoCo model"
        )
    return j.parent, f.placement


def add_loops(spec: mujoco.MjSpec, robot: Robot, timestep: float | None = None) -> list:
    """Close ``robot.loops`` in the MuJoCo specification: a site at each closure frame and a site-based
    equality (``point`` → connect of the two sites' origins; ``weld`` → weld of the two sites' frames;
    ``revolute`` → two connects, at the frames and ``HINGE_ARM`` along the hinge axis (A's z): a hinge, 6 rows
    of rank 5).  solref/solimp from ``loop_solref`` at ``timestep`` (default: the spec's).  Returns the
    equalities added."""
    ref, imp = loop_solref(spec.option.timestep if timestep is None else timestep)
    out = []
    for c in getattr(robot, "loops", ()):
        if c.kind == "plane":
            raise ModelFileError(
                f"plant of {robot.label}: loop '{c.name}' is a plane closure, which MuJoCo has no "
                "equality for; give the plant the slider as a body on a slide joint closed by a "
                "connect (an MJCF, e.g. mjcf/slider_crank.xml)"
            )
        pairs = [(pin.SE3.Identity(), "")]
        if c.kind == "revolute":
            pairs.append((pin.SE3(np.eye(3), np.array([0.0, 0.0, HINGE_ARM])), "_axis"))
        for off, tag in pairs:
            names = []
            for fid, side in ((c.fa, "a"), (c.fb, "b")):
                body, X = _body_of_frame(spec, robot, fid)
                X = X * off
                name = f"{c.name}_{side}{tag}"
                body.add_site(
                    name=name, pos=X.translation, quat=_mat2quat(X.rotation), size=[0.004, 0, 0], group=4
                )
                names.append(name)
            eq = spec.add_equality(
                name=f"{c.name}{tag}",
                objtype=mujoco.mjtObj.mjOBJ_SITE,
                name1=names[0],
                name2=names[1],
                solref=ref,
                solimp=imp,
            )
            eq.type = mujoco.mjtEq.mjEQ_WELD if c.kind == "weld" else mujoco.mjtEq.mjEQ_CONNECT
            out.append(eq)
    return out


def _srdf_per_part(
    srdf: str | Path | Sequence[str | Path | None] | None, sources: Sequence[Any]
) -> list[Path | None]:
    """One SRDF path (or None) per URDF part, from ``build_spec``'s ``srdf`` argument."""
    if srdf is None:
        return [None] * len(sources)
    if isinstance(srdf, (str, Path)):
        return [resolve_asset(srdf)] * len(sources)
    items = list(srdf)
    if len(items) != len(sources):
        raise ConfigError(
            f"srdf: give one SRDF for every part or a list of {len(sources)} (one per URDF part, "
            f"None for none), got a list of {len(items)}"
        )
    return [None if x is None else resolve_asset(x) for x in items]


def _exclude_srdf(spec: mujoco.MjSpec, path: Path, part: URDFPart, done: set) -> set[tuple[str, str]]:
    """Exclude the ``<disable_collisions link1= link2=>`` pairs of SRDF ``path`` between the bodies of
    ``part`` (link names prefixed with the part's prefix); pairs already in ``done`` are skipped.  Pairs
    naming a link the plant lacks are ignored (an SRDF often covers links a URDF variant drops), but an
    SRDF none of whose pairs names two links of the part is refused (wrong file).  Returns the pairs added."""
    _check_xml(path, "SRDF")
    pairs = [(e.get("link1"), e.get("link2")) for e in ET.parse(path).getroot().iter("disable_collisions")]
    bodies = {b.name for b in spec.bodies}
    added: set[tuple[str, str]] = set()
    known = 0
    for l1, l2 in pairs:
        if not l1 or not l2:
            raise ModelFileError(f"SRDF {path}: a <disable_collisions> lacks link1 or link2")
        a, b = part.prefix + l1, part.prefix + l2
        if a not in bodies or b not in bodies:
            continue
        known += 1
        key = (min(a, b), max(a, b))
        if a != b and key not in done and key not in added:
            spec.add_exclude(bodyname1=key[0], bodyname2=key[1])
            added.add(key)
    if pairs and not known:
        raise ModelFileError(
            f"SRDF {path}: none of its {len(pairs)} <disable_collisions> pairs names two links of "
            f"URDF {part.path.name} (e.g. '{pairs[0][0]}', '{pairs[0][1]}'); is it the SRDF of "
            "another robot?"
        )
    return added


def _joints_between(m: mujoco.MjModel, b1: int, b2: int) -> int:
    """Number of moving joints on the kinematic tree's path between bodies b1 and b2."""

    def chain(b: int) -> list[int]:
        out = [b]
        while b != 0:
            b = int(m.body_parentid[b])
            out.append(b)
        return out

    c1, c2 = chain(b1), chain(b2)
    common = set(c1) & set(c2)
    return sum(int(m.body_jntnum[b] > 0) for b in c1 + c2 if b not in common)


def _exclude_always_touching(spec: mujoco.MjSpec, done: set) -> set[tuple[str, str]]:
    """Exclude the body pairs at most two moving joints apart whose geoms are in contact (distance < 0)
    in every one of 1 + ``ALWAYS_TOUCHING_SAMPLES`` configurations (module docstring).  Returns them.
    A specification MuJoCo cannot compile is left as it is: ``plant_from_urdf`` reports why."""
    try:
        m = spec.compile()
    except Exception:
        return set()
    if m.njnt == 0 or m.ngeom < 2:
        return set()
    d = mujoco.MjData(m)
    rng = np.random.default_rng(0)
    lo = np.where(m.jnt_limited, m.jnt_range[:, 0], -np.pi)
    hi = np.where(m.jnt_limited, m.jnt_range[:, 1], np.pi)
    hinge_or_slide = np.isin(m.jnt_type, (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE)))
    always = None
    for k in range(1 + ALWAYS_TOUCHING_SAMPLES):
        d.qpos[:] = m.qpos0
        if k:
            x = rng.uniform(lo, hi)
            d.qpos[m.jnt_qposadr[hinge_or_slide]] = x[hinge_or_slide]
        mujoco.mj_kinematics(m, d)
        mujoco.mj_collision(m, d)
        touching = {
            tuple(sorted((int(m.geom_bodyid[c.geom[0]]), int(m.geom_bodyid[c.geom[1]]))))
            for c in d.contact[: d.ncon]
            if c.dist < 0
        }
        always = touching if always is None else always & touching
        if not always:
            return set()
    added = set()
    for b1, b2 in sorted(always or ()):
        if b1 == b2 or _joints_between(m, b1, b2) > 2:
            continue
        key = tuple(sorted((m.body(b1).name, m.body(b2).name)))
        if key not in done:
            spec.add_exclude(bodyname1=key[0], bodyname2=key[1])
            added.add(key)
    return added


def _geom_label(m: mujoco.MjModel, g: int) -> str:
    """A geom's name, or 'BODY[k]' (its k-th geom) when the URDF import left it unnamed."""
    name = m.geom(g).name
    if name:
        return name
    b = int(m.geom_bodyid[g])
    return f"{m.body(b).name}[{g - int(m.body_geomadr[b])}]"


def penetrations(plant: MujocoPlant, depth: float = PENETRATION_WARN) -> list[tuple[str, str, float]]:
    """The geom pairs in contact deeper than ``depth`` (m) in the plant's current state, as
    (geom 1, geom 2, depth in m), deepest first, one entry per pair (its deepest contact point); geoms
    without a name are called 'BODY[k]'.  Runs MuJoCo's collision detection on the current qpos."""
    m, d = plant.model, plant.data
    if m.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_CONTACT):
        return []
    mujoco.mj_kinematics(m, d)
    mujoco.mj_collision(m, d)
    deepest: dict[tuple[int, int], float] = {}
    for c in d.contact[: d.ncon]:
        if -c.dist > depth:
            g0, g1 = sorted((int(c.geom[0]), int(c.geom[1])))
            key = (g0, g1)
            deepest[key] = max(deepest.get(key, 0.0), -float(c.dist))
    return sorted(
        ((_geom_label(m, a), _geom_label(m, b), x) for (a, b), x in deepest.items()), key=lambda t: -t[2]
    )


def _exclude_rigid_neighbours(spec: mujoco.MjSpec) -> set[tuple[str, str]]:
    """Contact exclusions that keep URDF links apart only where MuJoCo would after fusing fixed joints.

    MuJoCo skips parent–child contacts, but a URDF chain link7 –fixed→ link8 –fixed→ hand keeps the
    hand and link7 as non-adjacent bodies whose meshes touch.  Group every body with its ancestors
    up to the nearest body that has a joint (a rigid group: they never move relative to each other;
    bodies welded to the world join the world's group); exclude contacts within a group and between
    a group and the group of its moving root's parent.  Returns the pairs (sorted names)."""
    group: dict[str, str] = {}
    adjacent: set[tuple[str, str]] = set()

    def walk(body: Any, g: str) -> None:
        for child in body.bodies:
            moving = len(child.joints) > 0
            cg = child.name if moving else g
            group[child.name] = cg
            if moving:
                adjacent.add((cg, g))
            walk(child, cg)

    world = spec.worldbody
    group[world.name] = world.name
    walk(world, world.name)
    members: dict[str, list[str]] = {}
    for b, g in group.items():
        members.setdefault(g, []).append(b)
    pairs = set()
    for ms in members.values():
        pairs |= {(a, b) for i, a in enumerate(ms) for b in ms[i + 1 :]}
    for g1, g2 in adjacent:
        pairs |= {(a, b) for a in members[g1] for b in members[g2]}
    done = {(min(a, b), max(a, b)) for a, b in pairs}
    for a, b in sorted(done):
        spec.add_exclude(bodyname1=a, bodyname2=b)
    return done


def _mat2quat(R: np.ndarray) -> np.ndarray:
    q = np.zeros(4)
    mujoco.mju_mat2Quat(q, np.ascontiguousarray(R, dtype=float).ravel())
    return q


def plant_from_urdf(
    robot: Robot,
    *,
    q0: ArrayLike | None = None,
    sim_dt: float | None = None,
    contacts: bool = True,
    mesh_dir: str | Path | None = None,
    passive_joints: tuple[str, ...] = (),
    xml_path: str | Path | None = None,
    integrator: str | None = None,
    noise_q: float = 0.0,
    noise_v: float = 0.0,
    seed: int = 0,
    friction: bool = True,
    meshes: bool = True,
    srdf: str | Path | Sequence[str | Path | None] | None = None,
) -> MujocoPlant:
    """A ``MujocoPlant`` of ``robot`` built from its URDF part(s); torques and states map by joint name.

    Args:
        robot: a Robot built from URDF (``Robot(path)``, ``Robot.from_urdf``, ``Robot.compose``).
        q0: initial configuration (model order, rad or m), at rest; None leaves MuJoCo's zero.
        sim_dt: MuJoCo time step (s); None keeps MuJoCo's default 0.002 s.
        contacts: False disables contacts.
        mesh_dir: folder with the mesh files, searched first by file name.
        passive_joints: joints without a motor (the plant then refuses a torque on them), besides the
            robot's own ``robot.passive_joints`` (a loops sidecar's).  The robot's loops (``robot.loops``)
            are closed by MuJoCo equalities (``add_loops``; solref/solimp from ``sim_dt``: ``loop_solref``).
        xml_path: write the plant's MJCF there (``save_xml``): a run directory's ``plant.xml``, whose
            path ``plant.path`` then is, so that a log's ``mjcf_path = str(plant.path)`` replays.
        integrator: as ``MujocoPlant``.
        noise_q: as ``MujocoPlant`` (rad or m).
        noise_v: as ``MujocoPlant`` (rad/s or m/s).
        seed: as ``MujocoPlant``.
        friction: keep the URDF's dry joint friction (module docstring; no controller models it);
            False gives an ideal plant.
        meshes: False drops the mesh geoms (``build_spec``), e.g. for COLLADA meshes MuJoCo cannot read.
        srdf: an SRDF (MoveIt) whose ``<disable_collisions>`` pairs do not collide: one file for every
            URDF part, or a list with one (or None) per part (``build_spec``).

    Contacts: rigidly joined links, neighbours across one joint, links that touch in every
    configuration and the SRDF's pairs are excluded (module docstring).  If the initial state (``q0``,
    or MuJoCo's zero) still penetrates deeper than ``PENETRATION_WARN`` (0.1 mm), a ``UserWarning``
    names every geom pair and its depth (``penetrations``).

    Integrator: MuJoCo's semi-implicit Euler unless ``integrator=`` says otherwise.  It treats the joint
    damping D implicitly, so a commanded acceleration a* (τ = M a* + c + D v) is achieved as
    a = (M + h D)⁻¹ M a*, short by about h D / M_ii on a light joint (h the time step; module docstring).

    The returned plant keeps the specification as ``plant.spec``; ``save_xml(plant, path)`` writes the
    equivalent MJCF (e.g. into a run directory, for replay)."""
    if sim_dt is not None and not sim_dt > 0:
        raise ConfigError(f"sim_dt must be > 0, got {sim_dt}")
    spec = build_spec(
        robot,
        contacts=contacts,
        mesh_dir=mesh_dir,
        passive_joints=passive_joints,
        friction=friction,
        meshes=meshes,
        srdf=srdf,
        sim_dt=sim_dt,
    )
    try:
        mj_model = spec.compile()
    except Exception as exc:
        msg = " ".join(str(exc).split())
        hint = (
            (
                "; MuJoCo reads STL, OBJ and MSH meshes: convert them, or pass meshes=False (the URDF inertials "
                "keep the dynamics)"
            )
            if "no decoder found for mesh" in msg
            else ""
        )
        raise ModelFileError(
            f"MuJoCo could not compile the plant built from {robot.label}: {msg}{hint}"
        ) from None
    plant = MujocoPlant.from_model(
        mj_model,
        robot.joint_names,
        name=robot.label,
        sim_dt=sim_dt,
        plant_only=(),
        noise_q=noise_q,
        noise_v=noise_v,
        seed=seed,
        integrator=integrator,
    )
    plant.spec = spec
    if xml_path is not None:
        save_xml(plant, xml_path)
    if q0 is not None:
        plant.reset(np.asarray(q0, dtype=float))
    deep = penetrations(plant) if contacts else []
    if deep:
        listed = "; ".join(f"'{a}' and '{b}' by {x * 1e3:.3g} mm" for a, b, x in deep[:8])
        more = f" and {len(deep) - 8} more pairs" if len(deep) > 8 else ""
        warnings.warn(
            f"plant_from_urdf({robot.label}): the initial state penetrates: {listed}{more}; the contact "
            "solver will push them apart in the first steps: start elsewhere (q0), exclude the pairs "
            "(srdf= with <disable_collisions>), or pass contacts=False",
            UserWarning,
            stacklevel=2,
        )
    return plant


def save_xml(plant: MujocoPlant, path: str | Path) -> Path:
    """Write the MJCF of a plant built by ``plant_from_urdf`` (mesh paths absolute) to ``path`` and
    point ``plant.path`` at it, so that a run log's ``mjcf_path`` replays it (``cmstack view``)."""
    spec = getattr(plant, "spec", None)
    if spec is None:
        raise ConfigError(f"save_xml: plant {plant.path.name} was not built by plant_from_urdf (no spec)")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(spec.to_xml())
    plant.path = path.resolve()
    return plant.path

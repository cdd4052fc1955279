"""MJCF → ``Robot`` with its loops and passive joints, through Pinocchio 4.1's MJCF parser.

What Pinocchio 4.1's parser needed (measured on this stack's mechanisms):

* **Only the first top-level body.**  ``pin.buildModelFromMJCF`` builds the tree under the first
  ``<body>`` of ``<worldbody>`` and silently drops the others (a five-bar's second branch vanished: nq 3
  of 5).  Workaround: a copy of the file in which every top-level ``<body>``/``<frame>`` is moved into one
  joint-less body ``cmstack_world`` at the origin; Pinocchio fixes it to the universe, and the joint order
  is the file's (depth first), MuJoCo's too.
* **Its constraint variant fails on what it does not see.**  ``buildModelAndLegacyConstraintsFromMJCF``
  raises "Model does not have any body named dist_r" for an equality on a dropped branch (and the
  constraint models are LOCAL contact models with Pinocchio's own error conventions).  Workaround: the
  ``<equality>`` elements are read here from the XML, MuJoCo's semantics applied, and turned into
  ``LoopClosure`` objects (the constraint parse is used by the tests only, as an independent check).
* The parser reads joint ``damping``, ``range`` and the ``<default>`` classes, bodies' ``<inertial>``; it
  does not read the actuators, so the passive joints come from ``<actuator>`` here, and the torque limits
  (max|ctrlrange|·|gear| of a ctrllimited motor), gravity and qpos0 from MuJoCo's compiled model of the file
  (``_mujoco_reading``: ``<default>`` classes resolved as MuJoCo does; mjcf/yumi.xml's motors are limited by a
  default class, which a reading of the elements' own attributes missed).
* **It misplaces bodies given by ``axisangle`` (0.85 rad off) and ignores the compiler's ``eulerseq`` (0.29 rad
  off with "ZYX"), silently; it drops a ``<frame>``'s bodies.**  Workaround: in the copy it reads, every body's
  pos/quat, every named site's and every body's ``<inertial>`` are MuJoCo's compiled values
  (``_mujoco_poses``; ``<frame>`` unwrapped), and the loaded model is checked against ``mj_kinematics`` at a
  random configuration (``_same_kinematics``: every named body to 1e-9, else refused naming it).

MuJoCo's equality semantics applied (``<equality>``; an inactive one skipped: ``active="false"``, or MuJoCo's
compiled ``eq_active0`` when a ``<default>`` class sets ``active``), as MuJoCo 3.x/4.x's engine
defines the residual (``engine_core_constraint.c: mj_instantiateEquality``; the qpos0 data by its compiler); every
form is probed against MuJoCo's own ``efc_pos`` (tests/test_mjcf_equality_probe.py):

* ``connect body1 [body2] anchor`` (the body form needs ``anchor``): MuJoCo's residual is
  p1 + R1·anchor − (p2 + R2·a2), a2 = the point of body2 at the anchor at qpos0 → a ``point`` closure with
  offset = anchor, offset_b = a2 (closed at qpos0 by definition).
* ``connect site1 site2``: the two sites' origins → a ``point`` closure (closed only if the sites meet).
* ``weld body1 [body2] [relpose] [anchor] [torquescale]``: MuJoCo's residual is
  [p1 + R1·r − (p2 + R2·anchor);  torquescale·Im(q2⁻¹ · q1 · q_rel)], with relpose = "r q_rel" (x y z qw qx qy qz,
  q_rel normalised).  So relpose's position r is the point of *body1* that meets body2's anchor (not
  body1·relpose·anchor) and q_rel is body2's attitude relative to body1 → a ``weld`` closure with
  offset = (q_rel, r), offset_b = (I, anchor).  Without relpose (or with a zero quaternion) MuJoCo takes both at
  qpos0: r = T1⁻¹·T2·anchor, q_rel = q1⁻¹q2.  torquescale = 0 zeroes the rotation rows: a ``point`` closure.
* ``weld site1 site2``: the sites' frames coincide (relpose and anchor are ignored by MuJoCo) → a ``weld``
  closure (``point`` with torquescale = 0).
* Which form: connect reads the body form when body1 and anchor are given, weld when body1 is; else the site
  form, which needs site1 and site2.  body2 absent: the world.
* ``joint joint1=b joint2=a polycoef=c0 … c4``: q_b − q_b0 = Σ c_k (q_a − q_a0)^k → a ``JointCoupling`` (one row;
  q_a0 = q_b0 = 0: the joints' qpos0, ``ref`` being 0 here); without joint2, q_b = q_b0 + c0.
* ``tendon``, ``flex`` equalities: refused (no rigid-body loop).

Joints: hinge and slide joints, ``ball`` joints (q a quaternion x, y, z, w: Pinocchio's order; MuJoCo's is w, x,
y, z) and a ``<freejoint>``/``type="free"`` in a body of the world (a floating base; q = [p; quaternion], its qpos0
the body's pose in the file); the map to MuJoCo's qpos, qvel: ``models/mj_coords.py``.  A body with several
joints (a universal joint as two hinges) is split into a chain of bodies, one joint each (``_split_bodies``):
Pinocchio's parser would make one ``Composite_…`` joint of them.

``<include file=...>`` is inlined before anything is read (``read_mjcf_tree``, MuJoCo's lookup: the main file's
folder, then the including file's), so every part of this reading sees what MuJoCo compiles.

The initial pose is the first ``<key qpos>`` if any, else qpos0 (zero: a joint ``ref`` other than 0 is
refused); it is assembled (``Robot.assemble``); a loop that cannot close from it → ``ModelFileError`` naming
the file and the loop.
"""

from __future__ import annotations

import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import numpy as np
import pinocchio as pin
from numpy.typing import ArrayLike

from cmstack.models._model_files import _captured_fd2, _check_xml, by_mujoco
from cmstack.models.errors import ConfigError, FrameNotFoundError, ModelFileError

if TYPE_CHECKING:  # (models/robot.py imports this module: no import cycle at run time)
    from cmstack.models.loops import LoopClosure
    from cmstack.models.robot import Robot

WRAPPER = "cmstack_world"


@overload
def _floats(text: str, n: int, where: str) -> np.ndarray: ...
@overload
def _floats(text: None, n: int, where: str) -> None: ...
@overload
def _floats(text: str | None, n: int, where: str) -> np.ndarray | None: ...


def _floats(text: str | None, n: int, where: str) -> np.ndarray | None:
    """The ``n`` finite numbers of an attribute's text (None when the attribute is absent)."""
    if text is None:
        return None
    try:
        a = np.array([float(x) for x in text.split()])
    except ValueError:
        a = np.array([])
    if a.shape != (n,) or not np.all(np.isfinite(a)):
        raise ModelFileError(f"{where}: expected {n} finite numbers, got {text!r}")
    return a


def _inline_includes(elem: ET.Element, including: Path, main: Path, seen: set[Path]) -> None:
    """Replace (in place) every ``<include file=F>`` below ``elem`` by the children of F's root element, as
    MuJoCo's parser does: F is looked up in the main file's folder first, then in the including file's folder
    (MuJoCo 4.0, measured: both work, the main file's folder wins); a file is included once (MuJoCo: "already
    included"), the main file counting as included; an ``<include>`` has no children."""
    for child in list(elem):
        if child.tag != "include":
            _inline_includes(child, including, main, seen)
            continue
        where = f"MJCF {main}: <include> in {including.name}"
        f = child.get("file")
        if not f:
            raise ModelFileError(f"{where} has no file attribute")
        if len(child):
            raise ModelFileError(f"{where} (file '{f}') has child elements; MuJoCo refuses them")
        places = [Path(f)] if Path(f).is_absolute() else [main.parent / f, including.parent / f]
        target = next((t for t in places if t.is_file()), None)
        if target is None:
            looked = " or ".join(dict.fromkeys(str(t.parent) for t in places))
            raise ModelFileError(f"{where}: file '{f}' not found in {looked}")
        key = target.resolve()
        if key in seen:
            raise ModelFileError(f"{where}: file '{f}' is already included; MuJoCo includes a file once")
        seen.add(key)
        try:
            sub = ET.parse(target).getroot()
        except ET.ParseError as exc:
            raise ModelFileError(f"{where}: included file {target} is not well-formed XML: {exc}") from None
        _inline_includes(sub, target, main, seen)
        i = list(elem).index(child)
        elem.remove(child)
        for k, e in enumerate(list(sub)):
            elem.insert(i + k, e)


def read_mjcf_tree(path: Path) -> ET.Element:
    """The root ``<mujoco>`` element of the MJCF at ``path`` with every ``<include>`` inlined
    (``_inline_includes``): what every part of this loader reads."""
    root = ET.parse(path).getroot()
    if root.tag != "mujoco":
        raise ModelFileError(f"MJCF {path}: the root element is <{root.tag}>, not <mujoco>")
    _inline_includes(root, path, path, {path.resolve()})
    return root


def _wrapped_copy(root: ET.Element, path: Path) -> str:
    """The XML with every top-level body/frame inside one joint-less body (the parser's first-body limit)
    and relative asset folders made absolute (the copy lives in a temporary folder)."""
    wb = root.find("worldbody")
    if wb is None:
        raise ModelFileError(f"MJCF {path} has no <worldbody>")
    if not any(e.tag in ("body", "frame") for e in wb):
        raise ModelFileError(f"MJCF {path}: <worldbody> has no <body>: nothing moves")
    wrap = ET.Element("body", name=WRAPPER)
    for e in [e for e in wb if e.tag in ("body", "frame")]:
        wb.remove(e)
        wrap.append(e)
    wb.append(wrap)
    _split_bodies(wb)
    for comp in root.iter("compiler"):
        for key in ("meshdir", "texturedir", "assetdir"):
            d = comp.get(key)
            if d is not None and not Path(d).is_absolute():
                comp.set(key, str((path.parent / d).resolve()))
    return ET.tostring(root, encoding="unicode")


def _joint_type(j: ET.Element) -> str:
    return "free" if j.tag == "freejoint" else j.get("type", "hinge")


def _joints_in_order(root: ET.Element, path: Path) -> list[ET.Element]:
    """The file's joints depth first (MuJoCo's and Pinocchio's order); refused on one line naming the joint:
    a joint without a name, a hinge/slide ``ref`` other than 0, a free joint not in a body of the world."""
    out = []
    wb = root.find("worldbody")
    if wb is None:
        raise ModelFileError(f"MJCF {path} has no <worldbody>")

    def walk(elem: ET.Element, depth: int) -> None:
        for j in elem:
            if j.tag in ("joint", "freejoint"):
                if not j.get("name"):
                    raise ModelFileError(
                        f"MJCF {path}: a <{j.tag}> in body '{elem.get('name', '?')}' has no name; name it "
                        "(plants map joints by name)"
                    )
                if _joint_type(j) == "free" and depth > 1:
                    raise ModelFileError(
                        f"MJCF {path}: free joint '{j.get('name')}' is in body '{elem.get('name', '?')}', which "
                        "is not a child of <worldbody>; a free joint must be at the root"
                    )
                ref = j.get("ref")
                if ref is not None and _floats(ref, 1, f"MJCF {path}: joint '{j.get('name')}' ref")[0] != 0.0:
                    raise ModelFileError(
                        f"MJCF {path}: joint '{j.get('name')}' has ref={ref}; only ref=0 is supported "
                        "(qpos0 is then the model's zero)"
                    )
                out.append(j)
        for b in elem:
            if b.tag in ("body", "frame"):
                walk(b, depth + (b.tag == "body"))

    walk(wb, 0)
    return out


SPLIT = "__cmstack_"
"""Name infix of the joint-less-inertia bodies ``_split_bodies`` inserts (body ``l1`` with hinges ``ua``, ``ub``:
``l1__cmstack_ua`` holds ``ua``, then ``l1`` holds ``ub``)."""


def _split_bodies(wb: ET.Element) -> list[str]:
    """Give every joint its own body (Pinocchio's parser makes one ``Composite_…`` joint of a body with several
    joints, e.g. a universal joint written as two hinges; this stack maps 1-DoF joints by name).  A body B with
    joints j1 … jk becomes the chain B__cmstack_j1 (B's pose, joint j1, no mass) → … → B (identity pose, joint
    jk, B's geoms, inertial, sites and children).  The kinematics are MuJoCo's: it applies a body's joints in
    order, each about its own anchor in the body frame as moved by the ones before, T = T_B J_1 ⋯ J_k with
    J_i = T(p_i) R_i T(−p_i), and each inserted body contributes one J_i.  Returns the joints moved onto an
    inserted body (their body has no mass of its own)."""
    moved: list[str] = []
    pose_keys = ("pos", "quat", "euler", "axisangle", "xyaxes", "zaxis")
    for body in list(wb.iter("body")):
        joints = [j for j in body if j.tag in ("joint", "freejoint")]
        if len(joints) < 2:
            continue
        parent = next(p for p in wb.iter() if body in list(p))
        at = list(parent).index(body)
        parent.remove(body)
        outer = None
        top = None
        for j in joints[:-1]:
            b = ET.Element("body", name=f"{body.get('name', 'body')}{SPLIT}{j.get('name')}")
            childclass = body.get("childclass")
            if childclass is not None:
                b.set("childclass", childclass)
            if outer is None:
                for k in pose_keys:
                    value = body.get(k)
                    if value is not None:
                        b.set(k, value)
                top = b
            else:
                outer.append(b)
            body.remove(j)
            b.append(j)
            moved.append(j.get("name", ""))
            outer = b
        for k in pose_keys:
            if k in body.attrib:
                del body.attrib[k]
        assert outer is not None and top is not None
        outer.append(body)
        parent.insert(at, top)
    return moved


def _actuated(root: ET.Element, path: Path, joint_names: list[str]) -> dict[str, float]:
    """{joint: torque limit (inf when the actuator is not limited)} of the joints an <actuator> drives."""
    out: dict[str, float] = {}
    for act in root.iter("actuator"):
        for a in act:
            if not isinstance(a.tag, str):
                continue
            j = a.get("joint") or a.get("jointinparent")
            if j is None:
                raise ModelFileError(
                    f"MJCF {path}: actuator '{a.get('name', a.tag)}' does not drive a joint "
                    "(tendon/site/body transmission); cmstack maps motors to joints"
                )
            if j not in joint_names:
                raise ModelFileError(
                    f"MJCF {path}: actuator '{a.get('name', a.tag)}' drives joint '{j}', which "
                    f"is not in the model (joints: {joint_names})"
                )
            lim = np.inf
            cr = a.get("ctrlrange")
            if cr is not None and a.get("ctrllimited", "auto") != "false":
                lo, hi = _floats(cr, 2, f"MJCF {path}: actuator '{a.get('name', a.tag)}' ctrlrange")
                g = a.get("gear", "1")
                gear = _floats(
                    g, max(1, len(g.split())), f"MJCF {path}: actuator '{a.get('name', a.tag)}' gear"
                )[0]
                lim = max(abs(lo), abs(hi)) * abs(gear)
            out[j] = lim
    return out


def _frame(robot: Robot, name: str | None, kind: str, path: Path, eq: str) -> str:
    if name is None or name == "world":
        return "universe"
    try:
        robot.frame_id(name)
    except FrameNotFoundError as exc:
        raise ModelFileError(
            f"MJCF {path}: equality '{eq}': {kind} '{name}' is not a frame of the model "
            f"({str(exc).split(';')[0]})"
        ) from None
    return name


def _closure(
    robot: Robot, e: ET.Element, name: str, path: Path, pose: Callable[[str], pin.SE3]
) -> LoopClosure:
    """The ``LoopClosure`` of one ``<connect>``/``<weld>`` element, MuJoCo's reading of it (module docstring;
    ``pose(frame)``: the frame's world pose at qpos0)."""
    from cmstack.models.loops import LoopClosure

    where = f"MJCF {path}: equality '{name}'"
    if e.tag == "connect":  # MuJoCo: the body form needs body1 AND anchor, else the site form
        body_form = e.get("body1") is not None and e.get("anchor") is not None
    else:  # weld: body1 alone selects the body form (anchor defaults to 0 0 0)
        body_form = e.get("body1") is not None
    ts = 1.0
    if e.tag == "weld":
        ts = float(_floats(e.get("torquescale", "1"), 1, f"{where}: torquescale")[0])
    # torquescale = 0: MuJoCo's rotation rows are identically zero, only the position rows constrain
    kind = "point" if (e.tag == "connect" or ts == 0.0) else "weld"
    if not body_form:
        if e.get("site1") is None or e.get("site2") is None:
            need = (
                "body1 and anchor, or site1 and site2" if e.tag == "connect" else "body1, or site1 and site2"
            )
            raise ModelFileError(f"{where}: a <{e.tag}> needs {need} (MuJoCo's two forms)")
        fa = _frame(robot, e.get("site1"), "site1", path, name)
        fb = _frame(robot, e.get("site2"), "site2", path, name)
        return LoopClosure(robot, fa, fb, kind, name=name)
    fa = _frame(robot, e.get("body1"), "body1", path, name)
    fb = _frame(robot, e.get("body2"), "body2", path, name)
    T1, T2 = pose(fa), pose(fb)
    anchor = _floats(e.get("anchor", "0 0 0"), 3, f"{where}: anchor")
    if e.tag == "connect":  # anchor on body1; body2's point is the one at the anchor at qpos0
        return LoopClosure(
            robot, fa, fb, "point", offset=anchor, offset_b=T2.actInv(T1.act(anchor)), name=name
        )
    rp = _floats(e.get("relpose"), 7, f"{where}: relpose")
    if rp is None or not np.any(rp[3:]):  # relpose ignored: body1's point and orientation at qpos0
        p1, R1 = T1.actInv(T2.act(anchor)), T1.rotation.T @ T2.rotation
    else:  # relpose's position is body1's point (NOT body1·relpose·anchor); its unit quaternion body2's attitude
        p1, R1 = rp[:3], pin.Quaternion(rp[3], rp[4], rp[5], rp[6]).normalized().matrix()
    return LoopClosure(
        robot, fa, fb, kind, offset=pin.SE3(R1, p1), offset_b=pin.SE3(np.eye(3), anchor), name=name
    )


_COMPILED: dict = {}


def _compiled(path: Path) -> Any:
    """MuJoCo's compiled model of the file (``mujoco.MjModel.from_xml_path``: its own includes, ``<default>``
    classes, compiler options), compiled once per load (``load_mjcf_robot`` empties the memo first: an included
    file may change between loads); a file MuJoCo refuses → ``ModelFileError`` naming it."""
    import mujoco

    key = str(path.resolve())
    mj = _COMPILED.get(key)
    if mj is None:
        mj = by_mujoco(lambda: mujoco.MjModel.from_xml_path(str(path)), path, "compiled")
        _COMPILED.clear()
        _COMPILED[key] = mj
    return mj  # (the local: a load in another thread may have emptied the memo meanwhile)


def _mujoco_reading(robot: Robot, path: Path, acts: dict[str, float]) -> None:
    """What MuJoCo's compiler resolves and a reading of the elements' own attributes misses (``<default>``
    classes, ``class=``, several ``<option>``), taken from its compiled model: each motor's torque limit
    max|ctrlrange|·|gear| when ``actuator_ctrllimited`` (else inf), gravity (``opt.gravity``), and qpos0 (a hinge
    or slide whose ``ref``, a default's too, makes qpos0 ≠ 0 is refused); the joints MuJoCo's actuators drive
    must be the ones the file's elements name (``acts``)."""
    import mujoco

    mj = _compiled(path)
    driven: dict[str, float] = {}
    for i in range(mj.nu):
        if int(mj.actuator_trntype[i]) not in (
            int(mujoco.mjtTrn.mjTRN_JOINT),
            int(mujoco.mjtTrn.mjTRN_JOINTINPARENT),
        ):
            raise ModelFileError(
                f"MJCF {path}: actuator '{mj.actuator(i).name or i}' does not drive a joint; cmstack maps motors "
                "to joints"
            )
        j = mj.joint(int(mj.actuator_trnid[i, 0])).name
        lim = np.inf
        if mj.actuator_ctrllimited[i]:
            lim = float(np.max(np.abs(mj.actuator_ctrlrange[i])) * abs(mj.actuator_gear[i, 0]))
        driven[j] = lim
    if set(driven) != set(acts):
        raise ModelFileError(
            f"MJCF {path}: MuJoCo's actuators drive joints {sorted(driven)}, the file's elements {sorted(acts)}"
        )
    for j, lim in driven.items():
        robot.effort_limit[robot.joint_index(j)] = lim
    robot.model.gravity = pin.Motion(np.array(mj.opt.gravity, dtype=float), np.zeros(3))
    for k in range(mj.njnt):
        if int(mj.jnt_type[k]) in (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE)):
            ref = float(mj.qpos0[mj.jnt_qposadr[k]])
            if ref != 0.0:
                raise ModelFileError(
                    f"MJCF {path}: joint '{mj.joint(k).name}' has ref={ref:g} (MuJoCo's qpos0); only ref=0 is "
                    "supported (qpos0 is then the model's zero)"
                )
    _same_kinematics(robot, mj, path)


def _same_kinematics(robot: Robot, mj: Any, path: Path) -> None:
    """Every named body where MuJoCo puts it: at one configuration (joints ~ U(−1, 1), seeded) the world pose
    of each body by Pinocchio's model and by ``mujoco.mj_kinematics`` agree to 1e-9 (m, rotation-matrix entries),
    else ``ModelFileError`` naming the file and the body.  Checked when every joint is 1-DoF (qpos maps by name)."""
    import mujoco

    model = robot.model
    if not (model.nq == model.nv == mj.nq == len(robot.joint_names)):
        return
    q = np.random.default_rng(0).uniform(-1.0, 1.0, model.nq)
    d = mujoco.MjData(mj)
    for n in robot.joint_names:
        d.qpos[mj.jnt_qposadr[mj.joint(n).id]] = q[robot.joint_index(n)]
    mujoco.mj_kinematics(mj, d)
    data = model.createData()
    pin.framesForwardKinematics(model, data, q)
    for b in range(1, mj.nbody):
        name = mj.body(b).name
        if not name or not model.existFrame(name):
            continue
        T = data.oMf[robot.frame_id(name)]
        err = max(
            float(np.max(np.abs(T.translation - d.xpos[b]))),
            float(np.max(np.abs(T.rotation - d.xmat[b].reshape(3, 3)))),
        )
        if err > 1e-9:
            raise ModelFileError(
                f"MJCF {path}: Pinocchio's model puts body '{name}' {err:.3g} (m or rotation entry) from where "
                "MuJoCo puts it; give its placement as pos and quat"
            )


_ORIENT = ("pos", "quat", "euler", "axisangle", "xyaxes", "zaxis")


def _num(x: ArrayLike) -> str:
    return " ".join(repr(float(v)) for v in np.ravel(x))


def _unwrap_frames(elem: ET.Element) -> None:
    """Replace (in place) every ``<frame>`` below ``elem`` by its children, recursively."""
    for child in list(elem):
        _unwrap_frames(child)
        if child.tag == "frame":
            i = list(elem).index(child)
            elem.remove(child)
            for k, e in enumerate(list(child)):
                elem.insert(i + k, e)


def _mujoco_poses(root: ET.Element, path: Path) -> ET.Element:
    """A copy of the tree for Pinocchio's parser in which every body's placement, every named site's, and every
    body's inertia are MuJoCo's compiled values: ``pos``/``quat`` from ``body_pos``/``body_quat`` (relative to
    the parent body), ``site_pos``/``site_quat``, and ``<inertial pos quat mass diaginertia>`` from
    ``body_ipos``/``body_iquat``/``body_mass``/``body_inertia``.  Why: Pinocchio 4.1's parser places a body
    given by ``axisangle`` 0.85 rad off, and ignores the compiler's ``eulerseq`` (0.29 rad off with "ZYX"),
    silently (measured); MuJoCo resolves every orientation form, ``angle``, ``eulerseq``, inertias from geoms
    and the compiler's inertia options.  Bodies are matched in document order (MuJoCo numbers them depth
    first), checked by name, ``<frame>`` elements unwrapped (their transforms are in MuJoCo's values); when
    MuJoCo cannot compile the file, or the order does not match (e.g. ``<replicate>``), the tree is returned as
    it is and the later checks speak."""
    out = ET.fromstring(ET.tostring(root))
    try:
        mj = _compiled(path)
    except ModelFileError:
        return out
    wb = out.find("worldbody")
    if wb is not None:  # a <frame>'s transform is in MuJoCo's body_pos/quat: its children take its place
        _unwrap_frames(wb)
    bodies = list(wb.iter("body")) if wb is not None else []
    if len(bodies) != mj.nbody - 1 or any(
        b.get("name") and b.get("name") != mj.body(i + 1).name for i, b in enumerate(bodies)
    ):
        return out
    for i, b in enumerate(bodies, start=1):
        for a in _ORIENT:
            b.attrib.pop(a, None)
        b.set("pos", _num(mj.body_pos[i]))
        b.set("quat", _num(mj.body_quat[i]))
        for old in b.findall("inertial"):
            b.remove(old)
        b.insert(
            0,
            ET.Element(
                "inertial",
                pos=_num(mj.body_ipos[i]),
                quat=_num(mj.body_iquat[i]),
                mass=_num(mj.body_mass[i]),
                diaginertia=_num(mj.body_inertia[i]),
            ),
        )
    for s in wb.iter("site") if wb is not None else ():
        n = s.get("name")
        if not n:
            continue
        k = mj.site(n).id
        for a in _ORIENT:
            s.attrib.pop(a, None)
        s.set("pos", _num(mj.site_pos[k]))
        s.set("quat", _num(mj.site_quat[k]))
    return out


def _dropped_sites(robot: Robot, root: ET.Element, path: Path) -> None:
    """Add the named sites Pinocchio's parser dropped (those of ``<worldbody>`` itself; a joint-less body's are kept) as
    frames, where MuJoCo's compiler puts them: its ``site_pos``/``site_quat`` in its body's frame (MuJoCo reads
    every orientation form, ``euler`` with the compiler's ``eulerseq`` and ``angle`` included), that body being
    the universe or a body frame of the model.  MuJoCo compiles the file only when such a site exists."""
    wb = root.find("worldbody")
    names = [s.get("name", "") for s in (wb.iter("site") if wb is not None else ()) if s.get("name")]
    missing = [n for n in names if not robot.model.existFrame(n)]
    if not missing:
        return
    mj = _compiled(path)
    for n in missing:
        sid = mj.site(n).id
        b = int(mj.site_bodyid[sid])
        parent = "universe" if b == 0 else mj.body(b).name
        if b != 0 and not robot.model.existFrame(parent):
            continue  # a body Pinocchio merged away: an equality naming the site is refused as not a frame
        quat = mj.site_quat[sid]
        place = pin.SE3(pin.Quaternion(quat[0], quat[1], quat[2], quat[3]).matrix(), mj.site_pos[sid].copy())
        robot.add_frame(n, parent, place)


def _active_by_default(root: ET.Element, path: Path) -> np.ndarray | None:
    """MuJoCo's ``eq_active0`` (one flag per equality element, document order) when a ``<default>`` class sets
    an equality's ``active`` (the class tree and ``class=`` resolved by MuJoCo's own compiler); None when no
    default does, and then each element's own ``active`` attribute is what MuJoCo reads."""
    if not any(d.find("equality") is not None for d in root.iter("default")):
        return None
    mj = _compiled(path)
    n = sum(1 for eqs in root.findall("equality") for e in eqs if isinstance(e.tag, str))
    if mj.neq != n:
        raise ModelFileError(f"MJCF {path}: MuJoCo compiled {mj.neq} equalities, the file has {n}")
    return np.asarray(mj.eq_active0, dtype=bool)


def _loops(robot: Robot, root: ET.Element, path: Path) -> None:
    model = robot.model
    data = model.createData()
    pin.framesForwardKinematics(model, data, pin.neutral(model))

    def pose(frame: str) -> pin.SE3:
        return data.oMf[robot.frame_id(frame)].copy()

    active = _active_by_default(root, path)
    k = 0
    for eqs in root.findall("equality"):
        for e in eqs:
            if not isinstance(e.tag, str):
                continue
            name = e.get("name") or f"{e.tag}{k}"
            k += 1
            if e.tag not in ("connect", "weld", "joint"):
                raise ModelFileError(
                    f"MJCF {path}: equality '{name}' is a <{e.tag}>; only <connect>, <weld> and <joint> "
                    "close loops in cmstack"
                )
            if not (e.get("active", "true") != "false" if active is None else active[k - 1]):
                continue
            where = f"MJCF {path}: equality '{name}'"
            if e.tag == "joint":
                from cmstack.models.loops import JointCoupling

                j1, j2 = e.get("joint1"), e.get("joint2")
                if j1 is None:
                    raise ModelFileError(f"{where}: a <joint> equality needs joint1")
                pc = e.get("polycoef", "0 1 0 0 0")
                try:
                    c: JointCoupling | LoopClosure = JointCoupling(
                        robot, j1, j2, _floats(pc, len(pc.split()), f"{where}: polycoef"), name=name
                    )
                except ConfigError as exc:
                    raise ModelFileError(f"{where}: {exc}") from None
                robot.loops.append(c)
                continue
            try:
                c = _closure(robot, e, name, path, pose)
            except ConfigError as exc:
                raise ModelFileError(f"{where}: {exc}") from None
            robot.loops.append(c)


def _initial_q(robot: Robot, path: Path, root: ET.Element) -> np.ndarray:
    """The file's initial configuration in the model's order: its first keyframe's qpos, else qpos0, as MuJoCo
    compiles them (a free joint's qpos0 is its body's pose in the file), mapped by joint name
    (``models/mj_coords.py``: quaternions reordered)."""
    import mujoco

    from cmstack.models.mj_coords import CoordinateMap

    mj = _compiled(path)
    key = root.find("keyframe/key")
    if key is not None and key.get("qpos") is not None:  # (MuJoCo pads a short one with qpos0: refused here)
        _floats(key.get("qpos"), mj.nq, f"MJCF {path}: keyframe qpos (nq = {mj.nq})")
    ids = [mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_JOINT, n) for n in robot.joint_names]
    qpos = np.array(mj.key_qpos[0] if mj.nkey else mj.qpos0, dtype=float)
    cm = CoordinateMap(mj, ids, robot.model, f"MJCF {path}")
    q = cm.q_from_qpos(qpos)
    # the joints' viscous damping as MuJoCo compiled it, per degree of freedom: Pinocchio 4.1's parser reads a
    # hinge's or slide's but leaves a ball joint's at 0 (a 0.01 N·m·s/rad ball damping on a 1e-5 kg·m² link is
    # an acceleration of 1e3 rad/s² the model would not have)
    robot.damping = np.array(mj.dof_damping[cm.vsel], dtype=float)
    robot.model.damping = robot.damping.copy()
    if not np.all(np.isfinite(q)):
        raise ModelFileError(f"MJCF {path}: the initial qpos is not finite: {qpos.tolist()}")
    return np.array(q, dtype=float)


def wrapped_mjcf(path: str | Path) -> str:
    """The text of the MJCF at ``path`` with its top-level bodies wrapped in one fixed body: what this loader
    hands Pinocchio's parser (e.g. to read Pinocchio's own constraint models of the file)."""
    path = Path(path)
    _check = _check_xml
    _check(path, "MJCF")
    return _wrapped_copy(read_mjcf_tree(path), path)


def load_mjcf_robot(cls: type[Robot], path: Path) -> Robot:
    """``Robot.from_mjcf``: see the module docstring."""

    _check_xml(path, "MJCF")
    _COMPILED.clear()
    root = read_mjcf_tree(path)
    joints = _joints_in_order(root, path)
    names = [j.attrib["name"] for j in joints]  # (every joint has one: _joints_in_order)
    text = _wrapped_copy(_mujoco_poses(root, path), path)
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / path.name
        f.write_text(text)
        with _captured_fd2() as noise:
            try:
                model = pin.buildModelFromMJCF(str(f))
                failure = None
            except Exception as exc:  # Pinocchio raises ValueError/RuntimeError with a C++ message
                failure = " ".join(str(exc).split())
    if failure is not None:
        said = " ".join(noise[0].split())
        raise ModelFileError(
            f"MJCF {path} could not be loaded by Pinocchio: {failure}" + (f" ({said})" if said else "")
        )
    got = [model.names[i] for i in range(1, model.njoints)]
    if got != names:
        raise ModelFileError(f"MJCF {path}: Pinocchio's parser gave joints {got}, the file has {names}")
    copy_wb = ET.fromstring(ET.tostring(root)).find("worldbody")
    moved = set(_split_bodies(copy_wb)) if copy_wb is not None else set()  # the joints moved (names)
    for i in range(1, model.njoints):
        if model.joints[i].shortname() == "JointModelFreeFlyer":
            # MuJoCo's free-joint qpos is the body's pose in the world (qpos0: the pose written in the file);
            # Pinocchio 4.1's parser puts an offset in the placement: the identity makes q that pose too
            model.jointPlacements[i] = pin.SE3.Identity()
        if model.names[i] in moved:
            continue  # a body inserted by _split_bodies: no mass of its own, the next joint's body has it
        if not model.inertias[i].mass > 0:
            raise ModelFileError(
                f"MJCF {path}: the body moved by joint '{model.names[i]}' has mass "
                f"{model.inertias[i].mass:g} kg; a moving body needs a mass > 0"
            )
    opt = root.find("option")
    g = _floats(opt.get("gravity") if opt is not None else None, 3, f"MJCF {path}: option gravity")
    model.gravity = pin.Motion(np.array([0.0, 0.0, -9.81]) if g is None else g, np.zeros(3))
    robot = cls.__new__(cls)
    robot._setup(model, path, path.name, [], kind="MJCF")
    robot.mjcf_path = path
    acts = _actuated(root, path, names)
    robot.passive_joints = [n for n in names if n not in acts]
    for n, lim in acts.items():
        try:
            robot.effort_limit[robot.joint_index(n)] = lim
        except ConfigError:
            raise ModelFileError(
                f"MJCF {path}: an actuator drives joint '{n}', a {_joint_type(joints[names.index(n)])} joint; "
                "cmstack's motors drive 1-DoF joints"
            ) from None
    _dropped_sites(robot, root, path)
    _loops(robot, root, path)  # first: a loop naming a body the model lacks is named here, not by MuJoCo
    _mujoco_reading(robot, path, acts)
    robot.q_initial = _initial_q(robot, path, root)
    _COMPILED.clear()  # (nothing kept past the load)
    if robot.loops:
        robot.q_initial = robot._assemble_initial(f"MJCF {path}")
    return robot

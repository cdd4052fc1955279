"""URDF → Pinocchio robot model, frame lookup, kinematics computed once per control step, and the
name-based joint map to a MuJoCo plant.

    robot = Robot("urdf/yumi.urdf")
    kin = robot.update(q, v)          # FK, Jacobians, their time variation, M, h: once per step
    fs = kin.frame("yumi_link_7_l")   # pose T, LOCAL_WORLD_ALIGNED J and dJ/dt, twist J v
    M, h = kin.M, kin.h               # M(q) v̇ + h(q, v) = τ  (h = Coriolis + gravity, Pinocchio nle)

Your own robot: ``Robot.from_urdf(path, locked_joints={"finger": 0.0})`` removes the locked joints
(Pinocchio's reduced model); ``Robot.compose([(urdf, "left_", T_left), (urdf, "right_", T_right)])``
appends several URDFs into one model, each with a name prefix and a base pose.

The joint order used everywhere in models/ and controllers/ is the Pinocchio model's order.
"""

from __future__ import annotations

import difflib
import math
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pinocchio as pin
from numpy.typing import ArrayLike

from cmstack.models._model_files import _captured_fd2, _check_xml
from cmstack.models.errors import (
    ConfigError,
    FrameNotFoundError,
    MissingExtraError,
    ModelFileError,
    StateError,
    check_finite,
)
from cmstack.models.kinematics import FrameState, Kinematics  # noqa: F401 (FrameState re-exported)
from cmstack.models.mj_coords import _joint_kind

_crba, _WORLD = pin.crba, pin.Convention.WORLD
_F64 = np.dtype(np.float64)
_dot = np.dot  # on two (n,) vectors: BLAS ddot, cheaper to call than the @ operator


PACKAGE_ROOT = Path(__file__).resolve().parents[1]
"""Where the shipped ``urdf/``, ``mjcf/`` and ``scenarios/configs/`` live (the repository root in a
source checkout, ``site-packages/cmstack`` in an installed one)."""


def resolve_asset(p: str | Path) -> Path:
    """Resolve a model file path: absolute as given; relative from the current directory if it
    exists there, else from the package (``"urdf/yumi.urdf"`` finds the shipped YuMi anywhere)."""
    p = Path(p).expanduser()
    if p.is_absolute():
        return p
    return p.resolve() if p.exists() else PACKAGE_ROOT / p


def _continuous_as_revolute(path: Path) -> tuple[str | None, list[str]]:
    """The URDF text with every ``continuous`` joint made a ``revolute`` one (its ``<limit>`` effort and
    velocity kept, position bounds set far away and then removed, ``_load_urdf``), and those joints'
    names; (None, []) when there is none.

    Why: Pinocchio models a continuous joint by (cos θ, sin θ) (nq = 2, nv = 1), MuJoCo's URDF import by
    an unlimited hinge with the angle θ.  As a revolute joint without position limits it has the angle
    as its one coordinate in both, so q, v and τ keep one entry per joint and the plant maps by name.
    The dynamics are the same: the joint's motion subspace is the rotation about the same axis."""
    root = ET.parse(path).getroot()
    names: list[str] = []
    for j in root.iter("joint"):
        if j.get("type") == "continuous":
            j.set("type", "revolute")
            lim = j.find("limit")
            if lim is None:
                lim = ET.SubElement(j, "limit", effort="0", velocity="0")
            lim.set("lower", "-1e9")
            lim.set("upper", "1e9")
            names.append(j.get("name") or "")
    return (ET.tostring(root, encoding="unicode"), names) if names else (None, [])


def _urdfdom_lines(text: str) -> str:
    """urdfdom's own message lines, without its 'at line N in file.cpp' locations, joined with '; '."""
    lines = [" ".join(x.split()) for x in text.splitlines()]
    return "; ".join(x for x in lines if x and not x.startswith("at line "))


def _xml_inertials(root: ET.Element, path: Path) -> dict[str, tuple[float, np.ndarray]]:
    """{link name: (mass in kg, 3×3 rotational inertia in kg·m² about the centre of mass)} of every
    ``<link>`` with an ``<inertial>``, read from the URDF's XML ourselves, because urdfdom turns a mass
    it cannot read (``nan``, ``abc``) into 0 kg after printing to fd 2.  A value that is not a finite
    number, or a negative mass, is refused here (``ModelFileError`` naming the file and the link)."""
    out = {}
    for link in root.iter("link"):
        name = link.get("name", "?")
        inertial = link.find("inertial")
        if inertial is None:
            continue

        def number(elem: ET.Element | None, attr: str, what: str) -> float:
            raw = elem.get(attr, "0") if elem is not None else "0"
            try:
                x = float(raw)
            except ValueError:
                x = math.nan
            if not math.isfinite(x):
                raise ModelFileError(
                    f"URDF {path}: link '{name}': {what} is {raw!r}, not a finite number; fix its <inertial>"  # noqa: B023 (called in this iteration)
                )
            return x

        m = number(inertial.find("mass"), "value", "<mass value>")
        if m < 0:
            raise ModelFileError(
                f"URDF {path}: link '{name}' has mass {m:g} kg; a mass must be >= 0 "
                "(fix its <inertial><mass value>)"
            )
        el = inertial.find("inertia")
        c = {k: number(el, k, f"<inertia {k}>") for k in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")}
        I = np.array(
            [[c["ixx"], c["ixy"], c["ixz"]], [c["ixy"], c["iyy"], c["iyz"]], [c["ixz"], c["iyz"], c["izz"]]]
        )
        out[name] = (m, I)
    return out


def _inertia_fault(I: np.ndarray) -> str:
    """'' when the rotational inertia I (3×3, kg·m², about the centre of mass) is physical, else why not.

    Physical: symmetric positive semi-definite (principal moments I1 ≤ I2 ≤ I3 all ≥ 0) and the
    principal moments satisfy the triangle inequality I1 + I2 ≥ I3 (and so every permutation), since
    I1 + I2 − I3 = 2 ∫ z² dm ≥ 0 along the third principal axis.  Zero moments are accepted: a point
    mass (all zero) and a thin rod (0, I, I) are the usual idealizations and satisfy both with
    equality.  Round-off allowance: 1e-9 × (I1 + I2 + I3) + 1e-15 kg·m²."""
    ev = np.linalg.eigvalsh(0.5 * (I + I.T))
    tol = 1e-9 * float(np.abs(ev).sum()) + 1e-15
    if ev[0] < -tol:
        return (
            f"an inertia that is not positive definite (principal moments {_fmt(ev)} kg·m², one is negative)"
        )
    if ev[0] + ev[1] < ev[2] - tol:
        return (
            f"principal moments {_fmt(ev)} kg·m² that violate the triangle inequality "
            f"({ev[0]:.6g} + {ev[1]:.6g} < {ev[2]:.6g}; no rigid body has them)"
        )
    return ""


def _fmt(v: Iterable[float]) -> str:
    return "(" + ", ".join(f"{x:.6g}" for x in v) + ")"


def _check_bodies(model: pin.Model, path: Path, links: dict[str, tuple[float, np.ndarray]]) -> None:
    """Refuse a moving body that is not physical: for each Pinocchio joint, the body it moves (its URDF
    link plus every link welded to it by fixed or locked joints: Pinocchio has merged their inertias)
    must have a mass > 0 kg and a physical rotational inertia (``_inertia_fault``).  A massless link
    welded to a body with mass is fine: only the combined body enters the dynamics.  The error names
    the file, the URDF link(s) and the joint, on one line."""
    for j in range(1, model.njoints):
        Y = model.inertias[j]
        names = [f.name for f in model.frames if f.type == pin.FrameType.BODY and f.parentJoint == j]
        joint = model.names[j]
        if not (math.isfinite(Y.mass) and Y.mass > 0):
            what = f"link '{names[0]}'" if len(names) == 1 else f"links {names} (welded together)"
            raise ModelFileError(
                f"URDF {path}: {what}, moved by joint '{joint}', has mass {Y.mass:g} kg; a moving "
                "body needs a mass > 0 (fix its <inertial><mass value>)"
            )
        fault = _inertia_fault(np.array(Y.inertia))
        if fault:
            own = [n for n in names if n in links and _inertia_fault(links[n][1])]
            what = (
                f"link '{own[0]}'"
                if own
                else (f"link '{names[0]}'" if len(names) == 1 else f"links {names} (welded together)")
            )
            if own:
                fault = _inertia_fault(links[own[0]][1])
            raise ModelFileError(
                f"URDF {path}: {what}, moved by joint '{joint}', has {fault}; fix its <inertial><inertia>"
            )


def _load_urdf(path: Path, *, bodies: bool = True, floating_base: bool = False) -> pin.Model:
    """Pinocchio model of one URDF file, every error naming the file.  Continuous joints become revolute
    joints without position limits (``_continuous_as_revolute``; their bounds are ±inf).

    Checked on load (``ModelFileError`` naming the file and the link, one line): every ``<mass>`` and
    ``<inertia>`` value finite, no negative mass (``_xml_inertials``, from the XML itself), and every
    moving body physical (``_check_bodies``; ``bodies=False`` leaves that to the caller, e.g.
    ``_part_model``, which checks after locking joints: a locked joint's link then belongs to its parent's
    body).  ``floating_base``: the root link on a free joint named ``root_joint`` (Pinocchio's
    ``JointModelFreeFlyer``: q = [p; quaternion x, y, z, w], v = [linear; angular] in the root link's axes).
    urdfdom's own messages, which it prints to fd 2, are captured: folded into the error when the file
    is refused, dropped otherwise (a message with 'Error' that did not stop the parse is an error too:
    urdfdom then dropped part of the file)."""
    _check_xml(path, "URDF")
    links = _xml_inertials(ET.parse(path).getroot(), path)
    xml, continuous = _continuous_as_revolute(path)
    with _captured_fd2() as noise:
        try:
            root = (pin.JointModelFreeFlyer(),) if floating_base else ()
            model = (
                pin.buildModelFromUrdf(str(path), *root) if xml is None else pin.buildModelFromXML(xml, *root)
            )
            orig = pin.buildModelFromUrdf(str(path), *root) if continuous else None  # limits, friction
            failure = None
        except Exception as exc:  # Pinocchio raises ValueError/RuntimeError with a C++ message
            failure = " ".join(str(exc).split())
    said = _urdfdom_lines(noise[0])
    if failure is not None:
        raise ModelFileError(
            f"URDF {path} could not be loaded by Pinocchio: {failure}"
            + (f" (urdfdom: {said})" if said else "")
        ) from None
    if "Error" in said:
        raise ModelFileError(f"URDF {path}: urdfdom dropped part of the file: {said}")
    if continuous and orig is not None:  # orig: the model as read, made exactly when there are some
        for name in continuous:
            jm, jo = model.joints[model.getJointId(name)], orig.joints[orig.getJointId(name)]
            model.lowerPositionLimit[jm.idx_q], model.upperPositionLimit[jm.idx_q] = -np.inf, np.inf
            for attr in ("effortLimit", "velocityLimit", "damping", "friction"):
                getattr(model, attr)[jm.idx_v] = getattr(orig, attr)[jo.idx_v]
    if bodies:
        _check_bodies(model, path, links)
    return model


def _as_pose(T: pin.SE3 | ArrayLike | None, where: str) -> pin.SE3:
    """A base pose given as ``pinocchio.SE3``, a 4×4 homogeneous matrix, or a position (3,) with the
    world's orientation (metres)."""
    if T is None:
        return pin.SE3.Identity()
    if isinstance(T, pin.SE3):
        return T.copy()
    A = np.asarray(T, dtype=float)
    if A.shape == (3,) and np.all(np.isfinite(A)):
        return pin.SE3(np.eye(3), A)
    if A.shape != (4, 4) or not np.all(np.isfinite(A)):
        raise ConfigError(
            f"{where}: a base pose must be a pinocchio.SE3, a finite 4×4 matrix or a position (3,), "
            f"got shape {A.shape}"
        )
    R = A[:3, :3]
    if not np.allclose(R.T @ R, np.eye(3), atol=1e-9) or np.linalg.det(R) < 0:
        raise ConfigError(f"{where}: the base pose's 3×3 block is not a rotation matrix (RᵀR ≠ I or det < 0)")
    return pin.SE3(R, A[:3, 3])


@dataclass(frozen=True)
class URDFPart:
    """One URDF in a robot: its file, the prefix put before each of its joint and frame names, the
    pose of its root link in the world (``base``, SE3, metres), and the joints locked at a value
    (``locked``: name as written in the URDF → rad or m)."""

    path: Path
    prefix: str = ""
    base: pin.SE3 = field(default_factory=pin.SE3.Identity)
    locked: dict = field(default_factory=dict)
    loops: Path | None = None
    """The part's loops sidecar (``cmstack.models.loops``), names as in its URDF."""
    floating_base: bool = False
    """The part's root link on a free joint ``root_joint`` (prefixed like the part's names)."""


def _part_model(part: URDFPart) -> pin.Model:
    """The part's Pinocchio model: its locked joints removed (``pinocchio.buildReducedModel`` at the
    configuration q_ref that holds the locked values, the neutral one elsewhere), then every joint and
    frame name prefixed.  Errors name the file and the joint at fault."""
    model = _load_urdf(part.path, bodies=False, floating_base=part.floating_base)
    names = [model.names[i] for i in range(1, model.njoints)]
    if part.locked:
        q_ref = pin.neutral(model)
        ids = []
        for name, value in part.locked.items():
            if name not in names:
                close = difflib.get_close_matches(str(name), names, n=4)
                raise FrameNotFoundError(
                    f"locked joint '{name}' is not in {part.path}"
                    + (f"; did you mean {close}?" if close else f"; joints: {names}")
                )
            jid = model.getJointId(name)
            jm = model.joints[jid]
            x = float(value)
            if not np.isfinite(x):
                raise ConfigError(f"locked joint '{name}' of {part.path.name}: value {value!r} is not finite")
            i = jm.idx_q
            if jm.nq == 1:
                lo, hi = model.lowerPositionLimit[i], model.upperPositionLimit[i]
                if not (lo - 1e-12 <= x <= hi + 1e-12):
                    raise ConfigError(
                        f"locked joint '{name}' of {part.path.name}: value {x} is outside its "
                        f"limits [{lo}, {hi}]"
                    )
                q_ref[i] = x
            elif jm.nq == 2 and jm.nv == 1:  # continuous joint: q = (cos θ, sin θ)
                q_ref[i : i + 2] = np.cos(x), np.sin(x)
            else:
                raise ConfigError(
                    f"locked joint '{name}' of {part.path.name} has nq={jm.nq}; only 1-DoF joints "
                    "(revolute, continuous, prismatic) can be locked at a scalar value"
                )
            ids.append(jid)
        model = pin.buildReducedModel(model, sorted(ids), q_ref)
    _check_bodies(model, part.path, _xml_inertials(ET.parse(part.path).getroot(), part.path))
    if part.prefix:
        for i in range(1, model.njoints):
            model.names[i] = part.prefix + model.names[i]
        for f in model.frames:
            if f.name != "universe":
                f.name = part.prefix + f.name
    return model


def _as_part(item: str | Path | URDFPart | Any, k: int) -> URDFPart:
    if isinstance(item, URDFPart):
        return URDFPart(
            resolve_asset(item.path),
            item.prefix,
            item.base,
            dict(item.locked),
            None if item.loops is None else resolve_asset(item.loops),
            item.floating_base,
        )
    if not isinstance(item, (tuple, list)) or not 1 <= len(item) <= 5:
        raise ConfigError(
            f"Robot.compose: part {k} must be (urdf, prefix, base_pose[, locked_joints[, loops]]), "
            f"got {item!r}"
        )
    path = resolve_asset(item[0])
    prefix = item[1] if len(item) > 1 else ""
    if not isinstance(prefix, str):
        raise ConfigError(
            f"Robot.compose: part {k} ({path.name}): the prefix must be a string, got {prefix!r}"
        )
    base = _as_pose(item[2] if len(item) > 2 else None, f"Robot.compose: part {k} ({path.name})")
    locked = dict(item[3]) if len(item) > 3 and item[3] else {}
    loops = resolve_asset(item[4]) if len(item) > 4 and item[4] is not None else None
    return URDFPart(path, prefix, base, locked, loops)


def example_robot_data_path(relative: str) -> Path:
    """A file of the optional ``example-robot-data`` package (``pip install example-robot-data``;
    in cmstack's ``dev`` extra, never needed by the library itself), e.g.
    ``example_robot_data_path("panda_description/urdf/panda.urdf")``."""
    from importlib import metadata

    try:
        dist = metadata.distribution("example-robot-data")
    except metadata.PackageNotFoundError:
        raise MissingExtraError(
            f"'{relative}' comes from the example-robot-data package, which is not installed: "
            "pip install example-robot-data (or pip install 'cmstack[dev]')",
            package="example-robot-data",
        ) from None
    p = Path(str(dist.locate_file(f"cmeel.prefix/share/example-robot-data/robots/{relative}")))
    if not p.is_file():
        raise ModelFileError(f"example-robot-data has no file robots/{relative} (looked at {p})")
    return p


class Robot:
    """A URDF loaded into Pinocchio, with clear errors and a once-per-step kinematics cache."""

    def __init__(self, urdf_path: str | Path):
        path = resolve_asset(urdf_path)
        self._setup(_load_urdf(path), path, path.name, [URDFPart(path)])

    def _setup(
        self, model: pin.Model, path: Path, label: str, sources: list[URDFPart], kind: str = "URDF"
    ) -> None:
        self.model = model
        where = f"MJCF {path}" if kind == "MJCF" else f"URDF {label}"  # (errors name the model file)
        if self.model.nv == 0:
            raise ModelFileError(f"{where} has no movable joint.")
        self.path = path
        self.label = label
        """What error messages call this robot: the URDF's file name, or the composed parts."""
        self.sources = list(sources)
        """The URDF parts this robot was built from (file, prefix, base pose, locked joints); a plant
        built from URDF (``cmstack.sim.urdf_plant``) rebuilds the same robot from them."""
        self.data = self.model.createData()
        self._gen = 0  # bumped whenever self.data changes state (update, add_frame, a law's direct pass)
        self._lean_gen = -1  # the _gen of the last update_for_kernel: data.a not computed at that state
        self.joint_names = [self.model.names[i] for i in range(1, self.model.njoints)]
        self.floating_base: str | None = None
        """The name of the root free joint (a floating base: MJCF ``<freejoint>``, ``from_urdf(...,
        floating_base=True)``), else None."""
        for i, n in enumerate(self.joint_names, start=1):
            jm = self.model.joints[i]
            jkind = _joint_kind(jm)
            if jkind is None:
                raise ModelFileError(
                    f"{where}: joint '{n}' is a {jm.shortname()} (nq={jm.nq}, nv={jm.nv}); this stack maps "
                    "1-DoF joints (revolute, continuous, prismatic), ball joints and a root free joint"
                )
            if jkind == "free":
                if self.model.parents[i] != 0:
                    raise ModelFileError(
                        f"{where}: free joint '{n}' is not at the root (its parent is joint "
                        f"'{self.model.names[self.model.parents[i]]}'); a free joint moves a body of the world"
                    )
                if self.floating_base is None:
                    self.floating_base = n
        self.nq, self.nv = self.model.nq, self.model.nv
        self._qshape, self._vshape = (self.nq,), (self.nv,)
        self.damping = np.array(self.model.damping, dtype=float).copy()
        self.effort_limit = np.array(self.model.effortLimit, dtype=float).copy()
        self._frame_ids: dict[str, int] = {}
        self._views: tuple | None = (
            None  # (data, data.M, data.nle): views refreshed in place by computeAllTerms
        )
        self.loops: list = []
        """The robot's loop closures (``cmstack.models.loops.LoopClosure``): from an MJCF's ``<equality
        connect|weld>`` or a URDF's loops sidecar; every law and plant takes them."""
        self.passive_joints: list[str] = []
        """Joints without an actuator (an MJCF joint no ``<actuator>`` drives, or the sidecar's ``passive``)."""
        self.mjcf_path: Path | None = None
        """The MJCF this robot was read from (``from_mjcf``), else None."""
        self.q_initial = pin.neutral(self.model)
        """The model file's initial configuration (MJCF: its first keyframe or qpos0; URDF: zero), closed by
        ``assemble`` when the robot has loops."""

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_views"] = None  # views into this process's data: taken again after a copy or pickle
        return state

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_urdf(
        cls,
        path: str | Path,
        locked_joints: dict[str, float] | None = None,
        *,
        prefix: str = "",
        base: pin.SE3 | np.ndarray | None = None,
        loops: str | Path | None = None,
        floating_base: bool = False,
    ) -> Robot:
        """A robot from one URDF file.

        Args:
            path: the URDF (relative paths: current directory first, then the cmstack package).
            locked_joints: joint name (as in the URDF) → value (rad or m) at which that joint is
                fixed; the joints are removed from the model (``pinocchio.buildReducedModel``), so
                q, v and τ do not contain them (e.g. a gripper's fingers).
            prefix: put before every joint and frame name (``"left_"`` → ``left_panda_joint1``).
            base: pose of the URDF's root link in the world (``pinocchio.SE3``, 4×4 matrix, or a
                position (3,) in m with the world's orientation).
            loops: a TOML sidecar naming the loop closures and passive joints (format:
                ``cmstack.models.loops``; names as in the URDF, the prefix is put before them); the
                robot's ``loops`` and ``passive_joints`` then hold them and ``q_initial`` is assembled.
            floating_base: put the root link on a free joint ``root_joint`` (prefixed), first in q and v:
                q = [p (m); quaternion x, y, z, w] (the root link's pose in the world, Pinocchio's order),
                v = [linear (m/s); angular (rad/s)], both in the root link's axes; ``base`` is then
                the free joint's initial pose (``q_initial``).  The free joint has no actuator: it is in
                ``passive_joints``.  The sidecar is unchanged (it names the URDF's joints and frames).
        """
        part = URDFPart(
            resolve_asset(path),
            prefix,
            _as_pose(base, f"Robot.from_urdf({Path(path).name})"),
            dict(locked_joints or {}),
            None if loops is None else resolve_asset(loops),
            floating_base,
        )
        return cls.compose([part])

    @classmethod
    def compose(cls, parts: Sequence[URDFPart | tuple], loops: str | Path | None = None) -> Robot:
        """One robot from several URDFs, each with a name prefix and a base pose, e.g. two arms from
        one single-arm URDF::

            Robot.compose([("panda.urdf", "left_", T_left), ("panda.urdf", "right_", T_right)])

        Args:
            parts: a list of ``(urdf, prefix, base_pose)`` or ``(urdf, prefix, base_pose,
                locked_joints)`` tuples (or ``URDFPart``); base_pose is the pose of that URDF's root
                link in the world (``pinocchio.SE3``, 4×4 matrix, or a position (3,) with the world's
                orientation; metres), locked_joints a
                {joint name as in the URDF: value} dict as in ``from_urdf``.

        The parts are appended to one Pinocchio model (``pinocchio.appendModel`` at the world frame,
        placement = base pose) in the order given: q = (q_part1, q_part2, ...).  Prefixed names must
        not collide (the error names both parts and the name).

        Loops: a part given as ``(urdf, prefix, base_pose, locked_joints, loops_toml)`` brings its own sidecar
        (names as in its URDF, prefixed like the part: the same file serves every copy); ``loops=PATH``
        adds a sidecar whose names are the composed model's (closures between parts).
        """
        plist: list[URDFPart] = [_as_part(item, k) for k, item in enumerate(parts)]
        if not plist:
            raise ConfigError("Robot.compose: no URDF part given")
        models = [_part_model(p) for p in plist]
        seen: dict[str, int] = {}
        for k, m in enumerate(models):
            for name in [m.names[i] for i in range(1, m.njoints)] + [
                f.name for f in m.frames if f.name != "universe"
            ]:
                if name in seen and seen[name] != k:
                    a, b = plist[seen[name]], plist[k]
                    raise ConfigError(
                        f"Robot.compose: name '{name}' is in part {seen[name]} ({a.path.name}, "
                        f"prefix '{a.prefix}') and part {k} ({b.path.name}, prefix '{b.prefix}'); "
                        "give the parts different prefixes"
                    )
                seen.setdefault(name, k)
        if len(plist) == 1 and plist[0].base.isIdentity(0.0):
            model = models[0]
        else:
            model = pin.Model()
            for m, p in zip(models, plist):
                model = pin.appendModel(model, m, 0, p.base)
        label = (
            plist[0].path.name
            if len(plist) == 1
            else "compose[" + ", ".join(f"{p.prefix}:{p.path.name}" for p in plist) + "]"
        )
        # a part's free joint: its q is the root link's pose in the world (MuJoCo's convention too), so
        # the base pose appendModel put in its placement moves into the initial configuration
        q_free: list[tuple[int, pin.SE3]] = []
        for j in range(1, model.njoints):
            if model.joints[j].shortname() == "JointModelFreeFlyer" and model.parents[j] == 0:
                q_free.append((model.joints[j].idx_q, model.jointPlacements[j].copy()))
                model.jointPlacements[j] = pin.SE3.Identity()
        robot = cls.__new__(cls)
        robot._setup(model, plist[0].path, label, plist)
        for iq, T in q_free:
            robot.q_initial[iq : iq + 7] = pin.SE3ToXYZQUAT(T)
        for j in range(1, model.njoints):  # a free joint has no actuator
            if (
                model.joints[j].shortname() == "JointModelFreeFlyer"
                and model.names[j] not in robot.passive_joints
            ):
                robot.passive_joints.append(model.names[j])
        from cmstack.models.loops import apply_sidecar, read_sidecar

        sides = [(read_sidecar(resolve_asset(p.loops)), p.prefix) for p in plist if p.loops is not None]
        if loops is not None:
            sides.append((read_sidecar(resolve_asset(loops)), ""))
        for side, prefix in sides:
            apply_sidecar(robot, side, prefix)
        if robot.loops:
            robot.q_initial = robot._assemble_initial(sides[0][0]["path"] if sides else robot.path)
        return robot

    @classmethod
    def from_mjcf(cls, path: str | Path) -> Robot:
        """A robot from an MJCF file: bodies, hinge/slide joints, inertias, damping and limits through
        Pinocchio's MJCF parser; every ``<equality connect|weld>`` becomes a ``LoopClosure`` in
        ``robot.loops``, every joint no ``<actuator>`` drives is in ``robot.passive_joints``, and
        ``q_initial`` (the first keyframe's qpos, else qpos0) is assembled.  Workarounds for Pinocchio 4.1's
        parser and what is refused: ``cmstack.models.mjcf``."""
        from cmstack.models.mjcf import load_mjcf_robot

        return load_mjcf_robot(cls, resolve_asset(path))

    #: how far (rad or m) closing the loops may move a joint from the file's pose without a warning
    ASSEMBLY_WARN = 0.05

    def _assemble_initial(self, source: str | Path) -> np.ndarray:
        """``q_initial`` closed by ``assemble`` inside the joint ranges; a loop that cannot close there →
        ``ModelFileError`` naming the file, the loop and the joints held on their limits (one line); a joint
        moved more than ``ASSEMBLY_WARN`` (0.05 rad or m) from the file's pose → one ``ModelFileWarning`` line
        naming the file, the loops and the joints with their moves."""
        from cmstack.models.errors import InfeasibleError, ModelFileWarning
        from cmstack.models.loops import ClosureSet, joint_ranges, v_names

        try:
            q = self.assemble(self.q_initial)
        except InfeasibleError as exc:
            raise ModelFileError(f"{source}: {exc} (from the file's initial pose)") from None
        d = pin.difference(self.model, self.q_initial, q)
        big = np.flatnonzero(np.abs(d) > self.ASSEMBLY_WARN)
        if big.size:
            _, _, rev = joint_ranges(self)
            names = v_names(self)
            cs = ClosureSet(self.loops)
            J = cs.jacobian(q)
            loops = [c.name for c, s in zip(cs.closures, cs.slices) if np.any(J[s][:, big] != 0.0)]
            moves = ", ".join(f"{names[i]} {d[i]:+.3g} {'rad' if rev[i] else 'm'}" for i in big)
            hint = "a <keyframe> qpos" if str(source).startswith("MJCF") else "an initial configuration"
            warnings.warn(
                f"{source}: closing loop(s) {loops} moved joint(s) more than {self.ASSEMBLY_WARN} rad or m from "
                f"the file's pose: {moves}; the file's pose is not assembled (give it {hint} that is)",
                ModelFileWarning,
                stacklevel=4,
            )
        return q

    def assemble(
        self, q_guess: ArrayLike | None = None, *, tol: float = 1e-12, max_iter: int = 50
    ) -> np.ndarray:
        """A configuration near ``q_guess`` (default ``q_initial``) that closes every loop of ``robot.loops``
        inside the joint ranges: Newton on the loop residual, q ← q − J⁺φ ([Aghili] (39), each step kept in the
        ranges; ``cmstack.models.loops.assemble``).  When it cannot close, ``InfeasibleError`` names the loop,
        its residual and the joints held on their range limits."""
        from cmstack.models.loops import assemble

        return assemble(self, self.q_initial if q_guess is None else q_guess, tol=tol, max_iter=max_iter)

    @property
    def actuated_joints(self) -> list[str]:
        """The joints with an actuator: every joint not in ``passive_joints``."""
        return [n for n in self.joint_names if n not in self.passive_joints]

    # ------------------------------------------------------------------ names
    def frame_id(self, name: str) -> int:
        fid = self._frame_ids.get(name)
        if fid is None:
            if not self.model.existFrame(name):
                names = [f.name for f in self.model.frames]
                close = difflib.get_close_matches(name, names, n=4)
                raise FrameNotFoundError(
                    f"frame '{name}' is not in {self.label}"
                    + (f"; did you mean {close}?" if close else f"; frames are e.g. {names[:8]}")
                )
            try:
                fid = self.model.getFrameId(name)
            except ValueError:  # a name shared by frames of several types (an MJCF body and its joint)
                fid = next(
                    self.model.getFrameId(name, t)
                    for t in (
                        pin.FrameType.BODY,
                        pin.FrameType.OP_FRAME,
                        pin.FrameType.JOINT,
                        pin.FrameType.FIXED_JOINT,
                    )
                    if self.model.existFrame(name, t)
                )
            self._frame_ids[name] = fid
        return fid

    def add_frame(self, name: str, parent_frame: str, placement: pin.SE3) -> int:
        """Add an operational frame rigidly attached to ``parent_frame`` at ``placement`` (e.g. the
        coupling body's frame E1·T_A^B), so that Pinocchio computes its pose, Jacobian and Jacobian
        time variation in C++ every step.  Adding the same (name, parent, placement) twice returns
        the existing frame; any Kinematics computed before are invalid afterwards."""
        pid = self.frame_id(parent_frame)
        parent = self.model.frames[pid]
        oMf = parent.placement * placement
        if self.model.existFrame(name):
            fid = self.model.getFrameId(name)
            f = self.model.frames[fid]
            if f.parentJoint == parent.parentJoint and f.placement.isApprox(oMf, 1e-12):
                return fid
            raise FrameNotFoundError(f"frame '{name}' already exists in {self.label} with another placement")
        fid = self.model.addFrame(pin.Frame(name, parent.parentJoint, pid, oMf, pin.FrameType.OP_FRAME))
        self.data = self.model.createData()
        self._gen += 1
        self._frame_ids[name] = fid
        return fid

    def _joint_model(self, name: str) -> Any:
        if name not in self.joint_names:
            close = difflib.get_close_matches(name, self.joint_names, n=4)
            raise FrameNotFoundError(
                f"joint '{name}' is not in {self.label}"
                + (f"; did you mean {close}?" if close else f"; joints: {self.joint_names}")
            )
        return self.model.joints[self.model.getJointId(name)]

    def joint_index(self, name: str) -> int:
        """Index of a 1-DoF joint in v and τ (and in q when the robot has no free or ball joint: otherwise
        its q index is ``joint_q_index``).  A free or ball joint → ``ConfigError`` naming it (use
        ``v_indices``/``q_indices``)."""
        jm = self._joint_model(name)
        if jm.nv != 1:
            raise ConfigError(
                f"joint '{name}' of {self.label} has nq={jm.nq}, nv={jm.nv}; a scalar joint index is a "
                "1-DoF joint's (use robot.v_indices / robot.q_indices for a ball or free joint)"
            )
        return jm.idx_v

    def joint_q_index(self, name: str) -> int:
        """Index of a 1-DoF joint in q (``ConfigError`` for a ball or free joint)."""
        self.joint_index(name)
        return self._joint_model(name).idx_q

    def v_indices(self, names: Sequence[str]) -> np.ndarray:
        """The v (and τ) indices of the named joints, each joint's nv of them in order (a ball joint 3,
        a free joint 6: Pinocchio's [linear; angular], local axes)."""
        out: list[int] = []
        for n in names:
            jm = self._joint_model(n)
            out.extend(range(jm.idx_v, jm.idx_v + jm.nv))
        return np.array(out, dtype=np.int64)

    def q_indices(self, names: Sequence[str]) -> np.ndarray:
        """The q indices of the named joints, each joint's nq of them (a ball joint's quaternion x, y, z, w;
        a free joint's position then quaternion: Pinocchio's order)."""
        out: list[int] = []
        for n in names:
            jm = self._joint_model(n)
            out.extend(range(jm.idx_q, jm.idx_q + jm.nq))
        return np.array(out, dtype=np.int64)

    def q_from_names(self, values: dict[str, float], default: np.ndarray | None = None) -> np.ndarray:
        q = pin.neutral(self.model) if default is None else np.array(default, dtype=float)
        for n, x in values.items():
            q[self.joint_q_index(n)] = x
        return q

    # ------------------------------------------------------------------ kinematics
    def update(self, q: np.ndarray, v: np.ndarray) -> Kinematics:
        """Run every algorithm a control step needs, once (``pin.computeAllTerms``): FK with zero
        acceleration (so the classical drift terms dJ v are the frames' accelerations), the joint
        Jacobians, M = CRBA (full symmetric), h = nle(q, v).  dJ/dt is computed only if asked for."""
        q, v = self.state_arrays(q, v)
        if not math.isfinite(_dot(q, q) + _dot(v, v)):  # one cheap test: NaN/inf makes the sum non-finite
            self.refuse_state(q, v)
        m, d = self.model, self.data
        # one pass: FK (q, v, v̇ = 0, so data.a holds the drift accelerations), joint Jacobians,
        # M (full symmetric) and nle; frame quantities are read from it on demand (Kinematics.frame)
        pin.computeAllTerms(m, d, q, v)
        self._gen += 1
        M, h = self.dynamics_views()
        return Kinematics(self, q.copy(), v.copy(), M.copy(), h.copy())

    def state_arrays(self, q: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(q, v) as float64 arrays of the model's sizes, else ``StateError`` naming both shapes (the
        first half of ``update``'s checks; ``refuse_state`` is the second)."""
        if type(q) is not np.ndarray or q.dtype != np.float64:
            q = np.asarray(q, dtype=float)
        if type(v) is not np.ndarray or v.dtype != np.float64:
            v = np.asarray(v, dtype=float)
        if q.shape != (self.nq,) or v.shape != (self.nv,):
            raise StateError(
                f"{self.path.name}: expected q of size {self.nq} and v of size {self.nv}, "
                f"got {q.shape} and {v.shape}"
            )
        return q, v

    def refuse_state(self, q: np.ndarray, v: np.ndarray) -> None:
        """Raise the ``StateError`` of a state whose |q|² + |v|² is not finite: the non-finite entries
        named, or the overflow."""
        check_finite("q", q, f"state given to {self.path.name}")
        check_finite("v", v, f"state given to {self.path.name}")
        raise StateError(f"{self.path.name}: |q|² + |v|² overflows; the state is absurdly large")

    def update_for_kernel(self, q: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The lean pass of a compiled control step that computes the rest itself (the fused UK step,
        ``controllers/_uk_kernels.py``): ``state_arrays``' checks, then one ``pin.crba`` in the WORLD
        convention, which leaves the joints' poses data.oMi, the joint Jacobians data.J and M (full
        symmetric) with the same values as ``update``'s computeAllTerms.  Not computed, unlike ``update``:
        h (the kernel's Newton–Euler pass), the joints' velocities and accelerations (a ``Kinematics`` of
        this state computes them on its first frame, ``Kinematics.frame``), the rest of computeAllTerms
        (dJ, centroidal terms, energies); data.nle keeps an older state's.  The caller tests |q|² + |v|²
        for finiteness (``refuse_state`` when it is not).  Returns (q, v)."""
        if (
            type(q) is not np.ndarray
            or q.dtype is not _F64
            or q.shape != self._qshape
            or type(v) is not np.ndarray
            or v.dtype is not _F64
            or v.shape != self._vshape
        ):
            q, v = self.state_arrays(q, v)
        _crba(self.model, self.data, q, _WORLD)
        self._gen += 1
        self._lean_gen = self._gen
        return q, v

    @property
    def generation(self) -> int:
        """A counter of the states this robot's Pinocchio data has held: every pass that changes the data
        (``update``, ``update_for_kernel``, ``update_in_place``, ``add_frame``) increments it."""
        return self._gen

    def update_in_place(self, q: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``update``'s one pass (``pin.computeAllTerms``) without its copies, for a compiled step that reads M
        and h in place: q, v must be float64 arrays of the model's sizes (``state_arrays``), and the caller
        tests them for finiteness (``refuse_state``).  Returns the (M, h) views of ``dynamics_views``, which hold
        this state until the next pass; a ``Kinematics`` made before is stale from here on (it says so)."""
        pin.computeAllTerms(self.model, self.data, q, v)
        self._gen += 1
        return self.dynamics_views()

    def dynamics_views(self) -> tuple[np.ndarray, np.ndarray]:
        """(M, h): views into this robot's Pinocchio data, which ``pin.computeAllTerms`` refreshes in
        place; taken once per data object (``add_frame`` makes a new one).  They hold the last
        computeAllTerms' values: copy them to keep a step's."""
        d = self.data
        vw = self._views
        if vw is None or vw[0] is not d:
            vw = self._views = (d, d.M, d.nle)
        return vw[1], vw[2]

"""URDF → Pinocchio robot model, frame lookup, kinematics computed once per control step, and the
name-based joint map to a MuJoCo plant.

    robot = Robot("urdf/yumi.urdf")
    kin = robot.update(q, v)          # FK, Jacobians, their time variation, M, h: once per step
    fs = kin.frame("yumi_link_7_l")   # pose T, LOCAL_WORLD_ALIGNED J and dJ/dt, twist J v
    M, h = kin.M, kin.h               # M(q) v̇ + h(q, v) = τ  (h = Coriolis + gravity, Pinocchio nle)

The joint order used everywhere in models/ and controllers/ is the Pinocchio model's order.
"""
from __future__ import annotations

import difflib
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pinocchio as pin

from cmstack.models.errors import FrameNotFoundError, JointMapError, ModelFileError, StateError, check_finite

LWA = pin.ReferenceFrame.LOCAL_WORLD_ALIGNED


def _check_xml(path: Path, kind: str) -> None:
    if not path.is_file():
        raise ModelFileError(f"{kind} file not found: {path}. Check the path (a relative path is taken from the current directory, else from the cmstack package).")
    try:
        ET.parse(path)
    except ET.ParseError as exc:
        raise ModelFileError(f"{kind} file {path} is not well-formed XML: {exc}") from None


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


@dataclass
class FrameState:
    """Kinematics of one frame at the current (q, v); all in LOCAL_WORLD_ALIGNED (see docs/design.md).

    T: world pose; J (6×nv): [ṗ; ω] = J v; dJ (6×nv): dJ/dt, so [p̈; ω̇] = J v̇ + dJ v;
    twist = J v (linear velocity of the origin and angular velocity, both in world axes)."""

    T: pin.SE3
    J: np.ndarray
    dJ: np.ndarray
    twist: np.ndarray


@dataclass
class Kinematics:
    """Everything a controller needs at one (q, v), computed once by Robot.update."""

    robot: "Robot"
    q: np.ndarray
    v: np.ndarray
    M: np.ndarray
    h: np.ndarray
    _frames: dict = field(default_factory=dict)

    def frame(self, name_or_id) -> FrameState:
        fid = self.robot.frame_id(name_or_id) if isinstance(name_or_id, str) else int(name_or_id)
        fs = self._frames.get(fid)
        if fs is None:
            m, d = self.robot.model, self.robot.data
            J = pin.getFrameJacobian(m, d, fid, LWA)
            dJ = pin.getFrameJacobianTimeVariation(m, d, fid, LWA)
            fs = FrameState(T=d.oMf[fid].copy(), J=J, dJ=dJ, twist=J @ self.v)
            self._frames[fid] = fs
        return fs


class Robot:
    """A URDF loaded into Pinocchio, with clear errors and a once-per-step kinematics cache."""

    def __init__(self, urdf_path: str | Path):
        path = resolve_asset(urdf_path)
        _check_xml(path, "URDF")
        try:
            self.model = pin.buildModelFromUrdf(str(path))
        except Exception as exc:  # Pinocchio raises ValueError/RuntimeError with a C++ message
            raise ModelFileError(f"URDF {path} could not be loaded by Pinocchio: {exc}") from None
        if self.model.nv == 0:
            raise ModelFileError(f"URDF {path} has no movable joint.")
        self.path = path
        self.data = self.model.createData()
        self.joint_names = [self.model.names[i] for i in range(1, self.model.njoints)]
        for i, n in enumerate(self.joint_names, start=1):
            jm = self.model.joints[i]
            if jm.nq != 1 or jm.nv != 1:
                raise ModelFileError(f"URDF {path}: joint '{n}' has nq={jm.nq}, nv={jm.nv}; this stack's "
                                     "name-based plant map expects 1-DoF joints (revolute, prismatic).")
        self.nq, self.nv = self.model.nq, self.model.nv
        self.damping = np.array(self.model.damping, dtype=float).copy()
        self.effort_limit = np.array(self.model.effortLimit, dtype=float).copy()
        self._frame_ids: dict[str, int] = {}

    # ------------------------------------------------------------------ names
    def frame_id(self, name: str) -> int:
        fid = self._frame_ids.get(name)
        if fid is None:
            if not self.model.existFrame(name):
                names = [f.name for f in self.model.frames]
                close = difflib.get_close_matches(name, names, n=4)
                raise FrameNotFoundError(
                    f"frame '{name}' is not in {self.path.name}"
                    + (f"; did you mean {close}?" if close else f"; frames are e.g. {names[:8]}"))
            fid = self.model.getFrameId(name)
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
            raise FrameNotFoundError(f"frame '{name}' already exists in {self.path.name} with another placement")
        fid = self.model.addFrame(pin.Frame(name, parent.parentJoint, pid, oMf, pin.FrameType.OP_FRAME))
        self.data = self.model.createData()
        self._frame_ids[name] = fid
        return fid

    def joint_index(self, name: str) -> int:
        """Index of a 1-DoF joint in q and v."""
        if name not in self.joint_names:
            close = difflib.get_close_matches(name, self.joint_names, n=4)
            raise FrameNotFoundError(f"joint '{name}' is not in {self.path.name}"
                                     + (f"; did you mean {close}?" if close else f"; joints: {self.joint_names}"))
        return self.model.joints[self.model.getJointId(name)].idx_q

    def q_from_names(self, values: dict[str, float], default: np.ndarray | None = None) -> np.ndarray:
        q = np.zeros(self.nq) if default is None else np.array(default, dtype=float)
        for n, x in values.items():
            q[self.joint_index(n)] = x
        return q

    # ------------------------------------------------------------------ kinematics
    def update(self, q: np.ndarray, v: np.ndarray) -> Kinematics:
        """Run every algorithm a control step needs, once: FK with zero acceleration (so the
        classical drift terms come out of dJ v), joint Jacobians and their time variation, frame
        placements, M = CRBA (symmetrised), h = nle(q, v)."""
        q = np.asarray(q, dtype=float)
        v = np.asarray(v, dtype=float)
        if q.shape != (self.nq,) or v.shape != (self.nv,):
            raise StateError(f"{self.path.name}: expected q of size {self.nq} and v of size {self.nv}, "
                             f"got {q.shape} and {v.shape}")
        if not np.isfinite(q @ q + v @ v):  # one cheap test: NaN/inf anywhere makes the sum non-finite
            check_finite("q", q, f"state given to {self.path.name}")
            check_finite("v", v, f"state given to {self.path.name}")
            raise StateError(f"{self.path.name}: |q|² + |v|² overflows; the state is absurdly large")
        m, d = self.model, self.data
        pin.computeJointJacobiansTimeVariation(m, d, q, v)  # also runs FK (q, v) and the joint Jacobians
        pin.updateFramePlacements(m, d)
        M = pin.crba(m, d, q).copy()   # Pinocchio 4 returns the full symmetric matrix (tested)
        h = pin.nonLinearEffects(m, d, q, v).copy()
        return Kinematics(self, q.copy(), v.copy(), M, h)


class JointMap:
    """Name-based map between a Pinocchio model's 1-DoF joints and a MuJoCo model's joints.

    q_model[i] = qpos[qadr[i]],  v_model[i] = qvel[dadr[i]];  torques go to the motor actuator
    driving the same joint (ctrl = τ / gear).  Built once at start-up; a mismatch is refused with a
    message listing the names missing on either side.  Plant joints that the model deliberately does
    not have (a passive hinge of a closed chain, say) must be named in ``plant_only``."""

    def __init__(self, model_joint_names: list[str], mj_model, *, plant_only: tuple[str, ...] = (),
                 source: str = "plant"):
        import mujoco

        mj_names = [mujoco.mj_id2name(mj_model, mujoco.mjtObj.mjOBJ_JOINT, j) for j in range(mj_model.njnt)]
        missing = [n for n in model_joint_names if n not in mj_names]
        extra = [n for n in mj_names if n not in model_joint_names and n not in plant_only]
        if missing or extra:
            raise JointMapError(
                f"{source} joints do not match the model: "
                + (f"missing in the plant: {missing}; " if missing else "")
                + (f"in the plant but not in the model: {extra}; " if extra else "")
                + "rename them, or declare plant-only joints explicitly.")
        self.names = list(model_joint_names)
        self.jid = np.array([mj_names.index(n) for n in self.names])
        bad = [n for n, j in zip(self.names, self.jid)
               if int(mj_model.jnt_type[j]) not in (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))]
        if bad:
            raise JointMapError(f"{source}: joints {bad} are not hinge/slide joints; the model's are 1-DoF")
        self.qadr = mj_model.jnt_qposadr[self.jid].copy()
        self.dadr = mj_model.jnt_dofadr[self.jid].copy()
        # actuators: motor on a joint (trntype joint), by joint
        self.act = -np.ones(len(self.names), dtype=int)
        self.gear = np.ones(len(self.names))
        for a in range(mj_model.nu):
            if int(mj_model.actuator_trntype[a]) == int(mujoco.mjtTrn.mjTRN_JOINT):
                j = mj_model.actuator_trnid[a, 0]
                hit = np.flatnonzero(self.jid == j)
                if hit.size:
                    self.act[hit[0]] = a
                    self.gear[hit[0]] = mj_model.actuator_gear[a, 0]
        self.actuated = self.act >= 0

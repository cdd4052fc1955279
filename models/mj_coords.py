"""Pinocchio's (q, v) and MuJoCo's (qpos, qvel) of the same joints, mapped by joint name.

The two libraries agree on a hinge or slide joint (one angle or length, one rate) and differ on the
multi-DoF joints (each convention checked numerically in tests/test_joint_coords.py):

* **ball joint.**  MuJoCo qpos = unit quaternion (w, x, y, z); Pinocchio ``JointModelSpherical`` q =
  (x, y, z, w).  Both velocities are the child body's angular velocity relative to the parent in the
  child's (local) axes: v = qvel.
* **free joint.**  MuJoCo qpos = (p, w, x, y, z): the body origin in the world and its orientation;
  Pinocchio ``JointModelFreeFlyer`` q = (p, x, y, z, w), the same pose (the joint's placement is the
  identity: ``models/mjcf.py`` and ``Robot.compose`` make it so).  MuJoCo's qvel = (ṗ in world axes,
  ω in the body's axes); Pinocchio's v = (ṗ in the body's axes, ω in the body's axes), so with R the body's
  rotation (from the quaternion)
      v_lin = Rᵀ qvel_lin,   v_ang = qvel_ang;   qvel_lin = R v_lin.
  (Pinocchio's linear velocity is the spatial-velocity's linear part in the LOCAL frame, which for the
  body origin is Rᵀ ṗ: ``pin.getFrameVelocity(..., LOCAL).linear``.)

So q is a gather of qpos (a permutation that reorders each quaternion), qpos ← q the scatter back, and v a
gather of qvel with each free joint's linear part rotated.  Generalized forces map as velocities do (the
free joint's linear force: world axes in MuJoCo, local in Pinocchio), but this stack's plants drive only
1-DoF joints, so torques are a plain gather.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mujoco
import numpy as np
import pinocchio as pin

from cmstack.models.errors import JointMapError

# MuJoCo's joint types (mjtJoint): free 0, ball 1, slide 2, hinge 3
_MJ_FREE, _MJ_BALL = 0, 1
_PERM = {
    "free": np.array([0, 1, 2, 4, 5, 6, 3]),  # Pinocchio (p, x, y, z, w) ← MuJoCo (p, w, x, y, z)
    "ball": np.array([1, 2, 3, 0]),  # (x, y, z, w) ← (w, x, y, z)
    "1dof": np.array([0]),
}


_ONE_DOF = {
    "JointModelRX",
    "JointModelRY",
    "JointModelRZ",
    "JointModelRevoluteUnaligned",
    "JointModelPX",
    "JointModelPY",
    "JointModelPZ",
    "JointModelPrismaticUnaligned",
}


def _joint_kind(jm: Any) -> str | None:
    """'1dof', 'ball' (spherical: q a unit quaternion x, y, z, w, v the local angular velocity), 'free'
    (free flyer: q = [p; quaternion x, y, z, w], v = [local linear; local angular]) or None (not supported)."""
    name = jm.shortname()
    if name in _ONE_DOF:
        return "1dof"
    if name == "JointModelSpherical":
        return "ball"
    if name == "JointModelFreeFlyer":
        return "free"
    return None


def _pin_kind(jm: Any) -> str:
    return _joint_kind(jm) or jm.shortname()


class CoordinateMap:
    """q = qpos[qsel] (quaternions reordered), v = qvel[vsel] with each free joint's linear part rotated
    into its body's axes; the inverse maps scatter back.

    Args:
        mj_model: the MuJoCo model.
        mj_ids: the ids of the MuJoCo joints in the model's joint order (q and v are those joints' coordinates
            in that order: Pinocchio's layout, a free joint 7 and 6 of them, a ball 4 and 3, others 1 and 1).
        model: the Pinocchio model, when there is one: each joint's kind is then checked against MuJoCo's
            (a model ball joint that MuJoCo has as a hinge, say → ``JointMapError`` naming it).
        source: what errors call the MuJoCo model (a file name)."""

    def __init__(
        self,
        mj_model: mujoco.MjModel,
        mj_ids: Sequence[int] | np.ndarray,
        model: pin.Model | None = None,
        source: str = "plant",
    ) -> None:
        qsel: list[int] = []
        vsel: list[int] = []
        free_q, free_v = [], []
        for k, mj in enumerate(mj_ids):
            t = int(mj_model.jnt_type[mj])
            kind = {_MJ_FREE: "free", _MJ_BALL: "ball"}.get(t, "1dof")
            if model is not None:
                jm = model.joints[k + 1]
                if _pin_kind(jm) != kind:
                    mj_kind = {0: "free", 1: "ball", 2: "slide", 3: "hinge"}.get(t, str(t))
                    raise JointMapError(
                        f"{source}: joint '{model.names[k + 1]}' is a {mj_kind} joint in MuJoCo and a "
                        f"{jm.shortname()} in the model (nq={jm.nq}, nv={jm.nv}); the kinds must match"
                    )
            qa, da = int(mj_model.jnt_qposadr[mj]), int(mj_model.jnt_dofadr[mj])
            nv = {"free": 6, "ball": 3}.get(kind, 1)
            if kind == "free":
                free_q.append(len(qsel))
                free_v.append(len(vsel))
            qsel.extend((qa + _PERM[kind]).tolist())
            vsel.extend(range(da, da + nv))
        self.qsel = np.array(qsel, dtype=np.int64)
        self.vsel = np.array(vsel, dtype=np.int64)
        self.nq, self.nv = self.qsel.size, self.vsel.size
        self.free_q = np.array(free_q, dtype=np.int64)
        """q index of each free joint's position (its quaternion x, y, z, w at +3 … +6)."""
        self.free_v = np.array(free_v, dtype=np.int64)
        """v index of each free joint's linear velocity (+0 … +2; angular +3 … +5)."""
        self.has_free = bool(free_q)

    def q_from_qpos(self, qpos: np.ndarray) -> np.ndarray:
        return qpos[self.qsel]

    def qpos_into(self, q: np.ndarray, qpos: np.ndarray) -> None:
        """qpos[mapped entries] ← q (entries of joints the model does not have are left alone)."""
        qpos[self.qsel] = q

    def v_from_qvel(self, q: np.ndarray, qvel: np.ndarray) -> np.ndarray:
        """v from MuJoCo's qvel at configuration q (model order: the free joints' rotations come from q)."""
        v = qvel[self.vsel]
        for iq, iv in zip(self.free_q.tolist(), self.free_v.tolist()):
            R = _quat_xyzw_to_R(q[iq + 3 : iq + 7])
            v[iv : iv + 3] = R.T @ v[iv : iv + 3]
        return v

    def qvel_into(self, q: np.ndarray, v: np.ndarray, qvel: np.ndarray) -> None:
        """qvel[mapped entries] ← v at configuration q (model order)."""
        qvel[self.vsel] = v
        for iq, iv in zip(self.free_q.tolist(), self.free_v.tolist()):
            R = _quat_xyzw_to_R(q[iq + 3 : iq + 7])
            qvel[self.vsel[iv : iv + 3]] = R @ v[iv : iv + 3]


def _quat_xyzw_to_R(x: np.ndarray) -> np.ndarray:
    """Rotation matrix of a quaternion (x, y, z, w) (normalized here)."""
    return pin.Quaternion(float(x[3]), float(x[0]), float(x[1]), float(x[2])).normalized().matrix()

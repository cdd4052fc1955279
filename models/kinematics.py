"""One kinematic snapshot of a robot at (q, v): ``Kinematics`` (q, v, M, h, frames on demand) and the
``FrameState`` of one frame, both filled from the robot's Pinocchio data by ``Robot.update``.

Its own module (``models/robot.py`` re-exports both names) so that the step engine and the loops, which
build snapshots, need not import the robot model, which imports them (no import cycle,
``tests/test_import_cycles.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pinocchio as pin

from cmstack.models.errors import StateError

if TYPE_CHECKING:
    from cmstack.models.robot import Robot

LWA = pin.ReferenceFrame.LOCAL_WORLD_ALIGNED
_frame_jacobian = pin.getFrameJacobian
_frame_acc = pin.getFrameClassicalAcceleration
_fk = pin.forwardKinematics


class FrameState:
    """Kinematics of one frame at the current (q, v); all in LOCAL_WORLD_ALIGNED (see docs/design.md).

    R, p: world rotation and position; T: the same as a pin.SE3; J (6×nv): [ṗ; ω] = J v;
    twist = J v (linear velocity of the origin and angular velocity, both in world axes);
    acc = dJ v, the classical acceleration of the frame at v̇ = 0, so [p̈; ω̇] = J v̇ + acc;
    dJ (6×nv): dJ/dt (computed on first access: an extra Pinocchio pass)."""

    __slots__ = ("J", "twist", "acc", "R", "p", "_kin", "_fid", "_T", "_dJ")

    def __init__(
        self,
        J: np.ndarray,
        twist: np.ndarray,
        acc: np.ndarray,
        R: np.ndarray,
        p: np.ndarray,
        kin: Kinematics | None = None,
        fid: int = -1,
    ) -> None:
        self.J, self.twist, self.acc, self.R, self.p = J, twist, acc, R, p
        self._kin, self._fid = kin, fid
        self._T: pin.SE3 | None = None
        self._dJ: np.ndarray | None = None

    @property
    def T(self) -> pin.SE3:
        if self._T is None:
            self._T = pin.SE3(self.R, self.p)
        return self._T

    @property
    def dJ(self) -> np.ndarray:
        if self._dJ is None:
            if self._kin is None:
                raise StateError("FrameState.dJ: this frame state has no Kinematics to compute dJ from")
            self._dJ = self._kin._time_variation(self._fid)
        return self._dJ


class Kinematics:
    """Everything a controller needs at one (q, v), computed once by Robot.update: q, v, M (nv×nv,
    full symmetric), h = nle(q, v) (Coriolis + gravity), and frames on demand (``frame``)."""

    __slots__ = ("robot", "q", "v", "M", "h", "_frames", "_tv", "_gen")

    def __init__(
        self,
        robot: Robot,
        q: np.ndarray,
        v: np.ndarray,
        M: np.ndarray,
        h: np.ndarray,
        generation: int | None = None,
    ):
        """generation: the ``Robot.generation`` whose Pinocchio data holds this state (default: the current
        one); a snapshot made after the pass that computed it (a compiled step's lazily built snapshot)
        gives that pass's generation, so that it refuses to read frames once the data has moved on."""
        self.robot, self.q, self.v, self.M, self.h = robot, q, v, M, h
        self._frames: dict = {}
        self._tv = False
        # the robot's Pinocchio data holds this snapshot's state until it changes
        self._gen = robot._gen if generation is None else generation

    def _check_current(self) -> None:
        """A frame not read yet comes from the robot's Pinocchio data, which must still hold this snapshot:
        a later ``robot.update`` (another controller, a viewer) or ``add_frame`` would make it another
        state's, silently.  So that is an error naming what to do."""
        if self.robot._gen != self._gen:
            raise StateError(
                f"{self.robot.label}: this Kinematics snapshot (q, v of an earlier step) is stale: "
                "robot.update or add_frame ran since; read its frames before the next update, or give "
                "each consumer its own Robot"
            )

    def frame(self, name_or_id: str | int) -> FrameState:
        fs = self._frames.get(name_or_id)
        if fs is None:
            if self.robot._gen != self._gen:
                self._check_current()
            robot = self.robot
            fid = robot.frame_id(name_or_id) if isinstance(name_or_id, str) else int(name_or_id)
            m, d = robot.model, robot.data
            if robot._lean_gen == self._gen:  # a lean pass (Robot.update_for_kernel): the joints'
                _fk(m, d, self.q, self.v, np.zeros(robot.nv))  # accelerations at v̇ = 0, same (q, v)
                robot._lean_gen = -1
            J = _frame_jacobian(m, d, fid, LWA)  # also sets d.oMf[fid]
            if J.ndim == 1:  # Pinocchio returns (6,) for a 1-DoF model
                J = J.reshape(6, 1)
            H = d.oMf[fid].homogeneous  # an owned 4×4 copy
            acc = _frame_acc(m, d, fid, LWA).vector.copy()
            fs = FrameState(J, J @ self.v, acc, H[:3, :3], H[:3, 3], self, fid)
            self._frames[name_or_id] = fs
        return fs

    def _time_variation(self, fid: int) -> np.ndarray:
        self._check_current()
        m, d = self.robot.model, self.robot.data
        if not self._tv:
            pin.computeJointJacobiansTimeVariation(m, d, self.q, self.v)
            self._tv = True
        return pin.getFrameJacobianTimeVariation(m, d, fid, LWA).reshape(6, -1)

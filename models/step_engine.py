"""The step engine's tables: what a compiled step reads of a robot, built in one place.

Every compiled step of the stack (the UK step, ``controllers/uk_plan.py`` and ``_uk_kernels.uk_step``; PIDC's
closed-chain step, ``controllers/pidc_plan.py`` and ``_pidc_kernels.pidc_closed_step``; the loop closures' pass,
``models/loops.py: ClosureSet`` and ``_loop_kernels.closure_pass``) reads the same three things of the robot after
one Pinocchio pass, and this module builds them, once per step object:

* the **frame slots** (``FrameSlots``): every frame the step's tasks and loops name gets one row of the frame
  table ``frame_states`` (``models/_frame_kernels.py``) fills, given by
      fint[k] = [the row of the frame's parent joint in the joint-pose table, support mask of the nv columns]
      fplace[k] = ʲM_f (4×4), the frame's placement in that joint;
  the joint-pose table is either every joint in Pinocchio's order (row j − 1 for joint j, the world last: the
  compiled control steps, whose Newton–Euler pass reads every joint) or only the joints the frames hang on, in
  the order first named (``compact``: the loop closures' pass);
* the **body table** (``body_tables``) of ``_uk_kernels.bias_forces``, h = nle(q, v) by Newton–Euler: each joint's
  parent row, its body's [m, lever (3), Ī (3×3 row-major)], gravity;
* the **frame targets** (``copy_frame_targets``, ``sample_frame_targets``): constant poses and circles copied
  when a parameter moved, other trajectories sampled in Python each step;
* the **Python rows** (``PythonRows``) of the tasks without a compiled row builder, filled by their own
  ``qp_rows`` before the compiled call while the other tasks stay compiled;
* the **record** of one step (``StepRecord``): q, v, M, h, the frames, each group's rows and each task's error,
  typed and read-only;
* the **addresses** (``data_addresses``) of the Pinocchio arrays the kernels read in place (data.J, data.M, every
  slot joint's rotation and translation in data.oMi), after the one check that each is column-major float64.

The tables are plain arrays: a plan copies them into its packed tables (``uk_plan._FusedPlan``,
``pidc_plan.ClosedChainPlan``) or passes them as they are (``ClosureSet``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from cmstack.models.kinematics import FrameState, Kinematics


class FrameSlots:
    """The frame table's rows of one compiled step (module docstring).

    Args:
        model: the Pinocchio model (``robot.model``).
        compact: False: the joint-pose table holds every joint (row j − 1 for joint j, the world's pose last, row
            nj); True: only the joints the slots' frames hang on, in the order first named (``joint_ids``).
    """

    def __init__(self, model: Any, compact: bool = False) -> None:
        self.model = model
        self.compact = compact
        self.nv = int(model.nv)
        self.nj = int(model.njoints) - 1
        self._frames: dict[int, int] = {}
        self._joints: dict[int, int] = {}
        self._fint: list[np.ndarray] = []
        self._fplace: list[np.ndarray] = []

    def slot(self, fid: int) -> int:
        """The row of frame ``fid`` in the frame table (added on first use)."""
        k = self._frames.get(fid)
        if k is not None:
            return k
        model = self.model
        fr = model.frames[fid]
        j = int(fr.parentJoint)
        if self.compact:
            row = self._joints.setdefault(j, len(self._joints))
        else:
            row = j - 1 if j else self.nj
        mask = np.zeros(self.nv, dtype=np.int64)
        for ji in model.supports[j]:
            if ji > 0:  # every column of the joint (a ball joint 3, a free joint 6): 1 on its first, 2 on the
                jm = model.joints[ji]  # others (_frame_kernels.frame_states' drift term tells them apart)
                mask[jm.idx_v : jm.idx_v + jm.nv] = 2
                mask[jm.idx_v] = 1
        self._fint.append(np.r_[row, mask])
        self._fplace.append(fr.placement.homogeneous)
        k = self._frames[fid] = len(self._frames)
        return k

    def __len__(self) -> int:
        return len(self._frames)

    @property
    def index(self) -> dict[int, int]:
        """{frame id: its row in the frame table}."""
        return dict(self._frames)

    @property
    def joint_ids(self) -> list[int]:
        """The Pinocchio joints of the joint-pose table's rows, in row order (every joint 1 … nj, or the compact
        table's joints; the world's constant pose, row nj of the full table, is not listed)."""
        return list(self._joints) if self.compact else list(range(1, self.nj + 1))

    @property
    def fint(self) -> np.ndarray:
        """(nf, 1 + nv) int64: [joint-pose row, support mask] of each slot."""
        return np.array(self._fint, dtype=np.int64).reshape(len(self._fint), self.nv + 1)

    @property
    def fplace(self) -> np.ndarray:
        """(nf, 4, 4): each slot's placement ʲM_f in its joint."""
        return np.array(self._fplace, dtype=float).reshape(len(self._fplace), 4, 4)

    def joint_pose_table(self) -> np.ndarray:
        """A zero joint-pose table of the right size, (rows, 12) = [R row-major (9), p (3)] per row: the full
        table ends with the world's constant pose (row nj), which the kernels never overwrite."""
        if self.compact:
            return np.zeros((len(self._joints), 12))
        jpose = np.zeros((self.nj + 1, 12))
        jpose[self.nj] = np.r_[np.eye(3).ravel(), np.zeros(3)]
        return jpose


def body_tables(model: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(parent, inert, grav) of ``_uk_kernels.bias_forces``: parent (nj, 3) int64, each joint's [parent row (−1:
    the world), first velocity column (``idx_v``), number of velocity columns (``nv``: a ball joint 3)]; inert
    (nj, 13) = [m (kg), lever (3, m), Ī (3×3 row-major, kg·m², about the centre of mass in the joint's axes)] of
    each joint's body (``model.inertias``); grav (3,) = model.gravity.linear (m/s²)."""
    nj = int(model.njoints) - 1
    parent = np.array(
        [(model.parents[j] - 1, model.joints[j].idx_v, model.joints[j].nv) for j in range(1, nj + 1)],
        dtype=np.int64,
    ).reshape(nj, 3)
    inert = np.zeros((nj, 13))
    for j in range(1, nj + 1):
        Y = model.inertias[j]
        inert[j - 1] = np.r_[Y.mass, Y.lever, np.asarray(Y.inertia).ravel()]
    return parent, inert, np.array(model.gravity.linear, dtype=float)


def data_addresses(
    d: Any, front: Sequence[np.ndarray], joint_ids: Sequence[int], who: str = ""
) -> tuple[list[int], tuple]:
    """The addresses a compiled step reads in the Pinocchio data ``d``: those of the arrays ``front`` (e.g.
    data.J, data.M), then the rotation and translation of each joint of ``joint_ids`` in data.oMi, in that order.
    Each must be column-major float64 (Eigen's storage, refreshed in place by Pinocchio), else ``TypeError``
    naming its dtype and shape.  Returns (addresses, keep): hold ``keep`` (and ``d``) as long as the addresses
    are used, so that the storage stays."""
    poses = [d.oMi[j] for j in joint_ids]
    arrays = list(front) + [a for T in poses for a in (T.rotation, T.translation)]
    for a in arrays:
        if a.dtype != np.float64 or not a.flags.f_contiguous:
            raise TypeError(
                f"{who + ': ' if who else ''}Pinocchio data array of dtype {a.dtype}, shape {a.shape} is not "
                "column-major float64"
            )
    return [int(a.__array_interface__["data"][0]) for a in arrays], (d, poses, arrays)


def copy_frame_targets(
    frame_tasks: list[tuple[int, Any]], tgtH: np.ndarray, tgtVA: np.ndarray, tcirc: np.ndarray
) -> list[tuple[int, Any]]:
    """The frame tasks' targets into a compiled step's tables, for each (k, task) of ``frame_tasks``: a constant
    pose (``task.constant_target``: T, velocity, acceleration) as tgtH[k] = T (4×4), tgtVA[k] = [velocity (6),
    acceleration (6)]; a ``Circle`` (``trajectory.kernel_params()``) as tcirc[k] = [c (3), r, ω, φ, 1, u (3),
    w (3)] with its orientation in tgtH[k, :3, :3], sampled by the kernel (``_trajectory_kernels.circle_sample``);
    any other trajectory is returned in the list of (k, task) sampled in Python each step
    (``sample_frame_targets``).  Run when ``models/_params.version`` moved (a target, a trajectory or a circle's
    parameter was set)."""
    traj = []
    for k, task in frame_tasks:
        c = task.constant_target
        tcirc[k, 6] = 0.0
        if c is None:
            tr = task.trajectory
            circ = tr.kernel_params() if callable(getattr(tr, "kernel_params", None)) else None
            if circ is not None:  # sampled in the kernel
                tcirc[k, :6] = circ[:6]
                tcirc[k, 6] = 1.0
                tcirc[k, 7:] = circ[6:]  # the plane's axes u, w
                tgtH[k, :3, :3] = tr.R
            else:
                traj.append((k, task))
            continue
        T, vel, accD = c
        tgtH[k] = T.homogeneous
        tgtVA[k, :6] = vel
        tgtVA[k, 6:] = accD
    return traj


def sample_frame_targets(
    traj_tasks: list[tuple[int, Any]], tgtH: np.ndarray, tgtVA: np.ndarray, t: float
) -> None:
    """The frame targets of the tasks whose trajectory is sampled in Python (``task.desired(t)``: pose T, velocity,
    acceleration) into a compiled step's tables: tgtH[k] = T (4×4), tgtVA[k] = [velocity (6), acceleration (6)],
    for each (k, task) of ``traj_tasks`` (``copy_frame_targets``' list)."""
    for k, task in traj_tasks:
        T, vel, accD = task.desired(t)
        tgtH[k] = T.homogeneous
        tgtVA[k, :6] = vel
        tgtVA[k, 6:] = accD


class PythonRows:
    """The rows of the tasks that have no compiled row builder (``Task.kernel_kind()`` None), filled by their own
    Python each step before a compiled step's call, into tables the kernel reads (the fallback per task: the other
    tasks stay compiled; ``docs/add_a_task.md``).

    Args:
        robot: the ``Robot`` whose lean pass (``Robot.update_for_kernel``) ran this step.
        entries: (A, b, task) per task: views of the compiled step's table that receive [A | b] = task.qp_rows(kin,
            t) (world axes; A (k×nv), b (k,), k = task.dim).

    ``fill(t, q, v, kin)`` hands each task one ``Kinematics`` of this step, refilled each step (q, v, M of the lean
    pass, a view of the robot's data; frames on demand; h NaN: the compiled step's own output), or the caller's
    ``kin``; it is valid during the step's ``qp_rows`` calls only.
    """

    def __init__(self, robot: Any, entries: list[tuple[np.ndarray, np.ndarray, Any]]) -> None:
        self.robot = robot
        self.entries = entries
        self._kin: Kinematics | None = None
        self._data: Any = None

    def __bool__(self) -> bool:
        return bool(self.entries)

    @property
    def tasks(self) -> list[Any]:
        """The tasks whose rows are filled here, in row order."""
        return [task for _, _, task in self.entries]

    def snapshot(self, q: np.ndarray, v: np.ndarray) -> Kinematics:
        """The step's snapshot for the tasks' rows (class docstring), at the robot's current generation."""
        robot = self.robot
        k = self._kin
        if k is None or self._data is not robot.data:  # (a new data object: ``Robot.add_frame``)
            self._data = robot.data
            k = self._kin = Kinematics(robot, q, v, robot.data.M, np.full(robot.nv, np.nan), robot.generation)
            return k
        k.q, k.v, k._gen = q, v, robot.generation  # M: the same data's view, refreshed in place by crba
        if k._frames:
            k._frames = {}
        k._tv = False
        return k

    def fill(self, t: float, q: np.ndarray, v: np.ndarray, kin: Kinematics | None = None) -> None:
        """Every task's rows at (t, q, v) (or the caller's snapshot ``kin``) into its views; a task whose
        ``qp_rows`` gives the wrong shapes → ``ValueError`` naming it and both shapes."""
        if kin is None:
            kin = self.snapshot(q, v)
        for A_tab, b_tab, task in self.entries:
            A, b = task.qp_rows(kin, t)
            try:
                A_tab[...] = A
                b_tab[...] = b
            except ValueError:
                raise ValueError(
                    f"task {getattr(task, 'name', task)!r}: qp_rows gave A of shape {np.shape(A)} and b of shape "
                    f"{np.shape(b)}; its dim says {A_tab.shape} and {b_tab.shape}"
                ) from None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_kin"] = state["_data"] = None  # made again on first use
        return state


class StepRecord:
    """One compiled step's record, typed and read-only (issue 29 item 3): what the step computed from (t, q, v)
    before its law's solve.  Every array is a copy with ``writeable = False`` (so the record outlives the step's
    buffers and cannot be edited by a reader).

    Attributes:
        t (s); q, v (nv,); M (nv×nv), h (nv,) = nle(q, v) of the step's own pass (N·m);
        groups: the rows each priority group stacked, in order, as (A, b) with A v̇ = b (world axes; the groups
            above the last scaled by √ω as the law solves them, the last group's rows unscaled, its weights in
            ``weights``); a closed chain's level 1 holds its kept rows (the zero-torque rows included);
        weights: the last group's ω per row;
        errors: {task name: its pose error in its own axes (``Task.error``: m, rad)} of every task of the step.
    ``frame(fid)``: the pose, LOCAL_WORLD_ALIGNED Jacobian, twist and J̇v of a frame the step computed
    (``FrameState``; ``KeyError`` naming the frame id when the step did not compute it)."""

    __slots__ = ("t", "q", "v", "M", "h", "groups", "weights", "errors", "_frames")

    def __init__(
        self,
        t: float,
        q: np.ndarray,
        v: np.ndarray,
        M: np.ndarray,
        h: np.ndarray,
        groups: list[tuple[np.ndarray, np.ndarray]],
        weights: np.ndarray,
        errors: dict[str, np.ndarray],
        frames: dict[int, tuple[np.ndarray, np.ndarray]],
    ) -> None:
        def ro(a: np.ndarray) -> np.ndarray:
            a = np.array(a, dtype=float)
            a.flags.writeable = False
            return a

        self.t = float(t)
        self.q, self.v, self.M, self.h = ro(q), ro(v), ro(M), ro(h)
        self.groups = tuple((ro(A), ro(b)) for A, b in groups)
        self.weights = ro(weights)
        self.errors = {name: ro(e) for name, e in errors.items()}
        self._frames = {fid: (ro(J), ro(x)) for fid, (J, x) in frames.items()}

    def frame(self, fid: int) -> FrameState:
        """The frame ``fid`` as the step computed it: R, p (world), J (6×nv), twist = J v, acc = J̇ v."""
        if fid not in self._frames:
            raise KeyError(
                f"frame id {fid} was not computed by this step (its frames: {sorted(self._frames)})"
            )
        J, x = self._frames[fid]
        return FrameState(J, x[12:18], x[18:24], x[:9].reshape(3, 3), x[9:12])

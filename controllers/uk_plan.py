"""The compiled plan of the UK step: tables and buffers for ``controllers/_uk_kernels.py``, built once per
controller from what its tasks can do (``Task.kernel_kind()``), bound to the Pinocchio data it reads."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pinocchio as pin

from cmstack.models.coupling import JointTrajectoryTask
from cmstack.models.limits import EffortLimit
from cmstack.models.step_engine import (
    FrameSlots,
    PythonRows,
    body_tables,
    copy_frame_targets,
    data_addresses,
    sample_frame_targets,
)
from cmstack.models.trajectory import CIRCLE_ROW

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType

    from cmstack.controllers.udwadia_kalaba import UdwadiaKalabaController
    from cmstack.controllers.uk_levels import _Level
    from cmstack.models.coupling import Task
    from cmstack.models.robot import Robot

#: one task of the plan in row order: (task, √ω scale, weight in H, 1 if in the final level)
_Entry = tuple  # (Task, float, float, int)

#: header slot (``_uk_kernels``) -> the part of the integer table whose offset it holds
_I_OFFSETS = {
    "O_TINT": "tint",
    "O_FINT": "fint",
    "O_PIDX": "pidx",
    "O_EIDX": "eidx",
    "O_PARENT": "parent",
    "O_PAS": "pas",
    "O_LROWS": "lrows",
    "O_LVL": "lvl",
    "O_PPIV": "ppiv",
    "O_KEEP": "keep",
}
#: header slot (``_uk_kernels``) -> the part of the float table whose offset it holds
_F_OFFSETS = {
    "O_FPLACE": "fplace",
    "O_FJ": "fJ",
    "O_FVEC": "fvec",
    "O_TFLT": "tflt",
    "O_TGTH": "tgtH",
    "O_TGTVA": "tgtVA",
    "O_TCIRC": "tcirc",
    "O_QREF": "qref",
    "O_TBIAS": "tbias",
    "O_TERR": "terr",
    "O_WK": "wk",
    "O_JPOSE": "jpose",
    "O_INERT": "inert",
    "O_GRAV": "grav",
    "O_RNEA": "rnea",
    "O_LSCALE": "lscale",
    "O_JC": "Jc",
    "O_CTOL": "ctol",
    "O_PWORK": "pwork",
    "O_SCR": "scr",
    "O_PYAB": "pyab",
}


def _packed(sizes: dict[str, int], start: int) -> tuple[dict[str, int], int]:
    """({part: offset}, total length) of the parts of ``sizes`` laid end to end after ``start`` entries."""
    offsets, o = {}, start
    for name, size in sizes.items():
        offsets[name] = o
        o += size
    return offsets, o


class _FusedPlan:
    """Tables and buffers of the compiled step (``controllers/_uk_kernels.py``), built once per
    controller: the frames the tasks need (each with its joint, placement and support columns), the
    tasks in row order (the levels above the last, scaled by √ω, then the last level's, weighted by ω
    in H), the first ``EffortLimit`` (the others are checked in Python)."""

    @staticmethod
    def _inner(task: Task) -> Any:
        """The task whose compiled rows stand for ``task``: itself, or the task one with integral action
        wraps (``kernel_biased_inner``: its β = K_i z enters the kernel as a bias of those rows), or None.
        Typed Any: the plan reads what its kernel kind has (``fid``; ``fa``, ``fb``, ``code``; ``idx``)."""
        biased = getattr(task, "kernel_biased_inner", None)
        return biased() if biased is not None else task

    @classmethod
    def build(cls, ctl: UdwadiaKalabaController) -> _FusedPlan | None:
        """The plan, or None when numba is missing or the layout is one it does not compile.  A task without a
        compiled row builder (``Task.kernel_kind()`` None: a user's task, or a subclass that redefines its row
        maths) fills its own rows in Python (``task.qp_rows``) into the step's table while the others stay
        compiled (``py_tasks``: the fallback is per task, not per step); not so a task with integral action around
        such a task, nor one of the robot's loops (the closed-chain level reads compiled loop rows): those take
        the generic path."""
        loops = {id(c) for c in ctl.loops}
        for L in ctl.levels:
            for task in L.tasks:
                inner = cls._inner(task)
                if inner is None:
                    return None
                kk = getattr(inner, "kernel_kind", None)
                if (not callable(kk) or kk() is None) and (inner is not task or id(task) in loops):
                    return None
        if ctl._passive.size and not ctl.loops:
            return None  # passive joints without loops: the generic path (their rows are M_p v̇ = −h_p)
        try:
            from cmstack.controllers import _uk_kernels
        except ImportError:  # numba absent: the generic path
            return None
        return cls(ctl, _uk_kernels)

    def __init__(self, ctl: UdwadiaKalabaController, K: ModuleType) -> None:
        self.step = K.uk_step
        robot, n = ctl.robot, ctl.n
        model = robot.model
        upper, entries, gap_after = self._layout(ctl)
        npas = int(ctl._passive.size)
        slots = FrameSlots(model)  # the frames the tasks name (models/step_engine.py)
        tint, tflt, pidx, bounds, row, n_py = self._task_tables(entries, gap_after, npas, slots.slot, K)
        nt = len(entries)
        width = max([6] + [int(r[5]) for r in tint])
        m = self.m_up = sum(L.dim for L in upper) + (npas if self.closed else 0)
        pas, lrows, lscale, lvl = self._closed_tables(ctl, upper)
        nl = lrows.size
        from cmstack.controllers.kernels import passive_work

        pw_f, pw_i = passive_work(nl, pas.size) if self.closed else (0, 0)
        nf, nj = len(slots), model.njoints - 1
        eidx = self._kernel_effort(ctl)
        # the two tables the kernel reads (``_uk_kernels.uk_step``): a header of sizes and offsets, then
        # every table; the plan's arrays below are views into them, so writing one is what the kernel reads
        n_keep = m + lvl.size if self.closed else 0
        i_sizes = {
            "tint": tint.size,
            "fint": nf * (n + 1),
            "pidx": 2 * len(pidx),  # the joint tasks' v indices, then their q indices
            "eidx": eidx.size,
            "parent": 3 * nj,
            "pas": pas.size,
            "lrows": nl,
            "lvl": lvl.size,
            "ppiv": pw_i,
            "keep": n_keep,
        }
        f_sizes = {
            "fplace": 16 * nf,
            "fJ": 6 * n * nf,
            "fvec": 24 * nf,
            "tflt": 4 * nt,
            "tgtH": 16 * nt,
            "tgtVA": 12 * nt,
            "tcirc": CIRCLE_ROW * nt,
            "qref": 7 * len(pidx),
            "tbias": width * nt,
            "terr": width * nt,
            "wk": K.kkt_work_size(n, m),
            "jpose": 12 * (nj + 1),
            "inert": 13 * nj,
            "grav": 3,
            "rnea": 18 * nj,
            "lscale": nl,
            "Jc": nl * n,
            "ctol": 1,
            "pwork": pw_f,
            "scr": 4 * width + 9 + n,
            "pyab": n_py * (n + 1),
        }
        self._off_i, i_len = _packed(i_sizes, K.HEADER)
        self._off_f, f_len = _packed(f_sizes, 2)
        self.I = np.zeros(i_len, dtype=np.int64)
        self.F = np.zeros(f_len)
        sizes = (n, nt, nf, nj, m, row, width, len(pidx), eidx.size, K.kkt_work_size(n, m))
        self._write_header(K, sizes, pas.size, nl, lvl.size, n_py)
        self.I[K.NQ] = nq = robot.nq  # q is a point of the joint manifold (nq ≠ nv with a ball joint)
        self._fill_tables(ctl, slots, (tint, tflt, pidx, eidx), (pas, lrows, lscale, lvl))
        self._bind_float_views(K, robot, slots, n, m, nt, width, len(pidx), n_py)
        # the step's buffer (``uk_step``): [q (nq) | v | M | h | v̇ | τ | h + D v | λ | Ab]
        self.ab_shape = (row, n + 1)
        self.nq = nq
        self.o_out = nq + 2 * n + n * n
        self.o_ab = self.o_out + 3 * n + m
        # closed: the loop reaction λ, then the kept rows of each upper level, last
        self.buf_len = self.o_ab + row * (n + 1) + nl + lvl.size
        self.sl_x, self.sl_tau = slice(self.o_out, self.o_out + n), slice(self.o_out + n, self.o_out + 2 * n)
        self.plain = not self.other_limits  # no limit beside the kernel's effort limit
        self.n = n
        self.data = None
        self.ptr: np.ndarray | None = None
        self.D: np.ndarray | None = None
        self.tmax: np.ndarray | None = None
        self.version = -1  # models._params.version when the gains and targets were copied
        self.traj_tasks: list = []  # frame tasks whose target is sampled in Python every step
        self.traj_joints: list = []  # joint trajectory tasks sampled in Python every step (not a Sinusoid)
        self.sampled = False  # traj_tasks or traj_joints (``sample`` runs each step)
        # row ranges of each upper level and of each last-level task (for the fallbacks and forces)
        self._levels, i = [], 0
        for L in upper:
            j = i + L.dim
            self._levels.append((i, j))
            i = j
        self._final = [(bounds[k][0], bounds[k][1], entries[k][2]) for k in range(nt) if entries[k][3]]
        self._table_views = self._find_views()

    def _layout(self, ctl: UdwadiaKalabaController) -> tuple[list[_Level], list[_Entry], int]:
        """(upper levels, entries, gap_after): the levels the KKT holds as equalities, every task in row
        order as (task, √ω scale, weight in H, 1 if in the final level), and the entry before which the
        passive joints' zero-torque rows open a gap in level 1 (−1: none).  Sets ``closed``, ``absorbed``
        and ``absorbed_sqrt_w``.

        "absorbed": the last level is Gauss alone and the levels above it have more rows than there are
        degrees of freedom (e.g. a posture on every joint as the last strict level), so they cannot all
        be equalities of one KKT system.  The level before Gauss is then solved as the KKT's final level
        without Gauss (H = Σ ω AᵀA, no M).  When that H is positive definite the level's minimiser
        over the levels above is unique, so Gauss, strictly after it, has nothing left to decide and
        the solution is the strict one; otherwise (and whenever a limit is hit) the step takes the
        generic path (``_call_generic``), whose null-space solve such layouts needed every step.
        "closed": passive joints (with the robot's loops in level 1), ``_uk_kernels.passive_level``: level 1 gets
        the zero-torque rows in a gap of p rows after its own, every upper level loses its vanishing rows, and
        the torque sent is T (M v̇ + h + D v); never absorbed (the generic path's layout, row for row)."""
        self.closed = bool(ctl._passive.size)
        self.absorbed = not self.closed and not ctl._final.tasks and len(ctl._upper) >= 1 and ctl.n_eq > ctl.n
        upper = ctl._upper[:-1] if self.absorbed else ctl._upper
        last = ctl._upper[-1] if self.absorbed else ctl._final
        entries = [(task, float(sw), 0.0, 0) for L in upper for task, sw in zip(L.tasks, L.sqrt_w)]
        gap_after = len(upper[0].tasks) if self.closed else -1  # the entry before which the gap opens
        entries += [(task, 1.0, float(w), 1) for task, w in zip(last.tasks, last.weights)]
        self.absorbed_sqrt_w = np.repeat(last.sqrt_w, [t.dim for t in last.tasks]) if self.absorbed else None
        return upper, entries, gap_after

    def _task_tables(
        self, entries: list[_Entry], gap_after: int, npas: int, slot: Callable[[int], int], K: ModuleType
    ) -> tuple[np.ndarray, np.ndarray, list[int], list[tuple[int, int]], int, int]:
        """(tint, tflt, pidx, bounds, rows, n_py): each entry's integer row (kind, frame slots a b, first row,
        first selected row, rows, offset, final) and float row (k_p, k_d, √ω scale, weight), the joint
        indices of the joint-space tasks, each entry's row range, the stacked row count (the passive gap
        included) and the Python-filled rows.  Sorts the tasks into ``postures``, ``frame_tasks``,
        ``joint_trajs``, ``task_items``, ``integrals`` and ``py_tasks``."""
        nt = len(entries)
        tint = np.zeros((nt, 8), dtype=np.int64)
        tflt = np.zeros((nt, 4))
        pidx: list[int] = []
        self._pqidx: list[int] = []  # the q indices of pidx's joints (after a ball or free joint they differ)
        self.postures, self.frame_tasks, self.task_items, self.integrals = [], [], [], []
        self.joint_trajs: list = []  # (entry, first, stop in pidx, task) of the joint trajectory tasks
        self.py_tasks: list = []  # (A, b views of the table pyab, task) of the tasks whose rows Python fills
        row = n_py = 0
        bounds = []
        for k, (outer, sc, w, final) in enumerate(entries):
            if k == gap_after:
                row += npas
            task = self._inner(outer)
            if task is not outer:
                self.integrals.append((k, outer))
            kk = getattr(task, "kernel_kind", None)
            kind = kk() if callable(kk) else None
            a = b = off = 0
            sel0, nsel = task.rows.start, task.dim
            if kind is None:  # rows from the task's own Python (``step_engine.PythonRows``)
                kind, sel0, off = K.PYTHON, 0, n_py
                self.py_tasks.append((n_py, n_py + nsel, task))
                n_py += nsel
                tint[k] = (kind, a, b, row, sel0, nsel, off, final)
                tflt[k] = (0.0, 0.0, sc, w)
                bounds.append((row, row + nsel))
                row += nsel
                continue
            if kind == 1:
                a = slot(task.fid)
                self.frame_tasks.append((k, task))
            elif kind == 3:  # a loop closure (a coupling too): its frames, its code, its first kept row
                a, b, off = slot(task.fa), slot(task.fb), task.code
            else:
                off, sel0 = len(pidx), 0
                pidx.extend(int(i) for i in task.idx)
                self._pqidx.extend(int(i) for i in task.qidx)
                if isinstance(task, JointTrajectoryTask):  # its rows are JointTrajectoryTask's (kernel_kind)
                    self.joint_trajs.append((k, off, off + nsel, task))
                else:
                    self.postures.append((off, off + nsel, task))
            tint[k] = (kind, a, b, row, sel0, nsel, off, final)
            tflt[k] = (task.kp, task.kd, sc, w)
            self.task_items.append((k, task))
            bounds.append((row, row + nsel))
            row += nsel
        if self.closed and gap_after == len(entries):
            row += npas  # level 1 is the only upper level and Gauss has no task
        return tint, tflt, pidx, bounds, row, n_py

    def _closed_tables(
        self, ctl: UdwadiaKalabaController, upper: list[_Level]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The closed-chain tables (empty unless ``closed``): the passive joints, the loops' rows in level 1
        and their √ω, the upper levels' sizes."""
        if not self.closed:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64)
        return (
            np.ascontiguousarray(ctl._passive, dtype=np.int64),
            ctl._loop_rows.astype(np.int64),
            ctl._loop_scale.astype(float),
            np.array([L.dim for L in upper], dtype=np.int64),
        )

    def _kernel_effort(self, ctl: UdwadiaKalabaController) -> np.ndarray:
        """The joint indices of the effort limit checked in the kernel (``effort``: the first
        ``EffortLimit`` whose bounds are EffortLimit's own); the other limits are ``other_limits``."""
        efforts = [
            lim
            for lim in ctl.limits
            if isinstance(lim, EffortLimit)
            and type(lim).bounds is EffortLimit.bounds
            and type(lim).violated is EffortLimit.violated
        ]
        self.effort = efforts[0] if efforts else None
        self.other_limits = [lim for lim in ctl.limits if lim is not self.effort]
        if self.effort is None:
            return np.zeros(0, np.int64)
        return np.ascontiguousarray(self.effort.idx, dtype=np.int64)

    def _write_header(
        self, K: ModuleType, sizes: tuple[int, ...], n_pas: int, n_lrows: int, n_lvl: int, n_py: int
    ) -> None:
        """The integer table's header (``_uk_kernels``: N … O_KEEP, O_PYAB, N_PYAB): the sizes
        (n, tasks, frames, joints, upper rows, rows, width, pidx, eidx, work) and every table's offset."""
        I, off_i, off_f = self.I, self._off_i, self._off_f
        n, nt, nf, nj, m, row, width, n_pidx, n_eidx, n_wk = sizes
        I[[K.N, K.NT, K.NF, K.NJ, K.M_UP, K.NROWS, K.WIDTH]] = n, nt, nf, nj, m, row, width
        counts = {K.N_PIDX: n_pidx, K.N_EIDX: n_eidx, K.N_WK: n_wk, K.N_PAS: n_pas, K.N_LROWS: n_lrows}
        counts.update({K.N_LVL: n_lvl, K.N_PYAB: n_py})
        for slot, value in counts.items():
            I[slot] = value
        for name, table in _I_OFFSETS.items():
            I[getattr(K, name)] = off_i[table]
        for name, table in _F_OFFSETS.items():
            I[getattr(K, name)] = off_f[table]

    def _iview(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """The integer table's part ``name`` as an array of ``shape`` (a view: the kernel reads what is written)."""
        o = self._off_i[name]
        return self.I[o : o + int(np.prod(shape))].reshape(shape)

    def _fview(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """The float table's part ``name`` as an array of ``shape`` (a view: the kernel reads what is written)."""
        o = self._off_f[name]
        return self.F[o : o + int(np.prod(shape))].reshape(shape)

    def _fill_tables(
        self,
        ctl: UdwadiaKalabaController,
        slots: FrameSlots,
        tasks: tuple[np.ndarray, np.ndarray, list[int], np.ndarray],
        closed: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    ) -> None:
        """Copy the task tables (tint, tflt, pidx, eidx), the frame slots and the closed-chain tables (pas,
        lrows, lscale, lvl) into I and F, keeping the views the step writes or reads later."""
        tint, tflt, pidx, eidx = tasks
        pas, lrows, lscale, lvl = closed
        nt, nf, nl, n = len(tint), len(slots), lrows.size, ctl.n
        self.tint = self._iview("tint", (nt, 8))
        self.tint[:] = tint
        self.fint = self._iview("fint", (nf, n + 1))
        self.fint[:] = slots.fint
        self.pidx = self._iview("pidx", (2 * len(pidx),))  # [v indices | q indices] (``task_rows``)
        self.pidx[:] = pidx + self._pqidx
        self.eidx = self._iview("eidx", (eidx.size,))
        self.eidx[:] = eidx
        self._iview("pas", (pas.size,))[:] = pas
        self._iview("lrows", (nl,))[:] = lrows
        self._iview("lvl", (lvl.size,))[:] = lvl
        self._fview("lscale", (nl,))[:] = lscale
        self._fview("ctol", (1,))[0] = ctl.rank_tol
        # the last step's loops' rows J_c (``passive_level`` writes them): its torque map T, on demand
        # (``torque_map``), read from F itself: a pickled plan's views are copies
        self._jc = (self._off_f["Jc"], nl, n)
        self.passive = pas
        self.rank_tol = float(ctl.rank_tol)
        self.n_levels = lvl.size
        self.n_loop_rows = nl
        self.tflt = self._fview("tflt", (nt, 4))
        self.tflt[:] = tflt

    def _bind_float_views(
        self,
        K: ModuleType,
        robot: Robot,
        slots: FrameSlots,
        n: int,
        m: int,
        nt: int,
        width: int,
        n_pidx: int,
        n_py: int,
    ) -> None:
        """The float table's views the step and Python share: the Python rows' table (``PythonRows``), the
        frames' placements, Jacobians and vectors, the targets, biases and errors of the tasks, the joint
        references, the joints' pose table, the bodies of the kernel's h, the KKT work and Gauss' weight."""
        nf, nj = len(slots), robot.model.njoints - 1
        # the Python rows' table: (A view, b view, task) of each task of kind PYTHON (``step_engine.PythonRows``)
        pyab = self._fview("pyab", (n_py, n + 1))
        self.pyab = pyab
        self._py_rows = self.py_tasks  # (first row in pyab, stop, task): made views again after unpickling
        self.python = PythonRows(robot, [(pyab[i:j, :n], pyab[i:j, n], task) for i, j, task in self._py_rows])
        self.py_tasks = self.python.entries
        self.fplace = self._fview("fplace", (nf, 4, 4))
        self.fplace[:] = slots.fplace
        self.tbias = self._fview("tbias", (nt, width))  # β = K_i z of the tasks with integral action
        self.terr = self._fview("terr", (nt, width))  # every task's pose error, written by the kernel
        # [q_d | v_d | a_d | c | a | ω | φ] (``_uk_kernels.task_rows_into``)
        self.qref = self._fview("qref", (7 * n_pidx,))
        self.jref = self.qref.reshape(7, n_pidx)
        self.fJ = self._fview("fJ", (nf, 6, n))
        self.fvec = self._fview("fvec", (nf, 24))
        self.tgtH = self._fview("tgtH", (nt, 4, 4))
        self.tgtVA = self._fview("tgtVA", (nt, 12))
        self.tcirc = self._fview("tcirc", (nt, CIRCLE_ROW))
        self.jpose = self._fview("jpose", (nj + 1, 12))  # every joint's [R row-major, p], then the world's
        self.jpose[:] = slots.joint_pose_table()
        # the bodies for the kernel's h (``_uk_kernels.bias_forces``, ``step_engine.body_tables``)
        self.parent = self._iview("parent", (nj, 3))
        self.inert = self._fview("inert", (nj, 13))
        self.parent[:], self.inert[:], self._fview("grav", (3,))[:] = body_tables(robot.model)
        self.wk = self._fview("wk", (K.kkt_work_size(n, m),))
        self.H = self.wk[: n * n].reshape(n, n)
        self.r = self.wk[n * n : n * n + n]
        self.gauss = 0.0 if self.absorbed else 1.0
        self.F[0] = self.gauss
        self.joint_ids = slots.joint_ids
        self.frame_index = slots.index  # {frame id: its row in fJ, fvec} (``StepRecord``)

    def _find_views(self) -> dict:
        """{attribute: (table, byte offset, shape, strides)} of every attribute that is a view into I or F (what
        Python writes there is what the kernel reads), so that an unpickled plan makes them views again."""
        out = {}
        for name, a in self.__dict__.items():
            if not isinstance(a, np.ndarray) or name in ("I", "F"):
                continue
            for tab in ("I", "F"):
                T = getattr(self, tab)
                if np.shares_memory(a, T):
                    off = a.__array_interface__["data"][0] - T.__array_interface__["data"][0]
                    out[name] = (tab, off, a.shape, a.strides)
        return out

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        for name, (tab, off, shape, strides) in self._table_views.items():
            T = getattr(self, tab)
            setattr(self, name, np.ndarray(shape, dtype=T.dtype, buffer=T, offset=off, strides=strides))
        n = self.n
        self.python.entries = [(self.pyab[i:j, :n], self.pyab[i:j, n], task) for i, j, task in self._py_rows]
        self.py_tasks = self.python.entries

    def bind(self, d: pin.Data, D: np.ndarray, sqrt_tol: float) -> None:
        """The addresses of what the kernel reads (``_uk_kernels.uk_step``): in the Pinocchio data ``d``
        (refreshed in place by Pinocchio; ``d`` is held, so its storage stays) data.J, data.M and every
        joint's rotation and translation in data.oMi; the damping D and the effort limit's
        τ_max (held too), so that a change in place is read.  Taken again when the robot's data object
        changes (``Robot.add_frame`` creates a new one), or D or τ_max is replaced by another array."""

        Dk = np.ascontiguousarray(D, dtype=np.float64)
        tmax = None if self.effort is None else self.effort.tau_max
        tk = np.ascontiguousarray(np.zeros(0) if tmax is None else tmax, dtype=np.float64)
        if Dk.shape != (self.n,) or tk.shape != self.eidx.shape:
            raise ValueError(
                f"damping of shape {Dk.shape} or tau_max of shape {tk.shape}: expected ({self.n},) and "
                f"{self.eidx.shape}"
            )
        ptr, keep = data_addresses(d, [d.J, d.M], self.joint_ids)  # (models/step_engine.py)
        ptr[2:2] = [int(a.__array_interface__["data"][0]) for a in (Dk, tk)]
        self.ptr = np.array(ptr, dtype=np.int64)
        self._keep = (keep, Dk, tk)
        self.data, self.D, self.tmax = d, D, tmax
        self.F[1] = sqrt_tol

    def copy_parameters(self) -> None:
        """Copy every task's gains and targets into the tables (the kernel reads them there): run when
        ``models._params.version`` moved, i.e. a task's ``kp``, ``kd``, ``q_ref``, target or trajectory or
        a ``Circle``'s parameters were set since the last copy.  Frame tasks following a trajectory other
        than a ``Circle`` (which the kernel samples) are listed in ``traj_tasks``: sampled every step."""
        tflt = self.tflt
        for k, task in self.task_items:
            tflt[k, 0] = task.kp
            tflt[k, 1] = task.kd
        for off, stop, task in self.postures:
            self.jref[0, off:stop] = task.q_ref
        joints = []
        for k, off, stop, task in self.joint_trajs:
            tr = task.trajectory
            sin = tr.kernel_sinusoid() if callable(getattr(tr, "kernel_sinusoid", None)) else None
            if sin is not None and all(np.shape(x) in ((stop - off,), (1,)) for x in sin):
                self.jref[3:, off:stop] = sin  # sampled in the kernel (``sinusoid_sample``)
                self.tint[k, 1] = 1
            else:
                self.tint[k, 1] = 0
                joints.append((off, stop, task))
        self.traj_joints = joints
        traj = copy_frame_targets(self.frame_tasks, self.tgtH, self.tgtVA, self.tcirc)
        self.traj_tasks = traj
        self.sampled = bool(traj or self.traj_joints)

    def sample(self, t: float) -> None:
        """The targets of ``traj_tasks`` and ``traj_joints`` at t, into the tables."""
        for off, stop, task in self.traj_joints:
            for i, x in enumerate(task.trajectory(t)):  # (q_d, v_d, a_d), each broadcast to the joints
                self.jref[i, off:stop] = x
        sample_frame_targets(self.traj_tasks, self.tgtH, self.tgtVA, t)

    def pose_table(self, d: pin.Data) -> np.ndarray:
        """The kernel's joint-pose table [R row-major, p] of the plan's joints in the data ``d`` (tests)."""
        return np.array(
            [np.r_[d.oMi[j].rotation.ravel(), d.oMi[j].translation] for j in self.joint_ids + [0]]
        ).reshape(len(self.joint_ids) + 1, 12)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(data=None, ptr=None, _keep=None, version=-1, D=None, tmax=None)  # rebound on first use
        return state

    def torque_map(self) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
        """(T, (J_c, G⁺)) of the last step of a closed plan: ``kernels.passive_map`` on the loops' rows that step
        wrote (the same COD as the step's; what the generic path keeps as ``_T`` and ``_loop_reaction``)."""
        from cmstack.controllers.kernels import passive_map

        o, nl, n = self._jc
        Jc = self.F[o : o + nl * n].reshape(nl, n).copy()
        T, Gp, _ = passive_map(Jc, self.passive, self.rank_tol)
        return T, (Jc, Gp)

    def loop_reaction(self, buf: np.ndarray) -> np.ndarray:
        """λ = G⁺ S_p (M v̇ + h + D v) of a closed plan's step (``kernels.passive_torque`` wrote it), a view."""
        nb = len(buf)
        return buf[nb - self.n_levels - self.n_loop_rows : nb - self.n_levels]

    def _kept(self, buf: np.ndarray) -> list[int]:
        """The kept rows of each upper level of a closed plan's step (``passive_level``'s counts)."""
        return [int(x) for x in buf[len(buf) - self.n_levels :]]

    def task_tables(self) -> tuple[np.ndarray, ...]:
        """The tables ``_uk_kernels.task_rows_into`` reads after (t, q, v), in its order: (fJ, fvec, tint, tflt,
        tgtH, tgtVA, tcirc, pidx, qref, tbias) (views)."""
        return (
            self.fJ,
            self.fvec,
            self.tint,
            self.tflt,
            self.tgtH,
            self.tgtVA,
            self.tcirc,
            self.pidx,
            self.qref,
            self.tbias,
        )

    def results(
        self, buf: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
        """(v̇, τ, h + D v, λ or None, Ab) of one step's buffer (views)."""
        n = self.n
        o = self.o_out
        lam = buf[o + 3 * n : self.o_ab] if self.m_up else None
        if self.closed and lam is not None:
            lam = lam[: sum(self._kept(buf))]
        Ab = buf[self.o_ab : self.o_ab + self.ab_shape[0] * self.ab_shape[1]].reshape(self.ab_shape)
        return buf[o : o + n], buf[o + n : o + 2 * n], buf[o + 2 * n : o + 3 * n], lam, Ab

    def views(
        self, Ab: np.ndarray, buf: np.ndarray | None = None
    ) -> tuple[
        np.ndarray,
        np.ndarray,
        list[tuple[np.ndarray, np.ndarray]],
        list[tuple[np.ndarray, np.ndarray, float]],
    ]:
        """(E, f, rows, final_rows) of one step's [A | b] (contiguous copies, as the generic path's); a closed
        plan's rows are those its step kept (``buf``: that step's buffer)."""
        n = Ab.shape[1] - 1
        levels = self._levels
        if self.closed:
            assert buf is not None
            levels, i = [], 0
            for k in self._kept(buf):
                levels.append((i, i + k))
                i += k
        m = levels[-1][1] if levels else 0
        E, f = Ab[:m, :n].copy(), Ab[:m, n].copy()
        rows = [(Ab[i:j, :n].copy(), Ab[i:j, n].copy()) for i, j in levels]
        final_rows = [(Ab[i:j, :n].copy(), Ab[i:j, n].copy(), w) for i, j, w in self._final]
        return E, f, rows, final_rows

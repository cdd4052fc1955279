"""The compiled closed-chain step of PIDC: tables and buffers for ``controllers/_pidc_kernels.py: pidc_closed_step``,
built once per controller, bound to the Pinocchio data the robot's lean pass (``Robot.update_for_kernel``: one
``pin.crba``) refreshes in place.

One compiled call then does the whole step after that pass: h (``_uk_kernels.bias_forces``, Newton–Euler from
data.J and every joint's pose), the frames the loops and the tasks need (``_uk_kernels.frame_states``, from data.J,
data.oMi and v), the loops' rows (``models/_loop_kernels.py``), the task coordinates' rows
(``_uk_kernels.task_rows_into``: the kernels the tasks' own ``error_dynamics`` call, in world axes), and the law
(``pidc_rows``).  Python keeps what is not an array: the tasks' gains and targets, copied into the tables when one
was set (``copy_parameters``, ``models/_params.py``), the targets of frame tasks that follow neither a constant
pose nor a ``Circle`` (sampled with ``task.desired(t)`` each step, ``sample``), and the step's bookkeeping."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

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
    from cmstack.controllers.pidc import PIDC


class ClosedChainPlan:
    """Tables of ``pidc_closed_step`` for a PIDC on ``robot.loops`` (compiled closure kinds only) with joint
    coordinates or task coordinates whose rows have a compiled builder (frame tasks and loop closures, couplings
    included, ``Task.kernel_kind()`` 1 or 3) or none (``kernel_kind()`` None: the task's own ``qp_rows`` fill its
    rows before the call, ``python``; the others stay compiled)."""

    # views into the packed tables, set by ``_pack`` (besides the tables built in ``__init__``)
    ref: np.ndarray
    work: np.ndarray
    prm: np.ndarray
    ints: np.ndarray

    @classmethod
    def build(cls, ctl: PIDC) -> ClosedChainPlan | None:
        """The plan, or None when a loop or a task has no compiled row builder (then the step reads its rows in
        Python, ``PIDC._rows_step``)."""
        from cmstack.models._loop_kernels import KIND_CODES
        from cmstack.models.loops import LoopClosure
        from cmstack.models.robot import Robot

        loops = getattr(ctl.c, "closures", None)
        if (
            not loops
            or ctl._rows_kin is None
            or not ctl._direct
            or type(ctl.robot).update_for_kernel is not Robot.update_for_kernel
        ):
            return None
        for c in loops:  # by capability (as the UK plan): a loop whose rows the kernel computes
            kk = getattr(c, "kernel_kind", None)
            if not callable(kk) or kk() != LoopClosure._KERNEL or c.kind not in KIND_CODES:
                return None
        for (
            task
        ) in ctl.tasks:  # compiled frame tasks and loops (couplings); a task without a kernel: Python rows
            kind = task.kernel_kind() if callable(getattr(task, "kernel_kind", None)) else None
            if kind is not None and kind not in (1, LoopClosure._KERNEL):
                return None
        return cls(ctl, loops)

    def __init__(self, ctl: PIDC, loops: list[Any]):
        from cmstack.controllers import _uk_kernels

        self.K = _uk_kernels
        robot, n = ctl.robot, ctl.robot.nv
        model = robot.model
        nj = model.njoints - 1
        slots = FrameSlots(model)  # the frames the loops and tasks name (models/step_engine.py)
        slot = slots.slot

        lint, row = [], 0
        for c in loops:
            lint.append((c.code, slot(c.fa), slot(c.fb), row))
            row += c.m
        self.lint = np.array(lint, dtype=np.int64).reshape(len(lint), 4)
        self.m = row
        nt = len(ctl.tasks)
        tint = np.zeros((nt, 8), dtype=np.int64)
        tflt = np.zeros((nt, 4))
        self.frame_tasks: list[tuple[int, Any]] = []
        row = 0
        tasks: list[Any] = list(ctl.tasks)  # frame tasks and couplings (``build`` checked their kinds)
        py_rows: list[
            tuple[int, int, Any]
        ] = []  # (first row, stop, task) of the tasks whose rows are Python's
        for k, task in enumerate(tasks):
            kk = getattr(task, "kernel_kind", None)
            kind = kk() if callable(kk) else None
            if (
                kind is None
            ):  # ``step_engine.PythonRows``: its qp_rows into Ab before the call, which skips it
                tint[k] = (self.K.PYTHON, 0, 0, row, 0, task.dim, 0, 1)
                py_rows.append((row, row + task.dim, task))
                row += task.dim
                continue
            off = 0
            if kind == 3:  # a loop closure (a coupling too): its frames and code, as the loops' table below
                a, b, off = slot(task.fa), slot(task.fb), task.code
            else:
                a, b = slot(task.fid), 0
                self.frame_tasks.append((k, task))
            tint[k] = (kind, a, b, row, task.rows.start, task.dim, off, 1)
            tflt[k] = (task.kp, task.kd, 1.0, 1.0)
            row += task.dim
        self.tasks = tasks
        self.tint, self.tflt = tint, tflt
        self.k_task = row
        self.tbias = np.zeros((nt, 6))
        self.terr = np.zeros((nt, 6))
        self.tgtH = np.zeros((nt, 4, 4))
        self.tgtVA = np.zeros((nt, 12))
        self.tcirc = np.zeros((nt, CIRCLE_ROW))
        self.version = -1  # ``models/_params.version`` at the last copy of the tasks' gains and targets
        self.traj_tasks: list[tuple[int, Any]] = []  # frame tasks sampled in Python (``sample``)
        self.pidx = np.zeros(0, dtype=np.int64)
        self.qref = np.zeros(0)
        self.Ab = np.zeros((row, n + 1))
        self.fint, self.fplace = slots.fint, slots.fplace
        self.fJ = np.zeros((len(slots), 6, n))
        self.fvec = np.zeros((len(slots), 24))
        self.A = np.zeros((self.m, n))
        self.jdv = np.zeros(self.m)
        self.joint_ids = slots.joint_ids
        self.jpose = slots.joint_pose_table()  # every joint's [R row-major, p], then the world's (constant)
        # the bodies for the kernel's h (``_uk_kernels.bias_forces``, ``step_engine.body_tables``)
        self.parent, self.inert, self.grav = body_tables(model)
        self.rnea = np.zeros((nj, 18))
        self.h = np.zeros(n)
        self.scr = np.zeros(4 * 6 + 9)
        L = max(n, self.m, int(ctl._rk_ref.shape[1]), int(ctl._rk_ints[3])) + 1
        self.piv = np.zeros(4 * L, dtype=np.int64)
        self.data = None
        self.ptr = np.zeros(2 + 2 * nj, dtype=np.int64)
        #: the step's buffer: [q̈_des, τ_∥, τ, f_c (n each), λ (m), q (nq), v, rank, passive residual]
        self.nq = robot.nq
        self.out_len = 5 * n + robot.nq + self.m + 2
        self.sl_q = slice(4 * n + self.m, 4 * n + self.m + robot.nq)
        self.sl_v = slice(self.sl_q.stop, self.sl_q.stop + n)
        self.sl_tau = slice(2 * n, 3 * n)
        self._pack(ctl)
        Ab = self.Ab  # (a view of the packed float table now)
        self.python = PythonRows(robot, [(Ab[i:j, :n], Ab[i:j, n], task) for i, j, task in py_rows])

    def _pack(self, ctl: PIDC) -> None:
        """Every table into one integer array I and one float array F (``_pidc_kernels.HEADER``: sizes and
        offsets first); the plan's attributes, and the controller's reference buffer, become views into them,
        so what Python writes (targets, gains, the joint reference) is what the kernel reads."""
        from cmstack.controllers import _pidc_kernels as K

        n = ctl.robot.nv
        ints = [
            ("ints", ctl._rk_ints),
            ("fint", self.fint),
            ("lint", self.lint),
            ("tint", self.tint),
            ("pidx", self.pidx),
            ("parent", self.parent),
            ("piv", self.piv),
        ]
        flts = [
            ("prm", ctl._rk_prm),
            ("fplace", self.fplace),
            ("fJ", self.fJ),
            ("fvec", self.fvec),
            ("jpose", self.jpose),
            ("A", self.A),
            ("jdv", self.jdv),
            ("tflt", self.tflt),
            ("tgtH", self.tgtH),
            ("tgtVA", self.tgtVA),
            ("tcirc", self.tcirc),
            ("tbias", self.tbias),
            ("terr", self.terr),
            ("Ab", self.Ab),
            ("ref", ctl._rk_ref),
            ("work", ctl._rk_work),
            ("qref", self.qref),
            ("inert", self.inert),
            ("grav", self.grav),
            ("rnea", self.rnea),
            ("h", self.h),
            ("scr", self.scr),
        ]
        I = np.zeros(K.HEADER + sum(a.size for _, a in ints), dtype=np.int64)
        F = np.zeros(sum(a.size for _, a in flts))
        off: dict[str, int] = {}
        o = K.HEADER
        for name, a in ints:
            off[name] = o
            I[o : o + a.size] = a.ravel()
            setattr(self, name, I[o : o + a.size].reshape(a.shape))
            o += a.size
        o = 0
        for name, a in flts:
            off[name] = o
            F[o : o + a.size] = a.ravel()
            setattr(self, name, F[o : o + a.size].reshape(a.shape))
            o += a.size
        head = {
            K.H_N: n,
            K.H_M: self.m,
            K.H_K: ctl._rk_ref.shape[1],
            K.H_NF: self.fint.shape[0],
            K.H_NJ: len(self.joint_ids),
            K.H_NT: self.tint.shape[0],
            K.H_NROWS: self.Ab.shape[0],
            K.H_SINUS: int(bool(ctl._sinus and not ctl.tasks)),
            K.H_O_INTS: off["ints"],
            K.H_N_INTS: ctl._rk_ints.size,
            K.H_O_FINT: off["fint"],
            K.H_O_LINT: off["lint"],
            K.H_NL: self.lint.shape[0],
            K.H_O_TINT: off["tint"],
            K.H_O_PIDX: off["pidx"],
            K.H_N_PIDX: self.pidx.size,
            K.H_O_PRM: off["prm"],
            K.H_N_PRM: ctl._rk_prm.size,
            K.H_O_FPLACE: off["fplace"],
            K.H_O_FJ: off["fJ"],
            K.H_O_FVEC: off["fvec"],
            K.H_O_JPOSE: off["jpose"],
            K.H_O_A: off["A"],
            K.H_O_JDV: off["jdv"],
            K.H_O_TFLT: off["tflt"],
            K.H_O_TGTH: off["tgtH"],
            K.H_O_TGTVA: off["tgtVA"],
            K.H_O_TCIRC: off["tcirc"],
            K.H_O_TBIAS: off["tbias"],
            K.H_O_TERR: off["terr"],
            K.H_O_AB: off["Ab"],
            K.H_O_REF: off["ref"],
            K.H_O_WORK: off["work"],
            K.H_N_WORK: ctl._rk_work.size,
            K.H_O_QREF: off["qref"],
            K.H_O_PARENT: off["parent"],
            K.H_O_INERT: off["inert"],
            K.H_O_GRAV: off["grav"],
            K.H_O_RNEA: off["rnea"],
            K.H_O_H: off["h"],
            K.H_O_PIV: off["piv"],
            K.H_O_SCR: off["scr"],
            K.H_NQ: ctl.robot.nq,
        }
        for key, val in head.items():
            I[key] = val
        self.I, self.F = I, F

    def bind(self, d: Any) -> None:
        """The addresses the kernel reads in the Pinocchio data ``d`` (held, so its storage stays): data.J, data.M
        and every joint's rotation and translation in data.oMi (column-major float64, refreshed in place); taken
        again when the robot's data object changes (``Robot.add_frame`` creates a new one)."""
        ptr, self._keep = data_addresses(d, [d.J, d.M], self.joint_ids)  # (models/step_engine.py)
        self.ptr[:] = ptr
        self.data = d

    def copy_parameters(self) -> None:
        """Copy the tasks' gains and the frame tasks' targets into the tables (the kernel reads them there): run
        when ``models._params.version`` moved, i.e. a task's ``kp``, ``kd``, target or trajectory or a
        ``Circle``'s parameters were set since the last copy (as the fused UK step, ``uk_plan``).  A constant pose
        is copied here, a ``Circle`` sampled in the kernel; a frame task following another trajectory is listed in
        ``traj_tasks``: sampled every step (``sample``)."""
        from cmstack.models import _params

        self.version = _params.version
        traj = copy_frame_targets(self.frame_tasks, self.tgtH, self.tgtVA, self.tcirc)
        self.traj_tasks = traj
        for k, task in enumerate(self.tasks):
            self.tflt[k, 0] = getattr(task, "kp", 0.0)
            self.tflt[k, 1] = getattr(task, "kd", 0.0)

    def sample(self, t: float) -> None:
        """The targets of ``traj_tasks`` at t (``task.desired(t)``), into the tables."""
        sample_frame_targets(self.traj_tasks, self.tgtH, self.tgtVA, t)

"""The compiled plan of the UK step: tables and buffers for ``controllers/_uk_kernels.py``, built once per
controller from what its tasks can do (``Task.kernel_kind()``), bound to the Pinocchio data it reads."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from cmstack.models.limits import EffortLimit

if TYPE_CHECKING:
    from cmstack.controllers.udwadia_kalaba import UdwadiaKalabaController


class _FusedPlan:
    """Tables and buffers of the compiled step (``controllers/_uk_kernels.py``), built once per
    controller: the frames the tasks need (each with its joint, placement and support columns), the
    tasks in row order (the levels above the last, scaled by √ω, then the last level's, weighted by ω
    in H), the first ``EffortLimit`` (the others are checked in Python)."""

    @staticmethod
    def _inner(task):
        """The task whose compiled rows stand for ``task``: itself, or the task one with integral action
        wraps (``kernel_biased_inner``: its β = K_i z enters the kernel as a bias of those rows)."""
        biased = getattr(task, "kernel_biased_inner", None)
        return biased() if biased is not None else task

    @classmethod
    def build(cls, ctl: "UdwadiaKalabaController") -> "_FusedPlan | None":
        """The plan, or None when some task has no compiled row builder (``Task.kernel_kind()`` is
        None: a task of another kind, or a subclass that redefines its row maths), or numba is missing."""
        for L in ctl.levels:
            for task in L.tasks:
                inner = cls._inner(task)
                if inner is None or not callable(getattr(inner, "kernel_kind", None)) or inner.kernel_kind() is None:
                    return None
        try:
            from cmstack.controllers import _uk_kernels
        except ImportError:      # numba absent: the generic path
            return None
        return cls(ctl, _uk_kernels)

    def __init__(self, ctl: "UdwadiaKalabaController", K):
        self.step = K.uk_step
        robot, n = ctl.robot, ctl.n
        model = robot.model
        # "absorbed": the last level is Gauss alone and the levels above it have more rows than there are
        # degrees of freedom (e.g. a posture on every joint as the last strict level), so they cannot all
        # be equalities of one KKT system.  The level before Gauss is then solved as the KKT's final level
        # without Gauss (H = Σ ω AᵀA, no M).  When that H is positive definite the level's minimiser
        # over the levels above is unique, so Gauss, strictly after it, has nothing left to decide and
        # the solution is the strict one; otherwise (and whenever a limit is hit) the step takes the
        # generic path (``_call_generic``), whose null-space solve such layouts needed every step.
        self.absorbed = not ctl._final.tasks and len(ctl._upper) >= 1 and ctl.n_eq > n
        upper = ctl._upper[:-1] if self.absorbed else ctl._upper
        last = ctl._upper[-1] if self.absorbed else ctl._final
        entries = [(task, float(sw), 0.0, 0) for L in upper for task, sw in zip(L.tasks, L.sqrt_w)]
        entries += [(task, 1.0, float(w), 1) for task, w in zip(last.tasks, last.weights)]
        self.absorbed_sqrt_w = np.repeat(last.sqrt_w, [t.dim for t in last.tasks]) if self.absorbed else None
        frames: dict = {}
        joints: dict = {}
        fint, fplace = [], []

        def slot(fid: int) -> int:
            if fid not in frames:
                fr = model.frames[fid]
                j = int(fr.parentJoint)
                if j not in joints:
                    joints[j] = len(joints)
                mask = np.zeros(n, dtype=np.int64)
                for ji in model.supports[j]:
                    if ji > 0:
                        mask[model.joints[ji].idx_v] = 1
                fint.append(np.r_[joints[j], mask])
                fplace.append(fr.placement.homogeneous)
                frames[fid] = len(frames)
            return frames[fid]

        nt = len(entries)
        tint = np.zeros((nt, 8), dtype=np.int64)
        tflt = np.zeros((nt, 4))
        pidx: list = []
        self.postures, self.frame_tasks, self.task_items, self.integrals = [], [], [], []
        row = 0
        bounds = []
        for k, (outer, sc, w, final) in enumerate(entries):
            task = self._inner(outer)
            if task is not outer:
                self.integrals.append((k, outer))
            kind = task.kernel_kind()
            a = b = off = 0
            sel0, nsel = task.rows.start, task.dim
            if kind == 0:
                a, b = slot(task.fB), slot(task.f2)
            elif kind == 1:
                a = slot(task.fid)
                self.frame_tasks.append((k, task))
            else:
                off, sel0 = len(pidx), 0
                pidx.extend(int(i) for i in task.idx)
                self.postures.append((off, off + nsel, task))
            tint[k] = (kind, a, b, row, sel0, nsel, off, final)
            tflt[k] = (task.kp, task.kd, sc, w)
            self.task_items.append((k, task))
            bounds.append((row, row + nsel))
            row += nsel
        self.tint, self.tflt = tint, tflt
        width = max([6] + [int(r[5]) for r in tint])
        self.tbias = np.zeros((nt, width))          # β = K_i z of the tasks with integral action
        self.terr = np.zeros((nt, width))           # every task's pose error, written by the kernel
        self.pidx = np.array(pidx, dtype=np.int64)
        self.qref = np.zeros(len(pidx))
        self.fint = np.array(fint, dtype=np.int64).reshape(len(fint), n + 1)
        self.fplace = np.array(fplace, dtype=float).reshape(len(fplace), 4, 4)
        self.fJ = np.zeros((len(fint), 6, n))
        self.fvec = np.zeros((len(fint), 24))
        # the joints' views go to the kernel as tuples; padded (with the universe, never read) to a
        # length 4, 8, 16, … so that one compiled signature serves every plan of up to 4 joints
        ids = [j for j, _ in sorted(joints.items(), key=lambda js: js[1])]
        self.joint_ids = ids + [0] * (max(4, 1 << max(len(ids) - 1, 0).bit_length()) - len(ids))
        self.data = None
        self.tgtH = np.zeros((nt, 4, 4))
        self.tgtVA = np.zeros((nt, 12))
        self.tcirc = np.zeros((nt, 7))
        self.seen = [None] * nt
        self.D: np.ndarray | None = None
        self.tmax: np.ndarray | None = None
        self.args: tuple | None = None
        m = self.m_up = sum(L.dim for L in upper)
        self.gauss = 0.0 if self.absorbed else 1.0
        self.ab_shape = (row, n + 1)
        self.out_len = 3 * n + m
        self.wk = np.zeros(2 * n * n + n + n * (m + 1) + m * m)
        self.H = self.wk[:n * n].reshape(n, n)
        self.r = self.wk[n * n:n * n + n]
        # the effort limit checked in the kernel: an EffortLimit whose bounds are EffortLimit's own
        efforts = [lim for lim in ctl.limits if isinstance(lim, EffortLimit)
                   and type(lim).bounds is EffortLimit.bounds and type(lim).violated is EffortLimit.violated]
        self.effort = efforts[0] if efforts else None
        self.eidx = np.ascontiguousarray(self.effort.idx, dtype=np.int64) if self.effort else np.zeros(0, np.int64)
        self.no_tmax = np.zeros(0)
        self.other_limits = [lim for lim in ctl.limits if lim is not self.effort]
        # row ranges of each upper level and of each last-level task (for the fallbacks and forces)
        self._levels, i = [], 0
        for L in upper:
            j = i + L.dim
            self._levels.append((i, j))
            i = j
        self._final = [(bounds[k][0], bounds[k][1], entries[k][2]) for k in range(nt) if entries[k][3]]

    def bind(self, d, D: np.ndarray, sqrt_tol: float) -> None:
        """Views into the Pinocchio data ``d`` that ``computeAllTerms`` refreshes in place: data.J and
        each needed joint's R_j, p_j (data.oMi) and spatial acceleration (data.a); taken again when
        the robot's data object changes (``Robot.add_frame`` creates a new one), the damping D or
        the effort limit's τ_max array is replaced.  ``args``: everything but the step's own arrays,
        as the kernel takes it."""
        self.J = d.J
        poses = [d.oMi[j] for j in self.joint_ids]
        accs = [d.a[j] for j in self.joint_ids]
        self.jR = tuple(T.rotation for T in poses)
        self.jp = tuple(T.translation for T in poses)
        self.ja = tuple(a.vector for a in accs)
        self._keep = (poses, accs)
        self.data, self.D = d, D
        self.tmax = self.no_tmax if self.effort is None else self.effort.tau_max
        self.args = (self.J, D, self.jR, self.jp, self.ja, self.fint, self.fplace, self.fJ, self.fvec, self.tint,
                     self.tflt, self.tgtH, self.tgtVA, self.tcirc, self.pidx, self.qref, self.tbias, self.terr,
                     self.m_up, self.gauss, sqrt_tol, self.eidx, self.tmax, self.wk)

    def __getstate__(self):
        state = self.__dict__.copy()
        state.update(data=None, J=None, jR=None, jp=None, ja=None, _keep=None, args=None)   # rebound on first use
        return state

    def views(self, Ab: np.ndarray):
        """(E, f, rows, final_rows) of one step's [A | b] (contiguous copies, as the generic path's)."""
        n = Ab.shape[1] - 1
        m = self.m_up
        E, f = Ab[:m, :n].copy(), Ab[:m, n].copy()
        rows = [(Ab[i:j, :n].copy(), Ab[i:j, n].copy()) for i, j in self._levels]
        final_rows = [(Ab[i:j, :n].copy(), Ab[i:j, n].copy(), w) for i, j, w in self._final]
        return E, f, rows, final_rows

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
        model = ctl.robot.model
        if any(model.joints[j].idx_v != j - 1 or model.joints[j].nv != 1 for j in range(1, model.njoints)):
            return None          # the kernel's h takes joint j's velocity as column j − 1
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
        fint, fplace = [], []

        def slot(fid: int) -> int:
            if fid not in frames:
                fr = model.frames[fid]
                j = int(fr.parentJoint)
                mask = np.zeros(n, dtype=np.int64)
                for ji in model.supports[j]:
                    if ji > 0:
                        mask[model.joints[ji].idx_v] = 1
                fint.append(np.r_[j - 1 if j else model.njoints - 1, mask])   # its row in the pose table (last: the world)
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
        width = max([6] + [int(r[5]) for r in tint])
        m = self.m_up = sum(L.dim for L in upper)
        nf, nj = len(fint), model.njoints - 1
        # the effort limit checked in the kernel: an EffortLimit whose bounds are EffortLimit's own
        efforts = [lim for lim in ctl.limits if isinstance(lim, EffortLimit)
                   and type(lim).bounds is EffortLimit.bounds and type(lim).violated is EffortLimit.violated]
        self.effort = efforts[0] if efforts else None
        eidx = np.ascontiguousarray(self.effort.idx, dtype=np.int64) if self.effort else np.zeros(0, np.int64)
        self.other_limits = [lim for lim in ctl.limits if lim is not self.effort]
        # the two tables the kernel reads (``_uk_kernels.uk_step``): a header of sizes and offsets, then
        # every table; the plan's arrays below are views into them, so writing one is what the kernel reads
        I_len = K.HEADER + tint.size + nf * (n + 1) + len(pidx) + eidx.size + nj
        F_sizes = [("fplace", 16 * nf), ("fJ", 6 * n * nf), ("fvec", 24 * nf), ("tflt", 4 * nt),
                   ("tgtH", 16 * nt), ("tgtVA", 12 * nt), ("tcirc", 7 * nt), ("qref", len(pidx)),
                   ("tbias", width * nt), ("terr", width * nt),
                   ("wk", K.kkt_work_size(n, m)), ("jpose", 12 * (nj + 1)), ("inert", 13 * nj), ("grav", 3),
                   ("rnea", 18 * nj)]
        self.I = np.zeros(I_len, dtype=np.int64)
        self.F = np.zeros(2 + sum(k for _, k in F_sizes))
        I, F = self.I, self.F
        off_f, o = {}, 2
        for name, size in F_sizes:
            off_f[name] = o
            o += size

        def fview(name, shape):
            o = off_f[name]
            return F[o:o + int(np.prod(shape))].reshape(shape)

        o = K.HEADER
        off_i = {}
        for name, size in (("tint", tint.size), ("fint", nf * (n + 1)), ("pidx", len(pidx)), ("eidx", eidx.size),
                           ("parent", nj)):
            off_i[name] = o
            o += size
        I[[K.N, K.NT, K.NF, K.NJ, K.M_UP, K.NROWS, K.WIDTH]] = n, nt, nf, nj, m, row, width
        I[[K.O_TINT, K.O_FINT, K.O_PIDX, K.N_PIDX, K.O_EIDX, K.N_EIDX]] = (off_i["tint"], off_i["fint"], off_i["pidx"],
                                                                          len(pidx), off_i["eidx"], eidx.size)
        I[[K.O_FPLACE, K.O_FJ, K.O_FVEC, K.O_TFLT, K.O_TGTH, K.O_TGTVA, K.O_TCIRC, K.O_QREF, K.O_TBIAS,
           K.O_TERR, K.O_WK, K.N_WK, K.O_JPOSE]] = (
            off_f["fplace"], off_f["fJ"], off_f["fvec"], off_f["tflt"], off_f["tgtH"], off_f["tgtVA"],
            off_f["tcirc"], off_f["qref"], off_f["tbias"], off_f["terr"], off_f["wk"], K.kkt_work_size(n, m),
            off_f["jpose"])
        I[[K.O_PARENT, K.O_INERT, K.O_GRAV, K.O_RNEA]] = off_i["parent"], off_f["inert"], off_f["grav"], off_f["rnea"]

        def iview(name, shape):
            o = off_i[name]
            return I[o:o + int(np.prod(shape))].reshape(shape)

        self.tint = iview("tint", (nt, 8))
        self.tint[:] = tint
        self.fint = iview("fint", (nf, n + 1))
        if nf:
            self.fint[:] = np.array(fint, dtype=np.int64)
        self.pidx = iview("pidx", (len(pidx),))
        self.pidx[:] = pidx
        self.eidx = iview("eidx", (eidx.size,))
        self.eidx[:] = eidx
        self.tflt = fview("tflt", (nt, 4))
        self.tflt[:] = tflt
        self.fplace = fview("fplace", (nf, 4, 4))
        if nf:
            self.fplace[:] = np.array(fplace, dtype=float)
        self.tbias = fview("tbias", (nt, width))          # β = K_i z of the tasks with integral action
        self.terr = fview("terr", (nt, width))            # every task's pose error, written by the kernel
        self.qref = fview("qref", (len(pidx),))
        self.fJ = fview("fJ", (nf, 6, n))
        self.fvec = fview("fvec", (nf, 24))
        self.tgtH = fview("tgtH", (nt, 4, 4))
        self.tgtVA = fview("tgtVA", (nt, 12))
        self.tcirc = fview("tcirc", (nt, 7))
        self.jpose = fview("jpose", (nj + 1, 12))      # every joint's [R row-major, p], then the world's
        self.jpose[nj] = np.r_[np.eye(3).ravel(), np.zeros(3)]
        # the bodies for the kernel's h (``_uk_kernels.bias_forces``): every joint's parent row, its body's
        # mass, centre of mass and rotational inertia in its own frame, gravity
        self.parent = iview("parent", (nj,))
        self.parent[:] = [model.parents[j] - 1 for j in range(1, nj + 1)]
        self.inert = fview("inert", (nj, 13))
        for j in range(1, nj + 1):
            Y = model.inertias[j]
            self.inert[j - 1] = np.r_[Y.mass, Y.lever, np.asarray(Y.inertia).ravel()]
        fview("grav", (3,))[:] = model.gravity.linear
        self.wk = fview("wk", (K.kkt_work_size(n, m),))
        self.H = self.wk[:n * n].reshape(n, n)
        self.r = self.wk[n * n:n * n + n]
        self.gauss = 0.0 if self.absorbed else 1.0
        F[0] = self.gauss
        self.joint_ids = list(range(1, nj + 1))
        # the step's buffer (``uk_step``): [q | v | M | h | v̇ | τ | h + D v | λ | Ab]
        self.ab_shape = (row, n + 1)
        self.o_out = 3 * n + n * n
        self.o_ab = self.o_out + 3 * n + m
        self.buf_len = self.o_ab + row * (n + 1)
        self.sl_x, self.sl_tau = slice(self.o_out, self.o_out + n), slice(self.o_out + n, self.o_out + 2 * n)
        self.plain = not self.other_limits           # no limit beside the kernel's effort limit
        self.n = n
        self.data = None
        self.ptr: np.ndarray | None = None
        self.D: np.ndarray | None = None
        self.tmax: np.ndarray | None = None
        self.version = -1                  # models._params.version when the gains and targets were copied
        self.traj_tasks: list = []         # frame tasks whose target is sampled in Python every step
        # row ranges of each upper level and of each last-level task (for the fallbacks and forces)
        self._levels, i = [], 0
        for L in upper:
            j = i + L.dim
            self._levels.append((i, j))
            i = j
        self._final = [(bounds[k][0], bounds[k][1], entries[k][2]) for k in range(nt) if entries[k][3]]

    def bind(self, d, D: np.ndarray, sqrt_tol: float) -> None:
        """The addresses of what the kernel reads (``_uk_kernels.uk_step``): in the Pinocchio data ``d``
        (refreshed in place by Pinocchio; ``d`` is held, so its storage stays) data.J, data.M and every
        joint's rotation and translation in data.oMi; the damping D and the effort limit's
        τ_max (held too), so that a change in place is read.  Taken again when the robot's data object
        changes (``Robot.add_frame`` creates a new one), or D or τ_max is replaced by another array."""
        def address(a) -> int:
            return int(a.__array_interface__["data"][0])

        poses = [d.oMi[j] for j in self.joint_ids]
        for a in [d.J, d.M] + [T.rotation for T in poses] + [T.translation for T in poses]:
            if a.dtype != np.float64 or not a.flags.f_contiguous:
                raise TypeError(f"Pinocchio data array of dtype {a.dtype}, shape {a.shape} is not column-major float64")
        Dk = np.ascontiguousarray(D, dtype=np.float64)
        tmax = None if self.effort is None else self.effort.tau_max
        tk = np.ascontiguousarray(np.zeros(0) if tmax is None else tmax, dtype=np.float64)
        if Dk.shape != (self.n,) or tk.shape != self.eidx.shape:
            raise ValueError(f"damping of shape {Dk.shape} or tau_max of shape {tk.shape}: expected ({self.n},) and "
                             f"{self.eidx.shape}")
        ptr = [address(d.J), address(d.M), address(Dk), address(tk)]
        for T in poses:
            ptr += [address(T.rotation), address(T.translation)]
        self.ptr = np.array(ptr, dtype=np.int64)
        self._keep = (poses, Dk, tk)
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
            self.qref[off:stop] = task.q_ref
        tgtH, tgtVA, tcirc = self.tgtH, self.tgtVA, self.tcirc
        traj = []
        for k, task in self.frame_tasks:
            c = task.constant_target
            tcirc[k, 6] = 0.0
            if c is None:
                tr = task.trajectory
                circ = tr.kernel_params() if callable(getattr(tr, "kernel_params", None)) else None
                if circ is not None:            # sampled in the kernel (_uk_kernels.circle_sample)
                    tcirc[k, :6] = circ
                    tcirc[k, 6] = 1.0
                    tgtH[k, :3, :3] = tr.R
                else:
                    traj.append((k, task))
                continue
            T, vel, accD = c
            tgtH[k] = T.homogeneous
            tgtVA[k, :6] = vel
            tgtVA[k, 6:] = accD
        self.traj_tasks = traj

    def sample(self, t: float) -> None:
        """The targets of ``traj_tasks`` at t, into the tables."""
        tgtH, tgtVA = self.tgtH, self.tgtVA
        for k, task in self.traj_tasks:
            T, vel, accD = task.desired(t)
            tgtH[k] = T.homogeneous
            tgtVA[k, :6] = vel
            tgtVA[k, 6:] = accD

    def pose_table(self, d) -> np.ndarray:
        """The kernel's joint-pose table [R row-major, p] of the plan's joints in the data ``d`` (tests)."""
        return np.array([np.r_[d.oMi[j].rotation.ravel(), d.oMi[j].translation] for j in self.joint_ids + [0]]
                        ).reshape(len(self.joint_ids) + 1, 12)

    def __getstate__(self):
        state = self.__dict__.copy()
        state.update(data=None, ptr=None, _keep=None, version=-1, D=None, tmax=None)   # rebound on first use
        return state

    def results(self, buf: np.ndarray):
        """(v̇, τ, h + D v, λ or None, Ab) of one step's buffer (views)."""
        n = self.n
        o = self.o_out
        lam = buf[o + 3 * n:self.o_ab] if self.m_up else None
        return buf[o:o + n], buf[o + n:o + 2 * n], buf[o + 2 * n:o + 3 * n], lam, buf[self.o_ab:].reshape(self.ab_shape)

    def views(self, Ab: np.ndarray):
        """(E, f, rows, final_rows) of one step's [A | b] (contiguous copies, as the generic path's)."""
        n = Ab.shape[1] - 1
        m = self.m_up
        E, f = Ab[:m, :n].copy(), Ab[:m, n].copy()
        rows = [(Ab[i:j, :n].copy(), Ab[i:j, n].copy()) for i, j in self._levels]
        final_rows = [(Ab[i:j, :n].copy(), Ab[i:j, n].copy(), w) for i, j, w in self._final]
        return E, f, rows, final_rows

"""The levels of the prioritized Udwadia–Kalaba controller (``controllers/udwadia_kalaba.py``): Gauss'
principle as a member of a level, a level's tasks and weights, the step's info record, and the
null-space basis the hierarchy works in."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cmstack.controllers._qp_kernels import null_step as _null_step
from cmstack.models.coupling import Task
from cmstack.models.errors import ConfigError


class _Gauss:
    """Gauss' principle ½ (v̇ − a)ᵀ M (v̇ − a), a = M⁻¹ Q, as a member of a level."""

    name = "gauss"

    def __repr__(self) -> str:
        return "GAUSS"


GAUSS = _Gauss()
"""Place Gauss' principle in a level (the last one); weight 1, the tasks' weights are relative to it."""


def _nullspace_step(B: np.ndarray, y: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """(pinv(B) y, orthonormal basis of N(B)) with the relative rank tolerance ``tol``: one pivoted Householder QR of
    Bᵀ (``_qp_kernels.null_step``), the minimum-norm least-squares step and the null space of the same factorization
    (an SVD before: the same step to 8e-14 relative and the same projector to 1e-16 on 2,000 full-rank,
    rank-deficient and badly scaled matrices, tests/test_limit_rows.py)."""
    return _null_step(
        np.ascontiguousarray(B, dtype=np.float64), np.ascontiguousarray(y, dtype=np.float64), tol
    )


@dataclass
class UKStepInfo:
    """What the controller reports every step.  The generalized forces are computed on first
    access (diagnostics, not needed for τ).  ``path``: "kkt" (direct solve), "nullspace", "qp"
    (one QP with the limits) or "sequential" (one QP per level)."""

    status: str = "not run"
    _vdot: np.ndarray | None = None
    tau: np.ndarray | None = None
    qp_iter: int = 0
    limits_active: bool = False
    path: str = ""
    cold_retries: int = 0
    saturated: bool = False  # a level below the first gave way to the limits (``gave_way`` says which)
    gave_way: str = ""
    #: a step solved with the limits ("qp" or "sequential"): ‖A_k v̇ − b_k‖ of each level above the last (in the
    #: units of its √ω-scaled rows; level 1 first, the loops' and couplings' level when there is one); None on an
    #: equality step ("kkt", "nullspace"), whose levels hold exactly where they can
    level_residuals: tuple[float, ...] | None = None
    _Qc: np.ndarray | None = None
    _Qu: np.ndarray | None = None
    _Qlim: np.ndarray | None = None
    _lazy: object = None
    _vsrc: tuple[np.ndarray, slice] | None = (
        None  # a compiled step's (buffer, slice) of v̇, read when first asked for
    )

    @property
    def vdot(self) -> np.ndarray | None:
        """The step's acceleration v̇ (rad/s², m/s²)."""
        v = self._vdot
        if v is None and self._vsrc is not None:
            buf, sl = self._vsrc
            v = self._vdot = buf[sl]
            self._vsrc = None
        return v

    @vdot.setter
    def vdot(self, value: np.ndarray | None) -> None:
        self._vdot = value
        self._vsrc = None

    def __getstate__(self) -> dict:
        # the forces are computed on first access by a closure over the step (not picklable): computed now
        if self.vdot is not None:
            self._fill()
        state = self.__dict__.copy()
        state["_lazy"] = None
        return state

    def _fill(self):
        lazy = self._lazy
        if lazy is not None:  # a closure, or (function, argument): a compiled step's (f, its buffer)
            self._Qc, self._Qu, self._Qlim = lazy() if callable(lazy) else lazy[0](lazy[1])
            self._lazy = None

    @property
    def Qc(self) -> np.ndarray | None:
        """Q_c = −A₁ᵀ λ₁, the first (hard) level's generalized force; (3.10) without tasks."""
        if self.vdot is None:
            return None
        self._fill()
        return self._Qc

    @property
    def Qu(self) -> np.ndarray | None:
        """The other levels' (tasks') generalized force."""
        if self.vdot is None:
            return None
        self._fill()
        return self._Qu

    @property
    def Qlim(self) -> np.ndarray | None:
        """The limits' generalized force −Cᵀ z (zero when no limit is active)."""
        if self.vdot is None:
            return None
        self._fill()
        return self._Qlim


@dataclass
class _Level:
    tasks: list
    weights: np.ndarray
    sqrt_w: np.ndarray
    gauss: bool = False
    dim: int = 0


def _parse_level(level, k: int) -> _Level:
    if isinstance(level, (Task, _Gauss)) or (isinstance(level, tuple) and len(level) == 2):
        level = [level]
    tasks: list = []
    ws: list[float] = []
    gauss = False
    for item in level:
        if item is GAUSS:
            gauss = True
            continue
        w = 1.0
        if isinstance(item, tuple):
            if len(item) != 2:
                raise ConfigError(
                    f"level {k + 1}: a member must be a task, (task, weight) or GAUSS; got {item!r}"
                )
            item, w = item
        if not isinstance(item, Task):
            raise ConfigError(
                f"level {k + 1}: {item!r} is not a Task (FrameTask, RigidCoupling, PostureTask, …)"
            )
        try:
            w = float(w)
        except (TypeError, ValueError):
            raise ConfigError(
                f"level {k + 1}: weight of '{item.name}' must be a finite number > 0, got {w!r}"
            ) from None
        if not (math.isfinite(w) and w > 0):
            raise ConfigError(f"level {k + 1}: weight of '{item.name}' must be a finite number > 0, got {w}")
        tasks.append(item)
        ws.append(w)
    w_arr = np.array(ws, dtype=float)
    return _Level(tasks, w_arr, np.sqrt(w_arr), gauss, sum(t.dim for t in tasks))

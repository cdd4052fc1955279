"""PIDC (controllers/pidc.py) on a plant that measures less than the model's state.

``ActuatedJointsPIDC(pidc)``: a PIDC on a closed chain (``robot.loops``) whose plant measures the actuated joints
only, e.g. the series-parallel arm measured in (φ, θ, δ) (scenarios/series_parallel.py ``build_pidc``): the passive
joints are closed by the loops at every step and the torque is returned on the actuated joints.  (The hybrid
motion/force PIDC of the YuMi holding a bar is ``PIDC`` itself with options: scenarios/yumi_dual_arm.py
``build_pidc_force``.)
"""

from __future__ import annotations

import numpy as np

from cmstack.controllers._passive_kernels import CONVERGED, FALLBACK, STEPPED, layout, passive_step, prepare
from cmstack.controllers.pidc import PIDC, PIDCInfo
from cmstack.models.errors import StateError
from cmstack.models.lie import svd_rank
from cmstack.models.loops import ClosureSet, assemble


class ActuatedJointsPIDC:
    """A PIDC on a closed chain driven from the actuated joints' measurement (q_a, q̇_a).

    The state of the chain is completed on the loops' manifold at every step: the passive joints q_p solve
    φ(q_a, q_p) = 0 (Newton with q_a held, ``models.loops.assemble``'s step, run to ``tol``), and their rates are
    the ones the loops allow, J_a q̇_a + J_p q̇_p = 0:

        q̇_p = −J_p⁺ J_a q̇_a        (J_p⁺ the truncated pseudo-inverse: a planar loop's empty rows are dropped)

    which is unique when the passive joints are determined by the actuated ones (J_p of full column rank on the
    manifold, e.g. the series-parallel arm's elbow ζ and cylinder angle α given (φ, θ, δ)).  Returns the PIDC
    torque on the actuated joints, in ``pidc.robot.actuated_joints`` order.

    Cost (the step's own, not the PIDC's).  Newton starts from the tangent prediction of the previous step's
    solution, q_p ← q_p⁻ + G⁻ (q_a − q_a⁻) with G = −J_p⁺ J_a (dq_p = G dq_a on the manifold), whose error is
    second order in the change of q_a, so one Newton step usually reaches ``tol``; each iteration is one lean
    Pinocchio pass (``computeJointJacobians`` and the loops' frames: φ and J, ``_phi_jacobian``) and one compiled
    QR solve (``_passive_kernels.passive_step``, after ``prepare``: the start, the rates known, the input checked;
    the same J_p⁺ as the SVD while J_p has safely full column rank,
    the SVD path ``_svd_iteration`` otherwise).  The convergence test is the same, max |φ| ≤ tol, at the point
    returned, and the rates are taken at that point.

    pidc: a ``PIDC`` on ``robot.loops`` with the robot's passive joints; q_guess: a configuration near the
    first measured state (default ``robot.q_initial``); tol: the Newton tolerance on |φ| (m, rad)."""

    def __init__(self, pidc: PIDC, q_guess: np.ndarray | None = None, *, tol: float = 1e-14) -> None:
        robot = pidc.robot
        if not robot.loops:
            raise StateError(f"ActuatedJointsPIDC: {robot.label} has no loops (robot.loops) to close")
        self.pidc = pidc
        self.robot = robot
        self.loops = ClosureSet(robot.loops)  # the lean pass, on a Data of its own (not the PIDC's snapshot)
        self.act = np.array([robot.joint_index(n) for n in robot.actuated_joints], dtype=np.int64)
        self.pas = np.array([robot.joint_index(n) for n in robot.passive_joints], dtype=np.int64)
        self.q = np.array(robot.q_initial if q_guess is None else q_guess, dtype=float)
        self.tol = float(tol)
        self.max_iter = 50
        self.failures = 0
        #: Newton iterations (lean passes) of the last ``complete``, the convergence test included
        self.passes = 0
        m, p, a = self.loops.m, self.pas.size, self.act.size
        self._G = np.zeros((p, a))  # −J_p⁺ J_a at the last solution (the predictor)
        self._qa_prev = np.zeros(a)  # q_a of the last solution
        self._predict = False  # no solution yet: start from q_guess
        ni, nw = layout(m, p, a)
        self._ints = np.zeros(ni, dtype=np.int64)
        self._ints[:p], self._ints[p : p + a] = self.pas, self.act
        self._prm = np.array([self.tol, 1e-10])
        self._X = np.zeros((m, max(p, 1)))
        self._work = np.zeros(nw)

    @property
    def info(self) -> PIDCInfo:
        return self.pidc.info

    @property
    def unsolvable_steps(self) -> int:
        return self.pidc.unsolvable_steps

    def _phi_jacobian(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(φ, J) of the loops at q from one lean pass of the adapter's own ``ClosureSet`` (``computeJointJacobians``,
        then the frames and the rows in one compiled call, ``models/_loop_kernels.py: closure_pass``)."""
        return self.loops.phi_and_jacobian(q)

    def _svd_iteration(
        self, q: np.ndarray, v: np.ndarray, va: np.ndarray, phi: np.ndarray, J: np.ndarray
    ) -> bool:
        """One iteration by the truncated SVD of J_p (rtol 1e-10): True (converged: v[pas] and G written) or
        False (q[pas] stepped)."""
        pas = self.pas
        Jp_pinv = svd_rank(J[:, pas], rtol=1e-10).pinv()
        if float(np.max(np.abs(phi))) <= self.tol:
            self._G[:] = -(Jp_pinv @ J[:, self.act])
            v[pas] = -(Jp_pinv @ (J[:, self.act] @ va))
            return True
        q[pas] -= Jp_pinv @ phi
        return False

    def complete(self, qa: np.ndarray, va: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(q, q̇) of the whole chain from the actuated joints' (q_a, q̇_a), on the loops' manifold."""
        qa, va = np.asarray(qa, dtype=float), np.asarray(va, dtype=float)
        act = self.act
        q, v = np.empty(self.robot.nq), np.empty(self.robot.nv)
        if (
            qa.shape != act.shape
            or va.shape != act.shape
            or not prepare(qa, va, self.q, self._qa_prev, self._G, self._ints, self._predict, q, v)
        ):
            raise StateError(
                f"ActuatedJointsPIDC: expected {act.size} finite positions and rates of "
                f"{self.robot.actuated_joints}, got {qa!r}, {va!r}"
            )
        G, X, ints, prm, work = self._G, self._X, self._ints, self._prm, self._work
        st = STEPPED
        for k in range(self.max_iter):  # Newton on q_p, q_a held (as many tests as ``assemble``)
            phi, J = self._phi_jacobian(q)
            st = passive_step(phi, J, q, v, va, G, X, ints, prm, work)
            if st == FALLBACK:
                st = CONVERGED if self._svd_iteration(q, v, va, phi, J) else STEPPED
                if st == STEPPED and not np.all(np.isfinite(q)):
                    break
            if st == CONVERGED:
                self.passes = k + 1
                break
        if st != CONVERGED:  # retry from the last solution, unpredicted: raises, naming
            q = self.q.copy()  # the loop, when the loops cannot be closed there either
            q[act] = qa
            q = assemble(self.robot, q, tol=self.tol, fixed=self.robot.actuated_joints)
            phi, J = self._phi_jacobian(q)
            self._svd_iteration(q, v, va, phi, J)
            self.passes = -1
        self.q = q
        self._qa_prev[:] = qa
        self._predict = True
        return q, v

    def __call__(self, t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        """τ on the actuated joints from their measured positions q and rates v."""
        x, xd = self.complete(q, v)
        return self.pidc(t, x, xd)[self.act]

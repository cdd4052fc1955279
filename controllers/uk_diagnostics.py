"""Why a UK step could not hold its first level: incompatible hard rows, a target out of reach, a
near-singular Jacobian or limits too low; and the closed form (3.8) of Udwadia–Kalaba used to explain it."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from cmstack.models.coupling import FrameTask, RelativeFrameTask, Task
from cmstack.models.errors import InfeasibleError
from cmstack.models.limits import EffortLimit
from cmstack.models.loops import RigidCoupling
from cmstack.models.robot import Kinematics, Robot


class Diagnostics:
    """The diagnosing half of ``UdwadiaKalabaController`` (a mixin)."""

    # what the controller provides (declared for type checkers)
    n: int
    robot: Robot
    levels: list
    limits: list
    tau_max: np.ndarray
    binding_limits: Callable[[Kinematics, np.ndarray, np.ndarray], list[str]]  # (``LevelSolver``)
    _level_name: Callable[[int], str]

    def _incompatible(self, A: np.ndarray, b: np.ndarray, t: float) -> InfeasibleError:
        """Explain an infeasible first level: the least-squares residual of each of its tasks."""
        x = np.linalg.lstsq(A, b, rcond=None)[0]
        res = A @ x - b
        parts, i = [], 0
        for task in self.levels[0].tasks:
            parts.append(f"{task.name}: residual {np.linalg.norm(res[i : i + task.dim]):.3g}")
            i += task.dim
        return InfeasibleError(
            f"hard constraints are incompatible at t={t:.4f} s; the least-squares residual is "
            f"{np.linalg.norm(res):.3g} — "
            + "; ".join(parts)
            + ". Remove one of them or make it a soft task."
        )

    def _limits_infeasible(
        self,
        kin: Kinematics,
        hD: np.ndarray,
        Q: np.ndarray,
        rows: list[tuple[np.ndarray, np.ndarray]],
        t: float,
        status: str,
        closest: np.ndarray | None = None,
        resid: float = float("nan"),
    ) -> InfeasibleError:
        """Level 1 and the limits cannot hold together: the level, the limits and joints that bind at the
        closest step (``closest``: the least-squares step within the limits, residual ``resid``), then
        ``diagnose_infeasible``'s cause."""
        head = ""
        if rows:
            bind = self.binding_limits(kin, hD, closest) if closest is not None else []
            head = (
                f"{self._level_name(0)} cannot hold within the limits at t={t:.4f} s"
                + (f": at the closest step (residual {resid:.3g}) {', '.join(bind[:6])} bind" if bind else "")
                + ". "
            )
        return InfeasibleError(
            head + self.diagnose_infeasible(kin, hD, Q, rows[0] if rows else None, t, status)
        )

    def diagnose_infeasible(
        self,
        kin: Kinematics,
        hD: np.ndarray,
        Q: np.ndarray,
        level1: tuple[np.ndarray, np.ndarray] | None,
        t: float,
        status: str,
    ) -> str:
        """Why level 1 cannot hold within the limits.  The torque the hard level alone needs
        (Gauss' solution (3.8) of level 1, no task) names the joint; then the cause: a target out of
        reach (distance of a frame target from its chain's workspace ball), a near-singular
        configuration (a task Jacobian whose σ_min/σ_max < 1e-3), or, if neither, effort limits too
        low for this motion."""
        names = [c.name for c in self.levels[0].tasks] if len(self.levels) > 1 else []
        M = kin.M
        A, b = (np.zeros((0, self.n)), np.zeros(0)) if level1 is None else level1
        x = udwadia_kalaba_closed_form(M, Q, A, b)[0] if A.shape[0] else np.linalg.solve(M, Q)
        tau_free = M @ x + hD
        # the kinds of limit in force, by name ("velocity and effort"); the torque the hard level needs is named
        # only with an effort limit (with none, no torque bound is to blame)
        effort = any(isinstance(lim, EffortLimit) for lim in self.limits)
        others = list(dict.fromkeys(lim.name for lim in self.limits if not isinstance(lim, EffortLimit)))
        kinds = " and ".join(others + (["effort"] if effort else []))
        if effort:
            tm = self.tau_max
            worst = int(np.argmax(np.abs(tau_free) / tm))
            need = (
                f" (joint '{self.robot.joint_names[worst]}' would need {tau_free[worst]:.1f} N·m, "
                f"limit {tm[worst]:.1f}"
            )
        else:
            need = " ("
        which = f"{kinds} limits" if kinds else "limits"
        head = f"at t={t:.4f} s the hard constraints {names} cannot be met within the {which}{need}"
        causes = []
        for L in self.levels:
            for task in L.tasks:
                far = _out_of_reach(self.robot, kin, task, t)
                if far:
                    causes.append(far)
        for L in self.levels:
            for task in L.tasks:
                if isinstance(task, (FrameTask, RelativeFrameTask, RigidCoupling)):
                    W = task.compute(kin, t)[0]
                    sv = np.linalg.svd(W, compute_uv=False)
                    if sv[-1] < 1e-3 * sv[0]:
                        r = int(np.sum(sv > 1e-3 * sv[0]))
                        causes.append(
                            f"near-singular configuration: the Jacobian of '{task.name}' has rank {r} "
                            f"of {W.shape[0]} (σ_min/σ_max = {sv[-1] / sv[0]:.1e})"
                        )
        if causes:
            return (
                head
                + f"{'; ' if effort else ''}QP status {status}). Cause: "
                + "; ".join(causes)
                + ". The tasks drove the robot into a state the limits cannot recover from: "
                "bring the target into the workspace or away from the singularity."
            )
        return (
            head + f"{'; ' if effort else ''}QP status {status}): the {which} are too low for this motion "
            "(no target out of reach, no singular task Jacobian); slow the motion or raise the limits"
        )


def _chain_reach(robot: Robot, fid: int) -> tuple[int, float]:
    """(root joint, reach): the frame's supporting chain from its first moving joint, and an upper
    bound of the distance from that joint's origin to the frame (sum of the link offsets; the stroke
    of prismatic joints added)."""
    m = robot.model
    j = m.frames[fid].parentJoint
    reach = float(np.linalg.norm(m.frames[fid].placement.translation))
    while j > 0 and m.parents[j] > 0:
        if "P" in m.joints[j].shortname().replace("JointModel", ""):
            reach += float(
                max(
                    abs(m.lowerPositionLimit[m.joints[j].idx_q]), abs(m.upperPositionLimit[m.joints[j].idx_q])
                )
            )
        reach += float(np.linalg.norm(m.jointPlacements[j].translation))
        j = m.parents[j]
    return j, reach


def _out_of_reach(robot: Robot, kin: Kinematics, task: Task, t: float) -> str | None:
    """A sentence if the task's target lies outside the workspace ball of its chain(s)."""
    d = robot.data
    if isinstance(task, FrameTask):
        root, reach = _chain_reach(robot, task.fid)
        if root == 0:
            return None
        p = task.desired(t)[0].translation
        dist = float(np.linalg.norm(p - d.oMi[root].translation))
        if dist > reach:
            return (
                f"the target of '{task.name}' is out of reach: {dist:.3f} m from joint "
                f"'{robot.model.names[root]}', whose chain reaches {reach:.3f} m ({dist - reach:.3f} m outside "
                f"the workspace)"
            )
    elif isinstance(task, RigidCoupling):
        ra, reach_a = _chain_reach(robot, task.f1)
        rb, reach_b = _chain_reach(robot, task.f2)
        if ra == 0 or rb == 0:
            return None
        gap = float(np.linalg.norm(d.oMi[ra].translation - d.oMi[rb].translation))
        need = float(np.linalg.norm(task.T_AB.translation))
        if need > reach_a + reach_b + gap:
            return (
                f"'{task.name}' asks for frames {need:.3f} m apart, more than the chains can span "
                f"({reach_a + reach_b + gap:.3f} m)"
            )
    return None


def udwadia_kalaba_closed_form(
    M: np.ndarray, Q: np.ndarray, A: np.ndarray, b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Thesis (3.8) and (3.10): v̇ = a + M^{-1/2}(A M^{-1/2})⁺(b − A a),  a = M⁻¹ Q,
    Q_c = M^{1/2}(A M^{-1/2})⁺(b − A a): the torque-free motion the effort-limit diagnosis compares with the
    limits, and an independent reference for the tests (written once: tests/_uk_reference.py imports it)."""
    w, V = np.linalg.eigh(M)
    Mh = (V * np.sqrt(w)) @ V.T
    Mih = (V / np.sqrt(w)) @ V.T
    a = np.linalg.solve(M, Q)
    K = np.linalg.pinv(A @ Mih)
    return a + Mih @ K @ (b - A @ a), Mh @ K @ (b - A @ a)

"""Hybrid motion/force PIDC ([Aghili] §7.3) of the yumi_dual_arm scenario (plant=bar, controller=pidc_force):
the dual-arm YuMi squeezing a rigid bar, built from typed arguments by ``yumi_dual_arm.build_pidc_force``
(moved here from the library's controllers/pidc_adapters.py: it is this scenario's law, its force loop reads the
bar's weld and squeezes along the bar's axis)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cmstack.controllers.base import StepInfo


@dataclass(kw_only=True)
class YumiForceInfo(StepInfo):
    """One step of :class:`YumiForcePIDC`: Qc [N·m], the constraint force on the arm joints it used."""

    Qc: np.ndarray


class YumiForcePIDC:
    """Hybrid motion/force PIDC ([Aghili] §7.3) on the dual-arm YuMi holding a rigid bar (plant=bar).

    Constraint: the rigid coupling of models/coupling.py, A = W (6×14), acceleration level
    W q̈ = b_c (b_c = −Ẇq̇ − K_d w − K_p e: the coupling's own error ODE, which with an exact constraint
    is −Ẇ q̇, i.e. (I − P) q̈ = A⁺ b_c generalizes (13)).  P, A⁺ by SVD (models/projection.py).
    Motion: the E1 task rows A_t q̈ = b_t (models/coupling.FrameTask) realized inside the admissible set,

        q̈_des = A⁺ b_c + P z,   z = (A_t P)⁺ (b_t − A_t A⁺ b_c) − N_t k_null q̇,   N_t = I − (A_t P)⁺ A_t P

    Force: λ_d = [s·d; 0] with d the unit bar axis E1 → E2 (world), s the squeeze (the bar pushes the
    hands apart with s newtons; the constraint force on the arms is f = Wᵀλ, λ's linear part acting on
    E2 and its opposite on E1), f_d = Wᵀ λ_d, e_f = f_d − f_c with f_c read from the plant's weld (a
    simulated wrist force sensor: MuJoCo's qfrc_constraint on the arm joints), and

        τ = P b + (I − P)[b − (f_d + K_p e_f + K_i ∫ e_f)],   b = M q̈_des + h + D q̇      (45), (51–52)

    The bar's mass is not in the controller's model: the integral term absorbs it.

    frame1, frame2: the hands' frames (E1, E2); squeeze_force: s [N]; force_kp, force_ki: K_p, K_i of the
    force loop; null_damping: k_null [1/s]; model_damping: use the URDF's joint damping D (else D = 0);
    converge_after: the squeeze metrics of ``extra_metrics`` count t > converge_after [s]."""

    def __init__(
        self,
        robot,
        coupling,
        task,
        *,
        frame1: str,
        frame2: str,
        squeeze_force: float,
        force_kp: float,
        force_ki: float,
        null_damping: float,
        model_damping: bool,
        converge_after: float,
    ):
        from cmstack.models.projection import project  # noqa: F401 (documented dependency)

        self.robot, self.coupling, self.task = robot, coupling, task
        self.s_d = float(squeeze_force)
        self.kp_f, self.ki_f = float(force_kp), float(force_ki)
        self.k_null = float(null_damping)
        self.rank_tol = 1e-9
        self.D = robot.damping.copy() if model_damping else np.zeros(robot.nv)
        self.f1, self.f2 = robot.frame_id(frame1), robot.frame_id(frame2)
        self.converge_after = float(converge_after)
        self.plant = None
        self.integral = np.zeros(robot.nv)
        self.t_prev = None
        self.kin = None
        self.failures = 0
        self.log_t: list[float] = []
        self.log_s: list[float] = []
        self.log_lam: list[np.ndarray] = []
        self.info: YumiForceInfo | None = None

    #: the plant data it reads (its wrist force sensor), which cmstack rt's driver publishes with each state
    sensed_data = ("qfrc_constraint",)

    def attach_plant(self, plant):
        """Give the controller its force sensor (the plant's weld force on the arm joints)."""
        self.plant = plant

    def measured_fc(self):
        if self.plant is None:
            return None
        return self.plant.data.qfrc_constraint[self.plant.map.dadr].copy()

    def __call__(self, t, q, v):
        from cmstack.models.projection import project

        kin = self.robot.update(q, v)
        self.kin = kin
        W, bc = self.coupling.compute(kin, t)
        At, bt = self.task.compute(kin, t)
        pr = project(W, self.rank_tol)
        P = pr.P
        n = self.robot.nv
        qdd_c = pr.A_pinv @ bc
        AtP = At @ P
        AtP_pinv = project(AtP, self.rank_tol).A_pinv
        Nt = np.eye(n) - AtP_pinv @ AtP
        z = AtP_pinv @ (bt - At @ qdd_c) - Nt @ (self.k_null * v)
        qdd = qdd_c + P @ z
        b = kin.M @ qdd + kin.h + self.D * v
        # force loop
        p1, p2 = kin.frame(self.f1).T.translation, kin.frame(self.f2).T.translation
        d = (p2 - p1) / np.linalg.norm(p2 - p1)
        lam_d = np.concatenate([self.s_d * d, np.zeros(3)])
        f_d = W.T @ lam_d
        f_c = self.measured_fc()
        if f_c is None:
            f_c = f_d.copy()
        e_f = f_d - f_c
        dt = 0.0 if self.t_prev is None else t - self.t_prev
        self.integral = pr.Q @ (self.integral + e_f * dt)
        self.t_prev = t
        cmd = f_d + self.kp_f * e_f + self.ki_f * self.integral
        tau = b - pr.Q @ cmd
        lam = pr.A_pinv.T @ f_c
        self.log_t.append(t)
        self.log_s.append(float(lam[:3] @ d))
        self.log_lam.append(lam)
        self.info = YumiForceInfo(status="solved", Qc=f_c)
        return tau

    def errors(self, kin, t: float):
        """({coupling name: e_c}, {task name: e_u}) at (kin, t) (controllers.base.ReportsErrors)."""
        return {self.coupling.name: self.coupling.error(kin, t)}, {self.task.name: self.task.error(kin, t)}

    def extra_metrics(self) -> dict:
        t, s = np.array(self.log_t), np.array(self.log_s)
        late = t > self.converge_after
        if not late.any():
            return {"squeeze_force_n_mean": float("nan"), "squeeze_force_error_rel": float("nan")}
        s_mean = float(s[late].mean())
        return {
            "squeeze_force_set_n": self.s_d,
            "squeeze_force_n_mean": s_mean,
            "squeeze_force_error_rel": float(np.mean(np.abs(s[late] - self.s_d)) / abs(self.s_d)),
            "squeeze_force_error_rel_max": float(np.max(np.abs(s[late] - self.s_d)) / abs(self.s_d)),
        }

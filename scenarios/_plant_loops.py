"""How far a MuJoCo plant's closed chain is from a rigid one: ``plant_vs_rigid_qacc_rel`` of the scenarios whose
plant closes a loop with MuJoCo equalities (issue 23 item 3; closed_chain computes it against the controller's
Pinocchio model, scenarios/closed_chain.py).

On a logged plant state (qpos, q̇, the torques sent), MuJoCo's q̈ against the rigid closed-chain q̈ of the same
plant, solved from MuJoCo's own quantities (series_parallel's RigidLoopCheck for any loop equality):

    M q̈ + Jᵀλ = f,   J q̈ + J̇q̇ = 0   →   λ = S⁺ (J M⁻¹ f + J̇q̇),  S = J M⁻¹ Jᵀ,   q̈ = M⁻¹(f − Jᵀλ),

M from ``mj_fullM``, J the equality rows of ``efc_J`` (connect: 3 rows, weld: 6; rank-deficient in a planar
loop, hence S⁺), f = ``qfrc_smooth`` plus the constraint forces of every other row (contacts, joint limits: kept
as MuJoCo found them, so only the loop is made rigid), and J̇q̇ = d/dt(J(q)) q̇ by central differences along q̇
(q ± h q̇ by ``mj_integratePos``, h = ``JDOT_STEP``).  The plant's own bodies on both sides: what differs is the
loop's softness (MuJoCo's regularised equality, whose reference acceleration has no J̇q̇ term), not a model error.
The metric is the median over ``QACC_CHECK_STATES`` logged states, spread evenly over the run, of
‖q̈_MuJoCo − q̈_rigid‖ / ‖q̈_rigid‖ over the controller's coordinates (``plant.map.dadr``)."""

from __future__ import annotations

import mujoco
import numpy as np

#: logged states the q̈ check is evaluated on (spread evenly over the run, both ends included)
QACC_CHECK_STATES = 20
#: step along q̇ (s) of the central difference that gives J̇q̇
JDOT_STEP = 1e-6


def check_rows(n_rows: int, n_states: int = QACC_CHECK_STATES) -> np.ndarray:
    """The indices of ``n_states`` rows spread evenly over ``n_rows`` (fewer when the run is shorter)."""
    if n_rows <= 0 or n_states <= 0:
        return np.zeros(0, dtype=int)
    return np.unique(np.linspace(0, n_rows - 1, n_states).astype(int))


def _equality_rows(m, d) -> np.ndarray:
    return np.flatnonzero(d.efc_type[: d.nefc] == int(mujoco.mjtConstraint.mjCNSTR_EQUALITY))


def _efc_jacobian(m, d) -> np.ndarray:
    """efc_J as a dense nefc × nv matrix (MuJoCo stores it sparse on large models)."""
    if mujoco.mj_isSparse(m):
        J = np.zeros((d.nefc, m.nv))
        mujoco.mju_sparse2dense(
            J, d.efc_J, d.efc_J_rownnz[: d.nefc], d.efc_J_rowadr[: d.nefc], d.efc_J_colind
        )
        return J
    return d.efc_J[: d.nefc * m.nv].reshape(d.nefc, m.nv).copy()


def _loop_jacobian(m, d, qpos) -> np.ndarray:
    d.qpos[:] = qpos
    mujoco.mj_fwdPosition(m, d)
    return _efc_jacobian(m, d)[_equality_rows(m, d)]


def rigid_accelerations(plant, qpos, qvel, tau) -> tuple[np.ndarray, np.ndarray]:
    """(MuJoCo's qacc, the rigid closed-chain q̈), both nv, at a plant state and the model-order torques ``tau``
    sent there (mapped to the motors as ``MujocoPlant.set_torque`` maps them, clipped to ctrlrange)."""
    m = plant.model
    d = mujoco.MjData(m)
    d.eq_active[:] = plant.data.eq_active
    pm = plant.map
    d.ctrl[:] = 0.0
    act = pm.actuated
    lo = np.where(m.actuator_ctrllimited, m.actuator_ctrlrange[:, 0], -np.inf)[pm.act[act]]
    hi = np.where(m.actuator_ctrllimited, m.actuator_ctrlrange[:, 1], np.inf)[pm.act[act]]
    d.ctrl[pm.act[act]] = np.clip(np.asarray(tau, dtype=float)[act] / pm.gear[act], lo, hi)
    d.qpos[:], d.qvel[:] = qpos, qvel
    mujoco.mj_forward(m, d)
    qacc = d.qacc.copy()
    rows = _equality_rows(m, d)
    if rows.size == 0:
        return qacc, qacc.copy()
    Jall = _efc_jacobian(m, d)
    J = Jall[rows]
    f = d.qfrc_smooth + d.qfrc_constraint - J.T @ d.efc_force[rows]  # every force but the loop's
    M = np.zeros((m.nv, m.nv))
    mujoco.mj_fullM(m, d, M)
    v = np.asarray(qvel, dtype=float)
    scratch = mujoco.MjData(m)
    scratch.eq_active[:] = plant.data.eq_active
    qp, qm = np.array(qpos, dtype=float), np.array(qpos, dtype=float)
    mujoco.mj_integratePos(m, qp, v, JDOT_STEP)
    mujoco.mj_integratePos(m, qm, v, -JDOT_STEP)
    Jp, Jm = _loop_jacobian(m, scratch, qp), _loop_jacobian(m, scratch, qm)
    jdq = ((Jp - Jm) / (2 * JDOT_STEP)) @ v if Jp.shape == J.shape == Jm.shape else np.zeros(len(rows))
    Minv_f = np.linalg.solve(M, f)
    MiJt = np.linalg.solve(M, J.T)
    lam = np.linalg.pinv(J @ MiJt, rcond=1e-10, hermitian=True) @ (J @ Minv_f + jdq)
    return qacc, Minv_f - MiJt @ lam


def plant_vs_rigid_qacc_rel(plant, qpos, qvel, tau) -> float:
    """The median of ‖q̈_MuJoCo − q̈_rigid‖ / ‖q̈_rigid‖ over the controller's coordinates on the given states
    (rows of ``qpos``, ``qvel``, ``tau``: pick them with :func:`check_rows`); NaN without states."""
    i = plant.map.dadr
    rel = []
    for q, v, u in zip(qpos, qvel, tau):
        a_mj, a_rig = rigid_accelerations(plant, q, v, u)
        rel.append(float(np.linalg.norm(a_mj[i] - a_rig[i]) / max(np.linalg.norm(a_rig[i]), 1e-12)))
    return float(np.median(rel)) if rel else float("nan")

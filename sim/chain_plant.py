"""MuJoCo plant of an N-body chain ([Eslami]) seen the way the tensor model sees it: body poses and
twists in inertial coordinates, wrenches on bodies.

    plant = ChainMujocoPlant("mjcf/chain5.xml", ["body1", …, "body5"], sim_dt=2.5e-4)
    plant.reset(chain_state)                 # ChainState of models/tensor_chain.py
    q, v = plant.state()                     # q = [p_1…p_N, quat_1…quat_N] (7N), v = ν = [v…; ω…] (6N)
    plant.set_torque(tau)                    # the port: a wrench per body, [F_B; M_B] (6N) — "thrusters"
    plant.set_joint_moments(u)               # or motors in the ball joints: u_j on body j+1, −u_j on body j
    plant.set_wrench("body3", f, m)          # external disturbance, added to the port (world axes, at the CoM)
    plant.step(n)

The structure expected in the MJCF: the named bodies, each with its frame at its centre of mass (explicit
``<inertial pos="0 0 0">`` without rotation), body k+1 the child of body k through one ball joint, and body
1 either free (a freejoint) or welded to the world (no joint).  This is checked at construction.
``state()`` reads xpos/xquat and mj_objectVelocity (world-aligned, at the CoM) — what a motion-capture
system would measure; the controller never sees MuJoCo's generalized coordinates.
"""

from __future__ import annotations

import math
from pathlib import Path

import mujoco
import numpy as np
from numpy.typing import ArrayLike

from cmstack.models.errors import ModelFileError, StateError
from cmstack.models.robot import resolve_asset
from cmstack.models.tensor_chain import ChainState, TensorChain, quat_conj, quat_mul
from cmstack.sim.base import MujocoClock
from cmstack.sim.plant import _as_slice, load_mjcf


class ChainMujocoPlant(MujocoClock):
    def __init__(
        self,
        mjcf_path: str | Path,
        body_names: list[str],
        *,
        sim_dt: float | None = None,
        gravity: ArrayLike | None = None,
    ) -> None:
        self.path = resolve_asset(mjcf_path)
        self.model = load_mjcf(self.path)
        if sim_dt is not None:
            self.model.opt.timestep = float(sim_dt)
        if gravity is not None:
            self.model.opt.gravity[:] = gravity
        self.data = mujoco.MjData(self.model)
        m = self.model
        self.names = list(body_names)
        ids = []
        for nm in self.names:
            b = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, nm)
            if b < 0:
                have = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, i) for i in range(m.nbody)]
                raise ModelFileError(f"{self.path.name}: body '{nm}' not found (bodies: {have})")
            ids.append(b)
        self.ids = np.array(ids)
        n = len(ids)
        for k, b in enumerate(ids):
            if np.linalg.norm(m.body_ipos[b]) > 1e-12 or abs(abs(m.body_iquat[b][0]) - 1) > 1e-12:
                raise ModelFileError(
                    f"{self.path.name}: body '{self.names[k]}' must have its frame at its centre "
                    f'of mass without rotation (<inertial pos="0 0 0">)'
                )
        # base joint
        j0 = [j for j in range(m.njnt) if m.jnt_bodyid[j] == ids[0]]
        if len(j0) == 1 and m.jnt_type[j0[0]] == mujoco.mjtJoint.mjJNT_FREE:
            self.free = True
            self.base_qadr, self.base_dadr = m.jnt_qposadr[j0[0]], m.jnt_dofadr[j0[0]]
        elif len(j0) == 0:
            self.free = False
        else:
            raise ModelFileError(
                f"{self.path.name}: body '{self.names[0]}' must have a freejoint or no joint"
            )
        self.ball_q, self.ball_d = [], []
        for k in range(1, n):
            if m.body_parentid[ids[k]] != ids[k - 1]:
                raise ModelFileError(
                    f"{self.path.name}: '{self.names[k]}' must be the child of '{self.names[k - 1]}'"
                )
            js = [j for j in range(m.njnt) if m.jnt_bodyid[j] == ids[k]]
            if len(js) != 1 or m.jnt_type[js[0]] != mujoco.mjtJoint.mjJNT_BALL:
                raise ModelFileError(
                    f"{self.path.name}: '{self.names[k]}' must hang on exactly one ball joint"
                )
            if abs(abs(m.body_quat[ids[k]][0]) - 1) > 1e-12:
                raise ModelFileError(
                    f"{self.path.name}: '{self.names[k]}' must not be rotated in its parent at qpos0"
                )
            self.ball_q.append(m.jnt_qposadr[js[0]])
            self.ball_d.append(m.jnt_dofadr[js[0]])
        self.n = n
        self.offsets = np.array([m.body_pos[ids[k]] for k in range(1, n)])  # child CoM in parent frame
        self.port = np.zeros(6 * n)
        self.dist = np.zeros((n, 6))
        self.joint_u = np.zeros((n - 1, 3))
        # per-step helpers: the bodies' rows as a slice when consecutive, their ids as ints, buffers
        self._rows = _as_slice(self.ids)
        self._ids_int = [int(b) for b in self.ids]
        self._wrench = np.zeros((n, 6))
        self._vel = np.zeros((n, 6))
        self._bad_idx = [int(k) for k in self._BAD]

    # ------------------------------------------------------------------ state
    def reset(self, s: ChainState) -> None:
        """Put the plant in the chain state s (which must satisfy the joints)."""
        m, d = self.model, self.data
        mujoco.mj_resetData(m, d)
        n = self.n
        R = s.R
        w = s.w
        if self.free:
            d.qpos[self.base_qadr : self.base_qadr + 3] = s.pos[0]
            d.qpos[self.base_qadr + 3 : self.base_qadr + 7] = s.quat[0]
            d.qvel[self.base_dadr : self.base_dadr + 3] = s.v[0]
            d.qvel[self.base_dadr + 3 : self.base_dadr + 6] = R[0].T @ w[0]
        for k in range(1, n):
            d.qpos[self.ball_q[k - 1] : self.ball_q[k - 1] + 4] = quat_mul(
                quat_conj(s.quat[k - 1]), s.quat[k]
            )
            d.qvel[self.ball_d[k - 1] : self.ball_d[k - 1] + 3] = R[k].T @ (w[k] - w[k - 1])
        mujoco.mj_forward(m, d)
        got = self.chain_state()
        err = max(np.max(np.abs(got.pos - s.pos)), np.max(np.abs(got.nu - s.nu)))
        if err > 1e-9:
            raise StateError(
                f"{self.path.name}: the chain state could not be set (mismatch {err:.3g}); is it "
                f"consistent with the joints and, for a welded base, with the base pose?"
            )
        self.port[:] = 0.0
        self.dist[:] = 0.0
        self.joint_u[:] = 0.0

    def qpos_of(self, s: ChainState) -> np.ndarray:
        """MuJoCo qpos of a chain state (for replaying a tensor-model trajectory in the viewer)."""
        q = self.model.qpos0.copy()
        if self.free:
            q[self.base_qadr : self.base_qadr + 3] = s.pos[0]
            q[self.base_qadr + 3 : self.base_qadr + 7] = s.quat[0]
        for k in range(1, self.n):
            q[self.ball_q[k - 1] : self.ball_q[k - 1] + 4] = quat_mul(quat_conj(s.quat[k - 1]), s.quat[k])
        return q

    def check_matches(self, chain: TensorChain) -> None:
        """Refuse a tensor model whose masses, inertias, joint points or springs differ from the MJCF."""
        m = self.model
        bad = []
        if chain.n != self.n:
            bad.append(f"{chain.n} bodies vs {self.n}")
        else:
            for k, b in enumerate(self.ids):
                if abs(m.body_mass[b] - chain.masses[k]) > 1e-9:
                    bad.append(f"mass of {self.names[k]} {m.body_mass[b]} vs {chain.masses[k]}")
                if np.max(np.abs(np.diag(m.body_inertia[b]) - chain.inertias[k])) > 1e-9:
                    bad.append(
                        f"inertia of {self.names[k]} {m.body_inertia[b]} vs {np.diag(chain.inertias[k])}"
                    )
            for k in range(1, self.n):
                off = chain.joint_parent[k - 1] - chain.joint_child[k - 1]
                if np.max(np.abs(off - self.offsets[k - 1])) > 1e-9:
                    bad.append(f"joint {k}: CoM offset {self.offsets[k - 1]} vs {off}")
                j = [i for i in range(m.njnt) if m.jnt_bodyid[i] == self.ids[k]][0]
                if (
                    chain.spring_law == "rotvec"
                    and np.max(np.abs(chain.stiffness[k - 1] - m.jnt_stiffness[j])) > 1e-9
                ):
                    bad.append(f"joint {k}: stiffness {m.jnt_stiffness[j]} vs {chain.stiffness[k - 1]}")
        if bad:
            raise ModelFileError(f"{self.path.name} does not match the tensor model: " + "; ".join(bad))

    @property
    def body_rows(self) -> slice | np.ndarray:
        """The chain bodies' rows of MuJoCo's per-body arrays (``data.xpos``, ``xquat``, ``xfrc_applied``), in
        chain order: a slice when the body ids are consecutive, else their index array."""
        return self._rows

    def chain_state(self) -> ChainState:
        m, d = self.model, self.data
        pos = d.xpos[self._rows].copy()
        quat = d.xquat[self._rows].copy()
        quat[quat[:, 0] < 0] *= -1.0
        vel, body = self._vel, mujoco.mjtObj.mjOBJ_BODY
        for k, b in enumerate(self._ids_int):  # [ω; v] of each body, world axes
            mujoco.mj_objectVelocity(m, d, body, b, vel[k], 0)
        return ChainState(pos, quat, np.concatenate([vel[:, 3:].ravel(), vel[:, :3].ravel()]))

    def state(self) -> tuple[np.ndarray, np.ndarray]:
        s = self.chain_state()
        return np.concatenate([s.pos.ravel(), s.quat.ravel()]), s.nu

    # ------------------------------------------------------------------ inputs
    def set_torque(self, tau: ArrayLike) -> None:
        """Either the port τ = [F_B; M_B] (6N, world axes, forces at the CoMs: one thruster set per body), or
        3(N−1) motor moments (world axes), dispatched to ``set_joint_moments``."""
        tau = np.asarray(tau, dtype=float)
        if tau.shape == (3 * (self.n - 1),):
            self.set_joint_moments(tau)
            return
        if tau.shape != (6 * self.n,) or not np.all(np.isfinite(tau)):
            raise StateError(
                f"set_torque: expected the port (6N = {6 * self.n}) or motor moments "
                f"(3(N−1) = {3 * (self.n - 1)}) as finite numbers, got shape {tau.shape}"
            )
        self.port[:] = tau

    def set_joint_moments(self, u: ArrayLike) -> None:
        """Motor moments u_j (N−1, 3), world axes: +u_j on body j+1, −u_j on body j."""
        u = np.asarray(u, dtype=float).reshape(self.n - 1, 3)
        if not np.all(np.isfinite(u)):
            raise StateError("set_joint_moments: non-finite motor moments")
        self.joint_u[:] = u

    def set_wrench(self, body: str, f: ArrayLike = (0.0, 0.0, 0.0), m: ArrayLike = (0.0, 0.0, 0.0)) -> None:
        if body not in self.names:
            raise StateError(f"set_wrench: '{body}' is not one of the chain bodies {self.names}")
        k = self.names.index(body)
        self.dist[k, :3] = f
        self.dist[k, 3:] = m

    _BAD = (
        mujoco.mjtWarning.mjWARN_BADQACC,
        mujoco.mjtWarning.mjWARN_BADQPOS,
        mujoco.mjtWarning.mjWARN_BADQVEL,
    )

    def step(self, n_steps: int = 1) -> None:
        m, d = self.model, self.data
        n = self.n
        t0 = self.time
        w = self._wrench
        w[:, :3] = self.port[: 3 * n].reshape(n, 3)
        w[:, 3:] = self.port[3 * n :].reshape(n, 3)
        w += self.dist
        d.xfrc_applied[:] = 0.0
        d.xfrc_applied[self._rows] = w
        motors = bool(self.joint_u.any())
        for _ in range(n_steps):
            d.qfrc_applied[:] = 0.0
            if motors:
                R = d.xmat[self.ids].reshape(n, 3, 3)
                for k in range(1, n):
                    d.qfrc_applied[self.ball_d[k - 1] : self.ball_d[k - 1] + 3] = R[k].T @ self.joint_u[k - 1]
            mujoco.mj_step(m, d)
        counts = d.warning.number.tolist()
        qp, qv = d.qpos, d.qvel
        if any([counts[i] for i in self._bad_idx]) or not math.isfinite(qp.dot(qp) + qv.dot(qv)):
            bad = [k.name for k in self._BAD if counts[int(k)] > 0]
            raise StateError(
                f"the MuJoCo chain {self.path.name} diverged between t={t0:.4f} s and t={t0 + n_steps * self.dt:.4f} s "
                f"({', '.join(bad) or 'non-finite state'})"
            )

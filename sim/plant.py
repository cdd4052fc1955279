"""MuJoCo plant: the "real" robot.  State and torques by joint NAME (mapped once at start-up to the
Pinocchio model's order), external wrenches on bodies, optional measurement noise.

    plant = MujocoPlant("mjcf/yumi.xml", robot.joint_names, sim_dt=0.005)
    plant.reset(q0)                      # model order
    q, v = plant.state()                 # model order (+ noise if configured)
    plant.set_torque(tau)                # model order → motors driving the same joints
    plant.set_wrench("yumi_link_7_l", f=[0, 0, -10])   # world-frame force/torque at the body's CoM
    plant.step(n)

The plant owns everything physical: MJCF, integrator, disturbances, actuator limits (a motor's
ctrlrange clips the torque, as a real drive would), unmodelled bodies.
"""

from __future__ import annotations

import difflib
import math
from pathlib import Path
from typing import Any

import mujoco
import numpy as np
from numpy.typing import ArrayLike

from cmstack.models.errors import ConfigError, FrameNotFoundError, JointMapError, ModelFileError, StateError
from cmstack.models.mj_coords import CoordinateMap
from cmstack.models.robot import _check_xml, resolve_asset
from cmstack.sim.base import MujocoClock


class MeasurementNoise:
    """Gaussian noise on a measured state: q + N(0, std_q²), v + N(0, std_v²) per coordinate, drawn from
    ``rng`` (q's draws first, then v's; none for a zero deviation).  The one implementation of measurement
    noise: ``MujocoPlant(noise_q=, noise_v=)`` and a perturbation's ``noise_q``/``noise_v``
    (sim/perturb.py) both apply it, each with its own random stream."""

    def __init__(self, std_q: float, std_v: float, rng: np.random.Generator):
        for key, val in (("noise_q", std_q), ("noise_v", std_v)):
            if not (np.isfinite(val) and val >= 0):
                raise ConfigError(f"{key} must be a finite standard deviation >= 0, got {val}")
        self.std_q, self.std_v, self.rng = float(std_q), float(std_v), rng

    @property
    def active(self) -> bool:
        """Some noise is added (a deviation > 0)."""
        return self.std_q > 0 or self.std_v > 0

    def apply(self, q: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(q, v) with the noise added (new arrays where noise is added; the arguments are not changed)."""
        if self.std_q > 0:
            q = q + self.rng.normal(scale=self.std_q, size=q.shape)
        if self.std_v > 0:
            v = v + self.rng.normal(scale=self.std_v, size=v.shape)
        return q, v


def load_mjcf(path: str | Path) -> mujoco.MjModel:
    p = resolve_asset(path)
    _check_xml(p, "MJCF")
    try:
        return mujoco.MjModel.from_xml_path(str(p))
    except Exception as exc:  # mujoco raises ValueError with the compiler's message
        raise ModelFileError(f"MJCF {p} could not be compiled by MuJoCo: {exc}") from None


def _as_slice(idx: ArrayLike) -> slice | np.ndarray:
    """``idx`` (integer indices) as the equivalent slice when they are consecutive and increasing, else
    the index array itself."""
    idx = np.asarray(idx, dtype=int)
    if idx.size and np.array_equal(idx, np.arange(idx[0], idx[0] + idx.size)):
        return slice(int(idx[0]), int(idx[0]) + idx.size)
    return idx


class JointMap:
    """Name-based map between a Pinocchio model's joints and a MuJoCo model's joints.

    q_model = qpos[qadr],  v_model = qvel[dadr] (a ball or free joint's quaternion reordered, a free joint's
    linear velocity rotated into its body's axes: ``cmstack.models.mj_coords.CoordinateMap``, ``coords``);
    torques go to the motor actuator driving the same 1-DoF joint (ctrl = τ / gear); a ball or free joint
    has no motor.  Built once at start-up; a mismatch is refused with a
    message listing the names missing on either side.  Plant joints that the model deliberately does
    not have (a passive hinge of a closed chain, say) must be named in ``plant_only``."""

    def __init__(
        self,
        model_joint_names: list[str],
        mj_model: mujoco.MjModel,
        *,
        plant_only: tuple[str, ...] = (),
        source: str = "plant",
        model: Any = None,
    ):
        """model: the Pinocchio model, when known: each joint's kind is checked against MuJoCo's."""
        mj_names = [mujoco.mj_id2name(mj_model, mujoco.mjtObj.mjOBJ_JOINT, j) for j in range(mj_model.njnt)]
        missing = [n for n in model_joint_names if n not in mj_names]
        extra = [n for n in mj_names if n not in model_joint_names and n not in plant_only]
        if missing or extra:
            raise JointMapError(
                f"{source} joints do not match the model: "
                + (f"missing in the plant: {missing}; " if missing else "")
                + (f"in the plant but not in the model: {extra}; " if extra else "")
                + "rename them, or declare plant-only joints explicitly."
            )
        self.names = list(model_joint_names)
        self.jid = np.array([mj_names.index(n) for n in self.names], dtype=int)
        self.coords = CoordinateMap(mj_model, self.jid, model, source)
        self.qadr = self.coords.qsel
        self.dadr = self.coords.vsel
        self.nq, self.nv = self.coords.nq, self.coords.nv
        self.has_free = self.coords.has_free
        #: each v coordinate's name (a multi-DoF joint's are 'name[k]'), for messages
        self.v_names = []
        for n, j in zip(self.names, self.jid):
            t = int(mj_model.jnt_type[j])
            k = (
                6
                if t == int(mujoco.mjtJoint.mjJNT_FREE)
                else 3
                if t == int(mujoco.mjtJoint.mjJNT_BALL)
                else 1
            )
            self.v_names += [n] if k == 1 else [f"{n}[{i}]" for i in range(k)]
        # actuators: motor on a hinge or slide joint (trntype joint), by v coordinate
        self.act = -np.ones(self.nv, dtype=int)
        self.gear = np.ones(self.nv)
        for a in range(mj_model.nu):
            if int(mj_model.actuator_trntype[a]) == int(mujoco.mjtTrn.mjTRN_JOINT):
                j = mj_model.actuator_trnid[a, 0]
                hit = np.flatnonzero(self.jid == j)
                if hit.size:
                    if int(mj_model.jnt_type[j]) in (
                        int(mujoco.mjtJoint.mjJNT_FREE),
                        int(mujoco.mjtJoint.mjJNT_BALL),
                    ):
                        raise JointMapError(
                            f"{source}: actuator {a} drives the ball/free joint '{self.names[hit[0]]}'; this "
                            "stack's motors drive hinge and slide joints"
                        )
                    iv = int(np.flatnonzero(self.dadr == mj_model.jnt_dofadr[j])[0])
                    self.act[iv] = a
                    self.gear[iv] = mj_model.actuator_gear[a, 0]
        self.actuated = self.act >= 0


class MujocoPlant(MujocoClock):
    #: the MjSpec the plant was compiled from, when ``plant_from_urdf`` built it (``save_xml`` writes it)
    spec: mujoco.MjSpec | None = None

    def __init__(
        self,
        mjcf_path: str | Path,
        model_joint_names: list[str],
        *,
        sim_dt: float | None = None,
        plant_only: tuple[str, ...] = (),
        noise_q: float = 0.0,
        noise_v: float = 0.0,
        seed: int = 0,
        integrator: str | None = None,
        mj_model: mujoco.MjModel | None = None,
    ):
        self.path = resolve_asset(mjcf_path)
        self.model = load_mjcf(self.path) if mj_model is None else mj_model
        if sim_dt is not None:
            if not sim_dt > 0:
                raise ConfigError(f"sim_dt must be > 0, got {sim_dt}")
            self.model.opt.timestep = float(sim_dt)
        if integrator is not None:
            names = {
                "euler": mujoco.mjtIntegrator.mjINT_EULER,
                "rk4": mujoco.mjtIntegrator.mjINT_RK4,
                "implicit": mujoco.mjtIntegrator.mjINT_IMPLICIT,
                "implicitfast": mujoco.mjtIntegrator.mjINT_IMPLICITFAST,
            }
            if integrator.lower() not in names:
                raise ConfigError(f"integrator='{integrator}' is not one of {list(names)}")
            self.model.opt.integrator = names[integrator.lower()]
        self.data = mujoco.MjData(self.model)
        self.map = JointMap(
            model_joint_names, self.model, plant_only=plant_only, source=f"MJCF {self.path.name}"
        )
        self.noise = MeasurementNoise(noise_q, noise_v, np.random.default_rng(seed))
        self._ctrl_lo = np.where(
            self.model.actuator_ctrllimited, self.model.actuator_ctrlrange[:, 0], -np.inf
        )
        self._ctrl_hi = np.where(self.model.actuator_ctrllimited, self.model.actuator_ctrlrange[:, 1], np.inf)
        self.saturated = 0  # number of set_torque calls where a motor clipped
        # precomputed for the per-step path (set_torque, step): index arrays and limits of the motors
        m = self.map
        self._all_actuated = bool(np.all(m.actuated))
        self._act_idx = m.act[m.actuated]
        self._inv_gear = 1.0 / m.gear[m.actuated]
        self._lo_act, self._hi_act = self._ctrl_lo[self._act_idx], self._ctrl_hi[self._act_idx]
        self._bad_warnings = [(int(k), k.name) for k in self._BAD]
        self._bad_idx = [i for i, _ in self._bad_warnings]
        # contiguous index ranges become slices (a slice copy/assignment is cheaper than fancy indexing)
        self._q_ix, self._v_ix = _as_slice(m.qadr), _as_slice(m.dadr)
        self._act_ix = _as_slice(self._act_idx)

    @classmethod
    def from_model(
        cls, mj_model: mujoco.MjModel, model_joint_names: list[str], *, name: str = "model", **kwargs: Any
    ) -> MujocoPlant:
        """A plant of an already compiled ``mujoco.MjModel`` (e.g. ``cmstack.sim.urdf_plant``);
        ``name`` stands for the file name in messages; ``kwargs`` as ``__init__``."""
        return cls(name, model_joint_names, mj_model=mj_model, **kwargs)

    # ------------------------------------------------------------------ state
    def reset(
        self, q: ArrayLike, v: ArrayLike | None = None, qpos_extra: dict[str, float] | None = None
    ) -> None:
        mujoco.mj_resetData(self.model, self.data)
        q = np.asarray(q, dtype=float)
        if q.shape != (self.map.nq,):
            raise StateError(f"reset: q has shape {q.shape}, the model has nq={self.map.nq}")
        self.map.coords.qpos_into(q, self.data.qpos)
        if v is not None:
            v = np.asarray(v, dtype=float)
            if v.shape != (self.map.nv,):
                raise StateError(f"reset: v has shape {v.shape}, the model has nv={self.map.nv}")
            self.map.coords.qvel_into(q, v, self.data.qvel)
        for name, val in (qpos_extra or {}).items():
            j = self.joint_id(name)
            self.data.qpos[self.model.jnt_qposadr[j]] = val
        mujoco.mj_forward(self.model, self.data)

    def state(self, noisy: bool = True) -> tuple[np.ndarray, np.ndarray]:
        q = self.data.qpos[self._q_ix].copy()  # (a fancy index already copies; a slice needs the copy)
        v = self.data.qvel[self._v_ix].copy()
        if self.map.has_free:  # a free joint's linear velocity: world axes in MuJoCo, its body's in the model
            v = self.map.coords.v_from_qvel(q, self.data.qvel)
        return self.noise.apply(q, v) if noisy else (q, v)

    def measured_index(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(qadr, dadr) with ``state()`` = (data.qpos[qadr], data.qvel[dadr]) exactly, or None when measurement
        noise is added or a free joint's velocity is rotated (what the fixed-rate driver needs to log:
        sim/rt_driver.py)."""
        return None if (self.noise.active or self.map.has_free) else (self.map.qadr, self.map.dadr)

    def joint_id(self, name: str) -> int:
        """MuJoCo's id of the joint ``name`` (a FrameNotFoundError naming the closest joints if none)."""
        return self._named_id(mujoco.mjtObj.mjOBJ_JOINT, self.model.njnt, "joint", name)

    def body_id(self, name: str) -> int:
        """MuJoCo's id of the body ``name`` (a FrameNotFoundError naming the closest bodies if none)."""
        return self._named_id(mujoco.mjtObj.mjOBJ_BODY, self.model.nbody, "body", name)

    def _named_id(self, kind: Any, count: int, what: str, name: str) -> int:
        """The id of ``name`` among the model's ``count`` objects of type ``kind`` (mjtObj); else a
        FrameNotFoundError naming the file and the closest of their names (``what``: joint, body)."""
        i = mujoco.mj_name2id(self.model, kind, name)
        if i < 0:
            names = [mujoco.mj_id2name(self.model, kind, k) for k in range(count)]
            raise FrameNotFoundError(
                f"{what} '{name}' is not in {self.path.name}; close: {difflib.get_close_matches(name, names, n=4)}"
            )
        return i

    # ------------------------------------------------------------------ inputs
    def set_torque(self, tau: ArrayLike) -> None:
        """Model-order joint torques → the motors of the same joints (ctrl = τ / gear, clipped to
        ctrlrange).  A non-zero torque on a joint that has no motor is refused."""
        tau = np.asarray(tau, dtype=float)
        m = self.map
        if tau.shape != (m.nv,):
            raise StateError(f"set_torque: τ has shape {tau.shape}, the model has nv={m.nv}")
        if not math.isfinite(
            tau.dot(tau)
        ):  # one reduction: NaN/inf anywhere (or overflow) makes it non-finite
            raise StateError(
                f"set_torque: τ contains NaN/inf at joints "
                f"{[n for n, x in zip(m.v_names, tau) if not np.isfinite(x)] or '(overflow)'}"
            )
        if not self._all_actuated:
            if np.any(np.abs(tau[~m.actuated]) > 1e-9):
                bad = [n for n, a, x in zip(m.v_names, m.actuated, tau) if not a and abs(x) > 1e-9]
                raise JointMapError(f"{self.path.name}: torque requested on joints without a motor: {bad}")
            tau = tau[m.actuated]
        ctrl = tau * self._inv_gear
        clipped = np.minimum(self._hi_act, np.maximum(self._lo_act, ctrl))
        if clipped.tolist() != ctrl.tolist():  # (finite: checked above)
            self.saturated += 1
        self.data.ctrl[self._act_ix] = clipped

    def set_wrench(self, body: str, f: ArrayLike = (0.0, 0.0, 0.0), m: ArrayLike = (0.0, 0.0, 0.0)) -> None:
        """External force f and moment m (world axes) applied at the body's centre of mass until changed."""
        b = self.body_id(body)
        self.data.xfrc_applied[b, :3] = f
        self.data.xfrc_applied[b, 3:] = m

    def clear_wrenches(self) -> None:
        self.data.xfrc_applied[:] = 0.0

    _BAD = (
        mujoco.mjtWarning.mjWARN_BADQACC,
        mujoco.mjtWarning.mjWARN_BADQPOS,
        mujoco.mjtWarning.mjWARN_BADQVEL,
        mujoco.mjtWarning.mjWARN_BADCTRL,
    )

    def step(self, n: int = 1) -> None:
        """Advance n sim steps.  MuJoCo silently *resets* the state when an acceleration, position,
        velocity or control goes non-finite (it only bumps a warning counter): that would be a silent
        wrong answer, so any such warning is raised here as a StateError."""
        t0 = self.time
        m, d = self.model, self.data
        for _ in range(n):
            mujoco.mj_step(m, d)
        self.check_step(t0, n)

    def check_step(self, t0: float, n: int) -> None:
        """Raise StateError if MuJoCo flagged a non-finite acceleration/position/velocity/control (its
        warning counters are cumulative: one check after n steps from ``t0`` [s] covers them all) or
        the state is not finite."""
        d = self.data
        counts = d.warning.number.tolist()  # one read of every warning counter
        qp, qv = d.qpos, d.qvel
        if any([counts[i] for i in self._bad_idx]) or not math.isfinite(qp.dot(qp) + qv.dot(qv)):
            bad = [name for i, name in self._bad_warnings if counts[i] > 0]
            raise StateError(
                f"the MuJoCo plant {self.path.name} diverged between t={t0:.4f} s and "
                f"t={t0 + n * self.dt:.4f} s ({', '.join(bad) or 'non-finite state'}); check the applied "
                f"torques and wrenches for NaN, reduce sim_dt, or lower the gains"
            )

    # ------------------------------------------------------------------ diagnostics
    def equality_violation(self) -> float:
        """Max |constraint residual| of the plant's equality constraints (weld/connect), in SI."""
        if self.model.neq == 0:
            return 0.0
        # position-dependent stages only (kinematics, constraint rows): efc_pos at the current qpos,
        # without the velocity/acceleration stages of a full mj_forward (mj_step redoes all of them)
        mujoco.mj_fwdPosition(self.model, self.data)
        rows = self.data.efc_type == int(mujoco.mjtConstraint.mjCNSTR_EQUALITY)
        return float(np.max(np.abs(self.data.efc_pos[rows]))) if np.any(rows) else 0.0

    def equality_violations(self, qpos: ArrayLike) -> np.ndarray:
        """:meth:`equality_violation` at each row of ``qpos`` (N × nq, e.g. a run's logged
        ``plant_qpos``), evaluated on a scratch ``MjData`` (the residuals depend on qpos only): a run
        logs the state in its loop and computes this after it.  The plant's own data is untouched."""
        qpos = np.asarray(qpos, dtype=float)
        out = np.zeros(len(qpos))
        if self.model.neq == 0:
            return out
        d = mujoco.MjData(self.model)
        d.eq_active[:] = self.data.eq_active
        eq = int(mujoco.mjtConstraint.mjCNSTR_EQUALITY)
        for i, row in enumerate(qpos):
            d.qpos[:] = row
            mujoco.mj_fwdPosition(self.model, d)
            rows = d.efc_type == eq
            out[i] = float(np.max(np.abs(d.efc_pos[rows]))) if np.any(rows) else 0.0
        return out

"""Balloon + flight chain + slider + double pendulum ([Alazard] §4, Table 1): TITOP vs Pinocchio vs MuJoCo.

The 9-DoF system of the paper's validation case, built three times from independent descriptions:

* TITOP (models/titop.py): a FloatingBase balloon, a Prismatic slider block, two Revolute pendulum
  blocks, each built from its own Table 1 parameters only (Fig. 16); buoyancy as an external load at
  port B of the balloon, spring/dampers as the joints' driving inputs F_m, C_m1, C_m2;
* Pinocchio: urdf/balloon.urdf with a free-flyer root, ABA/RNEA, buoyancy and spring/dampers as
  generalized forces;
* MuJoCo: mjcf/balloon.xml, buoyancy as gravcomp = m_G/m_B, spring/dampers as joint
  stiffness/damping, its own RK4.

TITOP and Pinocchio are integrated by the same RK4 (:func:`rk4_step`: classic RK4 on
(IP, quaternion, joints, ν), quaternion renormalised after each step) with the same step, MuJoCo by
its RK4 with the same step.  ``engine`` picks the trajectory shown in the main plot, the log and the
Meshcat replay.  Metrics: FD/ID agreement on random states, trajectory agreement (5 s with Pinocchio,
2 s with MuJoCo), growth of the differences over the whole run (fitted exponent), energy drift with
the dampers off.
"""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pinocchio as pin

from cmstack.controllers.base import StepInfo
from cmstack.models.errors import ConfigError, ModelFileError, StateError, check_finite
from cmstack.models.robot import resolve_asset
from cmstack.models.titop import (
    FloatingBase,
    Prismatic,
    Revolute,
    RigidBody,
    System,
    quat_rows,
    quat_to_R,
    rpy,
)
from cmstack.scenarios._common import Outcome, Row, scenario_main
from cmstack.sim.base import MujocoClock
from cmstack.sim.plant import load_mjcf
from cmstack.sim.runner import simulate

NAME = "balloon"
ENGINES = ("titop", "pinocchio", "mujoco")
DOF_NAMES = ["x [m]", "y [m]", "z [m]", "φ [rad]", "θ [rad]", "ψ [rad]", "p [m]", "θ₁ [rad]", "θ₂ [rad]"]
JOINTS = ("slider", "pendulum1", "pendulum2")
LENGTH_DOFS = [0, 1, 2, 6]  # x, y, z, p [m]
ANGLE_DOFS = [3, 4, 5, 7, 8]  # φ, θ, ψ, θ₁, θ₂ [rad]


# ------------------------------------------------------------------------------------- parameters
class Params:
    """Table 1 (plus the chosen spring/dampers) read from the config, checked once."""

    def __init__(self, cfg):
        b, s, p1, p2 = cfg["balloon"], cfg["slider"], cfg["pendulum1"], cfg["pendulum2"]
        self.g = np.asarray(cfg["gravity"], dtype=float)
        self.mB, self.IB = float(b["mass"]), np.asarray(b["inertia"], dtype=float)
        self.CB = np.asarray(b["CB"], dtype=float)
        self.mS, self.t = float(s["mass"]), np.asarray(s["axis"], dtype=float)
        self.m1, self.SP1 = float(p1["mass"]), np.asarray(p1["SP"], dtype=float)
        self.m2, self.P1P2 = float(p2["mass"]), np.asarray(p2["SP"], dtype=float)
        self.k, self.ds = float(s["stiffness"]), float(s["damping"])
        self.dp1, self.dp2 = float(p1["damping"]), float(p2["damping"])
        self.mG = self.mB + self.mS + self.m1 + self.m2
        self.buoyancy = bool(cfg["buoyancy"])
        for key, val in (
            ("gravity", self.g),
            ("balloon.inertia", self.IB),
            ("balloon.CB", self.CB),
            ("slider.axis", self.t),
            ("pendulum1.SP", self.SP1),
            ("pendulum2.SP", self.P1P2),
        ):
            if val.shape != ((3, 3) if key == "balloon.inertia" else (3,)):
                raise ConfigError(f"config key '{key}' has the wrong shape {val.shape}")
        for key, val in (
            ("slider.stiffness", self.k),
            ("slider.damping", self.ds),
            ("pendulum1.damping", self.dp1),
            ("pendulum2.damping", self.dp2),
        ):
            if not (np.isfinite(val) and val >= 0):
                raise ConfigError(f"config key '{key}' must be >= 0, got {val}")
        self.q0 = initial_state(cfg)

    def with_dampers_off(self):
        p = object.__new__(Params)
        p.__dict__.update(self.__dict__)
        p.ds = p.dp1 = p.dp2 = 0.0
        return p


def initial_state(cfg):
    """Table 1: balloon at rest at the origin with R_b = R_i, p = ṗ = 0, θ₁(0), θ₂(0), rates 0."""
    q = np.zeros(10)
    q[6] = 1.0  # quaternion (x, y, z, w) = identity
    q[7] = cfg["slider"]["p0"]
    q[8] = np.deg2rad(cfg["pendulum1"]["theta0_deg"])
    q[9] = np.deg2rad(cfg["pendulum2"]["theta0_deg"])
    return q


# ------------------------------------------------------------------------------------- the models
def titop_system(P: Params) -> System:
    """Fig. 16: one block per body, each with its own parameters.  The balloon's frame has its origin
    at B (centre of mass), so its ports are B (buoyancy) and C = B − CB (the flight-chain tip)."""
    balloon = RigidBody("balloon", P.mB, (0, 0, 0), P.IB, ports={"B": np.zeros(3), "C": -P.CB})
    slider = RigidBody("slider", P.mS, (0, 0, 0), None, ports={"S": np.zeros(3)})
    pend1 = RigidBody("pendulum1", P.m1, P.SP1, None, ports={"P1": P.SP1})
    pend2 = RigidBody("pendulum2", P.m2, P.P1P2, None)
    sys_ = System(FloatingBase(balloon), P.g)
    sys_.add(Prismatic(slider, P.t), "balloon", "C")
    sys_.add(Revolute(pend1, (0, 0, 1)), "slider", "S")
    sys_.add(Revolute(pend2, (0, 0, 1)), "pendulum1", "P1")
    return sys_


def pinocchio_model(cfg, P: Params):
    path = resolve_asset(cfg["urdf"])
    if not path.is_file():
        raise ModelFileError(f"URDF not found: {path}")
    model = pin.buildModelFromUrdf(str(path), pin.JointModelFreeFlyer())
    model.gravity.linear = P.g
    names = [model.names[i] for i in range(2, model.njoints)]
    if tuple(names) != JOINTS or model.nq != 10:
        raise ModelFileError(f"{path}: expected joints {JOINTS} under a free-flyer, got {names}")
    # the URDF must describe the config's system (Table 1): compare the spatial inertias
    want = [
        pin.Inertia(P.mB, np.zeros(3), P.IB),
        pin.Inertia(P.mS, np.zeros(3), np.zeros((3, 3))),
        pin.Inertia(P.m1, P.SP1, np.zeros((3, 3))),
        pin.Inertia(P.m2, P.P1P2, np.zeros((3, 3))),
    ]
    for j, I in zip(range(1, 5), want):
        if not np.allclose(model.inertias[j].matrix(), I.matrix(), atol=1e-9):
            raise ConfigError(
                f"{path}: the inertia of joint '{model.names[j]}' differs from the config's Table 1 values"
            )
    return model, model.createData()


def mujoco_model(cfg, P: Params) -> mujoco.MjModel:
    """mjcf/balloon.xml with Table 1's inertias written in after compiling (see the file's header), the
    config's spring/dampers and step, RK4."""
    m = load_mjcf(cfg["mjcf"])
    bid = {n: mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, n) for n in ("balloon",) + JOINTS}
    jid = {n: mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, n) for n in JOINTS}
    if min(bid.values()) < 0 or min(jid.values()) < 0 or m.nq != 10:
        raise ModelFileError(
            f"{cfg['mjcf']}: expected bodies/joints {('balloon',) + JOINTS} and a free joint"
        )
    lam, V = np.linalg.eigh(P.IB)
    if np.linalg.det(V) < 0:
        V[:, 0] *= -1
    qw = np.zeros(4)
    mujoco.mju_mat2Quat(qw, V.ravel())
    m.body_inertia[bid["balloon"]] = lam
    m.body_iquat[bid["balloon"]] = qw
    m.body_ipos[bid["balloon"]] = 0.0
    m.body_mass[bid["balloon"]] = P.mB
    for n, mass, com in (
        ("slider", P.mS, np.zeros(3)),
        ("pendulum1", P.m1, P.SP1),
        ("pendulum2", P.m2, P.P1P2),
    ):
        m.body_inertia[bid[n]] = 0.0  # point masses (Table 1)
        m.body_mass[bid[n]] = mass
        m.body_ipos[bid[n]] = com
    m.body_gravcomp[bid["balloon"]] = (P.mG / P.mB) if P.buoyancy else 0.0
    m.opt.gravity[:] = P.g
    m.jnt_stiffness[jid["slider"]] = P.k
    m.qpos_spring[m.jnt_qposadr[jid["slider"]]] = 0.0
    for n, d in (("slider", P.ds), ("pendulum1", P.dp1), ("pendulum2", P.dp2)):
        m.dof_damping[m.jnt_dofadr[jid[n]]] = d
    m.dof_armature[:] = 0.0
    m.dof_frictionloss[:] = 0.0
    m.opt.timestep = float(cfg["dt"])
    m.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
    return m


# --------------------------------------------------------------------------- loads and dynamics
# The per-evaluation helpers below run four times per RK4 step (80 000 times per engine in the default
# run): they work on Python floats (one .tolist() per array) instead of 3-vector NumPy calls, the DCM by
# titop.quat_rows.


def _buoyancy_force(P: Params, q):
    """Rᵀ (−m_G g): the buoyancy force in the balloon frame, as a 3-tuple."""
    (a, b, c), (d, e, f), (g, h, k) = quat_rows(*q[3:7].tolist())
    fx, fy, fz = (-P.mG * P.g).tolist()
    return a * fx + d * fy + g * fz, b * fx + e * fy + h * fz, c * fx + f * fy + k * fz


def buoyancy_body(P: Params, q) -> np.ndarray:
    """F = −m_G g at B, as a wrench at B in the balloon frame (zero torque: B is the frame origin)."""
    if not P.buoyancy:
        return np.zeros(6)
    return np.array([*_buoyancy_force(P, q), 0.0, 0.0, 0.0])


def _joint_forces(P: Params, q, v):
    p, (pd, t1d, t2d) = q[7], v[6:9].tolist()
    return -P.k * float(p) - P.ds * pd, -P.dp1 * t1d, -P.dp2 * t2d


def joint_forces(P: Params, q, v) -> np.ndarray:
    """F_m = −k p − d_s ṗ, C_m1 = −d_p1 θ̇₁, C_m2 = −d_p2 θ̇₂ (§4)."""
    return np.array(_joint_forces(P, q, v))


def titop_fd(sys_: System, P: Params):
    """v̇ = TITOP forward dynamics with the spring/dampers as the joints' inputs and buoyancy as an
    external load at port B of the balloon."""

    def fd(q, v, extra=None):
        tau = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, *_joint_forces(P, q, v)])
        if extra is not None:
            tau = tau + extra
        return sys_.forward(q, v, tau, ext={("balloon", "B"): buoyancy_body(P, q)})

    return fd


def pinocchio_fd(model, data, P: Params):
    """v̇ = Pinocchio's ABA with buoyancy and the spring/dampers as generalized forces."""

    def fd(q, v, extra=None):
        F = _buoyancy_force(P, q) if P.buoyancy else (0.0, 0.0, 0.0)
        tau = np.array([*F, 0.0, 0.0, 0.0, *_joint_forces(P, q, v)])
        if extra is not None:
            tau = tau + extra
        return pin.aba(model, data, q, v, tau)

    return fd


def qdot(q, v) -> np.ndarray:
    """d/dt of (IP in R_i, quaternion (x, y, z, w), joints) for ν = [v_P; ω] in the body frame:
    ṗ = R v_P, q̇uat = ½ quat ⊗ (ω, 0), joint rates."""
    x, y, z, w = q[3:7].tolist()
    vx, vy, vz, wx, wy, wz = v[:6].tolist()
    (a, b, c), (d, e, f), (g, h, k) = quat_rows(x, y, z, w)
    return np.array(
        [
            a * vx + b * vy + c * vz,
            d * vx + e * vy + f * vz,
            g * vx + h * vy + k * vz,
            0.5 * (w * wx + y * wz - z * wy),
            0.5 * (w * wy + z * wx - x * wz),
            0.5 * (w * wz + x * wy - y * wx),
            0.5 * -(x * wx + y * wy + z * wz),
            *v[6:].tolist(),
        ]
    )


def _unit(q):
    """q with its quaternion normalised (a copy)."""
    q = q.copy()
    x, y, z, w = q[3:7].tolist()
    q[3:7] /= math.sqrt(x * x + y * y + z * z + w * w)
    return q


def rk4_step(fd, q, v, h):
    """Classic RK4 on (q, v) with q̇ = qdot(q, v), v̇ = fd(q, v); the quaternion is normalised
    before each evaluation and after the step.  Shared by the TITOP and Pinocchio engines."""
    k1q, k1v = qdot(q, v), fd(_unit(q), v)
    q2, v2 = q + 0.5 * h * k1q, v + 0.5 * h * k1v
    k2q, k2v = qdot(q2, v2), fd(_unit(q2), v2)
    q3, v3 = q + 0.5 * h * k2q, v + 0.5 * h * k2v
    k3q, k3v = qdot(q3, v3), fd(_unit(q3), v3)
    q4, v4 = q + h * k3q, v + h * k3v
    k4q, k4v = qdot(q4, v4), fd(_unit(q4), v4)
    q1 = q + h / 6.0 * (k1q + 2 * k2q + 2 * k3q + k4q)
    v1 = v + h / 6.0 * (k1v + 2 * k2v + 2 * k3v + k4v)
    return _unit(q1), v1


class RK4Plant:
    """The balloon as a plant (sim.base.Plant) integrated by :func:`rk4_step` with the forward dynamics
    ``fd`` (TITOP or Pinocchio), step h [s]; state (q, ν) in Pinocchio's convention.  ``set_torque``
    adds generalized forces (zero for this unforced system)."""

    def __init__(self, fd, q0, v0, h: float):
        self.fd, self._dt = fd, float(h)
        self.q, self.v = np.asarray(q0, dtype=float).copy(), np.asarray(v0, dtype=float).copy()
        self.t = 0.0
        self.tau = None

    dt = property(lambda self: self._dt)
    time = property(lambda self: self.t)

    @property
    def data(self):
        """qpos in MuJoCo's order, for the viewer (computed on access only)."""
        return _Qpos(pin_to_mujoco_qpos(self.q))

    def state(self):
        return self.q, self.v  # replaced, never modified in place, by step()

    def set_torque(self, tau) -> None:
        tau = np.asarray(tau, dtype=float)
        self.tau = tau if np.any(tau) else None

    def set_wrench(self, body, f=(0.0, 0.0, 0.0), m=(0.0, 0.0, 0.0)) -> None:
        raise ConfigError("the balloon's RK4 plant takes no external wrenches (buoyancy is in its dynamics)")

    def step(self, n: int = 1) -> None:
        fd = self.fd if self.tau is None else (lambda q, v: self.fd(q, v, self.tau))
        for _ in range(n):
            self.q, self.v = rk4_step(fd, self.q, self.v, self._dt)
            self.t += self._dt
        check_finite("balloon state", self.q, "RK4 integration")


class MujocoRK4Plant(MujocoClock):
    """The balloon's MuJoCo model (its own RK4) as a plant, state converted to Pinocchio's convention."""

    def __init__(self, m: mujoco.MjModel, q0, v0):
        self.model, self.data = m, mujoco.MjData(m)
        d = self.data
        d.qpos[:] = pin_to_mujoco_qpos(q0)
        R = quat_to_R(q0[3:7])
        d.qvel[:] = np.concatenate((R @ v0[:3], v0[3:]))
        mujoco.mj_forward(m, d)

    def state(self):
        return mujoco_to_pin(self.data.qpos, self.data.qvel)

    def set_torque(self, tau) -> None:
        self.data.qfrc_applied[:] = tau

    def set_wrench(self, body, f=(0.0, 0.0, 0.0), m=(0.0, 0.0, 0.0)) -> None:
        raise ConfigError("the balloon comparison applies no external wrenches")

    def step(self, n: int = 1) -> None:
        d = self.data
        for _ in range(n):
            mujoco.mj_step(self.model, d)
            if any(d.warning[i].number for i in range(len(d.warning))):
                raise StateError(f"MuJoCo warning at t={d.time:.4f} s while simulating the balloon")


class _Qpos:
    def __init__(self, qpos):
        self.qpos = qpos


class Unforced:
    """The balloon's "controller": no input (controllers.base.Controller); the motion is free."""

    def __init__(self, nv: int = 9):
        self.zero = np.zeros(nv)
        self.info = StepInfo(status="unforced")

    def __call__(self, t, q, v):
        return self.zero


def integrate(plant, n: int, progress: bool, desc: str):
    """n steps of the plant through the closed loop (sim.runner.simulate); returns the (n+1)×nq and
    (n+1)×nv state histories (initial state included) and the Run."""
    Q, V = [], []

    def record(t, q, v, tau):
        Q.append(q)
        V.append(v)

    run = simulate(
        plant,
        Unforced(),
        duration=n * plant.dt,
        control_dt=plant.dt,
        record=record,
        progress=progress,
        desc=desc,
    )
    record(plant.time, *plant.state(), None)
    return np.array(Q), np.array(V), run


def mujoco_to_pin(qpos, qvel):
    """MuJoCo (p, quat w-x-y-z, joints; world linear velocity, body angular velocity) → Pinocchio
    (p, quat x-y-z-w, joints; body-frame [v_P; ω])."""
    q = np.concatenate((qpos[:3], qpos[4:7], qpos[3:4], qpos[7:]))
    R = quat_to_R(q[3:7])
    v = np.concatenate((R.T @ qvel[:3], qvel[3:]))
    return q, v


def pin_to_mujoco_qpos(q):
    return np.concatenate((q[:3], q[6:7], q[3:6], q[7:]))


def dofs(Q) -> np.ndarray:
    """The paper's 9 outputs: IB in R_i, Euler angles Θ (R = Rz Ry Rx), p, θ₁, θ₂ (N×9)."""
    out = np.empty((Q.shape[0], 9))
    out[:, :3] = Q[:, :3]
    for k in range(Q.shape[0]):
        out[k, 3:6] = rpy(quat_to_R(Q[k, 3:7]))
    out[:, 6:] = Q[:, 7:]
    return out


def dof_difference(A, B) -> np.ndarray:
    """|A − B| per DoF (Euler-angle differences wrapped to (−π, π])."""
    d = A - B
    d[:, 3:6] = (d[:, 3:6] + np.pi) % (2 * np.pi) - np.pi
    return np.abs(d)


def energy(sys_: System, P: Params, q, v) -> float:
    """Kinetic + gravity + buoyancy potential (−F·IB, F = −m_G g constant) + slider spring ½ k p²."""
    E = sys_.energy(q, v)
    if P.buoyancy:
        E += P.mG * float(P.g @ q[:3])
    return E + 0.5 * P.k * q[7] ** 2


def kinetic(sys_: System, q, v) -> float:
    kin, _ = sys_.kinematics(q, v)
    return sum(nd.block.body.kinetic_energy(kin[i][1].tw) for i, nd in enumerate(sys_.nodes))


def _or(x, text):
    """A table cell: ``x``, or ``text`` saying why there is no number when x is nan."""
    return text if isinstance(x, float) and np.isnan(x) else x


def growth_exponent(t, d, lo=1e-13, hi=1e-3):
    """Least-squares slope of log d(t) where lo < d < hi (the exponential-growth window): a
    Lyapunov-like exponent of the difference between two engines (1/s); nan if too few points."""
    env = np.maximum.accumulate(d)
    sel = (env > lo) & (env < hi)
    if sel.sum() < 10:
        return float("nan")
    return float(np.polyfit(t[sel], np.log(env[sel]), 1)[0])


def random_state_checks(sys_, fd_t, model, data, fd_p, n, seed):
    """max |TITOP − Pinocchio| over n random states: forward (with the scenario's loads plus random
    generalized forces) and inverse dynamics (random accelerations)."""
    rng = np.random.default_rng(seed)
    e_fd = e_id = 0.0
    for _ in range(n):
        quat = rng.normal(size=4)
        q = np.concatenate(
            (
                rng.normal(size=3) * 2,
                quat / np.linalg.norm(quat),
                [rng.uniform(-1, 1)],
                rng.uniform(-np.pi, np.pi, 2),
            )
        )
        v = rng.normal(size=9) * 2
        extra = rng.normal(size=9) * 5
        e_fd = max(e_fd, float(np.abs(fd_t(q, v, extra) - fd_p(q, v, extra)).max()))
        a = rng.normal(size=9) * 5
        e_id = max(e_id, float(np.abs(sys_.inverse(q, v, a) - pin.rnea(model, data, q, v, a)).max()))
    return e_fd, e_id


# ----------------------------------------------------------------------------------------- run
def run(ctx) -> Outcome:
    cfg = ctx.cfg
    if cfg["engine"] not in ENGINES:
        raise ConfigError(f"engine='{cfg['engine']}' is not one of {list(ENGINES)}")
    h = float(cfg["dt"])
    if not h > 0:
        raise ConfigError(f"dt must be > 0, got {h}")
    T = float(cfg["duration"])
    if not T > 0:
        raise ConfigError(f"duration must be > 0, got {T}")
    n = int(round(T / h))
    P = Params(cfg)
    sys_ = titop_system(P)
    model, data = pinocchio_model(cfg, P)
    mjm = mujoco_model(cfg, P)
    fd_t, fd_p = titop_fd(sys_, P), pinocchio_fd(model, data, P)
    q0, v0 = P.q0, np.zeros(9)

    e_fd, e_id = random_state_checks(
        sys_, fd_t, model, data, fd_p, int(cfg["random_states"]), int(cfg["seed"])
    )

    n_en = int(round(float(cfg["energy_duration"]) / h))
    if n_en < 1:
        raise ConfigError(f"energy_duration must be >= dt, got {cfg['energy_duration']}")
    pg = ctx.progress
    Qt, Vt, run_t = integrate(RK4Plant(fd_t, q0, v0, h), n, pg, f"{NAME} (TITOP)")
    Qp, Vp, run_p = integrate(RK4Plant(fd_p, q0, v0, h), n, pg, f"{NAME} (Pinocchio)")
    Qm, Vm, run_m = integrate(MujocoRK4Plant(mjm, q0, v0), n, pg, f"{NAME} (MuJoCo)")
    wall_titop, wall_pin = run_t.wall_s, run_p.wall_s
    t = np.arange(n + 1) * h

    # dampers off: energy (TITOP), and the growth of the differences where the motion stays chaotic
    P0 = P.with_dampers_off()
    Qe, Ve, run_e = integrate(RK4Plant(titop_fd(sys_, P0), q0, v0, h), n_en, pg, f"{NAME} (TITOP, undamped)")
    Qep, _, run_ep = integrate(
        RK4Plant(pinocchio_fd(model, data, P0), q0, v0, h), n_en, pg, f"{NAME} (Pinocchio, undamped)"
    )
    Qem, _, run_em = integrate(
        MujocoRK4Plant(mujoco_model(cfg, P0), q0, v0), n_en, pg, f"{NAME} (MuJoCo, undamped)"
    )
    qpert = q0.copy()
    qpert[9] += cfg["perturbation_rad"]  # the system's own sensitivity (Pinocchio, same RK4)
    Qeq, _, run_eq = integrate(
        RK4Plant(pinocchio_fd(model, data, P0), qpert, v0, h), n_en, pg, f"{NAME} (Pinocchio, perturbed)"
    )
    runs = (run_t, run_p, run_m, run_e, run_ep, run_em, run_eq)
    # all seven loops: simulated time over their wall time
    realtime_factor = sum(r.simulated_s for r in runs) / sum(r.wall_s for r in runs)
    stride_e = max(1, n_en // 4000)
    E = np.array([energy(sys_, P0, Qe[k], Ve[k]) for k in range(0, n_en + 1, stride_e)])
    K = np.array([kinetic(sys_, Qe[k], Ve[k]) for k in range(0, n_en + 1, stride_e)])
    drift = float(np.abs(E - E[0]).max() / K.max())  # scale: the largest kinetic energy (E₀ depends on
    #                                                     the potential's reference; both are reported)
    te = np.arange(n_en + 1) * h
    De = dofs(Qe)
    U_tp, U_tm = dof_difference(De, dofs(Qep)), dof_difference(De, dofs(Qem))
    U_pert = dof_difference(dofs(Qep), dofs(Qeq))
    u_tp, u_tm, u_pert = U_tp.max(axis=1), U_tm.max(axis=1), U_pert.max(axis=1)
    lam_u_tp, lam_u_tm = growth_exponent(te, u_tp), growth_exponent(te, u_tm)
    lam_sys = growth_exponent(te, u_pert, lo=10 * cfg["perturbation_rad"], hi=1e-2)

    Dt, Dp, Dm = dofs(Qt), dofs(Qp), dofs(Qm)
    d_tp, d_tm, d_pm = dof_difference(Dt, Dp), dof_difference(Dt, Dm), dof_difference(Dp, Dm)
    n5 = int(round(min(cfg["compare_pinocchio_duration"], T) / h))
    n2 = int(round(min(cfg["compare_mujoco_duration"], T) / h))
    dmax_tp, dmax_tm, dmax_pm = d_tp.max(axis=1), d_tm.max(axis=1), d_pm.max(axis=1)
    lam_tp = growth_exponent(t, dmax_tp)
    lam_tm = growth_exponent(t, dmax_tm)

    def first_above(d, thr):
        idx = np.flatnonzero(d > thr)
        return float(t[idx[0]]) if idx.size else float("nan")

    shown = {"titop": (Qt, Vt, Dt), "pinocchio": (Qp, Vp, Dp), "mujoco": (Qm, Vm, Dm)}[cfg["engine"]]
    stride = max(1, int(round(cfg["log_dt"] / h)))
    log = ctx.logger
    for k in range(0, n + 1, stride):
        log.append(
            t=t[k],
            q=shown[0][k],
            v=shown[1][k],
            dof=shown[2][k],
            plant_qpos=pin_to_mujoco_qpos(shown[0][k]),
            diff_titop_pinocchio=d_tp[k],
            diff_titop_mujoco=d_tm[k],
            diff_pinocchio_mujoco=d_pm[k],
        )
    log.meta.update(
        mjcf_path=str(resolve_asset(cfg["mjcf"])),
        urdf_path=str(resolve_asset(cfg["urdf"])),
        engine=cfg["engine"],
        dof_names=np.array(DOF_NAMES),
        joint_names=np.array(JOINTS),
        energy_t=np.arange(0, n_en + 1, stride_e) * h,
        energy=E,
        kinetic=K,
        undamped_t=te[::stride],
        undamped_diff_titop_pinocchio=u_tp[::stride],
        undamped_diff_titop_mujoco=u_tm[::stride],
        undamped_diff_perturbed=u_pert[::stride],
        **{
            f"undamped_{name}_{unit}": U[::stride][:, idx].max(axis=1)
            for name, U in (
                ("diff_titop_pinocchio", U_tp),
                ("diff_titop_mujoco", U_tm),
                ("diff_perturbed", U_pert),
            )
            for unit, idx in (("m", LENGTH_DOFS), ("rad", ANGLE_DOFS))
        },
    )

    m = dict(
        engine=cfg["engine"],
        duration_s=T,
        dt_s=h,
        fd_vs_pinocchio_max=e_fd,
        id_vs_pinocchio_max=e_id,
        traj_vs_pinocchio_max=float(dmax_tp[: n5 + 1].max()),
        traj_vs_mujoco_max=float(dmax_tm[: n2 + 1].max()),
        traj_pinocchio_vs_mujoco_max=float(dmax_pm[: n2 + 1].max()),
        energy_drift_rel=drift,
        energy_duration_s=float(cfg["energy_duration"]),
        energy_drift_rel_to_e0=float(np.abs(E - E[0]).max() / abs(E[0])),
        energy_initial_j=float(E[0]),
        kinetic_energy_max_j=float(K.max()),
        diff_titop_pinocchio_end=float(dmax_tp[-1]),
        diff_titop_mujoco_end=float(dmax_tm[-1]),
        growth_rate_titop_pinocchio_per_s=lam_tp,
        growth_rate_titop_mujoco_per_s=lam_tm,
        undamped_growth_rate_titop_pinocchio_per_s=lam_u_tp,
        undamped_growth_rate_titop_mujoco_per_s=lam_u_tm,
        undamped_lyapunov_estimate_per_s=lam_sys,
        undamped_diff_titop_pinocchio_end=float(u_tp[-1]),
        undamped_diff_titop_mujoco_end=float(u_tm[-1]),
        undamped_diff_titop_pinocchio_5s=float(u_tp[: int(round(5.0 / h)) + 1].max()),
        time_diff_pinocchio_above_1em3_s=first_above(dmax_tp, 1e-3),
        time_diff_mujoco_above_1em3_s=first_above(dmax_tm, 1e-3),
        sim_wall_titop_s=wall_titop,
        sim_wall_pinocchio_s=wall_pin,
        realtime_factor=realtime_factor,
    )
    w5, w2 = n5 * h, n2 * h
    rows = [
        Row("fd_vs_pinocchio_max", e_fd, "negligible", "<= 1e-9", e_fd <= 1e-9),
        Row("id_vs_pinocchio_max", e_id, None, "<= 1e-9", e_id <= 1e-9),
        Row(
            f"traj_vs_pinocchio_max (first {w5:g} s)",
            m["traj_vs_pinocchio_max"],
            "negligible (Simscape)",
            "<= 1e-6",
            m["traj_vs_pinocchio_max"] <= 1e-6,
        ),
        Row(
            f"traj_vs_mujoco_max (first {w2:g} s)",
            m["traj_vs_mujoco_max"],
            None,
            "<= 1e-3",
            m["traj_vs_mujoco_max"] <= 1e-3,
        ),
        Row("energy_drift_rel (dampers 0)", drift, None, "<= 1e-6", drift <= 1e-6),
        Row("diff growth TITOP-Pinocchio [1/s]", _or(lam_tp, "none (Δ stays at round-off)"), None, "report"),
        Row("diff growth TITOP-MuJoCo [1/s]", _or(lam_tm, "none (Δ stays at round-off)"), None, "report"),
        Row("undamped: diff growth TITOP-Pinocchio [1/s]", lam_u_tp, None, "report"),
        Row("undamped: diff growth TITOP-MuJoCo [1/s]", lam_u_tm, None, "report"),
        Row("undamped: Lyapunov-like exponent [1/s]", lam_sys, None, "report"),
        Row("undamped: |TITOP−Pinocchio| at the end", m["undamped_diff_titop_pinocchio_end"], None, "report"),
        Row("undamped: |TITOP−MuJoCo| at the end", m["undamped_diff_titop_mujoco_end"], None, "report"),
        Row(
            "t(|Δ| > 1e-3) vs Pinocchio [s]",
            _or(m["time_diff_pinocchio_above_1em3_s"], f"never in {T:g} s"),
            None,
            "report",
        ),
        Row(
            "t(|Δ| > 1e-3) vs MuJoCo [s]",
            _or(m["time_diff_mujoco_above_1em3_s"], f"never in {T:g} s"),
            None,
            "report",
        ),
        Row("sim wall time TITOP / Pinocchio [s]", f"{wall_titop:.1f} / {wall_pin:.1f}"),
        Row("realtime_factor (all seven runs)", realtime_factor, None, "report"),
    ]
    if ctx.viewer is not None:  # replay the shown engine's motion in Meshcat
        viewer = ctx.make_viewer(mjm)
        L = log.arrays()
        for tk, qk in zip(L["t"], L["plant_qpos"]):
            viewer.maybe_update(float(tk), qk)
    plots = make_plots(ctx, t, shown[2], Dt, Dp, Dm, d_tp, d_tm, d_pm, log.meta, cfg) if ctx.drawing else []
    return Outcome(m, rows, plots)


def make_plots(ctx, t, D, Dt, Dp, Dm, d_tp, d_tm, d_pm, meta, cfg):
    plt = ctx.pyplot()

    paths = []
    # Fig. 17: the 9 DoF of the engine shown (black) and its difference to the others (red, right axis)
    other = "pinocchio" if cfg["engine"] != "pinocchio" else "titop"
    O = Dp if other == "pinocchio" else Dt
    fig, ax = plt.subplots(3, 3, figsize=(13, 9), sharex=True)
    diff = dof_difference(D, O)
    for i in range(9):
        a = ax.flat[i]
        a.plot(t, D[:, i], "k", lw=1)
        a.set_ylabel(DOF_NAMES[i])
        b = a.twinx()
        b.semilogy(t, diff[:, i] + 1e-17, "r", lw=0.7)
        b.tick_params(axis="y", colors="r")
    for a in ax[-1]:
        a.set_xlabel("t [s]")
    fig.suptitle(
        f"Balloon, slider, double pendulum ([Alazard] Fig. 17): {cfg['engine']} (black, left axis), "
        f"|{cfg['engine']} − {other}| (red, right axis, log, same unit)"
    )
    fig.tight_layout()
    paths.append(ctx.save_figure(fig, "dofs", dpi=100))

    # differences: lengths (x, y, z, p) and angles (φ, θ, ψ, θ₁, θ₂) on separate axes
    fig, ax = plt.subplots(5, 1, figsize=(9, 17))
    for row, (unit, idx) in enumerate((("m", LENGTH_DOFS), ("rad", ANGLE_DOFS))):
        a = ax[row]
        for d, lab, ls in (
            (d_tp, "TITOP − Pinocchio (same RK4)", "-"),
            (d_tm, "TITOP − MuJoCo (RK4)", "--"),
            (d_pm, "Pinocchio − MuJoCo", ":"),
        ):
            a.semilogy(t, d[:, idx].max(axis=1) + 1e-17, ls, label=lab, lw=1)
        a.axvline(
            cfg["compare_pinocchio_duration"],
            color="grey",
            ls=":",
            label=f"Pinocchio window ({cfg['compare_pinocchio_duration']:g} s)",
        )
        a.axvline(
            cfg["compare_mujoco_duration"],
            color="grey",
            ls="--",
            label=f"MuJoCo window ({cfg['compare_mujoco_duration']:g} s)",
        )
        what = "x, y, z, p" if unit == "m" else "φ, θ, ψ, θ₁, θ₂"
        a.set_ylabel(f"max |Δ| over {what} [{unit}]")
        a.set_xlabel("t [s]")
        a.legend(fontsize=8)
        a.set_title(
            f"differences between engines, dampers as configured ({'lengths' if unit == 'm' else 'angles'})"
        )
    tu = meta["undamped_t"]
    for row, unit in ((2, "m"), (3, "rad")):
        a = ax[row]
        a.semilogy(
            tu,
            meta[f"undamped_diff_titop_pinocchio_{unit}"] + 1e-17,
            label="TITOP − Pinocchio (same RK4)",
            lw=1,
        )
        a.semilogy(
            tu, meta[f"undamped_diff_titop_mujoco_{unit}"] + 1e-17, "--", label="TITOP − MuJoCo (RK4)", lw=1
        )
        a.semilogy(
            tu,
            meta[f"undamped_diff_perturbed_{unit}"] + 1e-17,
            ":",
            label=f"Pinocchio, θ₂(0) + {cfg['perturbation_rad']:g} rad",
            lw=1,
        )
        what = "x, y, z, p" if unit == "m" else "φ, θ, ψ, θ₁, θ₂"
        a.set_ylabel(f"max |Δ| over {what} [{unit}]")
        a.set_xlabel("t [s]")
        a.legend(fontsize=8)
        a.set_title("dampers off: the motion stays chaotic and every difference grows")
    E, K = meta["energy"], meta["kinetic"]
    ax[4].plot(meta["energy_t"], (E - E[0]) / K.max())
    ax[4].set_xlabel("t [s]")
    ax[4].set_ylabel("(E − E₀) / max KE [–]")
    ax[4].set_title("TITOP, dampers off: energy drift")
    fig.tight_layout()
    paths.append(ctx.save_figure(fig, "differences_energy", dpi=100))
    return paths


if __name__ == "__main__":
    raise SystemExit(scenario_main(NAME, run))

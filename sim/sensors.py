"""A robot's real interfaces in the closed loop (issue 32): what it measures and what it accepts.

``simulate`` (sim/runner.py) puts these between the plant and the controller:

    sensors="full"       the controller sees the plant's whole state (q, v) (every earlier run);
    sensors="actuated"   it sees the motors only: the plant's actuated joints through ``Encoders`` (quantization,
                         noise), then ``LoopStateEstimator`` (models/estimator.py) closes the loops for the passive
                         joints; ``ActuatedSensing`` is that path;
    command="torque"     the controller's τ goes to the plant (every earlier run);
    command="position"   the robot has its own joint PD (a joint-impedance robot, UR's servoJ, a position-
                         controlled servo): the controller sends (q_des, v_des, a_des, τ_ff) per actuated joint and the
                         plant runs the PD at its own rate; ``JointServo`` is that robot side.

Position command.  The law's acceleration v̇ (the controller's own: ``info.vdot``, or PIDC's ``info.qdd_des`` of a
solvable step; else the acceleration its torque gives on the model's loops, the rigid closed-chain dynamics
``ProjectionPlant.accel``) is integrated over the control period dt into the command, from the previous command's
end (q_c, v_c) (from the measured state (q̂, v̂) at the first command; after skipped states, from where the robot's
``hold`` took its reference meanwhile: ``JointServo.command``):

    q_des = q_c ⊕ (v_c + ½ v̇ dt) dt   (1-DoF motors: q_c + …),   v_des = v_c + v̇ dt,   a_des = v̇,   τ_ff = τ,

so the command is a smooth trajectory whose acceleration is the law's (the law's feedback, on the measured
state, steers it); a command re-anchored on the measurement every period would feed the encoders' quantum
straight into the stiff joint PD (measured: 64× the ee error on the five-bar at 2¹⁷ counts a turn).  The robot's
interpolator joins (q_c, v_c) to (q_des, v_des) by the cubic Hermite curve over the period, τ = s/dt:

    q_ref(s) = h₀₀ q_c + h₁₀ dt v_c + h₀₁ q_des + h₁₁ dt v_des,   v_ref(s) = dq_ref/ds,
    h₀₀ = 2τ³ − 3τ² + 1, h₁₀ = τ³ − 2τ² + τ, h₀₁ = −2τ³ + 3τ², h₁₁ = τ³ − τ²,

which is exactly the command's quadratic q_c + v_c s + ½ v̇ s² (a quadratic is a cubic with those end values),
and its PD runs at every plant step s ∈ [0, dt): τ_a = τ_ff + K_p (q_ref − q_a) + K_d (v_ref − v_a), q_a, v_a the
robot's own motor encoders.  With a perfect model the robot follows the command with τ_ff alone and the PD terms
stay at the plant's integration error; they act on the model's errors.
Gains (``JointServo`` default): a critically damped joint of bandwidth ``pd_hz`` on the closed chain's inertia
seen at each motor, m_i = (Tᵀ M T)_ii with T = [I; G] = ∂q/∂q_a (G = −J_p⁺ J_a, at ``robot.q_initial``):

    K_p,i = m_i ω²,   K_d,i = 2 m_i ω,   ω = 2π pd_hz   (N·m/rad and N·m·s/rad, or N/m and N·s/m)

30 Hz by default: ten times the closed_chain laws' 3 Hz (k_p = 400 s⁻²), ω·sim_dt = 0.05 at a 4 kHz plant
(the explicit PD is stable for ω·dt ≪ 1)."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import pinocchio as pin
from numpy.typing import ArrayLike

from cmstack.models.errors import ConfigError, SensorFault, StateError
from cmstack.models.estimator import LoopStateEstimator
from cmstack.models.robot import Robot
from cmstack.sim.plant import MeasurementNoise

SENSORS = ("full", "actuated")
COMMANDS = ("torque", "position")


FAULT_KINDS = ("jump", "dead")


class Encoders:
    """The motors' encoders: each actuated joint's position rounded to its quantum and noise added, and an injected
    fault (to test what the loop does with one).

    counts_per_turn: counts over 2π (e.g. 2**17; 0: no quantization): quantum Δ = 2π / counts, in each joint's
        unit (rad, or m for a prismatic joint); noise_q [rad, m], noise_v [rad/s, m/s]: standard deviations of
        Gaussian noise on the positions and on the rates (the drive's rate estimate); seed: of the noise.
    fault: None or (k, t0, kind, size): from t0 [s] on, encoder k (index among the actuated joints) reads
        q + size ("jump", size in rad or m) or 0 with its rate 0 ("dead")."""

    def __init__(
        self,
        counts_per_turn: float = 0,
        noise_q: float = 0.0,
        noise_v: float = 0.0,
        seed: int = 0,
        fault: tuple[int, float, str, float] | None = None,
    ) -> None:
        if not (math.isfinite(counts_per_turn) and counts_per_turn >= 0):
            raise ConfigError(f"encoder counts_per_turn must be >= 0 (0: exact), got {counts_per_turn}")
        self.quantum = 2 * math.pi / counts_per_turn if counts_per_turn > 0 else 0.0
        self.noise = MeasurementNoise(noise_q, noise_v, np.random.default_rng(seed))
        if fault is not None and fault[2] not in FAULT_KINDS:
            raise ConfigError(f"encoder fault kind {fault[2]!r} is not one of {list(FAULT_KINDS)}")
        self.fault = fault

    def read(self, t: float, qa: np.ndarray, va: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The encoders' reading at time t [s] of the true (q_a, v_a)."""
        qa, va = self.noise.apply(qa, va)
        if self.quantum > 0:
            qa = np.round(qa / self.quantum) * self.quantum
        f = self.fault
        if f is not None and t >= f[1] - 1e-12:
            qa, va = qa.copy(), va.copy()
            if f[2] == "jump":
                qa[f[0]] += f[3]
            else:
                qa[f[0]], va[f[0]] = 0.0, 0.0
        return qa, va


class ActuatedSensing:
    """What a robot that measures only its motors gives its controller: plant → ``Encoders`` → ``LoopStateEstimator``.

    ``measure(t, q, v)`` takes the plant's state at t [s] (model order) and returns the reconstructed one (model
    order); a fault raises ``SensorFault`` (models/estimator.py) with its time ``t`` [s] set.  ``us``: the
    estimator's wall time per call [µs]."""

    def __init__(self, estimator: LoopStateEstimator, encoders: Encoders | None = None) -> None:
        self.estimator = estimator
        self.encoders = encoders
        self.act = estimator.act  # the motors' v indices
        self.act_q = estimator.act_q  # their q indices (after a floating base's 7 q and 6 v they differ)
        self.base_q, self.base_v = (
            estimator.base_q,
            estimator.base_v,
        )  # the floating base's (empty without one)
        self.us: list[float] = []
        #: max |q̂_p − q_p| (rad, m) and max |v̂_p − v_p| over the calls: the reconstruction against the plant
        self.error_q_max, self.error_v_max = 0.0, 0.0
        self.compared = 0  # calls whose passive joints' truth was given (NaN errors in metrics() when none)

    @classmethod
    def for_robot(
        cls, robot: Robot, control_dt: float, encoders: Encoders | None = None, **options: Any
    ) -> ActuatedSensing:
        """An estimator of ``robot`` at the control period (its jump test) with ``options`` (LoopStateEstimator's)."""
        return cls(LoopStateEstimator(robot, dt=control_dt, **options), encoders)

    def measure(self, t: float, q: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The reconstructed (q, v) (model order) from the motors' entries of the plant's (q, v) at t [s] through the
        encoders, and a floating base's pose and twist as given (motion capture or an on-board estimator)."""
        qa, va = q[self.act_q], v[self.act]
        if self.encoders is not None:
            qa, va = self.encoders.read(t, qa, va)
        c0 = time.perf_counter()
        try:
            if self.base_q.size:
                qh, vh = self.estimator.reconstruct(qa, va, q[self.base_q], v[self.base_v])
            else:
                qh, vh = self.estimator.reconstruct(qa, va)
        except SensorFault as exc:
            exc.t = t
            raise
        self.us.append((time.perf_counter() - c0) * 1e6)
        pas, pas_q = self.estimator.pas, self.estimator.pas_q
        if pas.size and np.isfinite(
            q[pas_q[0]]
        ):  # (under cmstack rt the passive entries are NaN: not known here)
            self.compared += 1
            self.error_q_max = max(self.error_q_max, float(np.max(np.abs(qh[pas_q] - q[pas_q]))))
            self.error_v_max = max(self.error_v_max, float(np.max(np.abs(vh[pas] - v[pas]))))
        return qh, vh

    def metrics(self) -> dict[str, float]:
        """The reconstruction's figures for metrics.json."""
        return {
            "reconstruction_us_median": float(np.median(self.us)) if self.us else math.nan,
            "reconstruction_error_q_max": self.error_q_max if self.compared else math.nan,
            "reconstruction_error_v_max": self.error_v_max if self.compared else math.nan,
            **self.estimator.stats(),
        }


class ActuatedFrame:
    """What the driver of a robot that measures only its motors publishes (``cmstack rt --sensors actuated``): the
    state record keeps its layout (nq, nv) but holds the actuated joints' encoder readings (``Encoders``:
    quantization, noise, an injected fault, applied in the driver process) and NaN in every other entry, so the
    controller side can read nothing else (``ReconstructingController`` closes the loops from those).

    A floating base's pose and twist are published as well (what motion capture or the robot's own state estimator
    gives; ``base_q``, ``base_v``: their q and v entries).

    act: the actuated joints' v indices (``LoopStateEstimator.act``, 1-DoF joints); encoders: None (exact readings)
    or the robot's ``Encoders``; act_q: their q indices (default ``act``: no floating base)."""

    def __init__(
        self,
        act: ArrayLike,
        encoders: Encoders | None = None,
        *,
        act_q: ArrayLike | None = None,
        base_q: ArrayLike = (),
        base_v: ArrayLike = (),
    ) -> None:
        self.act = np.asarray(act, dtype=np.int64)
        self.act_q = self.act if act_q is None else np.asarray(act_q, dtype=np.int64)
        self.base_q = np.asarray(base_q, dtype=np.int64)
        self.base_v = np.asarray(base_v, dtype=np.int64)
        self.encoders = encoders

    @classmethod
    def of(cls, sensing: ActuatedSensing) -> ActuatedFrame:
        """The frame a driver publishes for ``sensing`` (its encoders, its motors' and base's entries)."""
        return cls(
            sensing.act, sensing.encoders, act_q=sensing.act_q, base_q=sensing.base_q, base_v=sensing.base_v
        )

    def publish(self, t: float, q: np.ndarray, v: np.ndarray, q_out: np.ndarray, v_out: np.ndarray) -> None:
        """Write the frame of the plant's (q, v) at t [s] into ``q_out``, ``v_out`` (model order)."""
        act, act_q = self.act, self.act_q
        qa, va = q[act_q], v[act]
        if self.encoders is not None:
            qa, va = self.encoders.read(t, qa, va)
        q_out.fill(np.nan)
        v_out.fill(np.nan)
        q_out[act_q] = qa
        v_out[act] = va
        q_out[self.base_q] = q[self.base_q]
        v_out[self.base_v] = v[self.base_v]


class ReconstructingController:
    """``controller`` given the state ``sensing`` reconstructs: ``controller(t, *sensing.measure(t, q, v))``; every
    other attribute is the controller's (``info``, ``kin``, ``errors``, ``robot`` ...).  What ``simulate`` hands
    ``cmstack rt`` with sensors="actuated": the controller side keeps the actuated entries of the driver's state
    and reconstructs the rest (the passive entries are not read but for the reconstruction's error metric)."""

    def __init__(self, controller: Any, sensing: ActuatedSensing) -> None:
        self.controller = controller
        self.sensing = sensing

    def __call__(self, t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        qh, vh = self.sensing.measure(t, q, v)
        return self.controller(t, qh, vh)

    def __getattr__(self, name: str) -> Any:
        if name in ("controller", "sensing"):  # (not yet set: unpickling)
            raise AttributeError(name)
        return getattr(self.controller, name)


def _tangent(robot: Robot, q: np.ndarray) -> np.ndarray:
    """T = ∂q/∂q_a (nv × a) with the floating base held (a robot that has one: its rows zero, the motors' inertia
    seen with the torso fixed): identity rows on the actuated joints, G = −J_p⁺ J_a on the other passive ones (a
    passive ball joint's three rows among them: only the root free joint is held)."""
    act = [robot.joint_index(n) for n in robot.actuated_joints]
    T = np.zeros((robot.nv, len(act)))
    T[act, range(len(act))] = 1.0
    pas = robot.v_indices([n for n in robot.passive_joints if n != robot.floating_base])
    if robot.loops and pas.size:
        from cmstack.models.loops import ClosureSet

        J = ClosureSet(robot.loops).jacobian(q)
        T[pas] = -np.linalg.pinv(J[:, pas], rcond=1e-10) @ J[:, act]
    return T


class JointServo:
    """A position-controlled robot's side (module docstring): each actuated joint's PD at the plant's rate around
    the commanded (q_des, v_des) with the feed-forward τ_ff.

    robot: the controller's model (its actuated joints are the commanded ones); control_dt [s]: the command period;
    kp, kd: gains per actuated joint (N·m/rad, N·m·s/rad; N/m, N·s/m) or None for the default of ``pd_hz`` [Hz]."""

    def __init__(
        self,
        robot: Robot,
        control_dt: float,
        *,
        kp: ArrayLike | None = None,
        kd: ArrayLike | None = None,
        pd_hz: float = 30.0,
    ) -> None:
        if not control_dt > 0 or not pd_hz > 0:
            raise ConfigError(f"JointServo: control_dt and pd_hz must be > 0, got {control_dt}, {pd_hz}")
        self.robot = robot
        self.dt = float(control_dt)
        names = list(robot.actuated_joints)
        for n in names:
            if robot.model.joints[robot.model.getJointId(n)].nq != 1:
                raise ConfigError(
                    f"JointServo: actuated joint '{n}' of {robot.label} is not a 1-DoF joint with one q "
                    "(a position-commanded motor is revolute or prismatic)"
                )
        self.act = np.array([robot.joint_index(n) for n in names], dtype=np.int64)  # v (and τ) indices
        self.qa = np.array([robot.joint_q_index(n) for n in names], dtype=np.int64)  # q indices
        a = self.act.size
        T = _tangent(robot, robot.q_initial)
        M = pin.crba(robot.model, robot.model.createData(), robot.q_initial)
        M = np.triu(M) + np.triu(M, 1).T
        m = np.diag(T.T @ M @ T).copy()
        w = 2 * math.pi * float(pd_hz)
        self.kp = np.broadcast_to(np.asarray(m * w * w if kp is None else kp, dtype=float), (a,)).copy()
        self.kd = np.broadcast_to(np.asarray(2 * m * w if kd is None else kd, dtype=float), (a,)).copy()
        if np.any(~(self.kp >= 0)) or np.any(~(self.kd >= 0)):
            raise ConfigError(f"JointServo: gains must be >= 0, got kp={self.kp}, kd={self.kd}")
        self.q_des = np.zeros(a)
        self.v_des = np.zeros(a)
        self.q_c = np.zeros(a)  # the command's start in this period (the previous command's end)
        self.v_c = np.zeros(a)
        self.commands = 0
        self.tau = np.zeros(robot.nv)  # τ_ff (model order, zero on the passive joints)
        self.applied = np.zeros(robot.nv)  # the torque applied, averaged over the last step()'s plant steps
        self._rigid: Any = None
        #: where the last command's v̇ came from ("vdot", "qdd_des", "rigid"); how many rigid solves were needed
        self.vdot_source, self.rigid_solves = "", 0
        #: periods the robot held its reference between two commands (skipped states, ``command(t=)``)
        self.held_periods = 0
        self._t_last: float | None = None
        self._acc = np.zeros(a)  # the last command's v̇ of the actuated joints
        #: the largest |PD torque| over the run (N·m, N): how much the robot's PD added to τ_ff
        self.pd_torque_max = 0.0

    def _vdot(self, controller: Any, q: np.ndarray, v: np.ndarray, tau: np.ndarray) -> np.ndarray:
        """The law's v̇ (model order): ``info.vdot`` (UK's), else ``info.qdd_des`` of a solvable step (PIDC's q̈_d,
        which its τ produces on the model's loops: equal to the rigid closed-chain dynamics' q̈ to 4e-13 relative on
        the five-bar and Delta), else the model's rigid closed-chain dynamics at (q, v, τ) (``ProjectionPlant.accel``:
        an SVD of the loops' Jacobian and a solve, ~200 µs on the five-bar; counted in ``rigid_solves``)."""
        info = getattr(controller, "info", None)
        nv = self.robot.nv
        vd = getattr(info, "vdot", None)
        if isinstance(vd, np.ndarray) and vd.shape == (nv,) and np.isfinite(vd).all():
            self.vdot_source = "vdot"
            return vd
        vd = getattr(info, "qdd_des", None)
        if (
            isinstance(vd, np.ndarray)
            and vd.shape == (nv,)
            and getattr(info, "solvable", True) is not False
            and np.isfinite(vd).all()
        ):
            self.vdot_source = "qdd_des"
            return vd
        r = self.robot
        if self._rigid is None:  # the model's forward dynamics, built once
            from cmstack.sim.projection_sim import ProjectionPlant

            self._rigid = ProjectionPlant(r, None) if r.loops else r.model.createData()
        self.rigid_solves += 1
        self.vdot_source = "rigid"
        if isinstance(self._rigid, pin.Data):  # no loops: ABA (joint damping as the plant's)
            return pin.aba(r.model, self._rigid, q, v, tau - r.damping * v)
        return self._rigid.accel(q, v, tau)

    def command(
        self, controller: Any, q: np.ndarray, v: np.ndarray, tau: np.ndarray, t: float | None = None
    ) -> None:
        """The command of one period from the state the controller saw (q̂, v̂) at t [s] and its torque τ.

        The actuated joints are 1-DoF (checked at construction), where q ⊕ δ = q + δ: on their entries the module's
        q_des = q_c ⊕ (v_c + ½ v̇ dt) dt is q_c + (v_c + ½ v̇_a dt) dt, computed on the a actuated entries only.

        Skipped states (``t`` given, a controller that answers the state of t after the one of t⁻ with
        n = round((t − t⁻)/dt) > 1): the robot held its reference for the n − 1 periods without a command
        (``hold``: q ← q + v dt each), so the chain goes on from there, q_c = q_des + (n − 1) dt v_des,
        v_c = v_des; without it the commanded motion would fall behind the clock by one period per skipped state."""
        dt, act, qa = self.dt, self.act, self.qa
        vd = self._vdot(controller, q, v, tau)
        qd, vdes = self.q_des, self.v_des
        if self.commands:  # from the previous command's end
            self.q_c[:] = qd
            self.v_c[:] = vdes
            if t is not None and self._t_last is not None:
                held = round((t - self._t_last) / dt) - 1
                if held > 0:  # the robot's ``hold`` over H = held·dt at the last command's acceleration
                    H = held * dt
                    self.q_c += (vdes + (0.5 * H) * self._acc) * H
                    self.v_c += H * self._acc
                    self.held_periods += held
        else:  # the first: from the measured state
            self.q_c[:] = q[qa]
            self.v_c[:] = v[act]
        acc = self._acc
        acc[:] = vd[act]
        np.multiply(acc, 0.5 * dt, out=qd)
        qd += self.v_c
        qd *= dt
        qd += self.q_c
        np.multiply(acc, dt, out=vdes)
        vdes += self.v_c
        self.tau[:] = tau
        self.commands += 1
        self._t_last = t
        if not (math.isfinite(float(qd.sum())) and math.isfinite(float(vdes.sum()))):
            raise StateError(f"JointServo: the command is not finite (q_des {qd}, v_des {vdes})")

    def step(self, plant: Any, n: int) -> None:
        """``n`` plant steps, the PD evaluated before each on the plant's own joint state along the interpolator's
        curve (module docstring)."""
        act, h, T = self.act, plant.dt, self.dt
        out = self.tau.copy()
        q0, v0 = self.q_c, self.v_c
        self.applied[:] = 0.0
        for i in range(n):
            q, v = plant.state()  # the robot's own motor encoders, at its rate
            x = i * h / T
            x2, x3 = x * x, x * x * x
            q_ref = (
                (2 * x3 - 3 * x2 + 1) * q0
                + (x3 - 2 * x2 + x) * T * v0
                + (3 * x2 - 2 * x3) * self.q_des
                + (x3 - x2) * T * self.v_des
            )
            v_ref = (
                (6 * x2 - 6 * x) * q0 / T
                + (3 * x2 - 4 * x + 1) * v0
                + (6 * x - 6 * x2) * self.q_des / T
                + (3 * x2 - 2 * x) * self.v_des
            )
            pd = self.kp * (q_ref - q[self.qa]) + self.kd * (v_ref - v[act])
            self.pd_torque_max = max(self.pd_torque_max, float(np.max(np.abs(pd))))
            out[act] = self.tau[act] + pd
            self.applied += out / n
            plant.set_torque(out)
            plant.step(1)

    # ---- across a process boundary (cmstack rt --command position): the command as the driver receives it
    @property
    def nc(self) -> int:
        """The command's size: (q_des, v_des, a_des, τ_ff) of the a actuated joints, 4 a values."""
        return 4 * self.act.size

    def packed(self) -> np.ndarray:
        """The last command as sent to the robot: [q_des, v_des, a_des (the law's v̇ of the period), τ_ff]
        (actuated joints); a_des is what the robot holds through a missed period (``hold``)."""
        return np.concatenate((self.q_des, self.v_des, self._acc, self.tau[self.act]))

    def receive(self, payload: np.ndarray, q: np.ndarray | None = None, v: np.ndarray | None = None) -> None:
        """The robot's side of a new command ``payload`` (:meth:`packed`): its curve starts where the previous
        one ended (at the measured motors (q, v), model order, for the first command) and ends at
        (q_des, v_des), τ_ff held over the period."""
        a, act = self.act.size, self.act
        if q is not None and v is not None:
            self.q_c[:], self.v_c[:] = q[self.qa], v[act]
        else:
            self.q_c[:], self.v_c[:] = self.q_des, self.v_des
        self.q_des[:], self.v_des[:], self._acc[:] = payload[:a], payload[a : 2 * a], payload[2 * a : 3 * a]
        self.tau[:] = 0.0
        self.tau[act] = payload[3 * a : 4 * a]
        self.commands += 1

    def hold(self) -> None:
        """No new command this period (a miss): the reference goes on from the last one's end at the last
        command's acceleration a_des, as a torque robot holds its torque,
        q_des ← q_des + (v_des + ½ a_des dt) dt, v_des ← v_des + a_des dt (the joints' own units), τ_ff held.
        (a_des is sent, not differenced from the robot's own curve: a difference would carry the two sides'
        round-off gap into the next held periods, multiplied by their number.)"""
        dt = self.dt
        self.q_c[:], self.v_c[:] = self.q_des, self.v_des
        self.q_des += (self.v_des + (0.5 * dt) * self._acc) * dt
        self.v_des += self._acc * dt


class PositionCommanding:
    """``controller`` as a position-controlled robot's controller side (``cmstack rt --command position``): its τ
    for the state it is given (reconstructed by ``sensing`` first when given: the driver publishes the motors
    only) turned by ``servo.command`` into (q_des, v_des, a_des, τ_ff), returned packed for the transport
    (``JointServo.packed``); every other attribute is the controller's."""

    def __init__(self, controller: Any, servo: JointServo, sensing: ActuatedSensing | None = None) -> None:
        self.controller = controller
        self.servo = servo
        self.sensing = sensing

    def __call__(self, t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        if self.sensing is not None:
            q, v = self.sensing.measure(t, q, v)
        tau = self.controller(t, q, v)
        self.servo.command(self.controller, q, v, tau, t)
        return self.servo.packed()

    def __getattr__(self, name: str) -> Any:
        if name in ("controller", "servo", "sensing"):  # (not yet set: unpickling)
            raise AttributeError(name)
        return getattr(self.controller, name)

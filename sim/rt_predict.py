"""The delay-compensating controller side of ``cmstack rt`` (issue 32): the law evaluated at the state the robot will
be in when its torque is applied, not at the state it was given.

Across the process boundary the torque computed from the state published at tick k is applied from tick k+1 on
(sim/rt_driver.py: a command is in time only when it answers the state before the tick; the driver holds the last
one otherwise): one period of delay, as on a real robot, which the in-process loop (``simulate``) does not have.
Measured on the five-bar at its default gains, that delay alone made the tracking error 3.1× the in-process one.
:class:`PredictingController` removes it to first order: before the law, the state (q̂, v̂) measured (or
reconstructed) at t_k is carried to t_k + h by the model's own closed-chain dynamics under the torque the robot is
applying meanwhile (``models/estimator.DelayPredictor``: one semi-implicit Euler step, put back on the loops), and
the law answers (t_k + h, q⁺, v⁺): its reference and its feedback are those of the instant its torque starts.
The prediction's error is O(h²) where the unpredicted state's is O(h) (tests/test_delay_predictor.py).

Modes (``cmstack rt --predict``, ``PREDICT``):

    none       the law answers the state it is given (every run before);
    one-step   h = one control period, the torque held meanwhile taken to be the last one this side sent;
    latency    the torque held meanwhile the one the driver actually applies: the last command that reached it
               in time (a command answering state j is applied at tick j + 1 iff it was sent before that tick,
               whose time is the state stamp's minus the periods since: ``on_frame``), else the one before it,
               held (a miss); and h = dt (1 + (L̄ − 1)/2), L̄ the periods a command that reaches the robot is held
               (1 without misses; measured, ``note_applied``).  A command held L periods acts over
               [t_{k+1}, t_{k+1} + L dt], where the in-process loop would have applied L torques, each from the
               state at its own start: one constant torque stands best for their average, about the torque at
               the middle of their starts, t_{k+1} + (L − 1) dt / 2.  In-process replays of an rt run's timing
               with 57 % of the cycles missed (five-bar, 10 s): 5.7× the in-process error without prediction,
               3.6× with one-step, 2.1× with latency.

The first state (cycle 0) is answered as given: the driver waits for that answer before its clock starts and
applies it over [t_0, t_1] (no delay).  ``stats()``: the mode, the predictions made, the failed ones (a projection
that did not converge: the law then gets the measured state), the largest |q⁺ − q̂| and the prediction's median
time [µs]."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from cmstack.models.errors import ConfigError
from cmstack.models.estimator import DelayPredictor
from cmstack.models.robot import Robot

PREDICT = ("none", "one-step", "latency")
#: the weight of each new hold length in ``latency``'s running average (about the last 20 commands)
HOLD_WEIGHT = 0.05


class PredictingController:
    """``controller`` answering the state predicted at the time its torque will be applied (module docstring).

    Args:
        controller: the law, ``controller(t, q, v) -> τ`` (model order, N·m / N).
        predictor: the law's model's ``DelayPredictor`` (its ``dt``: the control period [s]).
        mode: "one-step" or "latency" (``PREDICT``; "none" is not wrapped).
        n_cycles: the run's cycles (the per-call times are kept in a preallocated array of that size).

    Every other attribute is the controller's (``info``, ``robot``, ``errors`` ...)."""

    def __init__(self, controller: Any, predictor: DelayPredictor, mode: str = "one-step", n_cycles: int = 0):
        if mode not in PREDICT or mode == "none":
            raise ConfigError(f"predict={mode!r}: PredictingController takes one of {list(PREDICT[1:])}")
        nv = predictor.robot.nv
        self.__dict__.update(
            controller=controller,
            predictor=predictor,
            mode=mode,
            dt=predictor.dt,
            calls=0,
            predictions=0,
            dq_max=0.0,
            last=np.zeros(nv),  # the last torque sent
            applied=np.zeros(nv),  # the torque the driver applies now (``latency``)
            sent_k=-1,  # the state the last torque answered, and its send time (perf_counter s)
            sent_wall=math.inf,
            applied_k=-1,  # the state the last command known to have reached the robot answered
            hold=1.0,  # the periods a command reaching the robot is held, averaged (``latency``)
            horizon=predictor.dt,
            us=np.full(max(int(n_cycles), 1), np.nan),
        )

    def on_frame(self, k: int, wall: float, sent_k: int, sent_wall: float) -> None:
        """The loop's word before the law is called for state k (published at ``wall``, perf_counter s): the last
        command sent answered state ``sent_k`` at ``sent_wall``.  It reached the driver in time iff sent before tick
        sent_k + 1, at wall − (k − sent_k − 1)·dt; then it is the torque applied over [t_k, t_{k+1}], else the
        one before (held)."""
        if sent_k >= 0 and sent_k != self.sent_k:
            tick = wall - (k - sent_k - 1) * self.dt
            if sent_wall < tick:
                self.applied[:] = self.last
                self.note_applied(sent_k)
        self.__dict__.update(sent_k=sent_k, sent_wall=sent_wall)

    def note_applied(self, j: int) -> None:
        """The command answering state j reached the robot in time (applied from tick j + 1): the one before it,
        answering state j⁻, was held for L = j − j⁻ periods; their average L̄ (exponential, weight ``HOLD_WEIGHT``)
        sets the ``latency`` horizon."""
        if self.applied_k >= 0 and j > self.applied_k:
            hold = self.hold + HOLD_WEIGHT * ((j - self.applied_k) - self.hold)
            self.__dict__.update(hold=hold, horizon=self.dt * (1.0 + 0.5 * (hold - 1.0)))
        self.__dict__["applied_k"] = j

    def __call__(self, t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        c = self.calls
        if c == 0:
            tau = self.controller(t, q, v)
            self.applied[:] = tau
        else:
            c0 = time.perf_counter()
            latency = self.mode == "latency"
            h = self.horizon if latency else self.dt
            q1, v1 = self.predictor.predict(q, v, self.applied if latency else self.last, h)
            if c < self.us.size:
                self.us[c] = (time.perf_counter() - c0) * 1e6
            self.__dict__["predictions"] = self.predictions + 1
            dq = float(np.max(np.abs(q1 - q))) if q1.size else 0.0
            if dq > self.dq_max:
                self.__dict__["dq_max"] = dq
            tau = self.controller(t + h, q1, v1)
        self.last[:] = tau
        self.__dict__["calls"] = c + 1
        return tau

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.__dict__:
            self.__dict__[name] = value
        else:  # (``info`` replaced by the replay, …: the law's)
            setattr(self.controller, name, value)

    def __getattr__(self, name: str) -> Any:
        if name in ("controller", "predictor"):  # (not yet set: unpickling)
            raise AttributeError(name)
        return getattr(self.controller, name)

    def stats(self) -> dict[str, Any]:
        """The predictor's figures (timing.json ``predict``)."""
        us = self.us[np.isfinite(self.us)]
        return {
            "mode": self.mode,
            "horizon_s": self.horizon if self.mode == "latency" else self.dt,
            "hold_periods_mean": self.hold,
            "predictions": self.predictions,
            "failures": self.predictor.failures,
            "dq_max": self.dq_max,
            "predict_us_median": float(np.median(us)) if us.size else math.nan,
        }


def law_model(controller: Any) -> Any:
    """The law's model (``controller.robot``), None when it has none."""
    return getattr(controller, "robot", None)


def with_prediction(
    controller: Any,
    mode: str,
    control_dt: float,
    n_cycles: int,
    state_size: tuple[int, int] | None = None,
    partial_state: bool = False,
) -> tuple[Any, str]:
    """``controller`` (what ``run_rt`` is given: the law, or ``ReconstructingController(law, sensing)``) with its law
    wrapped in a :class:`PredictingController` of ``mode``, and a note: "" when it was, else why not (a position
    command, whose robot integrates its own command; no model; a model whose (nq, nv) is not the state's
    ``state_size``; a floating base; ``partial_state`` (the driver publishes the motors only) and the
    reconstruction is not ``controller`` itself, so the law's state cannot be reached).  ``mode`` "none": as
    given."""
    from cmstack.sim.sensors import PositionCommanding, ReconstructingController

    if mode not in PREDICT:
        raise ConfigError(f"predict={mode!r} is not one of {list(PREDICT)}")
    if mode == "none":
        return controller, ""
    if isinstance(controller, PositionCommanding):
        return (
            controller,
            "not predicted: a position command (the robot's joint PD integrates the command itself)",
        )
    reconstructs = isinstance(controller, ReconstructingController)
    if partial_state and not reconstructs:
        return controller, (
            f"not predicted: the driver publishes the motors only and {type(controller).__name__} is not the "
            "reconstruction (ReconstructingController) whose law could be wrapped"
        )
    inner = controller.controller if reconstructs else controller
    robot = law_model(inner)
    if not isinstance(robot, Robot):
        return controller, f"not predicted: {type(inner).__name__} has no model (.robot, a Robot)"
    if state_size is not None and (robot.nq, robot.nv) != tuple(state_size):
        return controller, (
            f"not predicted: the law's model {robot.label} has (nq, nv) = ({robot.nq}, {robot.nv}), the state it is "
            f"given {tuple(state_size)}"
        )
    try:
        predictor = DelayPredictor(robot, control_dt)
    except ConfigError as exc:
        return controller, f"not predicted: {exc}"
    predictor.warm_up()  # (its compiled kernels loaded now, not at the first prediction, under the driver's clock)
    law = PredictingController(inner, predictor, mode, n_cycles)
    if isinstance(controller, ReconstructingController):
        return ReconstructingController(law, controller.sensing), ""
    return law, ""


def prediction_stats(controller: Any, mode: str, note: str) -> dict[str, Any]:
    """timing.json's ``predict``: the :class:`PredictingController`'s ``stats()`` found in ``controller`` (itself,
    or the law of a ``ReconstructingController``), else {"mode": "none"} with ``note`` (why not)."""
    inner = (
        controller.__dict__.get("controller") if not isinstance(controller, PredictingController) else None
    )
    law = controller if isinstance(controller, PredictingController) else inner
    if isinstance(law, PredictingController):
        return law.stats()
    out: dict[str, Any] = {"mode": "none", "asked": mode}
    if note:
        out["note"] = note
    return out

"""Perturbations of the plant and the loop: a typed :class:`Perturbation` and the plant seen through it.

    p = Perturbation(mass_rel=0.2, noise_q=1e-4, delay_steps=1)
    plant = perturb_plant(plant, p, seed=3)        # the plant itself when every field is off

A scenario's ``[perturbation]`` config table is read into a ``Perturbation`` by the application
(``cmstack.scenario.apply_perturbation(plant, cfg)``, scenarios/_common.py); this module never reads a config.

Fields (defaults: everything off):

==========================  ===========================================================================
``mass_rel`` a              each plant body's mass m_b ← m_b (1 + u_b), u_b ~ U(−a, a), its rotational
                            inertia scaled by the same factor (the body's density changes)
``inertia_rel`` a           rotational inertia I_b ← I_b (1 + w_b), w_b ~ U(−a, a) (on top of mass_rel;
                            one factor per body keeps the principal moments physical)
``com_shift_m`` c           each body's centre of mass moved by U(−c, c) per axis, in the body frame [m]
``bodies``                  names of the bodies to perturb (empty: every body with mass)
``noise_q``, ``noise_v``    std of Gaussian noise added to the measured q [rad or m] and v [rad/s or m/s]
                            (``sim.plant.MeasurementNoise``, the plant's own noise implementation;
                            refused on a plant that already adds its own, which would add up)
``delay_steps`` d           the torque applied at control step k is the one computed from the
                            measurement of step k − d (the first command is held for k < d)
``torque_limit_fraction`` f τ_j clipped to f × the plant motor's limit (ctrlrange·gear); 0 = off
``wrench_body``             a body of the plant ('' = off) that receives the world-frame wrench
``wrench_force`` [N], ``wrench_moment`` [N·m]   at the body's centre of mass, for
``wrench_t0`` ≤ t < ``wrench_t1`` [s]
==========================  ===========================================================================

The model perturbation changes the MuJoCo plant only, so the controller's (Pinocchio) model is off by
exactly those factors.  Random draws use ``seed``: the model is drawn from the stream
``default_rng([seed, 1])`` and the noise from ``default_rng([seed, 2])``, so a run is reproducible and
two seeds perturb differently.  The drawn factors are in ``PerturbedPlant.drawn`` (and the run's
metrics under ``perturbation_*``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, NoReturn

import mujoco
import numpy as np

from cmstack.models.errors import ConfigError, JointMapError
from cmstack.sim.plant import MeasurementNoise, MujocoPlant

#: the name the fields go by in messages (a scenario config's table of the same name)
NAME = "perturbation"


@dataclass
class Perturbation:
    """What to perturb (module docstring), checked at construction (one-line ConfigError naming the field
    at fault, as ``perturbation.<field>``)."""

    mass_rel: float = 0.0
    inertia_rel: float = 0.0
    com_shift_m: float = 0.0
    bodies: list[str] = field(default_factory=list)
    noise_q: float = 0.0
    noise_v: float = 0.0
    delay_steps: int = 0
    torque_limit_fraction: float = 0.0
    wrench_body: str = ""
    wrench_force: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    wrench_moment: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    wrench_t0: float = 0.0
    wrench_t1: float = 0.0

    def __post_init__(self) -> None:
        def bad(key: str, why: str) -> NoReturn:
            raise ConfigError(f"{NAME}.{key} = {getattr(self, key)!r}: {why}")

        for k in ("mass_rel", "inertia_rel"):
            if not (np.isfinite(getattr(self, k)) and 0.0 <= getattr(self, k) < 1.0):
                bad(k, "must be a relative bound in [0, 1)")
        for k in ("com_shift_m", "noise_q", "noise_v"):
            if not (np.isfinite(getattr(self, k)) and getattr(self, k) >= 0.0):
                bad(k, "must be finite and >= 0")
        if not (isinstance(self.delay_steps, int) and self.delay_steps >= 0):
            bad("delay_steps", "must be an integer >= 0 (control steps)")
        if not (np.isfinite(self.torque_limit_fraction) and 0.0 <= self.torque_limit_fraction):
            bad("torque_limit_fraction", "must be >= 0 (0 = no extra saturation)")
        for k in ("wrench_force", "wrench_moment"):
            if len(getattr(self, k)) != 3:
                bad(k, "must have 3 entries (world x, y, z)")
        if self.wrench_body and not self.wrench_t1 > self.wrench_t0:
            bad("wrench_t1", f"must be > wrench_t0 = {self.wrench_t0} when wrench_body is set")

    @property
    def active(self) -> bool:
        """Any field but ``bodies`` differs from its default (off)."""
        off = asdict(Perturbation())
        return any(v != off[k] for k, v in asdict(self).items() if k != "bodies")

    @property
    def changes_model(self) -> bool:
        return self.mass_rel > 0 or self.inertia_rel > 0 or self.com_shift_m > 0


def perturb_model(
    model: mujoco.MjModel, p: Perturbation, rng: np.random.Generator, names: Sequence[str] | None = None
) -> dict[str, dict[str, Any]]:
    """Scale/shift the bodies' mass, inertia and CoM of ``model`` in place (see the module docstring);
    returns the drawn factors by body name.  Draws happen for every candidate body in id order, so
    which body gets which factor does not depend on ``bodies``."""
    cand = [b for b in range(1, model.nbody) if model.body_mass[b] > 0]
    by_name = {mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, b): b for b in range(model.nbody)}
    if names:
        missing = [n for n in names if n not in by_name]
        if missing:
            import difflib

            raise ConfigError(
                f"{NAME}.bodies: {missing} not in the plant; close: "
                f"{difflib.get_close_matches(missing[0], list(by_name), n=4)}"
            )
        chosen = {by_name[n] for n in names}
    else:
        chosen = set(cand)
    drawn: dict[str, dict[str, Any]] = {}
    for b in cand:
        u = rng.uniform(-p.mass_rel, p.mass_rel) if p.mass_rel > 0 else 0.0
        w = rng.uniform(-p.inertia_rel, p.inertia_rel) if p.inertia_rel > 0 else 0.0
        c = rng.uniform(-p.com_shift_m, p.com_shift_m, 3) if p.com_shift_m > 0 else np.zeros(3)
        if b not in chosen:
            continue
        model.body_mass[b] *= 1.0 + u
        model.body_inertia[b] *= (1.0 + u) * (1.0 + w)
        model.body_ipos[b] += c
        drawn[mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, b)] = dict(
            mass=1.0 + u, inertia=(1 + u) * (1 + w), com_shift=c.tolist()
        )
    return drawn


class PerturbedPlant:
    """A MuJoCo plant (``MujocoPlant`` or a subclass) seen through the perturbation: noisy measurements,
    delayed and saturated torques, a disturbance wrench; its model's inertial parameters changed at
    construction.  Everything else is the wrapped plant's (attribute access is forwarded)."""

    def __init__(self, plant: MujocoPlant, p: Perturbation, seed: int = 0):
        self.inner = plant
        self.p = p
        self.drawn: dict[str, dict[str, Any]] = {}
        if p.changes_model:
            self.drawn = perturb_model(plant.model, p, np.random.default_rng([int(seed), 1]), p.bodies)
            mujoco.mj_setConst(plant.model, plant.data)  # subtree masses, inverse weights of the constraints
        self.noise = MeasurementNoise(p.noise_q, p.noise_v, np.random.default_rng([int(seed), 2]))
        own = getattr(plant, "noise", None)
        if self.noise.active and isinstance(own, MeasurementNoise) and own.active:
            raise ConfigError(
                f"measurement noise given twice: the plant's own (noise_q={own.std_q:g}, "
                f"noise_v={own.std_v:g}) and {NAME}.noise_q/noise_v ({p.noise_q:g}, {p.noise_v:g}); "
                "they would add up: set one of them"
            )
        self.queue: deque[np.ndarray] = deque()
        self.limit: tuple[np.ndarray, np.ndarray] | None = None
        if p.torque_limit_fraction > 0:
            m = plant.map
            lo = np.full(m.nv, -np.inf)
            hi = np.full(m.nv, np.inf)
            for j, (name, act) in enumerate(zip(m.v_names, m.actuated)):
                if not act:
                    continue
                a = m.act[j]
                if not plant.model.actuator_ctrllimited[a]:
                    raise JointMapError(
                        f"{NAME}.torque_limit_fraction: the motor of joint '{name}' in "
                        f"{plant.path.name} has no ctrlrange (no effort limit to take a fraction of)"
                    )
                lo[j], hi[j] = plant.model.actuator_ctrlrange[a] * m.gear[j]
            self.limit = (p.torque_limit_fraction * lo, p.torque_limit_fraction * hi)
        self.clipped = 0  # control steps where the perturbation's saturation clipped a torque
        self.body = plant.body_id(p.wrench_body) if p.wrench_body else -1
        self._qfrc = np.zeros(plant.model.nv)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def state(self, noisy: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """The wrapped plant's measurement plus N(0, noise_q²), N(0, noise_v²) per coordinate."""
        q, v = self.inner.state(noisy=noisy)
        return self.noise.apply(q, v) if noisy else (q, v)

    def measured_index(self) -> tuple[np.ndarray, np.ndarray] | None:
        """As ``MujocoPlant.measured_index``: None when the perturbation (or the plant) adds noise."""
        return None if self.noise.active else self.inner.measured_index()

    def set_torque(self, tau: np.ndarray) -> None:
        """Queue τ_k; send τ_{k−d} (τ_0 while k < d), clipped to the fraction of the motor limits."""
        tau = np.array(tau, dtype=float)
        d = self.p.delay_steps
        if d > 0:
            if not self.queue:
                self.queue.extend([tau] * d)
            self.queue.append(tau)
            tau = self.queue.popleft()
        if self.limit is not None:
            sat = np.clip(tau, *self.limit)
            if np.any(sat != tau):
                self.clipped += 1
            tau = sat
        self.inner.set_torque(tau)

    def reset(
        self, q: np.ndarray, v: np.ndarray | None = None, qpos_extra: dict[str, float] | None = None
    ) -> None:
        """The wrapped plant's reset; the torque queue of the delay is emptied."""
        self.queue.clear()
        self.inner.reset(q, v, qpos_extra)

    def step(self, n: int = 1) -> None:
        """Advance n sim steps; the wrench enters as generalized forces J_bᵀ [f; m] at the body's CoM
        (``qfrc_applied``, so it adds to whatever the plant puts in ``xfrc_applied``)."""
        if self.body < 0:
            self.inner.step(n)
            return
        m, d = self.inner.model, self.inner.data
        for _ in range(n):
            t = float(d.time)
            self._qfrc[:] = 0.0
            if self.p.wrench_t0 <= t < self.p.wrench_t1:
                mujoco.mj_kinematics(m, d)
                mujoco.mj_comPos(m, d)
                mujoco.mj_applyFT(
                    m,
                    d,
                    np.asarray(self.p.wrench_force, float),
                    np.asarray(self.p.wrench_moment, float),
                    d.xipos[self.body].copy(),
                    self.body,
                    self._qfrc,
                )
            d.qfrc_applied[:] = self._qfrc
            self.inner.step(1)

    def metrics(self) -> dict[str, float]:
        """What the perturbation did, for metrics.json."""
        out: dict[str, float] = {"perturbation_saturated_steps": self.clipped}
        if self.drawn:
            f = np.array([x["mass"] for x in self.drawn.values()])
            out["perturbation_mass_factor_min"] = float(f.min())
            out["perturbation_mass_factor_max"] = float(f.max())
        return out


def perturb_plant(plant: MujocoPlant, p: Perturbation, seed: int = 0) -> MujocoPlant | PerturbedPlant:
    """``plant`` seen through ``p`` (random draws seeded by ``seed``); the plant itself when every field of
    ``p`` is off.  Call it right after building the plant, before ``reset``."""
    if not p.active:
        return plant
    return PerturbedPlant(plant, p, seed=seed)

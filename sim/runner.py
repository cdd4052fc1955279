"""Closed-loop runner: owns timing (control period, sim sub-steps, duration), the progress bar, the
per-call controller timing, disturbances and logging.

    result = run_closed_loop(plant, controller, duration=2.0, control_dt=0.005,
                             record=lambda t, q, v, tau: logger.append(...))

The controller sees only (t, q, v) as a real one would.  ``record`` is called once per control step
with the measured state and the torque applied.  Any exception propagates after the steps done so
far have been logged (the scenario framework then writes log.npz and the reason).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from cmstack.models.errors import ConfigError
from cmstack.sim.logger import Logger  # noqa: F401  (moved to sim/logger.py; kept importable from here)


@dataclass
class Disturbance:
    """A constant world-frame wrench on a body between t0 and t1 (seconds)."""

    body: str
    t0: float
    t1: float
    force: tuple = (0.0, 0.0, 0.0)
    moment: tuple = (0.0, 0.0, 0.0)


@dataclass
class RunResult:
    steps: int = 0
    step_us: list = field(default_factory=list)

    @property
    def step_us_median(self) -> float:
        return float(np.median(self.step_us)) if self.step_us else float("nan")


def substeps(control_dt: float, sim_dt: float) -> int:
    n = int(round(control_dt / sim_dt))
    if n < 1 or abs(n * sim_dt - control_dt) > 1e-9 * max(1.0, control_dt):
        raise ConfigError(f"control_dt={control_dt} must be a whole multiple of sim_dt={sim_dt}")
    return n


def run_closed_loop(plant, controller, *, duration: float, control_dt: float, record=None,
                    disturbances: list[Disturbance] = (), viewer=None, progress: bool = True,
                    desc: str = "sim") -> RunResult:
    if not duration > 0:
        raise ConfigError(f"duration must be > 0 s, got {duration}")
    n_sub = substeps(control_dt, plant.dt)
    n_steps = int(round(duration / control_dt))
    res = RunResult()
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=n_steps, desc=desc, unit="step", leave=False, mininterval=0.5)
    try:
        active: set[int] = set()
        for _ in range(n_steps):
            t = plant.time
            q, v = plant.state()
            c0 = time.perf_counter()
            tau = controller(t, q, v)
            res.step_us.append((time.perf_counter() - c0) * 1e6)
            plant.set_torque(tau)
            for i, d in enumerate(disturbances):
                on = d.t0 <= t < d.t1
                if on and i not in active:
                    plant.set_wrench(d.body, d.force, d.moment)
                    active.add(i)
                elif not on and i in active:
                    plant.set_wrench(d.body)
                    active.discard(i)
            if record is not None:
                record(t, q, v, tau)
            if viewer is not None:
                viewer.maybe_update(t, plant.data.qpos)
            plant.step(n_sub)
            res.steps += 1
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return res

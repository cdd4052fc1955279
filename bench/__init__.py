"""Speed benchmarks (``cmstack bench``); their numbers are written to ``./bench/results/*.json``."""

import time
from pathlib import Path

import numpy as np
from numba import njit


def results_dir() -> Path:
    """``bench/results`` under the current directory (the repository root when run from there)."""
    p = Path.cwd() / "bench" / "results"
    p.mkdir(parents=True, exist_ok=True)
    return p


def closed_loop_states(plant, ctl, n: int) -> list:
    """n states (t, q, v) of the controller ``ctl`` on ``plant``, one call and one plant step each (the
    states a step is timed on)."""
    out = []
    for _ in range(n):
        t = plant.time
        q, v = plant.state()
        out.append((t, q, v))
        plant.set_torque(ctl(t, q, v))
        plant.step()
    return out


def call_times_us(fns: dict, items, repeat: int) -> dict:
    """{name: µs of every call} of each function in ``fns`` (name -> fn) on each of ``items`` (its arguments),
    ``repeat`` passes; the functions' calls alternate on every item, so that a change of machine load hits
    them all alike."""
    out = {k: [] for k in fns}
    for _ in range(repeat):
        for it in items:
            for k, fn in fns.items():
                c0 = time.perf_counter()
                fn(*it)
                out[k].append((time.perf_counter() - c0) * 1e6)
    return {k: np.array(v) for k, v in out.items()}


@njit(cache=True)
def _floor_probe(M, h, q, v, t, out):
    """The smallest kernel that takes what a compiled law takes (M, h, q, v, t, a result array)."""
    for i in range(out.size):
        out[i] = h[i]


def python_floor(call, model, data, nv: int, accel_from_v: bool = False):
    """The least any controller written in Python can cost around the Pinocchio call ``call(model, data,
    q, v)`` it needs: one Python call, that Pinocchio call, one compiled (numba) kernel of six arguments
    that reads M and h (views taken once, as a controller keeps them) and copies h into a preallocated
    result, and the return.  ``accel_from_v``: the call also takes an acceleration, given v
    (``pin.rnea(m, d, q, v, v)``, as the benchmarks' floors call it).  No control law at all: a step
    measured beside it shows how much of its cost is the law and how much is calling overhead that no
    Python controller avoids.  Returns ``step(t, q, v) -> out``."""
    out = np.empty(nv)
    kernel = _floor_probe
    M, h, tau = data.M, data.nle, data.tau  # views, refreshed in place by the call: taken once

    def step(t, q, v):
        call(model, data, q, v)
        kernel(M, h, q, v, float(t), out)
        return out

    def step_a(t, q, v):
        call(model, data, q, v, v)
        kernel(M, tau, q, v, float(t), out)
        return out

    return step_a if accel_from_v else step

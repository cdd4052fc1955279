"""Control-step time of the robust inertia-partitioning controller ([Dastranj], law (18)) on the
series-parallel manipulator, measured on the states of a real closed-loop run of the default scenario:
each call is Ξ(q), E, Ė q̇, Pinocchio's joint Jacobians and their time variation on the open tree, the
per-body Γᵢ, hᵢ, Q_e,i, and the law.  Also the MuJoCo plant step (closed chain, RK4).

Issue 12 (law (18) ≤ 1.5× its floor, one RNEA on the open tree).  The step is now two numba kernels around
that RNEA (``controllers/kernels.py``: ``robust18_pre`` evaluates the sinusoid reference, the errors and the
lifted state q̂, q̂̇, q̂̈; ``robust18_post`` applies Eᵀ and the law), the info record refilled in place.
Measured interleaved (busy 2-core machine, load 8-11, medians over 5 s of states × 3):
    3 bodies: 26.3 µs (NumPy, before; quiet machine 27.3 µs = 9.5×) → 10.7 µs, floor 2.5 µs: 4.3×
    5 bodies: 31.2 µs → 14.0 µs, floor 3.7 µs: 3.7×
    (another run, load 14: 3 bodies 49.2 → 20.3 µs, 4.1×; 5 bodies 56.7 → 23.5 µs, 3.6×; the step is
    interleaved with the ~270 µs body-wise-sum path, whose working set slows it: alone it takes ~9 µs)
MISSED (target 1.5×).  Profile of the step alone (load 12, medians, 8.8 µs in all): ``robust18_pre`` 2.0 µs
(dispatch of its 9 arguments included), the RNEA 2.2, ``robust18_post`` 1.2, the result array 0.8, and ~2.6 µs of
Python (the call, two ``asarray``, shape checks, the info record).  1.5× a 2.5-3 µs RNEA leaves ~1.3 µs for
everything that is not Pinocchio — about one Python call.

Quiet machine (load 2, 5 s of states × 3): 3 bodies 4.2 µs over a 1.1 µs RNEA = 3.9×, 5 bodies 4.6 / 1.4 µs
= 3.3×.  ``bench.python_floor`` measures the bound: the least a Python controller can cost around the same
RNEA (its call, the RNEA, one six-argument numba kernel reading the result through views kept between
steps, the return) is 1.6 µs = 1.47× (3 bodies) and 1.9 µs = 1.39× (5 bodies) the floor (load 1.5), so
1.5× leaves 0.05-0.2 µs for the law itself; the law (18) step is 2.8× and 2.4× that bound.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import pinocchio as pin

from cmstack.bench import python_floor, results_dir
from cmstack.scenarios._common import default_config
from cmstack.scenarios.series_parallel import (
    build_plant,
    build_robust,
    make_trajectory,
    plant_state,
    reset_plant,
)


def measure(duration: float, repeat: int, model_actuator_bodies: bool = False) -> dict:
    cfg = default_config("series_parallel")
    cfg["model_actuator_bodies"] = model_actuator_bodies
    traj = make_trajectory(cfg)
    ctl = build_robust(cfg, traj)
    plant = build_plant(cfg)
    reset_plant(plant, cfg, traj(0.0)[0] + np.asarray(cfg["initial_error"]))
    n_sub = max(1, int(round(cfg["control_dt"] / plant.dt)))
    states, step_us = [], []
    for _ in range(int(round(duration / cfg["control_dt"]))):
        t = plant.time
        q, v = plant_state(plant)
        states.append((t, q, v))
        plant.set_torque(ctl(t, q, v))
        c0 = time.perf_counter()
        plant.step(n_sub)
        step_us.append((time.perf_counter() - c0) * 1e6)
    # interleaved in one process, call by call: the law with the RNEA model term (default), the law with
    # the paper's body-wise sums, and the floor = the one Pinocchio call the fast law needs (RNEA on the
    # open tree at q̂ = Ξ(q)); medians and the ratio of medians
    fast = build_robust({**cfg, "model_terms": "rnea"}, traj)
    part = build_robust({**cfg, "model_terms": "partition"}, traj)
    pm = fast.model
    m, d = pm.model, pm.data
    qh = [pm.map.xi(q) for _, q, _ in states]
    vh = [pm.map.E(q) @ v for _, q, v in states]
    ref = build_robust({**cfg, "model_terms": "rnea"}, traj)  # its NumPy formulation (before issue 12)
    pyf = python_floor(pin.rnea, m, m.createData(), m.nv, accel_from_v=True)
    calls, calls_part, floor, calls_np, pfl = [], [], [], [], []
    for _ in range(repeat):
        for (t, q, v), x, y in zip(states, qh, vh):
            c0 = time.perf_counter()
            fast(t, q, v)
            c1 = time.perf_counter()
            part(t, q, v)
            c2 = time.perf_counter()
            pin.rnea(m, d, x, y, y)
            c3 = time.perf_counter()
            ref._numpy_step(t, q, v)
            c4 = time.perf_counter()
            pyf(t, x, y)
            pfl.append((time.perf_counter() - c4) * 1e6)
            calls_np.append((c4 - c3) * 1e6)
            calls.append((c1 - c0) * 1e6)
            calls_part.append((c2 - c1) * 1e6)
            floor.append((c3 - c2) * 1e6)
    calls = np.array(calls)
    return dict(
        model_actuator_bodies=model_actuator_bodies,
        control_dt=cfg["control_dt"],
        calls=int(calls.size),
        control_step_us_median=float(np.median(calls)),
        control_step_us_p90=float(np.percentile(calls, 90)),
        control_step_us_min=float(calls.min()),
        partition_step_us_median=float(np.median(calls_part)),
        numpy_step_us_median=float(np.median(calls_np)),
        floor_rnea_us_median=float(np.median(floor)),
        ratio_to_floor=float(np.median(calls) / np.median(floor)),
        # the least a Python controller costs around the same RNEA (bench.python_floor)
        python_floor_us_median=float(np.median(pfl)),
        python_floor_ratio=float(np.median(pfl) / np.median(floor)),
        step_over_python_floor=float(np.median(calls) / np.median(pfl)),
        mujoco_step_us_median=float(np.median(step_us)),
    )


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5.0)
    args = ap.parse_args(argv)
    rows = [measure(args.duration, args.repeat, False), measure(args.duration, args.repeat, True)]
    for r in rows:
        bodies = (
            "3 bodies (paper's model)" if not r["model_actuator_bodies"] else "5 bodies (+cylinder, piston)"
        )
        print(
            f"{bodies}: law (18) step median {r['control_step_us_median']:.1f} µs (p90 {r['control_step_us_p90']:.1f}, "
            f"{r['calls']} calls) with the RNEA model term; {r['partition_step_us_median']:.1f} µs with the paper's "
            f"body-wise sums; {r['numpy_step_us_median']:.1f} µs as NumPy calls (before); floor (one RNEA) {r['floor_rnea_us_median']:.1f} µs -> ratio "  # noqa: E501
            f"{r['ratio_to_floor']:.2f} (target <= 1.5); the least Python controller around the same RNEA "
            f"{r['python_floor_us_median']:.1f} µs = {r['python_floor_ratio']:.2f}× the floor, the step "
            f"{r['step_over_python_floor']:.2f}× it; MuJoCo plant step (per control period) "
            f"median {r['mujoco_step_us_median']:.1f} µs"
        )
    out = results_dir()
    out.mkdir(exist_ok=True)
    (out / "series_parallel.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

"""[Eslami] timings: the DAC law (III) control step on states of a real closed-loop run of the default
chain_task_space scenario (closed-form reference, ProxSuite reference, + joint allocation closed form / QP),
and one RK4 step of the tensor Newton–Euler model (KKT (32) vs Schur (35), with/without the projection),
beside a MuJoCo step of the same chain.

Law (III), interleaved on the same states: the step (``TaskSpaceLaw.__call__`` = ``_compiled_step``, one
numba kernel ``controllers/kernels.py: dac_law3_step``), the generic path (``PortLaw.__call__``: dense ℳ, two
KKT LU solves of (*); the law's one other form, which ``qp=True`` runs and the tests compare the kernel with),
and the step's floor — the kernels it cannot avoid, as NumPy/LAPACK calls: rotations from the
quaternions, S = A ℳ⁻¹ Aᵀ (two dense products), one Cholesky factorization and two Cholesky solves.  Target
(issue 12): step ≤ 250 µs median (2× margin on the 0.5 ms control period).  Results: ./bench/results/chain.json.

Measured (busy 2-core machine, load 4–6, interleaved medians over 400 states × 3):
    before (NumPy closed form)  476 µs    (quiet machine: 488 µs, 11.9× the floor)
    after  (compiled kernel)     60 µs    = 1.24× the floor (48 µs); NumPy closed form / step = 8.0×
    (the NumPy closed form, ``_closed_form_step``, was removed since: the kernel is the law's one closed form)
Where the 60 µs go (same states, medians): the kernel call itself 19 µs (35 array arguments), the trajectory
sample ``traj.world(t)`` 12 µs, the Python wrapper (four output arrays,
argument conversion, the info record) the rest.  The floor as defined above is itself NumPy call overhead
(the compiled kernel does all of it, and the rest of the law, in 19 µs).  Before (profile of the NumPy closed
form on one
state of the run, busy, 676 µs in all): the obstacle wish ``null_space_wish`` 198 µs, the spring moments 64,
the task error 27, rotations 9, and ~380 µs of ~40 NumPy calls on 3- to 30-vectors building ℳ, ℳ⁻¹, D^Iℳ,
𝒞, A, Ȧ and running the Schur solves and the law.

    python -m bench.chain [--repeat 3] [--duration 2]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from scipy.linalg.lapack import dpotrf, dpotrs

from cmstack.bench import call_times_us, results_dir
from cmstack.controllers.dac import JointActuationMap, PortLaw, TaskSpaceLaw
from cmstack.models.lie import quat_to_matrix
from cmstack.scenarios._common import default_config
from cmstack.scenarios.chain_open_loop import body_names
from cmstack.scenarios.chain_task_space import build_model, ee_trajectory, initial_state, parse_obstacles
from cmstack.sim.chain_plant import ChainMujocoPlant


def _law(cfg, chain, traj, qp=False):
    k = cfg["obstacle_points_per_body"]
    pts = (
        [[0.0, 0.0, 0.0]]
        if k == 1
        else [[x, 0.0, 0.0] for x in np.linspace(-cfg["length"] / 2, cfg["length"] / 2, k)]
    )
    return TaskSpaceLaw(
        chain,
        traj,
        0.0,
        0.0,
        cfg["lam_p"],
        cfg["lam_a"],
        obstacles=parse_obstacles(cfg),
        obstacle_gain=cfg["obstacle_gain"],
        obstacle_range=cfg["obstacle_range"],
        qp=qp,
        kd_mass=cfg["kd_mass"],
        obstacle_points=pts,
    )


LAW3_TARGET_US = 250.0


_MI: dict[int, np.ndarray] = {}


def _law3_floor(law, s):
    """The kernels of one law (III) step: R(q), S = A ℳ⁻¹Aᵀ, Cholesky, two solves (shapes of the chain;
    ℳ⁻¹ a dense 6N×6N matrix, the chain's at the first state, inverted once)."""
    quat_to_matrix(s.quat)
    A = law._A
    Mi = _MI.get(id(law))
    if Mi is None:
        Mi = _MI[id(law)] = np.linalg.inv(law.chain.mass_matrix(s.R))
    S = A @ (Mi @ A.T)
    c, _ = dpotrf(S)
    y = np.ones(A.shape[0])
    dpotrs(c, y)
    dpotrs(c, y)


def _time(fn, items, repeat):
    """µs of every call of ``fn`` on each of ``items``, ``repeat`` passes."""
    return call_times_us({"": fn}, items, repeat)[""]


def measure(duration: float, repeat: int) -> dict:
    cfg = default_config("chain_task_space")
    chain = build_model(cfg, False)
    s0 = initial_state(cfg, chain)
    traj = ee_trajectory(cfg, s0.pos[-1] + np.asarray(cfg["ee_offset"]), s0.quat[-1])
    plant = ChainMujocoPlant(cfg["mjcf"], body_names(chain.n), sim_dt=cfg["sim_dt"], gravity=chain.gravity)
    plant.reset(s0)
    law = _law(cfg, chain, traj)
    n_sub = int(round(cfg["control_dt"] / plant.dt))
    states, mj_us = [], []
    for _ in range(int(round(duration / cfg["control_dt"]))):
        t = plant.time
        s = plant.chain_state()
        states.append((t, s))
        plant.set_torque(law(t, s))
        c0 = time.perf_counter()
        plant.step(n_sub)
        mj_us.append((time.perf_counter() - c0) * 1e6 / n_sub)
    sub = states[:: max(1, len(states) // 400)]
    res = {"states": len(sub)}
    law_cf, law_qp = _law(cfg, chain, traj), _law(cfg, chain, traj, qp=True)
    law_cf(*sub[0])
    tl = call_times_us(
        {
            "law3_closed_form_us": lambda t, s: law_cf(t, s),
            "law3_generic_kkt_us": lambda t, s: PortLaw.__call__(law_cf, t, s),
            "law3_floor_us": lambda t, s: _law3_floor(law_cf, s),
        },
        sub,
        repeat,
    )
    res.update(tl)
    res["law3_step_over_floor"] = float(np.median(tl["law3_closed_form_us"]) / np.median(tl["law3_floor_us"]))
    res["law3_generic_over_step"] = float(
        np.median(tl["law3_generic_kkt_us"]) / np.median(tl["law3_closed_form_us"])
    )
    res["law3_target_us"] = LAW3_TARGET_US
    res["law3_reference_qp_us"] = _time(lambda t, s: law_qp(t, s), sub, repeat)
    fixed = build_model(cfg, True, (s0.pos[0].copy(), s0.quat[0].copy()))
    alloc_cf, alloc_qp = JointActuationMap(fixed), JointActuationMap(fixed, qp=True, limit=5.0)
    tau = [(law_cf(t, s), s) for t, s in sub]
    res["joint_allocation_closed_form_us"] = _time(alloc_cf, tau, repeat)
    res["joint_allocation_qp_us"] = _time(alloc_qp, tau, repeat)
    port = [(s, np.zeros(6 * chain.n)) for _, s in sub]
    for method in ("kkt", "schur"):
        for proj in (True, False):
            res[f"tensor_rk4_step_{method}{'_projected' if proj else ''}_us"] = _time(
                lambda s, p: chain.step(s, 1e-3, p, method=method, project=proj), port, repeat
            )
    res["tensor_dynamics_kkt_us"] = _time(lambda s, p: chain.dynamics(s, p, "kkt"), port, repeat)
    res["tensor_dynamics_schur_us"] = _time(lambda s, p: chain.dynamics(s, p, "schur"), port, repeat)
    out = {"control_dt_us": cfg["control_dt"] * 1e6, "mujoco_step_us_median": float(np.median(mj_us))}
    for k, v in res.items():
        if isinstance(v, np.ndarray):
            out[f"{k}_median"] = float(np.median(v))
            out[f"{k}_p90"] = float(np.percentile(v, 90))
        else:
            out[k] = v
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.chain", description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--duration", type=float, default=2.0, help="closed-loop seconds whose states are replayed"
    )
    args = ap.parse_args(argv if argv is not None else [])
    r = measure(args.duration, args.repeat)
    width = max(len(k) for k in r)
    for k, v in r.items():
        print(f"  {k:<{width}}  {v:10.2f}" if isinstance(v, float) else f"  {k:<{width}}  {v}")
    med = r["law3_closed_form_us_median"]
    print(
        f"  law III step {med:.0f} µs median, {r['law3_step_over_floor']:.2f}× its floor "
        f"({r['law3_floor_us_median']:.0f} µs); target ≤ {LAW3_TARGET_US:.0f} µs: "
        f"{'OK' if med <= LAW3_TARGET_US else 'MISSED'} (the generic KKT path: {r['law3_generic_over_step']:.2f}× the step)"  # noqa: E501
    )
    (results_dir() / "chain.json").write_text(json.dumps(r, indent=2))


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])

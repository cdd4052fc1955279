"""Speed of the TITOP block diagrams ([Alazard]) against Pinocchio: forward dynamics (TITOP causal sweeps vs
ABA) and inverse dynamics (vs RNEA), on the balloon of §4, on random floating chains of growing size and
on Pinocchio's sample humanoid (32 DoF).  TITOP is pure Python/NumPy (one small matrix product per block
and sweep); Pinocchio is C++.
Never asserted in tests (shared, noisy machines).

    python -m bench.titop [--states 200] [--repeat 3]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import pinocchio as pin

from cmstack.scenarios._common import default_config
from cmstack.models.titop import from_pinocchio
from cmstack.scenarios.balloon import Params, pinocchio_model, titop_system


def _median_us(fn, items, repeat):
    ts = []
    for _ in range(repeat):
        for it in items:
            c0 = time.perf_counter()
            fn(*it)
            ts.append((time.perf_counter() - c0) * 1e6)
    return float(np.median(ts))


def _states(rng, nq_joints, n):
    out = []
    for _ in range(n):
        quat = rng.normal(size=4)
        q = np.concatenate((rng.normal(size=3), quat / np.linalg.norm(quat), rng.uniform(-1, 1, nq_joints)))
        out.append((q, rng.normal(size=6 + nq_joints), rng.normal(size=6 + nq_joints)))
    return out


def measure_pair(sysm, model, states, repeat):
    data = model.createData()
    return dict(titop_fd_us=_median_us(lambda q, v, u: sysm.forward(q, v, u), states, repeat),
                aba_us=_median_us(lambda q, v, u: pin.aba(model, data, q, v, u), states, repeat),
                titop_id_us=_median_us(lambda q, v, a: sysm.inverse(q, v, a), states, repeat),
                rnea_us=_median_us(lambda q, v, a: pin.rnea(model, data, q, v, a), states, repeat))


def balloon(n_states, repeat):
    cfg = default_config("balloon")
    P = Params(cfg)
    model, _ = pinocchio_model(cfg, P)
    return measure_pair(titop_system(P), model, _states(np.random.default_rng(0), 3, n_states), repeat)


def random_chain(n, rng):
    """A floating base carrying a chain of n joints, alternately revolute and prismatic about random axes."""
    model = pin.Model()
    parent = model.addJoint(0, pin.JointModelFreeFlyer(), pin.SE3.Identity(), "base")
    model.appendBodyToJoint(parent, pin.Inertia.Random(), pin.SE3.Identity())
    for k in range(n):
        axis = rng.normal(size=3)
        axis /= np.linalg.norm(axis)
        jm = pin.JointModelRevoluteUnaligned(axis) if k % 2 == 0 else pin.JointModelPrismaticUnaligned(axis)
        parent = model.addJoint(parent, jm, pin.SE3.Random(), f"j{k}")
        model.appendBodyToJoint(parent, pin.Inertia.Random(), pin.SE3.Identity())
    return model


def floating_models(n_states, repeat, sizes=(3, 6, 12, 24)):
    rows = []
    models = [(f"chain, {n} joints", random_chain(n, np.random.default_rng(n))) for n in sizes]
    models.append(("Pinocchio sample humanoid", pin.buildSampleModelHumanoidRandom()))
    for label, model in models:
        rng = np.random.default_rng(1)
        r = measure_pair(from_pinocchio(model), model, _states(rng, model.nq - 7, n_states), repeat)
        rows.append(dict(model=label, bodies=model.njoints - 1, **r))
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--states", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    b = balloon(args.states, args.repeat)
    print(f"balloon (4 bodies, 9 DoF): TITOP FD {b['titop_fd_us']:.0f} µs vs ABA {b['aba_us']:.1f} µs; "
          f"TITOP ID {b['titop_id_us']:.0f} µs vs RNEA {b['rnea_us']:.1f} µs (medians)")
    print("floating models turned into TITOP blocks by from_pinocchio (median µs):")
    print(f"  {'model':<26} {'bodies':>6} {'TITOP FD':>9} {'ABA':>7} {'TITOP ID':>9} {'RNEA':>7}")
    for r in floating_models(args.states // 2, args.repeat):
        print(f"  {r['model']:<26} {r['bodies']:>6} {r['titop_fd_us']:>9.0f} {r['aba_us']:>7.1f} "
              f"{r['titop_id_us']:>9.0f} {r['rnea_us']:>7.1f}")


if __name__ == "__main__":
    main()

"""Speed of the TITOP block diagrams ([Alazard]) against Pinocchio: forward dynamics (TITOP causal sweeps vs
ABA) and inverse dynamics (vs RNEA), on the balloon of §4, on random floating chains of growing size and
on Pinocchio's sample humanoid (32 DoF).  Each TITOP sweep is timed twice, interleaved call by call in one
process: the NumPy block-by-block reference (``System._forward_reference`` / ``_inverse_reference``, the
code before the compiled sweeps) and the compiled sweeps (``System.forward`` / ``inverse``,
models/_titop_kernels.py); Pinocchio is C++.  Medians.
Never asserted in tests (shared, noisy machines).

    python -m bench.titop [--states 200] [--repeat 3]        # writes bench/results/titop.json

2-core shared machine, load average 2.5 (median µs):

    balloon (4 bodies, 9 DoF): TITOP FD 252 (NumPy reference) -> 8.8 (compiled), x29; ABA 3.3
                               TITOP ID 177 (NumPy reference) -> 5.7 (compiled), x31; RNEA 1.7
      model                      bodies  FD ref     FD    x    ABA  ID ref     ID    x   RNEA
      chain, 3 joints                 4     248    8.8   28    3.4     172    5.7   30    1.7
      chain, 6 joints                 7     464   11.6   40    4.6     318    6.6   48    2.3
      chain, 12 joints               13     898   17.3   52    7.2     622   11.0   57    3.6
      chain, 24 joints               25    1769   28.7   62   12.2    1212   17.8   68    6.1
      Pinocchio sample humanoid      27    1801   31.6   57   12.4    1260   21.4   59    6.3

About 2 µs of the compiled balloon call is numba's dispatch of its ~20 array arguments and ~4 µs the
Python wrapper (argument checks, the external-load arrays); the sweeps themselves take ~2.5 µs.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
import pinocchio as pin

from cmstack.bench import call_times_us, results_dir
from cmstack.models.titop import from_pinocchio
from cmstack.scenarios._common import default_config
from cmstack.scenarios.balloon import Params, pinocchio_model, titop_system


def _interleaved_us(fns, items, repeat):
    """Median µs per call of each function in ``fns`` (name -> fn), timed interleaved (``call_times_us``)."""
    return {k: float(np.median(v)) for k, v in call_times_us(fns, items, repeat).items()}


def _states(rng, nq_joints, n):
    out = []
    for _ in range(n):
        quat = rng.normal(size=4)
        q = np.concatenate((rng.normal(size=3), quat / np.linalg.norm(quat), rng.uniform(-1, 1, nq_joints)))
        out.append((q, rng.normal(size=6 + nq_joints), rng.normal(size=6 + nq_joints)))
    return out


def measure_pair(sysm, model, states, repeat):
    """TITOP forward/inverse dynamics, the NumPy block-by-block reference (``_forward_reference``,
    ``_inverse_reference``: the code before the compiled sweeps) and the compiled one (``forward``,
    ``inverse``), beside Pinocchio's ABA and RNEA, interleaved; medians in µs."""
    data = model.createData()
    sysm.forward(*states[0])  # load the compiled kernels before timing
    sysm.inverse(*states[0])
    out: dict = {}
    for way, reference, compiled, pin_name, pin_call in (
        ("fd", sysm._forward_reference, sysm.forward, "aba_us", pin.aba),  # forward: v̇ of (q, v, τ)
        ("id", sysm._inverse_reference, sysm.inverse, "rnea_us", pin.rnea),  # inverse: τ of (q, v, v̇)
    ):
        calls = {
            f"titop_{way}_ref_us": reference,
            f"titop_{way}_us": compiled,
            pin_name: lambda q, v, x, f=pin_call: f(model, data, q, v, x),
        }
        out.update(_interleaved_us(calls, states, repeat))
    return out


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
    print(f"load average {os.getloadavg()[0]:.2f} (1 min); medians of interleaved calls, µs")
    b = balloon(args.states, args.repeat)
    print(
        f"balloon (4 bodies, 9 DoF): TITOP FD {b['titop_fd_ref_us']:.0f} (NumPy reference) -> "
        f"{b['titop_fd_us']:.1f} (compiled), x{b['titop_fd_ref_us'] / b['titop_fd_us']:.0f}; ABA {b['aba_us']:.1f}"
    )
    print(
        f"                           TITOP ID {b['titop_id_ref_us']:.0f} (NumPy reference) -> "
        f"{b['titop_id_us']:.1f} (compiled), x{b['titop_id_ref_us'] / b['titop_id_us']:.0f}; RNEA {b['rnea_us']:.1f}"
    )
    print("floating models turned into TITOP blocks by from_pinocchio (median µs; ref = NumPy reference):")
    print(
        f"  {'model':<26} {'bodies':>6} {'FD ref':>7} {'FD':>6} {'x':>4} {'ABA':>6} "
        f"{'ID ref':>7} {'ID':>6} {'x':>4} {'RNEA':>6}"
    )
    rows = floating_models(args.states // 2, args.repeat)
    for r in rows:
        print(
            f"  {r['model']:<26} {r['bodies']:>6} {r['titop_fd_ref_us']:>7.0f} {r['titop_fd_us']:>6.1f} "
            f"{r['titop_fd_ref_us'] / r['titop_fd_us']:>4.0f} {r['aba_us']:>6.1f} {r['titop_id_ref_us']:>7.0f} "
            f"{r['titop_id_us']:>6.1f} {r['titop_id_ref_us'] / r['titop_id_us']:>4.0f} {r['rnea_us']:>6.1f}"
        )
    (results_dir() / "titop.json").write_text(
        json.dumps(dict(loadavg_1min=os.getloadavg()[0], balloon=b, floating_models=rows), indent=2)
    )


if __name__ == "__main__":
    main()

"""python -m bench sensors [--duration S] — issue 32's figures: a closed chain on its motors' encoders only, and on
a position interface, against the same run with the full state and torques.  Never asserted in tests.

* five-bar and Delta: ``closed_chain`` (MuJoCo plant, 1 kHz, its default circle) with the full state; with
  ``sensors=actuated`` (exact encoders, then 2¹⁷ counts a turn); with ``command=position`` (full state, then
  actuated at 2¹⁷ counts): ee_error_max_m and its ratio to the full-state torque run;
* series-parallel arm (given the plant's whole state at PIDC's default rank threshold, also with an absolute rank_tol
  of 1e-9, the former default, and of 1e-5, above the MuJoCo loop's opening): the series_parallel scenario's PIDC
  on its closed chain (``closed_chain_robot`` with the cylinder and piston, as the plant has them: φ, θ, δ
  actuated, ζ and the cylinder angle passive), its trajectory,
  gains and 2 kHz rate, on the five-joint MuJoCo plant of its MJCF (no disturbance): the law given the plant's whole
  state, then the reconstructed one; the RMSE of (φ, θ, δ) against the trajectory after ``steady_after``, and the
  largest rank PIDC gives the planar triangle (2 on a closed state).

* the README's dual-Panda carry (examples/dual_panda_carry.py) with torques and with ``command=position``: the
  coupling and path errors after 1 s, motor saturations.

For every actuated run: the reconstruction's median time against the control step, its largest error against the
plant's passive joints, its Newton passes and J_p's smallest conditioning, and the faults (0 expected: a branch
flip would end the run).  Results: bench/results/sensors.json, with the machine's load."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np

from cmstack.bench import results_dir


def _closed_chain(model: str, sets: list[str], duration: float) -> dict:
    from cmstack.scenarios import closed_chain
    from cmstack.scenarios._common import run_scenario

    with tempfile.TemporaryDirectory() as d:
        m, _ = run_scenario(
            closed_chain.NAME,
            closed_chain.run,
            sets=[f"model='{model}'", *sets],
            duration=duration,
            out=os.path.join(d, "r"),
            html=False,
            plots=False,
        )
    return m


def _series_parallel(sensors: str, duration: float, law: str = "pidc", rank_tol: float | None = None) -> dict:
    from cmstack.controllers.pidc import PIDC
    from cmstack.controllers.udwadia_kalaba import UdwadiaKalabaController
    from cmstack.models.coupling import JointTrajectoryTask
    from cmstack.models.loops import assemble
    from cmstack.scenarios._common import default_config
    from cmstack.scenarios.series_parallel import Q_NAMES, closed_chain_robot, make_trajectory
    from cmstack.sim.plant import MujocoPlant
    from cmstack.sim.runner import simulate

    cfg = default_config("series_parallel")
    cfg["model_actuator_bodies"] = True  # the law's model has the plant's cylinder and piston
    robot = closed_chain_robot(cfg)
    traj = make_trajectory(cfg)
    if law == "pidc":
        extra = {} if rank_tol is None else {"rank_tol": rank_tol}
        ctl = PIDC(
            robot, None, list(Q_NAMES), traj, cfg["pidc_kp"], cfg["pidc_kv"], on_unsolvable="raise", **extra
        )
    else:
        task = JointTrajectoryTask(robot, traj, list(Q_NAMES), kp=cfg["pidc_kp"][0], kd=cfg["pidc_kv"][0])
        ctl = UdwadiaKalabaController(robot, levels=[[task]], limits=[], warn_free_dof=False)
    plant = MujocoPlant(
        cfg["mjcf"], robot.joint_names, sim_dt=cfg["control_dt"], integrator=cfg["integrator"]
    )
    act = [robot.joint_index(n) for n in Q_NAMES]
    q0 = robot.q_initial.copy()
    q0[act] = traj(0.0)[0] + np.asarray(cfg["initial_error"])
    plant.reset(assemble(robot, q0, fixed=list(Q_NAMES)))
    ts, es, ranks = [], [], []

    def record(t, q, v, tau):
        ts.append(t)
        es.append(q[act] - traj(t)[0])
        ranks.append(getattr(ctl.info, "rank", -1))

    run = simulate(
        plant,
        ctl,
        duration=duration,
        control_dt=cfg["control_dt"],
        record=record,
        progress=False,
        sensors=sensors,
    )
    t, e = np.array(ts), np.array(es)
    late = t > cfg["steady_after"]
    out = {
        "rmse": np.sqrt(np.mean(e[late] ** 2, axis=0)).tolist(),
        "error_max": np.abs(e[late]).max(axis=0).tolist(),
        "control_dt": cfg["control_dt"],
        "control_step_us_median": run.step_us_median,
        "law_loop_rank_max": int(max(ranks)),  # the planar triangle's rank is 2
    }
    if run.sensing is not None:
        out.update(run.sensing.metrics())
    return out


def _dual_panda(command: str, duration: float) -> dict:
    """The README's carry (examples/dual_panda_carry.py) with ``command``: its coupling and path errors after 1 s."""
    import importlib.util
    from pathlib import Path

    from cmstack.sim.runner import simulate

    path = Path(__file__).resolve().parents[1] / "examples" / "dual_panda_carry.py"
    spec = importlib.util.spec_from_file_location("dual_panda_carry", path)
    carry = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(carry)
    ctl, plant = carry.build(0.001, None)
    run = simulate(plant, ctl, duration=duration, control_dt=0.001, progress=False, command=command)
    box, path_err = carry.errors_max(run)
    out = {"coupling_error_max": box, "carry_error_max": path_err, "motor_saturations": plant.saturated}
    if run.servo is not None:
        out["pd_torque_max"] = run.servo.pd_torque_max
    return out


class _AnsweredTorques:
    """A law whose torque at cycle k is the one it computed from state j = answers[k] (an rt run's driver log: the
    cycle its applied torque answered; a repeated j is a held torque), the law called in order on the states it
    answers, as the rt controller was.  ``answers`` None: j = k − 1 every cycle (the one cycle of delay alone).
    A predicting law (``PredictingController``, mode "latency") is told the torque applied over [t_j, t_{j+1}]."""

    def __init__(self, law, answers: np.ndarray | None) -> None:
        self.__dict__.update(law=law, answers=answers, hist=[], out=[], k=0, last=-1, held=None)

    def __call__(self, t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        k, a = self.k, self.answers
        self.hist.append((t, q.copy(), v.copy()))
        j = k - 1 if a is None else int(a[min(k, a.size - 1)])
        j = min(max(j, 0), k)
        if j > self.last or self.held is None:
            applied = getattr(self.law, "applied", None)
            if isinstance(applied, np.ndarray) and 0 < j < len(self.out):
                applied[:] = self.out[j]  # (the torque the robot applied over [t_j, t_{j+1}])
                if self.last > 0:
                    self.law.note_applied(self.last)  # (the command before reached the robot)
            self.__dict__.update(held=np.array(self.law(*self.hist[j]), dtype=float), last=j)
        self.__dict__["k"] = k + 1
        self.out.append(self.held.copy())
        return self.held.copy()

    def __getattr__(self, name: str):
        return getattr(self.__dict__["law"], name)


def rt_replay(
    model: str, rt_dir: str | None, duration: float, predict: str = "none", sets: tuple = ()
) -> float:
    """``closed_chain`` with the motors only (``sensors=actuated``), in process, with the command timing of the rt run
    in ``rt_dir`` (its ``rt_timing.npz``'s ``answers``; None: the one cycle of delay and no miss), the law predicting
    the state at its torque's application (``predict``: sim/rt_predict.py's modes): its ``ee_error_max_m``.  Equal to
    the rt run's own error when the answered states explain it."""
    from cmstack.scenarios import closed_chain
    from cmstack.sim.rt_predict import with_prediction

    answers = (
        None if rt_dir is None else np.load(os.path.join(rt_dir, "rt_timing.npz"))["answers"].astype(int)
    )
    build = closed_chain.build_law

    def law(cfg, robot, coords):
        ctl, _ = with_prediction(build(cfg, robot, coords), predict, cfg["control_dt"], int(duration * 1e4))
        return _AnsweredTorques(ctl, answers)

    closed_chain.build_law = law
    try:
        m = _closed_chain(model, ["sensors='actuated'", *sets], duration)
    finally:
        closed_chain.build_law = build
    return float(m["ee_error_max_m"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench sensors", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--replay",
        nargs=2,
        metavar=("MODEL", "RT_DIR"),
        help="only replay the command timing of a `cmstack rt closed_chain --set model=MODEL --sensors actuated` run "
        "(its other keys the defaults) in process, and the delay alone: does it explain the rt run's error?",
    )
    ap.add_argument(
        "--predict",
        nargs="+",
        default=["none"],
        choices=["none", "one-step", "latency"],
        help="with --replay: the controller side's prediction mode(s) to replay (sim/rt_predict.py; default none)",
    )
    ap.add_argument("--duration", type=float, default=3.0, help="s of each closed_chain run (default 3)")
    ap.add_argument(
        "--sp-duration", type=float, default=6.0, help="s of each series-parallel run (default 6)"
    )
    ap.add_argument(
        "--carry-duration", type=float, default=5.0, help="s of each dual-Panda carry (default 5)"
    )
    args = ap.parse_args(argv)
    if args.replay:
        model, rt_dir = args.replay
        import tomllib

        with open(os.path.join(rt_dir, "config.toml"), "rb") as f:
            dt = float(tomllib.load(f)["control_dt"])
        with open(os.path.join(rt_dir, "metrics.json")) as f:
            rt = json.load(f)
        dur = np.load(os.path.join(rt_dir, "rt_timing.npz"))["answers"].size * dt
        with open(os.path.join(rt_dir, "timing.json")) as f:
            used = (json.load(f).get("predict") or {}).get("mode", "none")
        print(f"rt run {rt_dir} (predict {used}): ee_error_max_m {rt['ee_error_max_m']:.8e}")
        for mode in args.predict:
            print(
                f"predict {mode:9s} its timing replayed in process: {rt_replay(model, rt_dir, dur, mode):.8e}"
            )
            print(
                f"predict {mode:9s} the one cycle of delay alone:    {rt_replay(model, None, dur, mode):.8e}"
            )
        return 0
    load0 = os.getloadavg()[0]
    res: dict = {"load_start": load0, "closed_chain": {}, "series_parallel": {}}
    variants = {
        "full": [],
        "actuated": ["sensors='actuated'"],
        "actuated_2^17": ["sensors='actuated'", "encoder_counts=131072"],
        "position": ["command='position'"],
        "position_actuated_2^17": ["command='position'", "sensors='actuated'", "encoder_counts=131072"],
    }
    keys = (
        "ok",
        "reason",
        "ee_error_max_m",
        "loop_residual_max_m",
        "max_torque_nm",
        "motor_saturations",
        "reconstruction_us_median",
        "reconstruction_error_q_max",
        "estimator_iterations_max",
        "estimator_conditioning_min",
        "pd_torque_max",
        "fault",
    )
    for model in ("mjcf/five_bar.xml", "mjcf/delta.xml"):
        rows = res["closed_chain"][model] = {}
        for name, sets in variants.items():
            t0 = time.perf_counter()
            m = _closed_chain(model, sets, args.duration)
            rows[name] = {k: m.get(k) for k in keys}
            rows[name]["ratio_to_full"] = m["ee_error_max_m"] / rows["full"]["ee_error_max_m"]
            print(
                f"{model:20s} {name:24s} ee_error_max {m['ee_error_max_m']:.3e} m "
                f"({rows[name]['ratio_to_full']:.2f}x full)  recon median "
                f"{m.get('reconstruction_us_median', float('nan')):.0f} us  ok={m['ok']}  "
                f"[{time.perf_counter() - t0:.0f} s]",
                flush=True,
            )
    # full state at PIDC's default rank threshold (scaled with the loops' residual: rank 2), at an absolute 1e-9 (the
    # former default: MuJoCo's soft loop, open by ~6e-8 m, makes the planar triangle's out-of-plane row count, rank 3),
    # at an absolute 1e-5 above the loop's opening (rank 2), reconstructed
    for name, sensors, tol in (
        ("full", "full", None),
        ("full_rank_tol_1e-9", "full", 1e-9),
        ("full_rank_tol_1e-5", "full", 1e-5),
        ("actuated", "actuated", None),
    ):
        r = res["series_parallel"][name] = _series_parallel(sensors, args.sp_duration, rank_tol=tol)
        print(
            f"series_parallel      {name:24s} rmse (phi, theta, delta) "
            f"{np.round(r['rmse'], 6).tolist()}  recon median {r.get('reconstruction_us_median', float('nan')):.0f} us"
            f" / step {r['control_dt'] * 1e6:.0f} us",
            flush=True,
        )
    res["dual_panda_carry"] = {c: _dual_panda(c, args.carry_duration) for c in ("torque", "position")}
    for c, r in res["dual_panda_carry"].items():
        print(f"dual_panda_carry     {c:24s} {r}", flush=True)
    sp = res["series_parallel"]
    sp["ratio_to_full"] = (np.array(sp["actuated"]["rmse"]) / np.array(sp["full"]["rmse"])).tolist()
    res["load_end"] = os.getloadavg()[0]
    out = results_dir() / "sensors.json"
    out.write_text(json.dumps(res, indent=1, default=float))
    print(f"series_parallel actuated / full rmse: {np.round(sp['ratio_to_full'], 3).tolist()}")
    print(f"load {load0:.1f} -> {res['load_end']:.1f}; written {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

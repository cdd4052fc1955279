"""Campaign scaling: N variants of the flagship (yumi_dual_arm, virtual plant, noise on so that the
seeds differ) on the local process pool vs the same N runs in sequence in one process, interleaved;
optionally the same campaign through a Dask LocalCluster of the same number of workers (each task forks
its variant from its worker thread's fork server), and with ``--dask-fresh`` also through the former
path (a fresh ``python -m cmstack.campaign --child`` interpreter per variant), interleaved.

    python -m bench.campaign [--variants 32] [--duration 2.0] [--workers 2] [--repeats 1] [--dask] [--dask-fresh]

Reported: wall times, the ratio pool / sequence (issue target ≤ 0.6 on 2 cores), and for Dask the
end-to-end overhead per variant, (T_dask − T_pool) · workers / N, the median per-task cost outside
the scenario (scheduling + fork server or fresh interpreter: task wall − run wall), and the median run
wall per variant (run_job: it includes the imports a child does itself) against the pool's.  The pool
runs after the sequence, in the same process: its children inherit every import and compiled kernel.

Measured (2 cores, ``--variants 32 --dask``, 2 workers).  Before the fork server (load 1.4–3.4): sequence
50.7 s, pool 47.3 s, Dask 75.6 s: overhead 1.77 s per variant end to end, 0.65 s per task outside the
scenario (on a quiet machine earlier: pool 21.8 s, Dask 62.6 s, 2.5 s per variant).  With it,
``--dask-fresh --repeats 2`` (medians, load 1.3–3.0): sequence 41.3 s, pool 34.5 s, Dask fork server
37.4 s, Dask fresh interpreter 54.9 s: 0.18 s against 1.27 s per variant end to end, 0.03 s against
0.47 s per task; one more run at load 4.8–2.7: pool 32.8 s, fork server 31.0 s, fresh 46.1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from cmstack import campaign as C
from cmstack.campaign import executors as E  # owns DASK_TASK, the function each Dask task runs

SPEC = """
[campaign]
name = "bench_scaling"
scenario = "yumi_dual_arm"
seeds = {n}
metrics = ["constraint_error_converged"]
[base]
duration = {duration}
"perturbation.noise_q" = 1e-5
"""


def _records(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in (out / "variants").glob("*/result.json")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.campaign")
    ap.add_argument("--variants", type=int, default=32)
    ap.add_argument("--duration", type=float, default=2.0, help="simulated seconds per variant")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--dask", action="store_true", help="also run it through a Dask LocalCluster")
    ap.add_argument(
        "--dask-fresh",
        action="store_true",
        help="with --dask: also through the former path, a fresh interpreter per variant",
    )
    a = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="cmstack_bench_campaign_"))
    spec = tmp / "spec.toml"
    spec.write_text(SPEC.format(n=a.variants, duration=a.duration))
    s = C.load_spec(spec)
    seq, pool = [], []
    kinds = ["dask"] + (["dask_fresh"] if a.dask and a.dask_fresh else [])
    dask = {k: [] for k in kinds}
    per_task = {k: [] for k in kinds}
    run_wall = {k: [] for k in kinds + ["pool"]}
    tasks = {"dask": C.run_job_forked, "dask_fresh": C.run_job_subprocess}
    try:
        for r in range(a.repeats):
            out = tmp / f"seq{r}"
            jobs = [C.make_job(s, v, out) for v in s.variants]
            t0 = time.perf_counter()
            for job in jobs:  # the same runs, one after the other, in this process
                C.run_job(job)
            seq.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            C.run_campaign(spec, out=tmp / f"pool{r}", workers=a.workers, progress=False)
            pool.append(time.perf_counter() - t0)
            run_wall["pool"] += [rec["wall_s"] for rec in _records(tmp / f"pool{r}")]
            print(
                f"repeat {r}: sequence {seq[-1]:.1f} s, pool of {a.workers} {pool[-1]:.1f} s, "
                f"ratio {pool[-1] / seq[-1]:.2f}",
                flush=True,
            )
            if not a.dask:
                continue
            from distributed import LocalCluster

            for kind in kinds if r % 2 == 0 else kinds[::-1]:  # alternate which Dask path goes first
                E.DASK_TASK = tasks[kind]
                try:
                    with LocalCluster(
                        n_workers=a.workers, threads_per_worker=1, dashboard_address=None
                    ) as cl:
                        t0 = time.perf_counter()
                        C.run_campaign(
                            spec, out=tmp / f"{kind}{r}", scheduler=cl.scheduler_address, progress=False
                        )
                        dask[kind].append(time.perf_counter() - t0)
                finally:
                    E.DASK_TASK = E.run_job_forked
                for rec in _records(tmp / f"{kind}{r}"):
                    if "task_wall_s" in rec:
                        per_task[kind].append(rec["task_wall_s"] - rec["wall_s"])
                        run_wall[kind].append(rec["wall_s"])
                print(f"repeat {r}: {kind} {dask[kind][-1]:.1f} s", flush=True)
        n = a.variants
        print(
            f"\n{n} variants × {a.duration} s of yumi_dual_arm, {a.workers} workers, {a.repeats} repeat(s):"
        )
        print(
            f"  sequence (one process)   median {np.median(seq):7.1f} s   ({np.median(seq) / n:.2f} s per variant)"
        )
        print(
            f"  local pool               median {np.median(pool):7.1f} s   ratio pool/sequence "
            f"{np.median(pool) / np.median(seq):.2f} (target <= 0.6); median run wall {np.median(run_wall['pool']):.2f} s"  # noqa: E501
        )
        for kind in kinds:
            if not dask[kind]:
                continue
            label = "Dask, fork server" if kind == "dask" else "Dask, fresh interpreter"
            print(
                f"  {label:<24} median {np.median(dask[kind]):7.1f} s   ratio dask/pool "
                f"{np.median(dask[kind]) / np.median(pool):.2f}; median run wall {np.median(run_wall[kind]):.2f} s"
            )
            print(
                f"    overhead per variant: end to end (T_dask - T_pool)·workers/N = "
                f"{(np.median(dask[kind]) - np.median(pool)) * a.workers / n:.2f} s; "
                f"per task outside the scenario (median) {np.median(per_task[kind]):.2f} s"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

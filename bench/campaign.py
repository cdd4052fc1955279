"""Campaign scaling: N variants of the flagship (yumi_dual_arm, virtual plant, noise on so that the
seeds differ) on the local process pool vs the same N runs in sequence in one process, interleaved;
optionally the same campaign through a Dask LocalCluster of the same number of workers.

    python -m bench.campaign [--variants 32] [--duration 2.0] [--workers 2] [--repeats 1] [--dask]

Reported: wall times, the ratio pool / sequence (issue target ≤ 0.6 on 2 cores), and for Dask the
end-to-end overhead per variant, (T_dask − T_pool) · workers / N, and the median per-task cost outside
the scenario (fresh interpreter + imports + scheduling: task wall − run wall).
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from cmstack.sim import campaign as C

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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.campaign")
    ap.add_argument("--variants", type=int, default=32)
    ap.add_argument("--duration", type=float, default=2.0, help="simulated seconds per variant")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--dask", action="store_true", help="also run it through a Dask LocalCluster")
    a = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="cmstack_bench_campaign_"))
    spec = tmp / "spec.toml"
    spec.write_text(SPEC.format(n=a.variants, duration=a.duration))
    s = C.load_spec(spec)
    seq, pool, dask, per_task = [], [], [], []
    try:
        for r in range(a.repeats):
            out = tmp / f"seq{r}"
            jobs = [C.make_job(s, v, out) for v in s.variants]
            t0 = time.perf_counter()
            for job in jobs:                     # the same runs, one after the other, in this process
                C.run_job(job)
            seq.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            C.run_campaign(spec, out=tmp / f"pool{r}", workers=a.workers, progress=False)
            pool.append(time.perf_counter() - t0)
            print(f"repeat {r}: sequence {seq[-1]:.1f} s, pool of {a.workers} {pool[-1]:.1f} s, "
                  f"ratio {pool[-1] / seq[-1]:.2f}", flush=True)
            if a.dask:
                from distributed import LocalCluster

                with LocalCluster(n_workers=a.workers, threads_per_worker=1, dashboard_address=None) as cl:
                    t0 = time.perf_counter()
                    C.run_campaign(spec, out=tmp / f"dask{r}", scheduler=cl.scheduler_address, progress=False)
                    dask.append(time.perf_counter() - t0)
                import json

                for p in (tmp / f"dask{r}" / "variants").glob("*/result.json"):
                    rec = json.loads(p.read_text())
                    if "task_wall_s" in rec:
                        per_task.append(rec["task_wall_s"] - rec["wall_s"])
                print(f"repeat {r}: dask {dask[-1]:.1f} s", flush=True)
        n = a.variants
        print(f"\n{n} variants × {a.duration} s of yumi_dual_arm, {a.workers} workers, {a.repeats} repeat(s):")
        print(f"  sequence (one process)   median {np.median(seq):7.1f} s   ({np.median(seq) / n:.2f} s per variant)")
        print(f"  local pool               median {np.median(pool):7.1f} s   ratio pool/sequence "
              f"{np.median(pool) / np.median(seq):.2f} (target <= 0.6)")
        if dask:
            print(f"  Dask LocalCluster        median {np.median(dask):7.1f} s   ratio dask/pool "
                  f"{np.median(dask) / np.median(pool):.2f}")
            print(f"  Dask overhead per variant: end to end (T_dask - T_pool)·workers/N = "
                  f"{(np.median(dask) - np.median(pool)) * a.workers / n:.2f} s; "
                  f"per task outside the scenario (median) {np.median(per_task):.2f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``cmstack campaign``: run (or resume) a campaign, from the spec to its outputs, and the command line."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from cmstack.campaign.executors import make_job, read_result, run_dask, run_local
from cmstack.campaign.report import csv_text, plot, summary, summary_text, table_md
from cmstack.campaign.spec import _dumps, load_spec
from cmstack.models.errors import ConfigError
from cmstack.scenarios.loader import load_scenario
from cmstack.sim.logger import atomic_write


# ------------------------------------------------------------------------------------- driver
def run_campaign(
    spec_path: str | Path,
    *,
    out: str | Path | None = None,
    workers: int | None = None,
    scheduler: str | None = None,
    retry_failed: bool = False,
    progress: bool = True,
    report_only: bool = False,
) -> dict:
    """Run (or resume) a campaign; returns its summary.  See the docstring of ``cmstack.campaign``."""
    spec = load_spec(spec_path)
    out = Path(out) if out is not None else Path.cwd() / "runs" / "campaigns" / spec.name
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "spec.toml", spec.path.read_text())
    workers = int(workers or os.cpu_count() or 1)
    if workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {workers}")
    if scheduler is not None and not scheduler.startswith(
        ("tcp://", "tls://", "ws://", "wss://", "inproc://")
    ):
        raise ConfigError(f"--scheduler {scheduler}: expected an address like tcp://HOST:PORT")

    jobs = [make_job(spec, v, out) for v in spec.variants]
    records: dict = {}
    todo = []
    for job in jobs:
        rec = read_result(job)
        if rec is not None and (report_only or not (retry_failed and rec["status"] == "failed")):
            records[job["id"]] = rec
        else:
            todo.append(job)
    skipped = len(records)
    if report_only:  # tables and plots from the results so far; nothing runs
        todo = []
    load_scenario(spec.scenario)  # import the scenario here: forked workers inherit it

    bar = None
    if progress:
        from tqdm import tqdm

        tqdm.monitor_interval = 0  # no monitor thread: the local pool forks from this process
        bar = tqdm(total=len(jobs), initial=skipped, desc=f"campaign {spec.name}", unit="run")
    t0 = time.perf_counter()
    extra = dict(
        out=str(out),
        workers=workers if scheduler is None else None,
        scheduler=scheduler,
        skipped_finished=skipped,
    )

    def write_tables(final: bool = False):
        atomic_write(out / "campaign.csv", csv_text(spec, records))
        atomic_write(out / "table.md", table_md(spec, records))
        atomic_write(
            out / "summary.json",
            _dumps(summary(spec, records, dict(extra, complete=final and len(records) == len(jobs)))),
        )

    def on_result(rec):
        records[rec["id"]] = rec
        write_tables()
        if bar is not None:
            bar.update(1)
            bar.set_postfix(failed=sum(r["status"] == "failed" for r in records.values()), refresh=False)

    try:
        if todo:
            if scheduler is None:
                run_local(todo, min(workers, len(todo)), on_result)
            else:
                run_dask(todo, scheduler, on_result)
    finally:
        if bar is not None:
            bar.close()
    extra["wall_s_this_call"] = time.perf_counter() - t0
    extra["ran_this_call"] = len(todo)
    write_tables(final=True)
    extra["plots"] = [str(p) for p in plot(spec, records, out)]
    write_tables(final=True)
    return summary(spec, records, dict(extra, complete=len(records) == len(jobs)))


def main(argv=None) -> int:
    """``cmstack campaign`` (and ``python -m cmstack.campaign``).  Exit codes: 0 every variant met
    its success criterion, 1 some did not (missed or failed), 2 spec or usage error, 3 the campaign
    could not run."""
    import argparse

    ap = argparse.ArgumentParser(
        prog="cmstack campaign",
        description="Run a campaign of scenario variants "
        "on a local process pool or a Dask cluster (resumable).",
    )
    add_arguments(ap)
    return execute(ap.parse_args(argv))


def add_arguments(ap) -> None:
    ap.add_argument("spec", help="campaign spec (TOML; see cmstack.campaign)")
    ap.add_argument(
        "--scheduler", help="Dask scheduler address tcp://HOST:PORT (default: local process pool)"
    )
    ap.add_argument("--workers", type=int, help="local worker processes (default: all cores)")
    ap.add_argument("--out", help="campaign directory (default ./runs/campaigns/<name>/)")
    ap.add_argument("--retry-failed", action="store_true", help="re-run the variants recorded as failed")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument(
        "--report-only",
        action="store_true",
        help="rewrite campaign.csv, summary.json, table.md and plots/ from the results so far; run nothing",
    )


def execute(args) -> int:
    from cmstack.models.errors import StackError

    try:
        s = run_campaign(
            args.spec,
            out=args.out,
            workers=args.workers,
            scheduler=args.scheduler,
            retry_failed=args.retry_failed,
            progress=not args.no_progress,
            report_only=args.report_only,
        )
    except ConfigError as exc:
        print(f"error: ConfigError: {exc}", file=sys.stderr)
        return 2
    except StackError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    out = Path(s["out"])
    print((out / "table.md").read_text())
    print(summary_text(s))
    for f in s["failures"][:10]:
        print(f"  failed {f['id']} {f['swept']}: {f['reason']}")
    print(f"campaign directory: {out}  (campaign.csv, summary.json, table.md, plots/)")
    return 0 if s["failures"] == [] and s["success_rate"] == 1.0 else 1

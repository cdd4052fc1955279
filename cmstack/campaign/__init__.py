"""Campaigns: one scenario, many variants, one table — on a local process pool or a Dask cluster.

    cmstack campaign SPEC.toml [--scheduler tcp://HOST:PORT] [--workers N] [--out DIR]
                               [--retry-failed] [--no-progress]

A campaign spec (TOML) names a base scenario and the configuration keys to vary::

    [campaign]
    name = "yumi_masses"             # optional; default: the spec file's stem
    scenario = "yumi_dual_arm"       # a shipped scenario, or PATH.py relative to the spec
    seeds = 4                        # N (seeds 0..N-1) or a list of seeds, set on `seed_key`
    seed_key = "seed"
    samples = 0                      # size of the random sample drawn from [random]
    sample_seed = 0
    metrics = ["constraint_error_converged"]           # error metrics: median and p95 per group, plots
    report = { max_torque_nm = "max", control_step_us_median = "median" }   # other table columns
    plots = false          # each variant's own plots/ (default off: drawing is most of a short run's cost)
    units = { constraint_error_converged = "m" }       # axis units of metrics/keys the name does not tell
    thresholds = { constraint_error_converged = { "scenario target" = 1e-3 } }   # lines on the plots

    [base]                           # overrides of the scenario's default config, for every variant
    duration = 1.0
    [grid]                           # key → values; the cartesian product of all of them
    "perturbation.mass_rel" = [0.0, 0.2]
    [axes.law]                       # a named axis: label → table of overrides (several keys at once)
    uk_weighted = { controller = "uk", priority = "weighted" }
    [random]                         # key → {uniform = [lo, hi]} | {loguniform = [lo, hi]} | {normal = [mu, sd]}
    "perturbation.noise_q" = { loguniform = [1e-5, 1e-3] }    #   | {integers = [lo, hi]} | {choice = [...]}
    [success]                        # optional: metric → "<= x" | "< x" | ">= x" | "> x"; replaces the
    constraint_error_converged = "<= 2e-4"   # scenario's own "ok" as the success criterion
    [breakdown]                      # optional: breakdown points, one per label of the axis `by`
    by = "law"                       #   (omitted: one for the whole campaign)
    mass = "perturbation.mass_rel"   #   family → the config key whose value is the family's level
    delay = "perturbation.delay_steps"

The variants are axes × grid × random samples × seeds (seeds innermost), each a set of config
overrides.  Each variant runs in its OWN process (so MuJoCo, Pinocchio and ProxSuite objects are never
shared) through ``run_scenario`` with those overrides, into ``OUT/variants/<index>-<hash>/`` (the
usual run contract: config.toml, metrics.json, log.npz, and plots/ with ``plots = true``), and ends with ``result.json``
(status ok | missed | failed, reason, swept keys, metrics) written atomically.  A variant that raises,
or whose process dies (exit, signal, out of memory), is recorded as failed with its reason; the others
go on.  The campaign is resumable: a second call skips every variant that has a ``result.json`` whose
hash matches its overrides (``--retry-failed`` also re-runs the failed ones).  If the driver is killed,
its local workers die with it (Linux parent-death signal) and their partial run directories are redone.

Outputs, rewritten atomically after each result: ``campaign.csv`` (one row per variant, in variant
order: id, status, swept keys, seed, reason, metrics), ``summary.json`` (counts, success rates and
error statistics per swept key and per group), ``table.md`` (one row per group = variant without its
seed), and at the end ``plots/<key>.png`` (success rate and error distributions against each key).
Every plot axis carries its unit: ``units`` in ``[campaign]``, else the unit the name ends with
(``_m`` m, ``_rad`` rad, ``_s`` s, ``_us`` µs, ``_n`` N, ``_nm`` N·m, ``_rel`` relative; the perturbation
keys: ``noise_v`` rad/s, ``delay_steps`` control steps, ...).  Every error plot draws, as dashed lines
with a legend, the ``[success]`` threshold of its metric and the ``thresholds`` of ``[campaign]`` (named
reference levels, e.g. the scenario's own targets when they depend on the variant).

Execution: a local pool of ``--workers`` processes (default: all cores; a fresh forked process per
variant), or ``--scheduler tcp://HOST:PORT``: an existing Dask distributed cluster, each task running
its variant in a process forked from a "fork server" of its worker thread (started on the thread's first
task; it has imported the scenario, so a variant starts in milliseconds instead of a fresh interpreter's
seconds, and a variant that kills its process does not kill the Dask worker; see ``run_job_forked``).
With a scheduler the campaign directory must be at the same path on every worker (shared file system).

The package by concept: ``spec`` (the spec file, its variants and their overrides), ``executors`` (one
variant in its own process, the local pool, the fork server, Dask), ``report`` (campaign.csv,
summary.json, table.md, breakdown points, plots) and ``driver`` (``run_campaign`` and the command line);
``python -m cmstack.campaign`` is ``__main__``.  The names below are the public API; patch a name in
the module that owns it (e.g. ``executors.DASK_TASK``, the function each Dask task runs).
"""

from cmstack.campaign.driver import add_arguments, execute, main, run_campaign
from cmstack.campaign.executors import (
    RESULT,
    died,
    learn_modules,
    make_job,
    read_result,
    result_or_death,
    run_dask,
    run_job,
    run_job_forked,
    run_job_subprocess,
    run_local,
)
from cmstack.campaign.report import (
    LEAD_COLUMNS,
    breakdown,
    breakdown_md,
    csv_text,
    groups,
    plot,
    summary,
    summary_text,
    table_md,
    unit_of,
)
from cmstack.campaign.spec import Spec, Variant, check_overrides, expand, load_spec, shipped_dir

__all__ = [
    "LEAD_COLUMNS",
    "RESULT",
    "Spec",
    "Variant",
    "add_arguments",
    "breakdown",
    "breakdown_md",
    "check_overrides",
    "csv_text",
    "died",
    "execute",
    "expand",
    "groups",
    "learn_modules",
    "load_spec",
    "main",
    "make_job",
    "plot",
    "read_result",
    "result_or_death",
    "run_campaign",
    "run_dask",
    "run_job",
    "run_job_forked",
    "run_job_subprocess",
    "run_local",
    "shipped_dir",
    "summary",
    "summary_text",
    "table_md",
    "unit_of",
]

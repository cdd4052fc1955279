"""The ``cmstack`` command line.

    cmstack list                                   the shipped scenarios, one line each
    cmstack run NAME|PATH.py [--config F.toml] [--set k=v ...] [--duration S] [--out DIR]
                             [--viewer meshcat [--no-wait]] [--no-html] [--no-plots] [--no-progress] [--debug]
    cmstack view RUN_DIR [--speed S] [--loop] [--no-wait] [--qpos-key K] [--html OUT.html]
    cmstack bench [NAME ...]
    cmstack campaign SPEC.toml [--scheduler tcp://HOST:PORT] [--workers N] [--out DIR] [--retry-failed]
    cmstack baseline save RUN_DIR [--to DIR] | check RUN_DIR --against DIR   (docs/regression_testing.md)

``run`` takes a shipped scenario by name, or a scenario file of your own.  A file of your own
defines ``NAME`` (optional; default its stem) and ``run(ctx) -> Outcome``; its default config is,
in this order, ``CONFIG`` in the module (a path relative to the file), ``<stem>.toml`` beside the
file, or the ``--config`` file itself.

Exit codes (every scenario run): 0 every target met, 1 a target missed or not evaluated
(``"ok": false``), 2 usage or configuration error, 3 the run failed, 130 interrupted (Ctrl-C / SIGTERM).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import pkgutil
import sys
from pathlib import Path

EXIT_USAGE = 2


def _shipped() -> list[str]:
    """The shipped scenarios: the modules of ``scenarios/`` (not ``_private``) that have a default config
    ``scenarios/configs/<name>.toml``; helper modules such as ``schemas`` have none and are not scenarios."""
    import cmstack.scenarios as pkg
    from cmstack.scenarios._common import CONFIG_DIR

    return sorted(m.name for m in pkgutil.iter_modules(pkg.__path__)
                  if not m.name.startswith("_") and (CONFIG_DIR / f"{m.name}.toml").is_file())


def _first_doc_line(mod) -> str:
    return (mod.__doc__ or "").strip().splitlines()[0] if mod.__doc__ else ""


def cmd_list(_args) -> int:
    print("Scenarios (run one: cmstack run NAME [--set key=value ...] [--viewer meshcat]):")
    for name in _shipped():
        try:
            line = _first_doc_line(importlib.import_module(f"cmstack.scenarios.{name}"))
        except Exception as exc:  # a broken scenario must not hide the others
            line = f"(failed to import: {exc})"
        print(f"  {name:<22} {line}")
    return 0


def load_scenario(target: str):
    """(name, module, default config path or None) of a shipped scenario name or a scenario file."""
    from cmstack.models.errors import ConfigError

    path = Path(target).expanduser()
    if target.endswith(".py") or path.is_file():
        if not path.is_file():
            raise ConfigError(f"scenario file not found: {path}")
        mod_name = f"cmstack_user_scenario_{path.stem}"
        spec = importlib.util.spec_from_file_location(mod_name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = mod
        try:
            spec.loader.exec_module(mod)
        except Exception as exc:
            raise ConfigError(f"scenario file {path} failed to import: {type(exc).__name__}: {exc}") from None
        if not callable(getattr(mod, "run", None)):
            raise ConfigError(f"scenario file {path} defines no run(ctx) function")
        name = str(getattr(mod, "NAME", path.stem))
        cfg = getattr(mod, "CONFIG", None)
        if cfg is not None:
            cfg = (path.parent / cfg).resolve()
        elif (path.with_suffix(".toml")).is_file():
            cfg = path.with_suffix(".toml").resolve()
        return name, mod, cfg
    names = _shipped()
    if target not in names:
        import difflib

        close = difflib.get_close_matches(target, names, n=3)
        raise ConfigError(f"no scenario named '{target}'" + (f"; did you mean {close}?" if close else
                                                               f"; scenarios: {names}"))
    mod = importlib.import_module(f"cmstack.scenarios.{target}")
    if not callable(getattr(mod, "run", None)):   # a config without a scenario module: refuse, do not crash later
        raise ConfigError(f"cmstack.scenarios.{target} defines no run(ctx) function: not a scenario; scenarios: {names}")
    return target, mod, None


def cmd_run(args) -> int:
    from cmstack.models.errors import ConfigError
    from cmstack.scenarios._common import execute

    try:
        name, mod, defaults = load_scenario(args.scenario)
        user_file = mod.__name__.startswith("cmstack_user_scenario_")
        if user_file and defaults is None:     # (a shipped scenario reads scenarios/configs/<name>.toml)
            if not args.config:
                raise ConfigError(f"scenario file {args.scenario} has no default config: give --config FILE.toml, "
                                  f"put {Path(args.scenario).with_suffix('.toml').name} beside it, or set CONFIG")
            defaults = Path(args.config).expanduser().resolve()
    except ConfigError as exc:
        print(f"error: ConfigError: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return execute(name, mod.run, args, defaults=defaults)


def cmd_view(args) -> int:
    from cmstack.sim.viewer import main as viewer_main

    argv = [args.run, "--speed", str(args.speed), "--qpos-key", args.qpos_key]
    argv += ["--loop"] * args.loop + ["--no-wait"] * args.no_wait
    argv += ["--html", args.html] if args.html else []
    return viewer_main(argv)


def cmd_bench(args) -> int:
    from cmstack.bench.__main__ import main as bench_main

    return bench_main([*args.names, *(["--quick"] if args.quick else [])]) or 0


def cmd_campaign(args) -> int:
    from cmstack.sim.campaign import execute as campaign_execute

    return campaign_execute(args)


def build_parser() -> argparse.ArgumentParser:
    from cmstack.scenarios._common import EXIT_CODES_HELP, add_run_arguments

    ap = argparse.ArgumentParser(prog="cmstack", description="Constrained-multibody control stack: run, watch "
                                 "and benchmark closed-chain robot scenarios.")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="{list,run,view,bench,campaign,baseline,rt}")
    p = sub.add_parser("list", help="list the shipped scenarios")
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("run", help="run a scenario (a shipped name or your own PATH.py)",
                       description="Run a scenario: writes its run directory (config.toml, metrics.json, "
                                   "log.npz, plots/, replay.html) and prints its metrics beside the paper's.",
                       epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", help="a shipped scenario name (cmstack list) or a scenario file PATH.py")
    add_run_arguments(p)
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("view", help="replay a saved run in Meshcat")
    p.add_argument("run", help="run directory (runs/<scenario>/<timestamp>) or its log.npz")
    p.add_argument("--speed", type=float, default=1.0, help="playback speed (1 = real time)")
    p.add_argument("--loop", action="store_true", help="replay until interrupted")
    p.add_argument("--no-wait", action="store_true", help="exit when the replay ends")
    p.add_argument("--qpos-key", default="plant_qpos", help="log key of the MuJoCo qpos series")
    p.add_argument("--html", metavar="OUT.html", help="write the run as one standalone HTML file (time slider, "
                   "opens offline, no server) instead of serving it")
    p.set_defaults(func=cmd_view)
    p = sub.add_parser("bench", help="run the speed benchmarks (bench/)")
    p.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    p.add_argument("--quick", action="store_true", help="issue-12 benchmarks only, short runs (a few minutes)")
    p.set_defaults(func=cmd_bench)
    p = sub.add_parser("campaign", help="run many variants of a scenario (grid/random × seeds), resumable",
                       description="Run a campaign spec on a local process pool or a Dask cluster; writes "
                                   "campaign.csv, summary.json, table.md and plots/. Exit codes: 0 every variant "
                                   "succeeded, 1 some missed or failed, 2 spec error, 3 could not run.")
    from cmstack.sim.campaign import add_arguments as campaign_arguments

    campaign_arguments(p)
    p.set_defaults(func=cmd_campaign)
    from cmstack.baseline import add_arguments as baseline_arguments   # cmstack baseline {save,check}

    baseline_arguments(sub)
    from cmstack.rt import add_arguments as rt_arguments   # cmstack rt: real time, driver + controller

    rt_arguments(sub)
    return ap


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:          # the reader went away (`cmstack list | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # no second error at exit
        return 0


if __name__ == "__main__":
    sys.exit(main())

"""The ``cmstack`` command line.

    cmstack list                                   the shipped scenarios, one line each
    cmstack config NAME|PATH.py                    a scenario's default config (TOML, with its comments)
    cmstack --version                              the version and where the package is installed
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
import os
import sys
from pathlib import Path

EXIT_USAGE = 2


def cmd_list(_args: argparse.Namespace | None) -> int:
    from cmstack.scenarios.loader import listing

    print("\n".join(listing()))
    return 0


def cmd_config(args) -> int:
    """Print a scenario's default config file as it is, comments included (a shipped name, or a scenario
    file whose default config is found as ``cmstack run`` finds it)."""
    from cmstack.models.errors import ConfigError
    from cmstack.scenarios.loader import CONFIG_DIR, load_scenario, shipped_scenarios

    try:
        if args.scenario in shipped_scenarios():  # scenarios/configs/<name>.toml, the module not imported
            name, path = args.scenario, CONFIG_DIR / f"{args.scenario}.toml"
        else:  # a scenario file (its config found as `run` finds it), or a bad name (one line)
            name, _mod, path = load_scenario(args.scenario)
        if path is None:
            raise ConfigError(
                f"scenario file {args.scenario} has no default config (no CONFIG, no .toml beside it)"
            )
        text = Path(path).read_text(encoding="utf-8")
    except (ConfigError, OSError) as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"# the default config of scenario '{name}' ({path});")
    print(f"# edit a copy and run it with: cmstack run {args.scenario} --config FILE.toml")
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def cmd_run(args) -> int:
    from cmstack.models.errors import ConfigError
    from cmstack.scenarios._common import execute
    from cmstack.scenarios.loader import is_user_file, load_scenario

    try:
        name, mod, defaults = load_scenario(args.scenario)
        if is_user_file(mod) and defaults is None:  # (a shipped scenario reads scenarios/configs/<name>.toml)
            if not args.config:
                raise ConfigError(
                    f"scenario file {args.scenario} has no default config: give --config FILE.toml, "
                    f"put {Path(args.scenario).with_suffix('.toml').name} beside it, or set CONFIG"
                )
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
    argv += ["--viewer-host", args.viewer_host]
    return viewer_main(argv)


def cmd_bench(args) -> int:
    from cmstack.bench.__main__ import main as bench_main

    return bench_main([*args.names, *(["--quick"] if args.quick else [])]) or 0


def cmd_campaign(args) -> int:
    # what every variant needs, imported before the local pool forks them (they inherit it: build_parser
    # no longer imports it for every command)
    import cmstack.scenarios._common  # noqa: F401
    from cmstack.campaign import execute as campaign_execute

    return campaign_execute(args)


COMMANDS = ("list", "config", "run", "view", "bench", "campaign", "baseline", "rt")


def command_of(argv: list[str]) -> str | None:
    """The command ``argv`` names (its first word that is not an option), or None (none, or not one of
    COMMANDS: the whole parser then says which there are).  The top-level options take no value."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return word if word in COMMANDS else None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; ``only``: a parser of that one command (the others not added; ``""``:
    none), so that a command imports only what it needs (``cmstack baseline``, ``view``, ``config`` or
    ``--version``: no scenario machinery, MuJoCo, Pinocchio, pydantic, about 0.5 s of every child process)."""

    ap = argparse.ArgumentParser(
        prog="cmstack",
        description="Constrained-multibody control stack: run, watch "
        "and benchmark closed-chain robot scenarios.",
    )
    from cmstack import __version__

    ap.add_argument(
        "--version",
        action="version",
        version=f"cmstack {__version__} ({Path(__file__).resolve().parent})",
        help="print the version and where the package is installed, then exit",
    )
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="{" + ",".join(COMMANDS) + "}")
    adders = {
        "list": _list_parser,
        "config": _config_parser,
        "run": _run_parser,
        "view": _view_parser,
        "bench": _bench_parser,
        "campaign": _campaign_parser,
        "baseline": _baseline_parser,
        "rt": _rt_parser,
    }
    for cmd in COMMANDS:
        if only is None or only == cmd:
            adders[cmd](sub)
    return ap


def _baseline_parser(sub) -> None:
    from cmstack.baseline import add_arguments  # cmstack baseline {save,check}

    add_arguments(sub)


def _rt_parser(sub) -> None:
    from cmstack.rt import add_arguments  # cmstack rt: real time, driver + controller

    add_arguments(sub)


def _list_parser(sub) -> None:
    p = sub.add_parser("list", help="list the shipped scenarios")
    p.set_defaults(func=cmd_list)


def _config_parser(sub) -> None:
    p = sub.add_parser(
        "config",
        help="print a scenario's default config (TOML, with its comments)",
        description="Print a scenario's default config file, comments included: every key, its "
        "default and its meaning. Save it, edit it, and pass it to `cmstack run NAME --config FILE`.",
    )
    p.add_argument("scenario", help="a shipped scenario name (cmstack list) or a scenario file PATH.py")
    p.set_defaults(func=cmd_config)


def _run_parser(sub) -> None:
    from cmstack.scenarios._common import EXIT_CODES_HELP, add_run_arguments

    p = sub.add_parser(
        "run",
        help="run a scenario (a shipped name or your own PATH.py)",
        description="Run a scenario: writes its run directory (config.toml, metrics.json, "
        "log.npz, plots/, replay.html) and prints its metrics beside the paper's.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("scenario", help="a shipped scenario name (cmstack list) or a scenario file PATH.py")
    add_run_arguments(p)
    p.set_defaults(func=cmd_run)


def _view_parser(sub) -> None:
    p = sub.add_parser("view", help="replay a saved run in Meshcat")
    p.add_argument("run", help="run directory (runs/<scenario>/<timestamp>) or its log.npz")
    p.add_argument("--speed", type=float, default=1.0, help="playback speed (1 = real time)")
    p.add_argument("--loop", action="store_true", help="replay until interrupted")
    p.add_argument("--no-wait", action="store_true", help="exit when the replay ends")
    p.add_argument("--qpos-key", default="plant_qpos", help="log key of the MuJoCo qpos series")
    p.add_argument(
        "--viewer-host",
        default="127.0.0.1",
        metavar="HOST",
        help="address the Meshcat web server listens on (default 127.0.0.1: this machine only; "
        "0.0.0.0 opens it to every interface, with a warning)",
    )
    p.add_argument(
        "--html",
        metavar="OUT.html",
        help="write the run as one standalone HTML file (time slider, "
        "opens offline, no server) instead of serving it",
    )
    p.set_defaults(func=cmd_view)


def _bench_parser(sub) -> None:
    p = sub.add_parser("bench", help="run the speed benchmarks (bench/)")
    p.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    p.add_argument(
        "--quick", action="store_true", help="issue-12 benchmarks only, short runs (a few minutes)"
    )
    p.set_defaults(func=cmd_bench)


def _campaign_parser(sub) -> None:
    p = sub.add_parser(
        "campaign",
        help="run many variants of a scenario (grid/random × seeds), resumable",
        description="Run a campaign spec on a local process pool or a Dask cluster; writes "
        "campaign.csv, summary.json, table.md and plots/. Exit codes: 0 every variant "
        "succeeded, 1 some missed or failed, 2 spec error, 3 could not run.",
    )
    from cmstack.campaign import add_arguments as campaign_arguments

    campaign_arguments(p)
    p.set_defaults(func=cmd_campaign)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    cmd = command_of(argv)
    if cmd is None and "--version" in argv and not {"-h", "--help"} & set(argv):
        cmd = ""  # the version only: no command's parser needed
    ap = build_parser(only=cmd)
    args = ap.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # the reader went away (`cmstack list | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0


if __name__ == "__main__":
    sys.exit(main())

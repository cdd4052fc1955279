"""The command line's small promises (issue 21, item 6): only scenarios are listed and run; bad input to
``run``, ``view`` and ``campaign`` is one line and exit 2; ``run --help`` documents every exit code; the
files of a run directory honour the umask.  Commands run in a child process with a wall-clock limit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import _forkserver
import pytest
from _cli import cli

from cmstack.scenarios.loader import shipped_scenarios


def _cli(*argv, cwd, timeout=120) -> subprocess.CompletedProcess:
    return cli(*argv, cwd=cwd, timeout=timeout)


def test_list_shows_scenarios_only(tmp_path):
    r = _cli("list", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    listed = [line.split()[0] for line in r.stdout.splitlines()[1:]]
    assert listed == shipped_scenarios()
    assert "schemas" not in listed
    assert {
        "yumi_dual_arm",
        "series_parallel",
        "slider_crank",
        "balloon",
        "chain_open_loop",
        "chain_task_space",
        "closed_chain",
        "legged",
    } == set(listed)


def test_running_a_module_that_is_not_a_scenario_is_one_line_exit_2(tmp_path):
    r = _cli("run", "schemas", "--out", str(tmp_path / "r"), cwd=tmp_path)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0, r.stderr
    assert (
        r.stderr.startswith("error: ConfigError: no scenario named 'schemas'") and "yumi_dual_arm" in r.stderr
    )


@pytest.mark.parametrize("case", ["missing", "no_mjcf", "bad_qpos_key"])
def test_view_validates_before_starting_a_server(case, tmp_path):
    """`cmstack view /nonexistent` used to print a Meshcat URL, then fail: now nothing is served and no URL
    is printed; one line names what is wrong, exit 2."""
    import numpy as np

    run = tmp_path / "run"
    argv = ["view", str(run), "--no-wait"]
    if case == "missing":
        argv[1] = str(tmp_path / "nonexistent")
    else:
        run.mkdir()
        np.savez(
            run / "log.npz",
            t=np.arange(3) * 0.1,
            plant_qpos=np.zeros((3, 2)),
            mjcf_path=np.array(str(tmp_path / ("nope.xml" if case == "no_mjcf" else "x.xml"))),
        )
        if case == "bad_qpos_key":
            argv += ["--qpos-key", "model_qpos"]
    r = _cli(*argv, cwd=tmp_path, timeout=60)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stdout == "" and "http" not in r.stderr, (r.stdout, r.stderr)
    assert r.stderr.startswith("error: ") and r.stderr.strip().count("\n") == 0, r.stderr
    assert {"missing": "nonexistent", "no_mjcf": "nope.xml", "bad_qpos_key": "model_qpos"}[case] in r.stderr


@pytest.mark.parametrize(
    "argv", [["-m", "cmstack.cli", "run", "--help"], ["-m", "cmstack.scenarios.slider_crank", "--help"]]
)
def test_run_help_documents_every_exit_code(argv, tmp_path):
    from cmstack.scenarios import _common as c

    r = _forkserver.run([sys.executable, *argv], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    codes = r.stdout.split("exit codes:", 1)[1]
    documented = [int(line.split()[0]) for line in codes.strip().splitlines()]
    assert (
        documented
        == [c.EXIT_OK, c.EXIT_TARGET_MISSED, c.EXIT_USAGE, c.EXIT_FAILED, c.EXIT_INTERRUPTED]
        == [0, 1, 2, 3, 130]
    )
    assert "interrupted" in codes and "Ctrl-C" in codes


def test_unknown_campaign_names_the_shipped_specs(tmp_path):
    from cmstack.campaign import shipped_dir

    names = sorted(p.stem for p in shipped_dir().glob("*.toml"))
    assert "arena_yumi_bar" in names
    for arg in ("nope", str(tmp_path)):  # no such spec; a directory
        r = _cli("campaign", arg, "--out", str(tmp_path / "c"), cwd=tmp_path)
        assert r.returncode == 2, r.stderr
        assert (
            r.stderr.startswith(f"error: ConfigError: campaign spec {arg}: ") and "Traceback" not in r.stderr
        )
        assert r.stderr.strip().count("\n") == 0, r.stderr
    r = _cli("campaign", "nope", cwd=tmp_path)
    assert all(n in r.stderr for n in names), r.stderr


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_run_directory_files_honour_the_umask(umask, tmp_path):
    """config.toml, log.npz, metrics.json (atomic writes through mkstemp) used to be 0600 while the plots
    were 0644: every file of a run directory now has the mode open() would give it under the umask."""
    out = tmp_path / "run"
    r = cli(
        "run",
        "series_parallel",
        "--duration",
        "0.2",
        "--out",
        str(out),
        "--no-progress",
        cwd=tmp_path,
        umask=umask,
    )
    assert r.returncode in (0, 1), r.stderr
    files = {p.relative_to(out).as_posix(): p.stat().st_mode & 0o777 for p in out.rglob("*") if p.is_file()}
    assert {"config.toml", "log.npz", "metrics.json", "replay.html"} <= set(files)
    assert any(f.startswith("plots/") for f in files)
    assert files == {f: 0o666 & ~umask for f in files}, {f: oct(m) for f, m in files.items()}


_TOY_SPEC = """
[campaign]
scenario = "toy.py"
seeds = 2
metrics = ["final_error"]
[base]
duration = 0.3
[grid]
gain = [2.0, 20.0]
"""


@pytest.mark.parametrize("success", ["", '[success]\nfinal_error = "<= 0.9"\n'])
def test_campaign_summary_states_one_criterion(success, tmp_path):
    """A campaign used to print "1 ok, 15 missed ... success rate 50 %": two criteria side by side.  Now it
    prints one success count and rate with its definition; the scenario's own verdicts, when they are not
    the criterion, are printed as such.  Toy: gain 2 ends at x ~ 0.86 (misses the scenario's 0.01), gain 20
    at ~1e-3 (meets it); [success] final_error <= 0.9 accepts both."""
    from pathlib import Path

    data = Path(__file__).parent / "campaign_data"
    for f in ("toy.py", "toy.toml"):
        (tmp_path / f).write_text((data / f).read_text())
    (tmp_path / "spec.toml").write_text(_TOY_SPEC + success)
    r = _cli(
        "campaign", "spec.toml", "--out", "o", "--workers", "1", "--no-progress", cwd=tmp_path, timeout=300
    )
    tail = r.stdout.split("\n\n", 1)[1].splitlines()
    assert tail[0] == "4/4 variants finished (0 from an earlier call); 0 failed (raised or died)"
    if success:
        assert r.returncode == 0, r.stdout + r.stderr
        assert (
            tail[1]
            == "success: 4 of 4 (100.0 %); success = the spec's [success] criteria: final_error <= 0.9"
        )
        assert tail[2] == (
            '  for reference, the scenario\'s own targets ("ok" in each metrics.json): met by 2, '
            "missed by 2 (not the campaign's success criterion)"
        )
    else:
        assert r.returncode == 1, r.stdout + r.stderr
        assert tail[1] == (
            'success: 2 of 4 (50.0 %); success = every target of the scenario met ("ok" in the '
            "variant's metrics.json); 2 missed a target"
        )
    assert " ok, " not in r.stdout and "success rate" not in r.stdout
    assert "| 100 % |" in r.stdout  # the table's success column is the same criterion


def test_campaign_plots_have_units_and_threshold_lines(tmp_path, monkeypatch):
    """Every axis of a campaign plot has its unit; each error panel draws its [success] threshold and the
    spec's named thresholds as labelled lines (legend).  The figures are inspected as they are saved."""
    import matplotlib.figure

    from cmstack import campaign as C

    spec_file = tmp_path / "spec.toml"
    for f in ("toy.py", "toy.toml"):
        (tmp_path / f).write_text((Path(__file__).parent / "campaign_data" / f).read_text())
    spec_file.write_text(
        _TOY_SPEC.replace(
            'metrics = ["final_error"]',
            'metrics = ["final_error"]\nunits = '
            '{ final_error = "m", gain = "1/s" }\nthresholds = { final_error = { "scenario target" = 0.01 } }',
        )
        + '[success]\nfinal_error = "<= 0.9"\n'
    )
    spec = C.load_spec(spec_file)
    records = {
        v.id: dict(
            id=v.id, status="ok", reason="", swept=v.swept, metrics={"final_error": 0.001 * (1 + v.index)}
        )
        for v in spec.variants
    }
    saved = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, *a, **k: saved.append(fig))
    C.plot(spec, records, tmp_path)
    (fig,) = saved
    rate_ax, err_ax = fig.axes
    assert rate_ax.get_ylabel() == "success rate\n[fraction of seeds]"
    assert err_ax.get_ylabel() == "final_error [m]" and err_ax.get_xlabel() == "gain [1/s]"
    lines = {
        ln.get_label(): ln.get_ydata()[0] for ln in err_ax.get_lines() if not ln.get_label().startswith("_")
    }
    assert lines == {"success: <= 0.9": 0.9, "scenario target: 0.01": 0.01}
    assert [t.get_text() for t in err_ax.get_legend().get_texts()] == list(lines)
    assert C.unit_of("perturbation.noise_v", spec) == "rad/s" and C.unit_of("rmse_delta_m", spec) == "m"
    assert C.unit_of("peak_torque_nm", spec) == "N·m" and C.unit_of("control_step_us_median", spec) == "µs"


def test_campaign_spec_units_and_thresholds_are_checked(tmp_path):
    from cmstack import campaign as C
    from cmstack.models.errors import ConfigError

    for f in ("toy.py", "toy.toml"):
        (tmp_path / f).write_text((Path(__file__).parent / "campaign_data" / f).read_text())
    for bad, word in (
        ('thresholds = { final_error = { "t" = "x" } }', "thresholds.final_error"),
        ("units = { final_error = 3 }", "units"),
    ):
        (tmp_path / "s.toml").write_text(
            _TOY_SPEC.replace('metrics = ["final_error"]', f'metrics = ["final_error"]\n{bad}')
        )
        with pytest.raises(ConfigError, match=word):
            C.load_spec(tmp_path / "s.toml")
    for name in ("arena_yumi_bar", "breakdown_yumi_bar", "robust_yumi_virtual", "arena_series_parallel"):
        C.load_spec(name)  # the shipped specs parse with their units

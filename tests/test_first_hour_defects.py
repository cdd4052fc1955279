"""The small defects a newcomer met in the first hour (issue 33, item 4), each checked as it was seen.
Anything that runs a loop runs in a child process with a wall-clock limit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import _forkserver


def _python(code: str, cwd, timeout=600, merge=False) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge else subprocess.PIPE,
        text=True,
        timeout=timeout,
        env=dict(os.environ, MPLBACKEND="Agg"),
    )


def test_the_progress_bar_does_not_glue_itself_to_the_next_line_in_a_pipe(tmp_path):
    """stdout and stderr into one pipe (``cmstack run ... 2>&1 | tee log``): the line printed after the
    loop starts a line of its own instead of following the bar's last frame."""
    r = _python(
        """
        import numpy as np
        from cmstack import Robot, simulate
        from cmstack.plants import plant_from_mjcf
        robot = Robot.from_mjcf("mjcf/five_bar.xml")
        plant = plant_from_mjcf(robot, sim_dt=1e-3)
        class Zero:
            def __call__(self, t, q, v):
                return np.zeros(robot.nv)
        simulate(plant, Zero(), duration=0.05, control_dt=1e-3, progress=True)
        print("METRICS first line", flush=True)
        """,
        tmp_path,
        merge=True,
    )
    assert r.returncode == 0, r.stdout
    assert "step" in r.stdout  # the bar was drawn into the pipe
    assert "METRICS first line" in r.stdout.split("\n"), repr(r.stdout[-400:])


def test_a_urdf_plant_without_xml_path_saves_a_run_that_cmstack_view_replays(tmp_path):
    """``plant_from_urdf(robot)`` (no ``xml_path``): its plant has no MJCF file, so ``run.save`` writes the
    plant's MJCF as ``plant.xml`` beside the log and the log names it; ``cmstack view`` then replays it."""
    r = _python(
        f"""
        import numpy as np
        from cmstack import Robot, plant_from_urdf, simulate
        robot = Robot.from_urdf("urdf/five_bar.urdf", loops="urdf/five_bar.loops.toml")
        plant = plant_from_urdf(robot, q0=robot.q_initial, sim_dt=1e-3)
        class Zero:
            def __call__(self, t, q, v):
                return np.zeros(robot.nv)
        run = simulate(plant, Zero(), duration=0.02, control_dt=1e-3, progress=False)
        run.save({str(tmp_path / "run")!r})
        """,
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    import numpy as np

    with np.load(tmp_path / "run" / "log.npz") as z:
        assert str(z["mjcf_path"]) == str((tmp_path / "run" / "plant.xml").resolve())
    assert (tmp_path / "run" / "plant.xml").is_file()
    v = _forkserver.run(
        [
            sys.executable,
            "-m",
            "cmstack.cli",
            "view",
            str(tmp_path / "run"),
            "--html",
            str(tmp_path / "r.html"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert v.returncode == 0, v.stderr
    assert (tmp_path / "r.html").stat().st_size > 1000


def test_a_wrong_qpos_key_lists_the_logs_qpos_series(tmp_path):
    """``cmstack view RUN --qpos-key foo`` names the log's qpos series (it said "no qpos series" when the
    standalone-HTML path had read only the entries it wanted)."""
    from pathlib import Path

    import numpy as np

    from cmstack.sim.logger import Logger

    log = Logger()
    log.meta["mjcf_path"] = str(Path(__file__).resolve().parents[1] / "mjcf" / "five_bar.xml")
    for k in range(3):
        log.append(t=0.01 * k, plant_qpos=np.zeros(5), model_qpos=np.zeros(5))
    (tmp_path / "run").mkdir()
    log.save(tmp_path / "run" / "log.npz")
    for extra in (["--html", str(tmp_path / "r.html")], ["--no-wait"]):
        v = _forkserver.run(
            [sys.executable, "-m", "cmstack.cli", "view", str(tmp_path / "run"), "--qpos-key", "foo", *extra],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
        assert v.returncode == 2, v.stderr
        assert "has no 'foo' series; its qpos series: ['model_qpos', 'plant_qpos']" in v.stderr, v.stderr
        assert "Traceback" not in v.stderr


SHADOW = textwrap.dedent("""
    import sys
    # as with a non-editable install: no editable finder, the installed package on the path after the
    # current directory (which `python -c` puts first)
    sys.meta_path[:] = [f for f in sys.meta_path if "Editable" not in getattr(f, "__name__", type(f).__name__)]
    sys.path_hooks[:] = [h for h in sys.path_hooks if "Editable" not in getattr(h, "__name__", repr(h))]
    sys.path_importer_cache.clear()
    sys.path.insert(1, sys.argv[1])
    from cmstack import Robot
    import cmstack, cmstack.models.robot as r
    print(r.__file__)
    print(cmstack.__path__)
""")


def test_the_clone_root_does_not_shadow_an_installed_cmstack(tmp_path):
    """Run from the clone's root, ``import cmstack`` finds the clone's ``cmstack/`` folder before the
    installed package; its sub-packages live in the root's folders (pyproject.toml's package-dir), so
    ``from cmstack import Robot`` failed with "No module named 'cmstack.models'".  The package now looks
    for them there; installed (sub-packages below it), its search path is left alone."""
    from pathlib import Path

    from test_import_contract import installed_tree

    root = Path(__file__).resolve().parents[1]
    site = installed_tree(tmp_path / "site")  # the package as pip installs it

    def run(cwd):
        return subprocess.run(
            [sys.executable, "-c", SHADOW, str(site)], cwd=cwd, capture_output=True, text=True, timeout=300
        )

    r = run(root)  # from the clone's root: the clone's package, whole
    assert r.returncode == 0, r.stderr
    robot_file, path = r.stdout.splitlines()
    assert Path(robot_file) == root / "models" / "robot.py"
    assert str(root) in path
    r = run(tmp_path)  # anywhere else: the installed package, its path untouched
    assert r.returncode == 0, r.stderr
    robot_file, path = r.stdout.splitlines()
    assert Path(robot_file) == site / "cmstack" / "models" / "robot.py"
    assert path == repr([str(site / "cmstack")])


# ------------------------------------------------------------------------------------------- plots
class _Figures:
    """A scenario context that keeps the figures instead of writing them."""

    plots = drawing = True

    def __init__(self):
        self.figs = {}

    @staticmethod
    def pyplot():
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        return plt

    def save_figure(self, fig, stem, dpi=110):
        self.figs[stem] = fig
        return stem


def _legend(ax) -> list[str]:
    lg = ax.get_legend()
    return [] if lg is None else [t.get_text() for t in lg.get_texts()]


def test_yumi_velocity_panels_have_a_legend():
    import numpy as np

    from cmstack.scenarios._common import default_config
    from cmstack.scenarios.yumi_dual_arm import make_plots

    rng = np.random.default_rng(0)
    n = 50
    t = np.linspace(0.0, 1.0, n)
    names = [f"yumi_joint_{k}_{s}" for s in "lr" for k in range(1, 8)]
    L = {k: rng.normal(size=(n, 3)) for k in ("p_D", "p_E1")}
    L.update({k: rng.normal(size=(n, 6)) for k in ("e_c", "e_u", "Qc")})
    L.update({k: rng.normal(size=(n, 14)) for k in ("v", "tau")})
    ctx = _Figures()
    make_plots(ctx, t, L, default_config("yumi_dual_arm"), joint_names=names)
    fig = ctx.figs["velocities_torques"]
    axes = fig.axes
    assert len(axes) == 4  # v and τ of each arm
    for ax in axes:  # every panel, velocities included, says which line is which joint
        labels = _legend(ax)
        assert len(labels) == 7 and all(x.startswith("j") for x in labels), labels


def test_delta_torque_force_figure_has_a_title_and_labelled_multipliers():
    import numpy as np

    from cmstack import Robot
    from cmstack.scenarios._common import default_config
    from cmstack.scenarios.closed_chain import make_plots

    robot = Robot.from_mjcf("mjcf/delta.xml")
    m = sum(c.m for c in robot.loops)
    n = 40
    t = np.linspace(0.0, 1.0, n)
    L = {
        "t": t,
        "ee": np.zeros((n, 3)),
        "ee_ref": np.zeros((n, 3)),
        "ee_error": np.full(n, 1e-6),
        "loop_residual": np.full(n, 1e-9),
        "tau": np.ones((n, robot.nv)),
        "lam": np.outer(t, np.arange(1, m + 1)),
    }
    passive = np.array([j in robot.passive_joints for j in robot.joint_names])
    cfg = dict(default_config("closed_chain"), model="mjcf/delta.xml")
    ctx = _Figures()
    make_plots(ctx, L, robot, passive, cfg)
    fig = ctx.figs["torques_forces"]
    assert fig._suptitle is not None and "delta.xml" in fig._suptitle.get_text()
    labels = _legend(fig.axes[1])
    assert len(labels) == m == len(fig.axes[1].get_lines())  # every multiplier line is named
    assert len(set(labels)) == m
    for c in robot.loops:  # by its loop and component, force or moment
        assert sum(x.startswith(f"{c.name} ") for x in labels) == c.m
    assert all(x.split()[-1][0] in "fm" for x in labels), labels


def test_baseline_check_plot_has_units_on_its_y_axes(tmp_path):
    import numpy as np

    from cmstack.baseline import SignalResult, _plot, signal_unit

    assert signal_unit("q") == "rad or m" and signal_unit("tau") == "N·m or N"
    assert signal_unit("error__coupling") == "m or rad" and signal_unit("weld_violation") == "m"
    captured = {}
    import matplotlib.figure

    real = matplotlib.figure.Figure.savefig

    def keep(fig, *a, **k):
        captured["fig"] = fig
        return real(fig, *a, **k)

    t = np.linspace(0, 1, 20)
    s = SignalResult("tau", False, 1.0, 0.1, t_first=0.5, column=0, column_name="tau[j1]")
    s._arrays = (t, np.sin(t), np.sin(t) + 0.2, 10)
    matplotlib.figure.Figure.savefig = keep
    try:
        _plot(s, tmp_path / "tau.png")
    finally:
        matplotlib.figure.Figure.savefig = real
    a1, a2 = captured["fig"].axes
    assert a1.get_ylabel() == "tau[j1] [N·m or N]"
    assert a2.get_ylabel() == "run − baseline [N·m or N]"

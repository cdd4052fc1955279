"""The bad-input matrix: every shipped scenario against every kind of bad input.

Each case runs the CLI entry (``execute``, in process) and checks: the exit code of the run contract,
one line on stderr naming the culprit (key and value, file, joint or body), and, when a run directory
can exist, ``error.txt`` and ``metrics.json`` (ok false, the same one-line reason, the contract keys)
and no ``log.npz`` (the error came before any simulation).  A few end-to-end checks go through the
``cmstack`` command in a subprocess.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _cli import cli

from cmstack.scenarios._common import EXIT_USAGE, add_run_arguments, default_config, execute, resolve_config
from cmstack.scenarios.schemas import SCHEMAS

SCENARIOS = sorted(SCHEMAS)
#: per scenario: a gain (key, list index or None), its model-file keys, and a plant file of another robot
GAIN = {
    "yumi_dual_arm": ("task_kp", None),
    "series_parallel": ("K", 1),
    "slider_crank": ("kp", None),
    "balloon": ("slider.stiffness", None),
    "chain_open_loop": ("stiffness", 0),
    "chain_task_space": ("lam_p", None),
    "closed_chain": ("kp", None),
    "legged": ("base_kp", None),
}
GAIN_RANGE = {
    "yumi_dual_arm": "> 0",
    "series_parallel": "> 0",
    "slider_crank": "> 0",
    "balloon": ">= 0",
    "chain_open_loop": ">= 0",
    "chain_task_space": "> 0",
    "closed_chain": "> 0",
    "legged": "> 0",
}
MODEL_KEY = {
    "yumi_dual_arm": ("urdf", "URDF"),
    "series_parallel": ("urdf", "URDF"),
    "slider_crank": ("urdf", "URDF"),
    "balloon": ("urdf", "URDF"),
    "chain_open_loop": ("mjcf", "MJCF"),
    "chain_task_space": ("mjcf", "MJCF"),
    "closed_chain": ("model", "model"),
    "legged": ("model", "model"),
}
PLANT_KEY = {"yumi_dual_arm": "mjcf_virtual", "closed_chain": "plant_mjcf", "legged": "plant_mjcf"}
#: a name the foreign plant lacks, which the error must name
MISSING_NAME = {
    "yumi_dual_arm": "yumi_joint_1_l",
    "series_parallel": "phi",
    "slider_crank": "crank",
    "balloon": "balloon",
    "chain_open_loop": "body1",
    "chain_task_space": "body1",
    "closed_chain": "base_l",
    "legged": "fl_hip_a",
}


def _gain_set(name: str, value: str) -> tuple[str, str]:
    """(--set argument, the key as the error names it) putting ``value`` into the scenario's gain."""
    key, idx = GAIN[name]
    if idx is None:
        return f"{key}={value}", key
    cur = resolve_config(name)[key]
    vals = [repr(float(x)) for x in cur]
    vals[idx] = value
    return f"{key}=[{', '.join(vals)}]", f"{key}[{idx}]"


def _cases(name: str, tmp: Path):
    """(case id, argv after the scenario, expected exit, substrings the one-line error must contain)."""
    bad_toml = tmp / "malformed.toml"
    bad_toml.write_text("duration = = 2.0\n")
    afile = tmp / "a_file"
    afile.write_text("not a directory\n")
    mkey, kind = MODEL_KEY[name]
    pkey = PLANT_KEY.get(name, "mjcf")
    foreign = "mjcf/slider_crank.xml" if name == "yumi_dual_arm" else "mjcf/yumi.xml"
    s_nan, k_nan = _gain_set(name, "nan")
    s_inf, _ = _gain_set(name, "inf")
    s_neg, _ = _gain_set(name, "-500.0")
    rng = GAIN_RANGE[name]
    dur = "duration must be a finite duration in (0, 1e+06] s, got"
    return [
        ("missing-config", ["--config", str(tmp / "nope.toml")], 2, ["config file not found", "nope.toml"]),
        ("malformed-config", ["--config", str(bad_toml)], 2, ["malformed.toml", "not valid TOML", "line 1"]),
        ("unknown-key", ["--set", "no_such_key=1"], 2, ["unknown config key 'no_such_key'"]),
        ("wrong-type", ["--set", "duration='two'"], 2, [f"{dur} 'two'"]),
        ("nan", ["--set", s_nan], 2, [f"{k_nan} must be a finite number {rng}, got nan"]),
        ("inf", ["--set", s_inf], 2, [f"{k_nan} must be a finite number {rng}, got inf"]),
        ("negative-gain", ["--set", s_neg], 2, [f"{k_nan} must be a finite number {rng}, got -500"]),
        ("zero-duration", ["--duration", "0"], 2, [f"{dur} 0"]),
        ("negative-duration", ["--duration", "-1"], 2, [f"{dur} -1"]),
        ("infinite-duration", ["--duration", "inf"], 2, [f"{dur} inf"]),
        (
            "missing-model-file",
            ["--set", f"{mkey}='models/none.{kind.lower()}'"],
            2,
            [f"{mkey} must be an existing {kind} file", "'models/none.", f"no such {kind} file"],
        ),
        ("mismatched-joints", ["--set", f"{pkey}='{foreign}'"], 2, [Path(foreign).name, MISSING_NAME[name]]),
        (
            "unwritable-out",
            ["--out", str(afile / "run")],
            2,
            ["--out", "a_file is a regular file, not a directory"],
        ),
    ]


CASE_IDS = [
    "missing-config",
    "malformed-config",
    "unknown-key",
    "wrong-type",
    "nan",
    "inf",
    "negative-gain",
    "zero-duration",
    "negative-duration",
    "infinite-duration",
    "missing-model-file",
    "mismatched-joints",
    "unwritable-out",
]


def _execute(name: str, argv: list[str], capsys) -> tuple[int, str]:
    ap = argparse.ArgumentParser()
    add_run_arguments(ap)
    args = ap.parse_args(argv)
    mod = importlib.import_module(f"cmstack.scenarios.{name}")
    rc = execute(name, mod.run, args)
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("case", CASE_IDS)
@pytest.mark.parametrize("name", SCENARIOS)
def test_bad_input_matrix(name, case, tmp_path, capsys):
    ((cid, argv, code, needles),) = [c for c in _cases(name, tmp_path) if c[0] == case]
    out = tmp_path / "run"
    if "--out" not in argv:
        argv = argv + ["--out", str(out)]
    rc, err = _execute(name, argv + ["--no-progress"], capsys)
    lines = err.strip().splitlines()
    assert rc == code, err
    assert len(lines) == 1, err  # one line, no traceback
    for n in needles:
        assert n in lines[0], (n, lines[0])
    if case == "unwritable-out":  # no run directory can exist
        assert not (tmp_path / "a_file").is_dir()
        return
    m = json.loads((out / "metrics.json").read_text())
    assert m["ok"] is False and m["failed_targets"] == [] and m["not_evaluated"] == []
    assert m["reason"] and m["reason"] in lines[0]
    assert (out / "error.txt").is_file()
    if (out / "log.npz").exists():  # refused before anything ran: nothing logged
        with np.load(out / "log.npz") as z:
            assert "t" not in z.files or len(z["t"]) == 0


def test_every_default_key_is_typed():
    """A key of a shipped default config that no schema types would only be checked for finiteness."""
    for name, schema in SCHEMAS.items():
        cfg = resolve_config(name)
        assert set(cfg) == set(schema.model_fields), (name, set(cfg) ^ set(schema.model_fields))


def test_defaults_pass_and_keep_their_values():
    for name in SCENARIOS:
        raw = default_config(name)
        cfg = resolve_config(name)
        for k, v in raw.items():
            if isinstance(v, float):
                assert cfg[k] == v and isinstance(cfg[k], float)


def test_int_for_float_is_promoted():
    cfg = resolve_config("yumi_dual_arm", sets=["task_kp=400"])
    assert cfg["task_kp"] == 400.0 and isinstance(cfg["task_kp"], float)


def test_several_problems_one_line_each_named():
    from cmstack.models.errors import ConfigError

    with pytest.raises(ConfigError) as ei:
        resolve_config("yumi_dual_arm", sets=["task_kp=nan", "omega=-1"])
    msg = str(ei.value)
    assert "\n" not in msg
    assert (
        "task_kp must be a finite number > 0, got nan" in msg
        and "omega must be a finite number > 0, got -1" in msg
    )


# ------------------------------------------------------------------------------------- end to end (CLI)
def _cli(*argv, cwd) -> subprocess.CompletedProcess:
    return cli(*argv, cwd=cwd, timeout=300)


def test_cli_nan_gain_is_named_exit_2(tmp_path):
    """Row 6: task_kp=nan used to reach ProxSuite (1.5 M iterations, 7.6 s) without naming the key."""
    r = _cli(
        "run",
        "yumi_dual_arm",
        "--set",
        "task_kp=nan",
        "--out",
        str(tmp_path / "r"),
        "--no-progress",
        cwd=tmp_path,
    )
    assert r.returncode == EXIT_USAGE
    assert r.stderr.strip() == "error: ConfigError: task_kp must be a finite number > 0, got nan"
    assert (
        json.loads((tmp_path / "r" / "metrics.json").read_text())["reason"]
        == "ConfigError: task_kp must be a finite number > 0, got nan"
    )


def test_cli_out_under_a_file_exit_2(tmp_path):
    """Row 9: --out under a regular file was an 'unexpected NotADirectoryError' pointing to an error.txt
    that cannot exist."""
    (tmp_path / "f").write_text("x")
    r = _cli("run", "slider_crank", "--out", str(tmp_path / "f" / "run"), cwd=tmp_path)
    assert r.returncode == EXIT_USAGE
    assert (
        r.stderr.strip()
        == f"error: ConfigError: --out {tmp_path / 'f' / 'run'}: {tmp_path / 'f'} is a regular "
        "file, not a directory; choose another --out"
    )
    assert "unexpected" not in r.stderr and "error.txt" not in r.stderr


def test_cli_infinite_duration_exit_2(tmp_path):
    """Row 8: --duration inf was an 'unexpected OverflowError'."""
    r = _cli("run", "series_parallel", "--duration", "inf", "--out", str(tmp_path / "r"), cwd=tmp_path)
    assert r.returncode == EXIT_USAGE
    assert (
        r.stderr.strip() == "error: ConfigError: duration must be a finite duration in (0, 1e+06] s, got inf"
    )


def test_negative_gain_refused_before_the_solver():
    """Row 7: task_kp=-500 was accepted, then a misleading InfeasibleError."""
    from cmstack.models.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^task_kp must be a finite number > 0, got -500$"):
        resolve_config("yumi_dual_arm", sets=["task_kp=-500"])


def test_yumi_gains_validated_like_the_others():
    """Row 10: series_parallel and balloon validated their gains, yumi did not: every gain of every
    scenario is now refused when NaN, infinite or negative."""
    from cmstack.models.errors import ConfigError

    gains = {
        "yumi_dual_arm": [
            "constraint_kp",
            "constraint_kd",
            "task_kp",
            "task_kd",
            "omega",
            "force_kp",
            "force_ki",
            "pidc_null_damping",
        ]
    }
    for key in gains["yumi_dual_arm"]:
        for bad in ("nan", "inf", "-1.0"):
            with pytest.raises(
                ConfigError, match=rf"^{key} must be a finite number [>=]+ 0, got {bad.rstrip('.0')}"
            ):
                resolve_config("yumi_dual_arm", sets=[f"{key}={bad}"])
    assert not math.isnan(resolve_config("yumi_dual_arm")["omega"])


def test_a_scenario_of_your_own_gets_the_finiteness_floor(tmp_path):
    """Without a schema, NaN/inf anywhere and a non-positive or infinite duration are still refused."""
    from cmstack.models.errors import ConfigError

    d = tmp_path / "mine.toml"
    d.write_text("duration = 1.0\ngain = 2.0\n[table]\nv = [1.0, 2.0]\n")
    for sets, msg in (
        (["gain=nan"], "gain must be finite, got nan"),
        (["table.v=[1.0, inf]"], "table.v must be finite"),
        (["duration=0.0"], "duration must be a finite duration in (0, 1e+06] s, got 0"),
        (["duration=inf"], "duration must be finite, got inf"),
    ):
        with pytest.raises(ConfigError, match=re.escape(msg)):
            resolve_config("mine", sets=sets, defaults=d)
    assert resolve_config("mine", sets=["gain=3.0"], defaults=d)["gain"] == 3.0


def test_cli_output_into_a_closed_pipe_ends_quietly():
    """`cmstack list | head -1`: the reader closes the pipe early; no traceback, exit 0."""
    import subprocess

    p = subprocess.run(
        f"{sys.executable} -m cmstack.cli list | head -1", shell=True, capture_output=True, text=True
    )
    assert p.stdout.strip() and "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr, p.stderr


def test_mjcf_without_a_worldbody_is_one_line(tmp_path):
    """Robot.from_mjcf on a file with no <worldbody>: the one-line ModelFileError naming the file (it was an
    AttributeError from the joint scan before the check that says so)."""
    from cmstack.models.errors import ModelFileError
    from cmstack.models.robot import Robot

    p = tmp_path / "empty.xml"
    p.write_text("<mujoco><option timestep='0.001'/></mujoco>")
    with pytest.raises(ModelFileError, match=r"empty.xml has no <worldbody>$"):
        Robot.from_mjcf(p)

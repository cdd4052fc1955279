"""Open-loop regression of the tensor chain against its targets and the MuJoCo chain ([Eslami] §4.1), 2.5 s."""

import numpy as np
import pytest
from plotcheck import assert_plots_ok

from cmstack.models.errors import ConfigError, ModelFileError
from cmstack.scenarios._common import run_scenario
from cmstack.scenarios.chain_open_loop import NAME, run


def test_chain_open_loop_targets(tmp_path, cmstack_baseline):
    m, out = run_scenario(NAME, run, out=tmp_path, overrides={"duration": 2.5})
    assert m["momentum_drift_rel"] <= 1e-8
    assert m["constraint_violation_max_m"] <= 1e-6
    assert m["internal_force_during_moment_max_n"] <= 1e-9
    assert m["internal_force_during_force_max_n"] > 0.1  # the force pulse needs joint forces
    assert m["mujoco_pose_diff_max"] <= 1e-3
    # the Euler-angle law and MuJoCo's rotation-vector law are different springs: visibly different motion
    assert m["mujoco_pose_diff_paper_law"] > 10 * m["mujoco_pose_diff_max"]
    # issue 16: the paper's law (19) does not conserve energy, the rotation-vector law does (up to RK4)
    assert m["energy_drift_rel_rotvec"] <= 1e-6
    assert_plots_ok(out, ["open_loop_validation", "trace", "mujoco_comparison"])
    assert m["energy_drift_rel_euler123"] > 100 * m["energy_drift_rel_rotvec"]
    assert m["ok"] is True
    log = np.load(out / "log.npz")
    assert str(log["mjcf_path"]).endswith("mjcf/chain5.xml")
    assert log["plant_qpos"].shape == (len(log["t"]), 23)
    assert (out / "plots" / "open_loop_validation.png").is_file()
    # the bodies' motion, momenta, joint violation and the MuJoCo pose difference: tests/baselines/<this test>/
    cmstack_baseline.check(out, signals=["pos", "quat", "P", "L", "viol", "pose_diff_rotvec"])


def test_chain_open_loop_refuses_bad_config(tmp_path):
    with pytest.raises(ConfigError):
        run_scenario(NAME, run, out=tmp_path / "a", overrides={"spring_law": "hooke"})
    with pytest.raises(ModelFileError):  # the MJCF chain has 1 kg bodies
        run_scenario(NAME, run, out=tmp_path / "b", overrides={"mass": 2.0})
    with pytest.raises(ConfigError):
        run_scenario(NAME, run, out=tmp_path / "c", sets=["no_such_key=1"])

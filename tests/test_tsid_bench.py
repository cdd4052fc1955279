"""bench/yumi_uk.py against TSID: without the ``tsid`` package (as on CI) the bench skips its TSID rows with
one line; with it (built as docs/speed.md says), TSID's Panda circle problem is UK's, so both give the same
joint accelerations and torques on the closed-loop states.  No timing is asserted."""

import sys

import numpy as np
import pytest

from cmstack.bench import yumi_uk


def test_without_tsid_the_bench_skips_its_tsid_rows_with_a_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tsid", None)  # import tsid → ImportError, as when it is absent
    monkeypatch.chdir(tmp_path)
    assert yumi_uk._tsid() is None
    robot, hand, _, q0 = yumi_uk.panda_circle()
    assert yumi_uk.tsid_panda_factory(robot, hand, q0, [(0.0, q0, 0 * q0)]) is None
    cfg, robot, coupling, task, q0 = yumi_uk.setup()
    assert yumi_uk.tsid_step_factory(cfg, robot, coupling, task, q0) is None
    record = yumi_uk.record_states
    monkeypatch.setattr(yumi_uk, "record_states", lambda *a: record(*a)[:20])  # a short run
    yumi_uk.main(["--repeat", "1", "--fused-only"])
    out = capsys.readouterr().out
    assert "tsid: absent (not installed): the TSID rows are skipped" in out
    assert "tsid_panda" not in out and "against TSID" not in out
    res = (tmp_path / "bench" / "results" / "yumi_uk.json").read_text()
    assert '"against_tsid": {}' in res


@pytest.fixture(scope="module")
def panda():
    pytest.importorskip(
        "tsid", reason="tsid is not installed (docs/speed.md: how to build it for this Pinocchio)"
    )
    robot, hand, ctl, q0 = yumi_uk.panda_circle()
    states = yumi_uk.record_panda_states(150)
    # and the same states pushed off the closed loop (the hand's and the posture's errors large, within
    # the effort limits), so that every term of both laws matters
    rng = np.random.default_rng(22)
    states += [(t, q + rng.normal(0, 0.01, q.shape), v + rng.normal(0, 0.1, v.shape)) for t, q, v in states]
    return robot, hand, ctl, q0, states


def test_tsid_solves_the_panda_circle_problem_as_uk_does(panda):
    """Same v̇ and τ − D v on 150 closed-loop states and 150 pushed off it (the hand's equality, then the
    posture, within the effort limits), to TSID's Hessian regularisation."""
    robot, hand, ctl, q0, states = panda
    _, _, solve = yumi_uk.tsid_panda_factory(robot, hand, q0, states)
    c = yumi_uk.compare_panda(ctl, robot, states, solve)
    assert c["tsid_unsolved"] == 0
    assert c["uk_limits_bound"] == 0  # the effort bounds differ by D v where they bind: none does here
    assert c["vdot_max_abs"] > 1.0 and c["tau_max_abs"] > 1.0  # the states move: not a trivial match
    # TSID's eiquadprog adds 1e-8 to its Hessian's diagonal (H = I + 1e-8 I here): v̇ moves by ≈ 1e-8 of
    # its null-space part (1e-14 on the closed-loop states, 1.4e-9 of |v̇| on the pushed ones)
    assert c["vdot_rel"] < 1e-7 and c["tau_rel"] < 1e-7


def test_the_comparison_sees_a_different_problem(panda):
    """The same check on a TSID posture with other gains: the answers differ, so the match above is not
    an artefact of the comparison."""
    robot, hand, ctl, q0, states = panda
    gains = yumi_uk.PANDA_POSTURE_GAINS
    try:
        yumi_uk.PANDA_POSTURE_GAINS = (2 * gains[0], gains[1])
        _, _, solve = yumi_uk.tsid_panda_factory(robot, hand, q0, states)
    finally:
        yumi_uk.PANDA_POSTURE_GAINS = gains
    c = yumi_uk.compare_panda(ctl, robot, states, solve)
    assert c["tau_rel"] > 1e-3 and c["vdot_rel"] > 1e-2  # 8e-3 and 7e-2 here


def test_tsid_step_returns_the_torque_of_its_own_solution(panda):
    """step (the timed call) and solve give the same torque, and TSID's τ = M v̇ + h of its own v̇."""
    import pinocchio as pin

    robot, hand, ctl, q0, states = panda
    step, step_sampled, solve = yumi_uk.tsid_panda_factory(robot, hand, q0, states)
    d = robot.model.createData()
    for k in (0, 150, 299):
        t, q, v = states[k]
        vdot, tau, status = solve(k)
        assert status == 0
        assert np.allclose(step(k), tau, rtol=0, atol=1e-12)
        assert np.allclose(step_sampled(k), tau, rtol=0, atol=1e-9)
        assert np.allclose(pin.rnea(robot.model, d, q, v, vdot), tau, rtol=0, atol=1e-9)

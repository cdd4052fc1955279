"""bench/peers.py: the three solvers of the peers' benchmark behave on short runs of the YuMi closed chain
(behaviour only: no timing is asserted)."""

import time

import numpy as np
import pinocchio as pin
import pytest

from cmstack.bench.peers import CmstackKinematic, MinkIK, PinkIK, _Runner, errors, ik_gain, setup


@pytest.fixture(scope="module")
def problem():
    return setup(control_dt=0.005, duration=0.2)


def _run(P, solver, steps=None):
    r = _Runner(P, solver)
    for k in range(P.steps if steps is None else steps):
        r.timed_step(k, time.perf_counter_ns)
    return r


def _e1_error(P, q, t):
    d = P.robot.model.createData()
    pin.framesForwardKinematics(P.robot.model, d, q)
    return np.linalg.norm(pin.log(d.oMf[P.fid1].actInv(P.traj(t)[0])).vector)


def test_gain_is_the_fraction_removed_per_step():
    assert ik_gain(8.5, 0.005) == pytest.approx(1 - np.exp(-0.0425))
    assert ik_gain(1e9, 0.005) == pytest.approx(1.0)


def test_cmstack_kinematic_run_keeps_the_coupling_and_closes_on_e1(problem):
    P = problem
    r = _run(P, CmstackKinematic(P))
    e = errors(P, r.Q)
    assert e["coupling_m_max"] < 1e-3 and e["coupling_rad_max"] < 3e-3  # the hard level holds the bar
    assert _e1_error(P, r.Q[-1], P.steps * P.dt) < 0.5 * _e1_error(P, r.Q[0], 0.0)
    # the integrated q̈ is the law's, which the perfect model's forward dynamics reproduces from the torque
    ctl = r.s.ctl
    q, v = r.Q[-2], r.V[-2]
    tau = ctl(0.0, q, v)
    a = pin.aba(P.robot.model, P.robot.model.createData(), q, v, tau - ctl.D * v)
    assert np.allclose(a, ctl.info.vdot, atol=1e-6 * max(1.0, np.abs(a).max()))


@pytest.mark.parametrize("peer, constraint", [("pink", False), ("mink", True)])  # the bench's main rows
def test_each_peer_first_steps_reduce_the_e1_error(problem, peer, constraint):
    P = problem
    pytest.importorskip(peer)
    cls = PinkIK if peer == "pink" else MinkIK
    r = _run(P, cls(P, P.gains("matched"), constraint=constraint, solver="proxqp"), steps=10)
    before, after = _e1_error(P, r.Q[0], 0.0), _e1_error(P, r.Q[10], 10 * P.dt)
    assert after < before
    assert errors(P, r.Q[:11])["coupling_m_max"] < 1e-3  # the coupling holds meanwhile
    assert r.s.failures == 0


def test_without_the_peers_the_bench_skips_in_one_line(tmp_path, monkeypatch, capsys):
    import cmstack.bench.peers as peers

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(peers, "peers_missing", lambda: ["pin-pink"])
    peers.main([])
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "skipped" in out and "pin-pink" in out
    assert not (tmp_path / "bench" / "results" / "peers.json").exists()

"""The shared-memory transport (sim/rt_transport.py): values round-trip, the sequence lock rejects a
copy taken while the writer was writing, and a reader racing a writer in another process never accepts
a torn record.  Behaviour only; nothing here is timed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from cmstack.models.errors import ConfigError
from cmstack.sim import rt_transport as rt
from cmstack.sim.rt_transport import SeqRecord, ShmTransport


def test_state_and_command_round_trip():
    with ShmTransport.create(nq=3, nv=2) as link:
        q, v = np.array([0.1, -0.2, 0.3]), np.array([1.5, -2.5])
        link.state.publish(7, 0.007, 123.25, q, v)
        assert link.state.read() == 2
        assert (link.state.cycle, link.state.t, link.state.wall) == (7, 0.007, 123.25)
        np.testing.assert_array_equal(link.state.q, q)
        np.testing.assert_array_equal(link.state.v, v)
        link.command.send(7, np.array([4.0, -5.0]), 124.5)
        assert link.command.read() == 2
        assert (link.command.answers, link.command.send_wall) == (7, 124.5)
        np.testing.assert_array_equal(link.command.tau, [4.0, -5.0])
        # a second process attaches by name and sees the same records
        peer = ShmTransport.attach(link.name)
        assert (peer.nq, peer.nv) == (3, 2) and peer.state.read() == 2
        np.testing.assert_array_equal(peer.state.v, v)
        peer.close()
        link.set_driver_status(rt.STOPPED, rt.MISSES)
        assert (link.driver_status, link.stop_reason) == (rt.STOPPED, rt.MISSES)


def test_reader_refuses_a_record_being_written():
    buf = bytearray(SeqRecord.nbytes(4))
    rec = SeqRecord(buf, 0, 4)
    rec.write([1.0] * 4)
    rec.begin()  # the writer is half-way through a write
    rec.shared[:2] = 2.0
    assert rec.read(tries=50) == -1  # no consistent copy: refused, not returned torn
    assert rec.failed == 1 and rec.retries == 50
    rec.shared[2:] = 2.0
    rec.end()
    assert rec.read() == 4 and (rec.local == 2.0).all()


def test_reader_retries_when_the_writer_wrote_during_the_copy(monkeypatch):
    buf = bytearray(SeqRecord.nbytes(4))
    rec = SeqRecord(buf, 0, 4)
    rec.write([1.0] * 4)
    real_copyto, calls = np.copyto, []

    def copy_then_write(dst, src):  # the writer runs a whole write while the reader copies
        real_copyto(dst, src)
        if not calls:
            calls.append(1)
            rec.write([3.0] * 4)

    monkeypatch.setattr(np, "copyto", copy_then_write)
    seq = rec.read()
    assert seq == 4 and rec.retries == 1 and (rec.local == 3.0).all()


def test_bad_sizes_and_names_are_one_line_errors():
    with pytest.raises(ConfigError, match="nq must be an integer"):
        ShmTransport.create(nq=0, nv=2)
    with pytest.raises(ConfigError, match="no shared-memory block named"):
        ShmTransport.attach("cmstack_no_such_block")


WRITER = textwrap.dedent("""
    import sys, numpy as np
    from cmstack.sim import rt_transport as rt
    link = rt.ShmTransport.attach(sys.argv[1])
    n = link.nq + link.nv
    k = 0.0
    while not link.stop_requested:          # every slot of the record gets the same value k
        k += 1.0
        link.state.publish(k, k, k, np.full(link.nq, k), np.full(link.nv, k))
    link.close()
""")


def test_no_torn_read_against_a_writer_process():
    """A writer process publishes records whose every slot holds one value, as fast as it can; the
    reader takes sequence-locked copies and checks each is one value throughout.  Copies taken
    without the lock are counted too (torn ones happen; they are what the lock rejects)."""
    n = 4000  # a long copy: many chances to overlap a write
    with ShmTransport.create(nq=n, nv=n) as link:
        child = subprocess.Popen([sys.executable, "-c", WRITER, link.name])
        try:
            st = link.state
            seen, torn_locked, raw_torn, reads = set(), 0, 0, 0
            raw = np.empty_like(st.shared)
            while len(seen) < 200 and reads < 200_000 and child.poll() is None:
                reads += 1
                if st.read(tries=100_000) < 0:
                    continue
                vals = st.local
                if not (vals == vals[0]).all():
                    torn_locked += 1
                seen.add(float(vals[0]))
                np.copyto(raw, st.shared)
                raw_torn += not (raw == raw[0]).all()
            link.request_stop()
            assert child.wait(timeout=60) == 0
        finally:
            if child.poll() is None:
                child.kill()
        assert len(seen) >= 2, "the writer never ran while the reader read: nothing was tested"
        assert torn_locked == 0, f"{torn_locked} torn records accepted by the sequence lock"
        print(
            f"reads {reads}, values seen {len(seen)}, retries {st.retries}, unlocked copies torn {raw_torn}"
        )


def test_udp_round_trip_and_control_words():
    """The UDP transport has the shared-memory one's members: a state and a command go through whole,
    the newest record wins, the driver's status and a stop request reach the other end."""
    from cmstack.sim.rt_transport import UdpTransport

    with UdpTransport(nq=3, nv=2) as link:
        assert link.state.seq == 0 and link.command.read() == 0  # nothing received yet
        link.state.publish(6, 0.006, 10.0, np.zeros(3), np.zeros(2))
        link.state.publish(7, 0.007, 11.0, np.array([0.1, -0.2, 0.3]), np.array([1.5, -2.5]))
        assert link.state.read() == 4 and link.state.cycle == 7  # both arrived; the newest is kept
        np.testing.assert_array_equal(link.state.q, [0.1, -0.2, 0.3])
        np.testing.assert_array_equal(link.state.v, [1.5, -2.5])
        link.command.send(7, np.array([4.0, -5.0]), 12.5)
        assert link.command.read() == 2 and (link.command.answers, link.command.send_wall) == (7, 12.5)
        np.testing.assert_array_equal(link.command.tau, [4.0, -5.0])
        assert not link.stop_requested
        link.request_stop()
        assert link.stop_requested
        link.set_driver_status(rt.STOPPED, rt.MISSES)
        assert (link.driver_status, link.stop_reason) == (rt.STOPPED, rt.MISSES)
    with pytest.raises(ConfigError, match="nv must be an integer"):
        UdpTransport(nq=2, nv=0)

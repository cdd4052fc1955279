"""Shared-memory transport between a robot-side driver and a controller process, one machine: two
records behind sequence locks and a few control words, in one ``multiprocessing.shared_memory`` block.

    link = ShmTransport.create(nq=14, nv=14)          # the owner (the controller side) creates it
    peer = ShmTransport.attach(link.name)             # another process attaches by name (or inherits it by fork)

    # robot side, every cycle                         # controller side, every cycle
    link.state.publish(cycle, t, wall, q, v)          seq = link.state.read()      # -> seq or -1 (no consistent copy)
    n = link.command.read()                           link.state.q, .v, .t, .cycle  (the local copy)
    link.command.tau, .answers, .send_wall            link.command.send(cycle, tau, wall)

**Sequence lock.** Each record is a sequence counter (int64) followed by float64 slots.  The single
writer increments the counter to an odd value, writes the slots, then increments it to the next even
value.  A reader reads the counter, copies the slots into its own preallocated buffer, reads the
counter again, and accepts the copy only when both reads are equal and even; otherwise it retries (up
to ``tries`` times, then reports -1).  No OS lock or system call is on this path: a reader never
blocks the writer, and the writer never waits.

Assumptions (stated, not checked): one writer per record; x86-64 (total store order: the stores of the
counter and the slots become visible in program order, loads are not reordered with loads), aligned
8-byte words (single-copy atomic).  On a weakly ordered CPU (ARM) the counter accesses need fences,
which Python does not expose; use this transport on x86-64 or replace it.

**No allocation per cycle.** Every array is a NumPy view made once over the shared block or over a
preallocated local buffer; the counters are read and written through a ``memoryview`` cast to int64.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from multiprocessing import shared_memory

import numpy as np
from numpy.typing import ArrayLike

from cmstack.models.errors import ConfigError

#: bytes per slot (int64 counters and float64 values)
WORD = 8
#: the layout's first word (a transport of another layout refuses to attach)
MAGIC = 0x636D5354524E5432  # "cmSTRNT2" (T1: no C_NC word)

# control words (int64, one writer each; single aligned stores, no seqlock needed)
C_MAGIC, C_NQ, C_NV, C_DRIVER_STATUS, C_STOP_REASON, C_STOP_REQUEST, C_CYCLES, C_NS, C_NC = range(9)
N_CONTROL = 9
#: driver status values (control word C_DRIVER_STATUS)
STARTING, RUNNING, STOPPED, DONE, FAILED = 0, 1, 2, 3, 4
STATUS_NAMES = {STARTING: "starting", RUNNING: "running", STOPPED: "stopped", DONE: "done", FAILED: "failed"}
#: stop reasons (control word C_STOP_REASON)
NO_STOP, MISSES, CONTROLLER_REQUEST, DRIVER_ERROR, CONTROLLER_DIED = 0, 1, 2, 3, 4


#: what a closed transport's record views point to instead of the block
_RELEASED = np.zeros(0)
#: names of the blocks this process created (attaching to one of them leaves the resource tracker alone)
_CREATED: set[str] = set()


class SeqRecord:
    """``size`` float64 slots behind a sequence counter at ``offset`` of ``buf`` (a writable buffer).

    ``shared`` is the record in ``buf``; ``local`` a private copy of the same size that :meth:`read`
    fills.  The writer calls :meth:`begin`, writes into ``shared``, then :meth:`end` (or :meth:`write`)."""

    def __init__(self, buf: memoryview, offset: int, size: int) -> None:
        self.size = size
        self._seq = memoryview(buf)[offset : offset + WORD].cast("q")
        self.shared = np.ndarray((size,), dtype=np.float64, buffer=buf, offset=offset + WORD)
        self.local = np.zeros(size)
        self.retries = 0  # reads that had to retry (a writer was in the middle of a write)
        self.failed = 0  # reads that gave up (-1)

    @staticmethod
    def nbytes(size: int) -> int:
        return WORD * (1 + size)

    @property
    def seq(self) -> int:
        """The sequence counter (even: no write in progress; it grows by 2 per write)."""
        return self._seq[0]

    def begin(self) -> None:
        self._seq[0] = self._seq[0] + 1  # odd: a write is in progress

    def end(self) -> None:
        self._seq[0] = self._seq[0] + 1  # even: the record is consistent again

    def write(self, values: ArrayLike) -> None:
        """Write every slot at once (``values``: ``size`` floats)."""
        self.begin()
        self.shared[:] = values
        self.end()

    def read(self, tries: int = 1000) -> int:
        """Copy the record into ``local`` under the sequence lock; returns the counter of the copy
        (even), or -1 when no consistent copy was obtained within ``tries`` attempts."""
        seq, local, shared = self._seq, self.local, self.shared
        for _ in range(tries):
            s1 = seq[0]
            if s1 & 1:
                self.retries += 1
                continue
            np.copyto(local, shared)
            if seq[0] == s1:
                return s1
            self.retries += 1
        self.failed += 1
        return -1


class _StateFields:
    """``cycle``, ``t``, ``wall`` of a state record's local copy [cycle, t, wall, q, v] (both transports)."""

    local: np.ndarray

    @property
    def cycle(self) -> int:
        return int(self.local[0])

    @property
    def t(self) -> float:
        return float(self.local[1])

    @property
    def wall(self) -> float:
        return float(self.local[2])


class _CommandFields:
    """``answers``, ``send_wall`` of a command record's local copy [answers, send_wall, tau] (both transports)."""

    local: np.ndarray

    @property
    def answers(self) -> int:
        return int(self.local[0])

    @property
    def send_wall(self) -> float:
        return float(self.local[1])


class StateRecord(_StateFields, SeqRecord):
    """What the robot publishes each cycle: [cycle, t, wall, q (nq), v (nv), sensors (ns)].  ``cycle``,
    ``t`` [s, simulated or robot time], ``wall`` [s, ``time.perf_counter()`` at publication], ``q``,
    ``v`` and ``sensors`` (what a controller that senses the plant reads, measured with the state; none
    when ns = 0) read the local copy (after :meth:`read`)."""

    def __init__(self, buf: memoryview, offset: int, nq: int, nv: int, ns: int = 0) -> None:
        super().__init__(buf, offset, 3 + nq + nv + ns)
        self.nq, self.nv, self.ns = nq, nv, ns
        sh, lo = self.shared, self.local
        self._sh_q, self._sh_v, self._sh_s = sh[3 : 3 + nq], sh[3 + nq : 3 + nq + nv], sh[3 + nq + nv :]
        self.q, self.v, self.sensors = lo[3 : 3 + nq], lo[3 + nq : 3 + nq + nv], lo[3 + nq + nv :]

    def publish(
        self, cycle: int, t: float, wall: float, q: ArrayLike, v: ArrayLike, sensors: ArrayLike | None = None
    ) -> None:
        sh = self.shared
        self.begin()
        sh[0] = cycle
        sh[1] = t
        sh[2] = wall
        self._sh_q[:] = q
        self._sh_v[:] = v
        if sensors is not None:
            self._sh_s[:] = sensors
        self.end()


class CommandRecord(_CommandFields, SeqRecord):
    """What the controller sends each cycle: [answers, send_wall, tau (nc)]: the cycle of the state it
    answers, ``time.perf_counter()`` when sent, and the torques (model order, nc = nv) or, for a position-
    controlled robot, the command (q_des, v_des, a_des, tau_ff) of its actuated joints (nc = 4 a)."""

    def __init__(self, buf: memoryview, offset: int, nv: int) -> None:
        super().__init__(buf, offset, 2 + nv)
        self.nv = nv
        self._sh_tau = self.shared[2:]
        self.tau = self.local[2:]

    def send(self, answers: int, tau: ArrayLike, wall: float) -> None:
        sh = self.shared
        self.begin()
        sh[0] = answers
        sh[1] = wall
        self._sh_tau[:] = tau
        self.end()


def _block(shm: shared_memory.SharedMemory) -> memoryview:
    """The mapped bytes of ``shm`` (None once it is closed: refused here)."""
    buf = shm.buf
    if buf is None:
        raise ConfigError(f"ShmTransport: the shared-memory block '{shm.name}' is closed")
    return buf


class ShmTransport:
    """The control words, the state record and the command record in one shared-memory block."""

    def __init__(
        self,
        shm: shared_memory.SharedMemory,
        nq: int,
        nv: int,
        owner: bool,
        ns: int = 0,
        nc: int | None = None,
    ) -> None:
        self.shm, self.nq, self.nv, self.ns, self.owner = shm, nq, nv, ns, owner
        self.nc = nv if nc is None else nc
        buf = _block(shm)
        self.control = memoryview(buf)[: N_CONTROL * WORD].cast("q")
        off = N_CONTROL * WORD
        self.state = StateRecord(buf, off, nq, nv, ns)
        off += SeqRecord.nbytes(self.state.size)
        self.command = CommandRecord(buf, off, self.nc)

    @staticmethod
    def nbytes(nq: int, nv: int, ns: int = 0, nc: int | None = None) -> int:
        nc = nv if nc is None else nc
        return N_CONTROL * WORD + SeqRecord.nbytes(3 + nq + nv + ns) + SeqRecord.nbytes(2 + nc)

    @classmethod
    def create(cls, nq: int, nv: int, ns: int = 0, nc: int | None = None) -> ShmTransport:
        """A new zeroed block for a robot of ``nq`` positions and ``nv`` velocities (and torques), and ``ns``
        sensor values published with each state; ``nc``: the command's values (default nv, the torques)."""
        nc = nv if nc is None else nc
        if not (isinstance(nc, (int, np.integer)) and 0 < nc < 100_000):
            raise ConfigError(f"ShmTransport: nc must be an integer in [1, 99999], got {nc!r}")
        for key, n in (("nq", nq), ("nv", nv)):
            if not (isinstance(n, (int, np.integer)) and 0 < n < 100_000):
                raise ConfigError(f"ShmTransport: {key} must be an integer in [1, 99999], got {n!r}")
        if not (isinstance(ns, (int, np.integer)) and 0 <= ns < 100_000):
            raise ConfigError(f"ShmTransport: ns must be an integer in [0, 99999], got {ns!r}")
        shm = shared_memory.SharedMemory(create=True, size=cls.nbytes(nq, nv, ns, nc))
        _block(shm)[:] = bytes(len(_block(shm)))
        _CREATED.add(shm.name)
        link = cls(shm, int(nq), int(nv), owner=True, ns=int(ns), nc=int(nc))
        link.control[C_NQ], link.control[C_NV], link.control[C_NS] = int(nq), int(nv), int(ns)
        link.control[C_NC] = int(nc)
        link.control[C_MAGIC] = MAGIC
        return link

    @classmethod
    def attach(cls, name: str) -> ShmTransport:
        """Attach to the block ``name`` made by :meth:`create` (another process)."""
        try:
            shm = shared_memory.SharedMemory(name=name)
        except FileNotFoundError:
            raise ConfigError(f"ShmTransport: no shared-memory block named '{name}'") from None
        # the block belongs to its creator: before Python 3.13 attaching registers it with this process's
        # resource tracker, which would remove it when this process ends (bpo-39959)
        if shm.name not in _CREATED:
            try:
                from multiprocessing import resource_tracker

                # (the tracker registered the private _name, with its leading slash; typeshed omits it)
                resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]
            except Exception:
                pass
        words = memoryview(_block(shm))[: N_CONTROL * WORD].cast("q")
        magic, nq, nv, ns, nc = words[C_MAGIC], words[C_NQ], words[C_NV], words[C_NS], words[C_NC]
        words.release()
        if magic != MAGIC or len(_block(shm)) < cls.nbytes(max(nq, 1), max(nv, 1), max(ns, 0), max(nc, 1)):
            shm.close()
            raise ConfigError(
                f"ShmTransport: block '{name}' is not a cmstack transport (or of another version)"
            )
        return cls(shm, nq, nv, owner=False, ns=ns, nc=nc)

    @property
    def name(self) -> str:
        return self.shm.name

    # control words -----------------------------------------------------------------------------
    @property
    def driver_status(self) -> int:
        return self.control[C_DRIVER_STATUS]

    def set_driver_status(self, status: int, reason: int = NO_STOP) -> None:
        if reason != NO_STOP:
            self.control[C_STOP_REASON] = reason
        self.control[C_DRIVER_STATUS] = status

    @property
    def stop_reason(self) -> int:
        return self.control[C_STOP_REASON]

    def request_stop(self) -> None:
        """Ask the driver to stop the robot (the controller cannot go on)."""
        self.control[C_STOP_REQUEST] = 1

    @property
    def stop_requested(self) -> bool:
        return self.control[C_STOP_REQUEST] != 0

    def close(self) -> None:
        """Release the views and unmap the block; the owner also removes it."""
        for rec in (self.state, self.command):
            rec._seq.release()
            rec.shared = _RELEASED  # (drops the views of the block, which close() needs)
        self.state._sh_q = self.state._sh_v = self.state._sh_s = self.command._sh_tau = _RELEASED
        self.control.release()
        try:
            self.shm.close()
        except BufferError:  # a view still exported elsewhere: leave the mapping to the process' end
            pass
        if self.owner:
            try:
                self.shm.unlink()
            except FileNotFoundError:
                pass

    def __enter__(self) -> ShmTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------------------------------------ UDP
#: datagram kinds (first float64 of every datagram)
_STATE, _STATUS, _COMMAND, _STOP = 1.0, 2.0, 3.0, 4.0


class _UdpEnd:
    """One end's view of a UDP channel: the latest record received, copied into ``local`` (the same
    layout as the shared-memory records), and a counter that grows by 2 per record, like a sequence
    lock's.  Polling drains the socket (non-blocking) and keeps the newest record."""

    def __init__(self, link: UdpTransport, size: int, own_kind: float) -> None:
        self.link, self.size, self.kind = link, size, own_kind
        self.local = np.zeros(size)
        self.tx = np.zeros(1 + size)
        self.tx[0] = own_kind
        self._seq = 0
        self.retries = self.failed = 0

    @property
    def seq(self) -> int:
        self.link._poll(self)
        return self._seq

    def read(self, tries: int = 1) -> int:
        """Receive what has arrived; returns the counter of the newest record (0: none yet)."""
        self.link._poll(self)
        return self._seq


class _UdpState(_StateFields, _UdpEnd):
    def __init__(self, link: UdpTransport, nq: int, nv: int, ns: int = 0) -> None:
        super().__init__(link, 3 + nq + nv + ns, _STATE)
        self.nq, self.nv, self.ns = nq, nv, ns
        lo, tx = self.local, self.tx
        self.q, self.v, self.sensors = lo[3 : 3 + nq], lo[3 + nq : 3 + nq + nv], lo[3 + nq + nv :]
        self._tx_q, self._tx_v, self._tx_s = tx[4 : 4 + nq], tx[4 + nq : 4 + nq + nv], tx[4 + nq + nv :]

    def publish(
        self, cycle: int, t: float, wall: float, q: ArrayLike, v: ArrayLike, sensors: ArrayLike | None = None
    ) -> None:
        tx = self.tx
        tx[1] = cycle
        tx[2] = t
        tx[3] = wall
        self._tx_q[:] = q
        self._tx_v[:] = v
        if sensors is not None:
            self._tx_s[:] = sensors
        self.link._send(self.link._drv, tx)


class _UdpCommand(_CommandFields, _UdpEnd):
    def __init__(self, link: UdpTransport, nv: int) -> None:
        super().__init__(link, 2 + nv, _COMMAND)
        self.nv = nv
        self.tau = self.local[2:]
        self._tx_tau = self.tx[3:]

    def send(self, answers: int, tau: ArrayLike, wall: float) -> None:
        tx = self.tx
        tx[1] = answers
        tx[2] = wall
        self._tx_tau[:] = tau
        self.link._send(self.link._ctl, tx)


class UdpTransport:
    """The same records as :class:`ShmTransport` (members ``state``, ``command``, ``driver_status``,
    ``set_driver_status``, ``stop_reason``, ``request_stop``, ``stop_requested``) as UDP datagrams on
    one machine's loopback, the way UR's RTDE and Franka's FCI reach a PC (there over a network).  Two
    non-blocking sockets connected to each other: the driver's end sends states and its status and
    receives commands and stop requests; the controller's end the reverse.  Made before the driver
    process is forked; each end then polls only its own socket (no lock at all: a datagram arrives
    whole or not at all).  A poll with nothing to read raises and catches ``BlockingIOError``
    (allocated and freed: no growth)."""

    def __init__(self, nq: int, nv: int, host: str = "127.0.0.1", ns: int = 0, nc: int | None = None) -> None:
        for key, n in (("nq", nq), ("nv", nv)):
            if not (isinstance(n, (int, np.integer)) and 0 < n < 4000):
                raise ConfigError(
                    f"UdpTransport: {key} must be an integer in [1, 3999] (one datagram), got {n!r}"
                )
        if not (isinstance(ns, (int, np.integer)) and 0 <= ns and nq + nv + ns < 8000):
            raise ConfigError(
                f"UdpTransport: ns must be an integer >= 0 with nq + nv + ns < 8000 (one datagram), "
                f"got {ns!r}"
            )
        self.nq, self.nv, self.ns = int(nq), int(nv), int(ns)
        self.nc = self.nv if nc is None else int(nc)
        if not 0 < self.nc < 4000:
            raise ConfigError(f"UdpTransport: nc must be an integer in [1, 3999] (one datagram), got {nc!r}")
        self._drv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._ctl = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for s in (self._drv, self._ctl):
            s.bind((host, 0))
            s.setblocking(False)
        self._drv.connect(self._ctl.getsockname())
        self._ctl.connect(self._drv.getsockname())
        self.state = _UdpState(self, self.nq, self.nv, self.ns)
        self.command = _UdpCommand(self, self.nc)
        self._rx = np.zeros(1 + max(self.state.size, self.command.size, 3))
        self._status_tx, self._stop_tx = np.array([_STATUS, 0.0, 0.0]), np.array([_STOP])
        self._status, self._reason, self._stop = STARTING, NO_STOP, False
        self.name = f"udp:{host}:{self._drv.getsockname()[1]}<->{self._ctl.getsockname()[1]}"
        self.sent = self.send_failures = 0

    def _send(self, sock: socket.socket, buf: np.ndarray) -> None:
        try:
            sock.send(buf)  # type: ignore[arg-type]  # (an ndarray is a buffer; numpy's stubs do not say so)
            self.sent += 1
        except (BlockingIOError, ConnectionRefusedError):
            self.send_failures += 1  # a full buffer or no reader yet: the datagram is lost, as on a network

    def _poll(self, end: _UdpEnd) -> None:
        """Drain the socket that receives ``end``'s records (the driver's for commands, the
        controller's for states), dispatching each datagram by kind."""
        sock = self._ctl if end.kind == _STATE else self._drv
        rx = self._rx
        while True:
            try:
                n = sock.recv_into(rx)  # type: ignore[arg-type]  # (as in _send: an ndarray is a buffer)
            except (BlockingIOError, ConnectionRefusedError):
                return
            kind = rx[0]
            if kind == _STATE or kind == _COMMAND:
                rec = self.state if kind == _STATE else self.command
                if n == 8 * (1 + rec.size):
                    rec.local[:] = rx[1 : 1 + rec.size]
                    rec._seq += 2
            elif kind == _STATUS:
                self._status, self._reason = int(rx[1]), int(rx[2]) or self._reason
            elif kind == _STOP:
                self._stop = True

    # control words, as ShmTransport's ------------------------------------------------------------
    @property
    def driver_status(self) -> int:
        self._poll(self.state)
        return self._status

    def set_driver_status(self, status: int, reason: int = NO_STOP) -> None:
        self._status_tx[1], self._status_tx[2] = status, reason
        self._send(self._drv, self._status_tx)

    @property
    def stop_reason(self) -> int:
        self._poll(self.state)
        return self._reason

    def request_stop(self) -> None:
        self._send(self._ctl, self._stop_tx)

    @property
    def stop_requested(self) -> bool:
        self._poll(self.command)
        return self._stop

    def close(self) -> None:
        self._drv.close()
        self._ctl.close()

    def __enter__(self) -> UdpTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: either transport (the same members: ``state``, ``command``, the control words)
Link = ShmTransport | UdpTransport
#: the transports ``run_rt`` and ``cmstack rt --transport`` know: name -> maker(nq, nv, ns=sensor values)
TRANSPORTS: dict[str, Callable[..., Link]] = {"shm": ShmTransport.create, "udp": UdpTransport}

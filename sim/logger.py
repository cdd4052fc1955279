"""The run log: time series by key, saved as ``log.npz`` atomically.

Every file a run writes goes through :func:`atomic_write`: the bytes go to a temporary file in the
same directory, are flushed to disk, and the temporary file is renamed over the target
(``os.replace``, atomic on POSIX).  A reader (or a ``kill -9`` at any instant) therefore sees either
the previous complete file or the new complete file, never a half-written one.
"""
from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

import numpy as np


def atomic_write(path: str | Path, data, fsync: bool = True) -> Path:
    """Write ``data`` to ``path`` atomically: into a temporary file in the same directory, fsync
    (unless ``fsync=False``: a killed process still leaves no torn file, only a power cut could),
    then rename over ``path``.  ``data``: bytes, text (UTF-8), or a callable ``writer(fh)`` that
    writes into the open binary file.  Returns the path."""
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            if callable(data):
                data(fh)
            else:
                fh.write(data)
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


class Logger:
    """Time series by key; every append adds one row to each key it names.  ``meta`` holds
    constants saved beside the series (paths, joint names).

    Checkpoints: with ``checkpoint`` (a path, normally the run's ``log.npz``) the log is written there
    atomically whenever the logged time ``t`` has advanced by ``checkpoint_every_s`` simulated seconds
    since the last checkpoint (checked when an append carries ``t``, before that row is added, so a
    checkpoint holds whole control steps).  A run killed at any instant (``kill -9``) leaves the last
    checkpoint: at most ``checkpoint_every_s`` of simulated time is lost.  Checkpoints are written
    uncompressed (fast); the final :meth:`save` compresses.
    """

    def __init__(self, checkpoint: str | Path | None = None, checkpoint_every_s: float = 1.0):
        self.data: dict[str, list] = {}
        self.meta: dict[str, object] = {}
        self.checkpoint_path = Path(checkpoint) if checkpoint is not None else None
        self.checkpoint_every_s = float(checkpoint_every_s)
        self.checkpoints = 0                      # checkpoints written
        self._stacked: dict[str, np.ndarray] = {}  # rows already stacked, per key
        self._next_checkpoint_t: float | None = None

    def append(self, **kw) -> None:
        """Add one row to each named series (values are copied as float arrays)."""
        if self.checkpoint_path is not None and "t" in kw:
            self._maybe_checkpoint(float(kw["t"]))
        for k, x in kw.items():
            self.data.setdefault(k, []).append(np.array(x, dtype=float, copy=True))

    def _maybe_checkpoint(self, t: float) -> None:
        if self._next_checkpoint_t is None:
            self._next_checkpoint_t = t + self.checkpoint_every_s
        elif t >= self._next_checkpoint_t:
            self.save(self.checkpoint_path, compress=False, fsync=False)
            self.checkpoints += 1
            self._next_checkpoint_t = t + self.checkpoint_every_s

    @property
    def last_t(self) -> float | None:
        """The last logged time (s), or None if nothing with a ``t`` was logged."""
        ts = self.data.get("t")
        return float(ts[-1]) if ts else None

    def arrays(self) -> dict[str, np.ndarray]:
        """Each series stacked into one array (rows = appends); ragged series as object arrays."""
        out = {}
        for k, xs in self.data.items():
            done = self._stacked.get(k)
            if done is not None and len(done) > len(xs):  # the list was replaced from outside
                done = None
            if done is not None and len(done) == len(xs):
                out[k] = done
                continue
            try:
                tail = np.stack(xs[len(done):]) if done is not None else np.stack(xs)
                out[k] = np.concatenate([done, tail]) if done is not None else tail
            except ValueError:
                out[k] = np.array(xs, dtype=object)
            if out[k].dtype != object:
                self._stacked[k] = out[k]          # reused by the next call: stacking stays linear in time
        return out

    def __len__(self) -> int:
        return max((len(v) for v in self.data.values()), default=0)

    def _archive(self) -> dict[str, np.ndarray]:
        arrays = self.arrays()
        for k, v in self.meta.items():
            arrays[k] = np.asarray(v)
        return arrays

    def to_bytes(self, compress: bool = True) -> bytes:
        """The log as the bytes of an ``.npz`` archive (series and meta)."""
        buf = io.BytesIO()
        (np.savez_compressed if compress else np.savez)(buf, **self._archive())
        return buf.getvalue()

    def save(self, path, compress: bool = True, fsync: bool = True) -> Path:
        """Write the log (series and meta) to ``path`` (``.npz``) atomically."""
        arrays = self._archive()
        return atomic_write(path, lambda fh: (np.savez_compressed if compress else np.savez)(fh, **arrays), fsync)

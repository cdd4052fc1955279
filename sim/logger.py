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


def atomic_write(path: str | Path, data: bytes | str) -> Path:
    """Write ``data`` (bytes, or text as UTF-8) to ``path`` atomically: temporary file in the same
    directory, fsync, rename.  Returns the path."""
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
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
    constants saved beside the series (paths, joint names)."""

    def __init__(self):
        self.data: dict[str, list] = {}
        self.meta: dict[str, object] = {}

    def append(self, **kw) -> None:
        """Add one row to each named series (values are copied as float arrays)."""
        for k, x in kw.items():
            self.data.setdefault(k, []).append(np.array(x, dtype=float, copy=True))

    def arrays(self) -> dict[str, np.ndarray]:
        """Each series stacked into one array (rows = appends); ragged series as object arrays."""
        out = {}
        for k, xs in self.data.items():
            try:
                out[k] = np.stack(xs)
            except ValueError:
                out[k] = np.array(xs, dtype=object)
        return out

    def __len__(self) -> int:
        return max((len(v) for v in self.data.values()), default=0)

    def to_bytes(self, compress: bool = True) -> bytes:
        """The log as the bytes of an ``.npz`` archive (series and meta)."""
        arrays = self.arrays()
        for k, v in self.meta.items():
            arrays[k] = np.asarray(v)
        buf = io.BytesIO()
        (np.savez_compressed if compress else np.savez)(buf, **arrays)
        return buf.getvalue()

    def save(self, path, compress: bool = True) -> Path:
        """Write the log to ``path`` (``.npz``) atomically."""
        return atomic_write(path, self.to_bytes(compress))

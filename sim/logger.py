"""The run log: time series by key, saved as ``log.npz`` atomically.

Every file a run writes goes through :func:`atomic_write`: the bytes go to a temporary file in the
same directory, are flushed to disk, and the temporary file is renamed over the target
(``os.replace``, atomic on POSIX).  A reader (or a ``kill -9`` at any instant) therefore sees either
the previous complete file or the new complete file, never a half-written one.

Checkpoints are chunked: checkpoint k writes only the rows logged since checkpoint k − 1, as
``.<log name>.parts/<k>.npz`` beside the log (each part atomic); the final :meth:`Logger.save`
writes the whole ``log.npz`` and removes the parts.  A run killed before its final save leaves the
parts: :func:`read_log` (what the viewer and the tests read) returns ``log.npz`` when it exists, else
the parts concatenated, i.e. everything up to the last checkpoint.  Writing a checkpoint costs the
rows of one checkpoint interval, so a long run's checkpoints cost O(n) in total, not O(n²).
"""
from __future__ import annotations

import io
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np


def _umask() -> int:
    """The process' umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


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
        os.fchmod(fd, 0o666 & ~_umask())     # mkstemp makes 0600: honour the umask like open() (0644 under 022)
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


def parts_dir(path: str | Path) -> Path:
    """The directory of the checkpoint parts of the log ``path`` (``.<name>.parts`` beside it)."""
    path = Path(path)
    return path.parent / f".{path.name}.parts"


def read_log(path: str | Path, allow_pickle: bool = False) -> dict[str, np.ndarray]:
    """The arrays of a run log: ``path`` is the log (``log.npz``) or its run directory.  The complete
    log when it was saved; else (a run killed before its final save) its checkpoint parts
    concatenated row-wise per key (meta entries: the last part's).  FileNotFoundError if neither."""
    path = Path(path)
    if path.is_dir():
        path = path / "log.npz"
    if path.is_file():
        with np.load(path, allow_pickle=allow_pickle) as z:
            return {k: z[k] for k in z.files}
    parts = sorted(parts_dir(path).glob("[0-9]*.npz")) if parts_dir(path).is_dir() else []
    if not parts:
        raise FileNotFoundError(f"no log at {path} (and no checkpoint parts in {parts_dir(path)})")
    rows: dict[str, list] = {}
    out: dict[str, np.ndarray] = {}
    for p in parts:
        with np.load(p, allow_pickle=allow_pickle) as z:
            series = set(z["__series__"].tolist()) if "__series__" in z.files else set()
            for k in z.files:
                if k in series:
                    rows.setdefault(k, []).append(z[k])
                elif k != "__series__":
                    out[k] = z[k]
    for k, chunks in rows.items():
        try:
            out[k] = np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
        except ValueError:                 # a series whose rows changed shape between parts: one row per entry
            flat = [r for c in chunks for r in c]
            out[k] = np.empty(len(flat), dtype=object)
            out[k][:] = flat
    return out


class Logger:
    """Time series by key; every append adds one row to each key it names.  ``meta`` holds
    constants saved beside the series (paths, joint names).

    Storage: each key is one preallocated float array (rows × the first row's shape) that doubles
    when full, so an append is one row copy (O(1), no per-row Python object kept) and
    :meth:`arrays` returns views without stacking.  A key whose rows change shape falls back to a
    list of rows, saved as an object array (as ``np.array(rows, dtype=object)``).

    Checkpoints: with ``checkpoint`` (a path, normally the run's ``log.npz``) the log is written there
    atomically whenever the logged time ``t`` has advanced by ``checkpoint_every_s`` simulated seconds
    since the last checkpoint (checked when an append carries ``t``, before that row is added, so a
    checkpoint holds whole control steps).  A run killed at any instant (``kill -9``) leaves the last
    checkpoint: at most ``checkpoint_every_s`` of simulated time is lost.  A checkpoint writes only the
    rows since the previous one, uncompressed, as one part file (module docstring; :func:`read_log`
    reads them back); the final :meth:`save` to the checkpoint path writes the whole log compressed
    and removes the parts.
    """

    #: rows allocated for a new key (the column doubles when full)
    INITIAL_ROWS = 1024

    def __init__(self, checkpoint: str | Path | None = None, checkpoint_every_s: float = 1.0):
        self.meta: dict[str, object] = {}
        self.checkpoint_path = Path(checkpoint) if checkpoint is not None else None
        self.checkpoint_every_s = float(checkpoint_every_s)
        self.checkpoints = 0                      # checkpoints written
        self._cols: dict[str, np.ndarray] = {}    # key -> column (capacity × row shape); rows [0, n) are data
        self._n: dict[str, int] = {}              # key -> rows appended
        self._ragged: dict[str, list] = {}        # key -> rows, for a key whose row shape changed
        self._next_checkpoint_t: float | None = None
        self._saved: dict[str, int] = {}          # key -> rows already in a checkpoint part

    def append(self, **kw) -> None:
        """Add one row to each named series (values are copied as float arrays)."""
        if self.checkpoint_path is not None and "t" in kw:
            self._maybe_checkpoint(float(kw["t"]))
        cols, counts = self._cols, self._n
        for k, x in kw.items():
            col = cols.get(k)
            if col is None:
                self._append_slow(k, x)
                continue
            n = counts[k]
            if type(x) is np.ndarray:                     # fast paths: an array, or a Python number
                if x.shape != col.shape[1:]:
                    self._append_slow(k, x)
                    continue
            elif type(x) is float or type(x) is int:
                if col.ndim != 1:
                    self._append_slow(k, x)
                    continue
            else:
                x = np.asarray(x, dtype=float)
                if x.shape != col.shape[1:]:
                    self._append_slow(k, x)
                    continue
            if n == len(col):
                col = cols[k] = np.concatenate([col, np.empty_like(col)])
            col[n] = x
            counts[k] = n + 1

    def _append_slow(self, k: str, x) -> None:
        """First row of ``k``, or a row of another shape than the column's (the key becomes ragged)."""
        row = np.array(x, dtype=float, copy=True)
        if k in self._ragged:
            self._ragged[k].append(row)
            return
        col = self._cols.get(k)
        if col is None:
            col = self._cols[k] = np.empty((self.INITIAL_ROWS, *row.shape))
            col[0] = row
            self._n[k] = 1
            return
        n = self._n.pop(k)                    # the shape changed: keep this key as a list of rows
        self._ragged[k] = [c.copy() for c in col[:n]] + [row]
        del self._cols[k]

    def put(self, key: str, rows) -> None:
        """Set series ``key`` to ``rows`` (a whole series at once, copied as floats: e.g. a diagnostic
        computed from the logged states after the loop), replacing any rows it had."""
        rows = np.array(rows, dtype=float, copy=True)
        if rows.ndim == 0:
            raise ValueError(f"Logger.put('{key}'): expected rows (a series), got a scalar")
        self._ragged.pop(key, None)
        self._cols[key], self._n[key] = rows, len(rows)
        self._saved.pop(key, None)

    def _maybe_checkpoint(self, t: float) -> None:
        if self._next_checkpoint_t is None:
            self._next_checkpoint_t = t + self.checkpoint_every_s
        elif t >= self._next_checkpoint_t:
            self._write_part()
            self.checkpoints += 1
            self._next_checkpoint_t = t + self.checkpoint_every_s

    def _write_part(self) -> Path:
        """Checkpoint part ``checkpoints + 1``: per series the rows not in an earlier part, the names of
        the series (``__series__``) and the meta; written atomically, uncompressed."""
        d = parts_dir(self.checkpoint_path)
        d.mkdir(exist_ok=True)
        arrays, saved = {}, self._saved
        for k, col in self._cols.items():
            arrays[k] = col[saved.get(k, 0):self._n[k]]
            saved[k] = self._n[k]
        for k, xs in self._ragged.items():
            tail = np.empty(len(xs) - saved.get(k, 0), dtype=object)
            tail[:] = xs[saved.get(k, 0):]
            arrays[k] = tail
            saved[k] = len(xs)
        series = list(arrays)
        for k, v in self.meta.items():
            if k not in arrays:
                arrays[k] = np.asarray(v)
        arrays["__series__"] = np.array(series)
        return atomic_write(d / f"{self.checkpoints + 1:06d}.npz", lambda fh: np.savez(fh, **arrays), fsync=False)

    @property
    def data(self) -> dict[str, object]:
        """Per key, its rows so far: an array view (rows × shape) or, for a ragged key, the list of rows."""
        out = {k: col[:self._n[k]] for k, col in self._cols.items()}
        out.update(self._ragged)
        return out

    @property
    def last_t(self) -> float | None:
        """The last logged time (s), or None if nothing with a ``t`` was logged."""
        if "t" in self._ragged:
            return float(self._ragged["t"][-1])
        n = self._n.get("t", 0)
        return float(self._cols["t"][n - 1]) if n else None

    def arrays(self) -> dict[str, np.ndarray]:
        """Each series as one array (rows = appends; a view of the column, valid until the next
        append); ragged series as object arrays."""
        out = {k: col[:self._n[k]] for k, col in self._cols.items()}
        for k, xs in self._ragged.items():
            try:
                out[k] = np.array(xs, dtype=object)
            except ValueError:                 # shapes NumPy cannot even put side by side
                arr = np.empty(len(xs), dtype=object)
                arr[:] = xs
                out[k] = arr
        return out

    def __len__(self) -> int:
        return max([*self._n.values(), *(len(v) for v in self._ragged.values())], default=0)

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
        """Write the log (series and meta) to ``path`` (``.npz``) atomically; when ``path`` is the
        checkpoint path, its checkpoint parts are then removed (the log holds all of them)."""
        arrays = self._archive()
        atomic_write(path, lambda fh: (np.savez_compressed if compress else np.savez)(fh, **arrays), fsync)
        if self.checkpoint_path is not None and Path(path).resolve() == self.checkpoint_path.resolve():
            shutil.rmtree(parts_dir(path), ignore_errors=True)
        return Path(path)

"""The run log: time series by key, saved as ``log.npz`` atomically, in memory bounded by one chunk.

Every file a run writes goes through :func:`atomic_write`: the bytes go to a temporary file in the
same directory, are flushed to disk, and the temporary file is renamed over the target
(``os.replace``, atomic on POSIX).  A reader (or a ``kill -9`` at any instant) therefore sees either
the previous complete file or the new complete file, never a half-written one.

A logger with a checkpoint path (every scenario run's: ``log.npz`` of the run directory) streams its
rows to disk in chunks: checkpoint k writes the rows logged since checkpoint k − 1 as
``.<log name>.parts/<k>.npz`` beside the log (each part atomic, uncompressed) and then **drops them
from memory**, so a run holds at most one checkpoint interval of rows whatever its duration.
:meth:`Logger.chunks` reads the log back one chunk at a time (what a post-loop pass over a long run
uses), :meth:`Logger.extend_chunks` adds series computed chunk by chunk to the parts, and
:meth:`Logger.arrays` still returns whole series (read back from the parts: memory proportional to the
run, for the scenarios that want it).  The final :meth:`Logger.save` assembles ``log.npz`` from the
parts one chunk at a time (each series streamed into its ``.npy`` member, :func:`write_npz_streamed`),
never holding the whole log, then removes the parts.

A run killed before its final save (``kill -9``) leaves no ``log.npz``, only the parts directory
``.log.npz.parts/`` (everything up to the last checkpoint); :func:`read_log` (what ``cmstack view``,
``replay.html`` and the tests read) returns ``log.npz`` when it exists, else the parts concatenated,
else (a ``cmstack rt`` run whose two processes both died) the log of the records it streamed to
``.rt/`` (sim/rt_records.py).
A series that is missing from a later part (a post-loop pass killed half-way) is left out there.
"""

from __future__ import annotations

import ast
import functools
import io
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Collection, Iterable, Iterator
from functools import partial
from pathlib import Path
from typing import IO, Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike


def _umask() -> int:
    """The process' umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(
    path: str | Path, data: bytes | str | Callable[[IO[bytes]], Any], fsync: bool = True
) -> Path:
    """Write ``data`` to ``path`` atomically: into a temporary file in the same directory, fsync
    (unless ``fsync=False``: a killed process still leaves no torn file, only a power cut could),
    then rename over ``path``.  ``data``: bytes, text (UTF-8), or a callable ``writer(fh)`` that
    writes into the open binary file.  Returns the path."""
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600: honour the umask like open() (0644 under 022)
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


def _part_files(path: Path) -> list[Path]:
    d = parts_dir(path)
    return sorted(d.glob("[0-9]*.npz")) if d.is_dir() else []


@functools.lru_cache(maxsize=4096)
def _npy_header(header: bytes) -> tuple[tuple, bool, np.dtype]:
    """(shape, fortran order, dtype) of a ``.npy`` header dictionary (the parts of a run repeat a few)."""
    d = ast.literal_eval(header.decode("latin1"))
    return tuple(d["shape"]), bool(d["fortran_order"]), np.dtype(np.lib.format.descr_to_dtype(d["descr"]))


def _npy(buf: bytes, allow_pickle: bool) -> np.ndarray:
    """The array of the bytes of a ``.npy`` file (header parsed once per distinct header)."""
    if buf[:6] != b"\x93NUMPY":
        raise ValueError("not a .npy member")
    major = buf[6]
    hlen, start = (
        (int.from_bytes(buf[8:10], "little"), 10) if major == 1 else (int.from_bytes(buf[8:12], "little"), 12)
    )
    shape, fortran, dtype = _npy_header(buf[start : start + hlen])
    if dtype.hasobject:
        return np.lib.format.read_array(io.BytesIO(buf), allow_pickle=allow_pickle)
    x = np.frombuffer(buf, dtype=dtype, offset=start + hlen, count=int(np.prod(shape, dtype=np.int64)))
    return x.reshape(shape, order="F" if fortran else "C").copy()


def _read_part(
    p: Path, allow_pickle: bool = False, keys: Collection[str] | None = None, meta: bool = True
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(series, meta) of one checkpoint part; ``keys``: only these series; ``meta=False``: no meta."""
    series, out_meta = {}, {}
    with zipfile.ZipFile(p) as zf:
        members = {n[:-4]: n for n in zf.namelist() if n.endswith(".npy")}
        names = (
            set(_npy(zf.read(members["__series__"]), False).tolist()) if "__series__" in members else set()
        )
        for k, n in members.items():
            if k in names:
                if keys is None or k in keys:
                    series[k] = _npy(zf.read(n), allow_pickle)
            elif k != "__series__" and meta and keys is None:
                out_meta[k] = _npy(zf.read(n), allow_pickle)
    return series, out_meta


def _concat(chunks: list) -> np.ndarray:
    try:
        return np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
    except ValueError:  # a series whose rows changed shape between parts: one row per entry
        flat = [r for c in chunks for r in c]
        out = np.empty(len(flat), dtype=object)
        out[:] = flat
        return out


def _complete(present: list[set]) -> set:
    """The series to keep from parts whose series are ``present`` (one set per part, in order): a series
    is kept when every part from its first to the last has it (one that a later part lacks was being
    added by a post-loop pass that did not finish)."""
    keep = set()
    for k in set().union(*present) if present else ():
        first = next(i for i, s in enumerate(present) if k in s)
        if all(k in s for s in present[first:]):
            keep.add(k)
    return keep


def read_log(path: str | Path, allow_pickle: bool = False) -> dict[str, np.ndarray]:
    """The arrays of a run log: ``path`` is the log (``log.npz``) or its run directory.  The complete
    log when it was saved; else (a run killed before its final save) its checkpoint parts
    concatenated row-wise per key (meta entries: the last part's; a series a later part lacks is left
    out, see :func:`_complete`).  FileNotFoundError if neither."""
    path = Path(path)
    if path.is_dir():
        path = path / "log.npz"
    if path.is_file():
        with np.load(path, allow_pickle=allow_pickle) as z:
            return {k: z[k] for k in z.files}
    parts = _part_files(path)
    if not parts:
        from cmstack.sim.rt_records import read_records_log  # (a cmstack rt run whose processes both died)

        records = read_records_log(path.parent)
        if records is not None:
            return records
        raise FileNotFoundError(f"no log at {path} (and no checkpoint parts in {parts_dir(path)})")
    rows: dict[str, list] = {}
    present, out = [], {}
    for p in parts:
        series, meta = _read_part(p, allow_pickle)
        present.append(set(series))
        for k, x in series.items():
            rows.setdefault(k, []).append(x)
        out.update(meta)
    for k in _complete(present):
        out[k] = _concat(rows[k])
    return out


def _npz_member_rows(path: Path, key: str, idx: np.ndarray | None, block_rows: int = 8192) -> np.ndarray:
    """Rows ``idx`` (sorted indices; None: all) of the array ``key`` of the ``.npz`` at ``path``, read
    from its (compressed or stored) member block by block: only the rows asked for are kept."""
    with zipfile.ZipFile(path) as zf, zf.open(f"{key}.npy") as f:
        version = np.lib.format.read_magic(f)
        shape, fortran, dtype = (
            np.lib.format.read_array_header_1_0(f)
            if version == (1, 0)
            else np.lib.format.read_array_header_2_0(f)
        )
        if dtype.hasobject or fortran or len(shape) == 0 or idx is None:
            f.close()
            with np.load(path, allow_pickle=dtype.hasobject) as z:
                x = z[key]
            return x if idx is None else x[idx]
        row = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
        out = np.empty((len(idx), *shape[1:]), dtype=dtype)
        i = j = 0  # rows read so far; entries of idx filled
        while j < len(idx) and i < shape[0]:
            n = min(block_rows, shape[0] - i)
            blk = (
                np.frombuffer(f.read(n * row), dtype=dtype).reshape(n, *shape[1:])
                if row
                else np.empty((n, *shape[1:]), dtype=dtype)
            )
            k = j + int(np.searchsorted(idx[j:], i + n))
            out[j:k] = blk[idx[j:k] - i]
            i, j = i + n, k
        return out


def log_keys(path: str | Path) -> list[str]:
    """The entry names of a run log (``log.npz``, else those of its last checkpoint part)."""
    path = Path(path)
    if path.is_dir():
        path = path / "log.npz"
    if path.is_file():
        with zipfile.ZipFile(path) as zf:
            return [n[:-4] for n in zf.namelist() if n.endswith(".npy")]
    parts = _part_files(path)
    if not parts:
        raise FileNotFoundError(f"no log at {path} (and no checkpoint parts in {parts_dir(path)})")
    with np.load(parts[-1]) as z:
        return [k for k in z.files if k != "__series__"]


def read_log_rows(
    path: str | Path, keys: Iterable[str], idx: Iterable[int] | np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """Entries ``keys`` of a run log (as :func:`read_log` reads it: ``log.npz``, else the checkpoint
    parts), series restricted to rows ``idx`` (sorted row indices; None: all); missing keys are left
    out.  Memory: the rows asked for (plus one block or one part), not the whole log."""
    path = Path(path)
    if path.is_dir():
        path = path / "log.npz"
    idx = None if idx is None else np.asarray(idx, dtype=np.int64)
    if path.is_file():
        with zipfile.ZipFile(path) as zf:
            have = {n[:-4] for n in zf.namelist() if n.endswith(".npy")}
        return {k: _npz_member_rows(path, k, idx) for k in keys if k in have}
    parts = _part_files(path)
    if not parts:
        raise FileNotFoundError(f"no log at {path} (and no checkpoint parts in {parts_dir(path)})")
    rows: dict[str, list] = {}
    present, meta, offset = [], {}, 0
    for p in parts:
        series, m = _read_part(p, allow_pickle=True)
        present.append(set(series))
        meta.update({k: v for k, v in m.items() if k in keys})
        n = len(series.get("t", next(iter(series.values()), ())))
        for k in keys:
            if k in series:
                x = series[k]
                if idx is not None:
                    sel = idx[(idx >= offset) & (idx < offset + len(x))] - offset
                    x = x[sel]
                rows.setdefault(k, []).append(x)
        offset += n
    out = {k: _concat(v) for k, v in rows.items() if k in _complete(present)}
    out.update(meta)
    return out


def write_npz_streamed(fh: IO[bytes], arrays: dict, streams: dict, compress: bool = True) -> None:
    """Write an ``.npz`` archive (what ``np.load`` reads) into the open binary file ``fh``: ``arrays``
    (name -> array, written whole) and ``streams`` (name -> (row shape, dtype, rows, chunks)), each
    written as a ``.npy`` member whose header says (rows, *row shape) and whose data are the chunks'
    bytes in order, so that a series is never held whole.  ``chunks``: an iterable of C-contiguous
    arrays of that dtype and row shape with ``rows`` rows in total."""
    mode = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(fh, "w", compression=mode, allowZip64=True) as zf:
        for name, x in arrays.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(x), allow_pickle=True)
        for name, (shape, dtype, n, chunks) in streams.items():
            header = {
                "descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                "fortran_order": False,
                "shape": (int(n), *shape),
            }
            with zf.open(f"{name}.npy", "w", force_zip64=True) as f:
                try:
                    np.lib.format.write_array_header_1_0(f, header)
                except ValueError:  # a header longer than version 1.0 allows
                    np.lib.format.write_array_header_2_0(f, header)
                written = 0
                for c in chunks:
                    c = np.ascontiguousarray(c, dtype=dtype)
                    f.write(c.data if c.size else b"")
                    written += len(c)
                if written != n:
                    raise ValueError(f"write_npz_streamed: '{name}' got {written} rows, its header says {n}")


class Logger:
    """Time series by key; every append adds one row to each key it names.  ``meta`` holds
    constants saved beside the series (paths, joint names).

    Storage: each key is one preallocated float array (rows × the first row's shape) that doubles
    when full, so an append is one row copy (O(1), no per-row Python object kept).  A key whose rows
    change shape falls back to a list of rows, saved as an object array (as
    ``np.array(rows, dtype=object)``).

    Checkpoints: with ``checkpoint`` (a path, normally the run's ``log.npz``) the rows are written
    there in chunks whenever the logged time ``t`` has advanced by ``checkpoint_every_s`` simulated
    seconds since the last checkpoint (checked when an append carries ``t``, before that row is added,
    so a chunk holds whole control steps): one part file per chunk (module docstring), after which
    those rows leave memory (:attr:`rows_in_memory` is at most one interval's rows).  A run killed at
    any instant (``kill -9``) leaves the parts: at most ``checkpoint_every_s`` of simulated time is
    lost.  The final :meth:`save` to the checkpoint path writes the whole log (assembled chunk by
    chunk) and removes the parts.  Without ``checkpoint`` everything stays in memory.
    """

    #: rows allocated for a new key (the column doubles when full)
    INITIAL_ROWS = 1024

    def __init__(self, checkpoint: str | Path | None = None, checkpoint_every_s: float = 1.0) -> None:
        self.meta: dict[str, object] = {}
        self.checkpoint_path = Path(checkpoint) if checkpoint is not None else None
        self.checkpoint_every_s = float(checkpoint_every_s)
        self.checkpoints = 0  # checkpoint parts written
        self._cols: dict[str, np.ndarray] = {}  # key -> column (capacity × row shape); rows [0, n) in memory
        self._n: dict[str, int] = {}  # key -> rows in memory
        self._ragged: dict[str, list] = {}  # key -> rows in memory, for a key whose row shape changed
        self._on_disk: dict[str, int] = {}  # key -> rows already in checkpoint parts (gone from memory)
        self._whole: dict[str, np.ndarray] = {}  # key -> a whole series set by put()
        self._dropped: set[str] = set()  # series left out of arrays() and the saved log
        self._next_checkpoint_t: float | None = None
        self._last_t: float | None = None
        self._disk_cache: tuple[int, dict] | None = None  # (parts, series concatenated) for arrays()

    # ---------------------------------------------------------------------------------- appending
    def append_step(
        self, t: float, q: np.ndarray, v: np.ndarray, tau: np.ndarray, data: Any, **more: Any
    ) -> None:
        """One control step's row as the scenarios log it: t [s], q, v, τ and the plant's own state (``data``:
        its MuJoCo data; ``plant_qpos``, ``plant_qvel``), then the series in ``more`` (``append``)."""
        self.append(t=t, q=q, v=v, tau=tau, plant_qpos=data.qpos, plant_qvel=data.qvel, **more)

    def append(self, **kw: Any) -> None:
        """Add one row to each named series (values are copied as float arrays)."""
        if "t" in kw:
            t = float(kw["t"])
            if self.checkpoint_path is not None:
                self._maybe_checkpoint(t)
            self._last_t = t
        cols, counts = self._cols, self._n
        for k, x in kw.items():
            col = cols.get(k)
            if col is None:
                self._append_slow(k, x)
                continue
            n = counts[k]
            if type(x) is np.ndarray:  # fast paths: an array, or a Python number
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

    def _append_slow(self, k: str, x: ArrayLike) -> None:
        """First row of ``k``, or a row of another shape than the column's (the key becomes ragged)."""
        row = np.array(x, dtype=float, copy=True)
        self._whole.pop(k, None)
        if k in self._ragged:
            self._ragged[k].append(row)
            return
        col = self._cols.get(k)
        if col is None:
            col = self._cols[k] = np.empty((self.INITIAL_ROWS, *row.shape))
            col[0] = row
            self._n[k] = 1
            return
        n = self._n.pop(k)  # the shape changed: keep this key as a list of rows
        self._ragged[k] = [c.copy() for c in col[:n]] + [row]
        del self._cols[k]

    def put(self, key: str, rows: ArrayLike) -> None:
        """Set series ``key`` to ``rows`` (a whole series at once, copied as floats: e.g. a diagnostic
        computed from the logged states after the loop), replacing any rows it had (also those in
        checkpoint parts)."""
        rows = np.array(rows, dtype=float, copy=True)
        if rows.ndim == 0:
            raise ValueError(f"Logger.put('{key}'): expected rows (a series), got a scalar")
        self._cols.pop(key, None), self._n.pop(key, None), self._ragged.pop(key, None)
        self._dropped.discard(key)
        self._whole[key] = rows

    def drop(self, *keys: str) -> None:
        """Leave series ``keys`` out of :meth:`arrays`, :meth:`chunks` and the saved log (e.g. series a
        post-loop pass added to only some chunks)."""
        for k in keys:
            self._dropped.add(k)
            self._cols.pop(k, None), self._n.pop(k, None), self._ragged.pop(k, None), self._whole.pop(k, None)

    # ---------------------------------------------------------------------------------- checkpoints
    def _maybe_checkpoint(self, t: float) -> None:
        if self._next_checkpoint_t is None:
            self._next_checkpoint_t = t + self.checkpoint_every_s
        elif t >= self._next_checkpoint_t:
            self.flush()
            self._next_checkpoint_t = t + self.checkpoint_every_s

    def flush(self) -> Path | None:
        """Write the rows in memory as the next checkpoint part and drop them from memory (nothing
        without a checkpoint path or without rows in memory).  Returns the part's path."""
        if self.checkpoint_path is None or self.rows_in_memory == 0:
            return None
        p = self._write_part()
        self.checkpoints += 1
        for k, n in self._n.items():
            self._on_disk[k] = self._on_disk.get(k, 0) + n
            self._n[k] = 0
        for k, xs in self._ragged.items():
            self._on_disk[k] = self._on_disk.get(k, 0) + len(xs)
            xs.clear()
        return p

    def _memory_series(self) -> dict[str, np.ndarray]:
        out = {k: col[: self._n[k]] for k, col in self._cols.items() if self._n[k]}
        for k, xs in self._ragged.items():
            if xs:
                arr = np.empty(len(xs), dtype=object)
                arr[:] = xs
                out[k] = arr
        return out

    def _write_part(self) -> Path:
        """Checkpoint part ``checkpoints + 1``: per series the rows in memory, the names of the series
        (``__series__``) and the meta; written atomically, uncompressed."""
        assert self.checkpoint_path is not None  # parts exist only for a log with a checkpoint path
        d = parts_dir(self.checkpoint_path)
        d.mkdir(exist_ok=True)
        arrays = self._memory_series()
        return self._write_part_file(d / f"{self.checkpoints + 1:06d}.npz", arrays)

    def _write_part_file(self, path: Path, series: dict) -> Path:
        arrays = dict(series)
        for k, v in self.meta.items():
            if k not in arrays:
                arrays[k] = np.asarray(v)
        arrays["__series__"] = np.array(list(series))
        return atomic_write(path, lambda fh: np.savez(fh, **arrays), fsync=False)

    @property
    def rows_in_memory(self) -> int:
        """The most rows any appended series holds in memory (the rest is in checkpoint parts)."""
        return max([*self._n.values(), *(len(v) for v in self._ragged.values())], default=0)

    @property
    def parts(self) -> list[Path]:
        """The checkpoint part files written so far, in order."""
        return _part_files(self.checkpoint_path) if self.checkpoint_path is not None else []

    # ---------------------------------------------------------------------------------- reading
    def chunks(self, keys: Iterable[str] | None = None) -> Iterator[dict[str, np.ndarray]]:
        """Iterate over the log one chunk at a time: per checkpoint part, then the rows still in memory,
        a dict of series (only ``keys`` if given; series set whole by :meth:`put` are not included).
        Memory: one chunk."""
        keys = None if keys is None else set(keys)
        for p in self.parts:
            series, _ = _read_part(p, allow_pickle=True, keys=keys, meta=False)
            yield {k: v for k, v in series.items() if k not in self._dropped and k not in self._whole}
        mem = {
            k: v
            for k, v in self._memory_series().items()
            if (keys is None or k in keys) and k not in self._whole
        }
        if mem:
            yield mem

    def select(self, keys: Iterable[str]) -> dict[str, np.ndarray]:
        """Series ``keys`` whole (those that exist), read chunk by chunk: memory for these series only."""
        keys = set(keys)
        rows: dict[str, list] = {}
        for chunk in self.chunks(keys):
            for k, x in chunk.items():
                rows.setdefault(k, []).append(x)
        out = {k: _concat(v) for k, v in rows.items()}
        out.update({k: v for k, v in self._whole.items() if k in keys})
        return out

    def extend_chunks(
        self, fn: Callable[[dict[str, np.ndarray]], dict[str, Any]], deadline: float | None = None
    ) -> tuple[int, int]:
        """Add to every chunk the series ``fn(chunk)`` returns (a dict of arrays with the chunk's rows):
        each checkpoint part is rewritten (atomically) with them; the rows still in memory are first
        written as a part (:meth:`flush`).  Without a checkpoint path, the whole log is one chunk and
        the new series are set with :meth:`put`.  With ``deadline`` (a ``time.monotonic()`` instant)
        the pass stops at the first chunk boundary after it.  Returns (chunks done, chunks in all)."""
        import time

        if self.checkpoint_path is None:
            for k, x in fn(self.arrays()).items():
                self.put(k, x)
            return 1, 1
        self.flush()
        parts = self.parts
        for i, p in enumerate(parts):
            if deadline is not None and time.monotonic() > deadline:
                return i, len(parts)
            series, _ = _read_part(p, allow_pickle=True)
            series.update({k: np.asarray(v, dtype=float) for k, v in fn(series).items()})
            self._write_part_file(p, series)
            self._disk_cache = None
        return len(parts), len(parts)

    def _disk_series(self) -> dict[str, np.ndarray]:
        """The series in the checkpoint parts, concatenated (cached until the next part)."""
        parts = self.parts
        if self._disk_cache is None or self._disk_cache[0] != len(parts):
            rows: dict[str, list] = {}
            present: list[set] = []
            for p in parts:
                series, _ = _read_part(p, allow_pickle=True)
                present.append(set(series))
                for k, x in series.items():
                    rows.setdefault(k, []).append(x)
            self._disk_cache = (len(parts), {k: _concat(rows[k]) for k in _complete(present)})
        return self._disk_cache[1]

    @property
    def data(self) -> dict[str, np.ndarray]:
        """Per key, its rows so far (:meth:`arrays`)."""
        return self.arrays()

    @property
    def last_t(self) -> float | None:
        """The last logged time (s), or None if nothing with a ``t`` was logged."""
        if self._last_t is None and "t" in self._whole and len(self._whole["t"]):
            return float(self._whole["t"][-1])
        return self._last_t

    def arrays(self) -> dict[str, np.ndarray]:
        """Each series as one array (rows = appends; the rows in checkpoint parts are read back from
        disk, so this costs memory in proportion to the run: a long run's post-loop pass uses
        :meth:`chunks`); ragged series as object arrays."""
        mem = self._memory_series()
        out = {}
        disk = self._disk_series() if self.checkpoints else {}
        for k in {*disk, *self._cols, *self._ragged}:
            pieces = [x for x in (disk.get(k), mem.get(k)) if x is not None]
            if not pieces:  # a key with no rows left in memory nor on disk
                col = self._cols.get(k)
                pieces = [col[:0]] if col is not None else [np.empty(0, dtype=object)]
            out[k] = _concat(pieces) if len(pieces) > 1 else pieces[0]
        out.update(self._whole)
        for k in self._dropped:
            out.pop(k, None)
        return out

    def __len__(self) -> int:
        counts = [self._on_disk.get(k, 0) + n for k, n in self._n.items()]
        counts += [self._on_disk.get(k, 0) + len(v) for k, v in self._ragged.items()]
        counts += [len(v) for v in self._whole.values()]
        return max(counts, default=0)

    # ---------------------------------------------------------------------------------- saving
    def _archive(self) -> dict[str, np.ndarray]:
        arrays = self.arrays()
        for k, v in self.meta.items():
            arrays[k] = np.asarray(v)
        return arrays

    def to_bytes(self, compress: bool = True) -> bytes:
        """The log as the bytes of an ``.npz`` archive (series and meta)."""
        buf = io.BytesIO()
        save: Callable[..., None] = np.savez_compressed if compress else np.savez
        save(buf, **self._archive())
        return buf.getvalue()

    def _streams(self, spool: Path) -> tuple[dict, dict]:
        """(whole arrays, streams) for :func:`write_npz_streamed`: one pass over the chunks copies each
        series' rows, in order, into its own raw file under ``spool``; a series whose chunks are not
        all rows of one dtype and shape is returned whole instead (as :func:`read_log` joins it)."""
        files: dict[str, Any] = {}
        info: dict[str, Any] = {}
        irregular: dict[str, Any] = {}
        present: list[set] = []

        def to_irregular(k: str, x: np.ndarray) -> None:
            f = files.pop(k, None)
            rows = []
            if f is not None:
                f.close()
                shape, dtype, n = info.pop(k)
                rows.append(np.fromfile(f.name, dtype=dtype).reshape(n, *shape))
            irregular[k] = rows + [x]

        try:
            for chunk in self.chunks():
                present.append(set(chunk))
                for k, x in chunk.items():
                    if k in irregular:
                        irregular[k].append(x)
                        continue
                    shape, dtype, n = info.get(k, (x.shape[1:], x.dtype, 0))
                    if x.dtype == object or x.ndim == 0 or x.shape[1:] != shape or x.dtype != dtype:
                        to_irregular(k, x)
                        continue
                    if k not in files:
                        files[k] = open(spool / f"{len(info)}.raw", "wb")
                    files[k].write(np.ascontiguousarray(x).tobytes())
                    info[k] = (shape, dtype, n + len(x))
        finally:
            for f in files.values():
                f.close()
        keep = _complete(present)
        whole = {k: _concat(v) for k, v in irregular.items() if k in keep}
        whole.update(self._whole)
        streams = {
            k: (shape, dtype, n, _raw_chunks(Path(files[k].name), shape, dtype, n))
            for k, (shape, dtype, n) in info.items()
            if k in keep and k not in whole
        }
        for k, v in self.meta.items():
            if k not in streams:
                whole.setdefault(k, np.asarray(v))
        return whole, streams

    def save(self, path: str | Path, compress: bool = True, fsync: bool = True) -> Path:
        """Write the log (series and meta) to ``path`` (``.npz``) atomically; when ``path`` is the
        checkpoint path, its checkpoint parts are then removed (the log holds all of them).  A log with
        checkpoint parts is assembled one chunk at a time (memory: one chunk, whatever the run's
        length); ``compress=False`` stores the arrays uncompressed (an interrupted run: fast)."""
        if not self.checkpoints:
            arrays = self._archive()
            save: Callable[..., None] = np.savez_compressed if compress else np.savez
            atomic_write(path, lambda fh: save(fh, **arrays), fsync)
        else:
            spool = Path(tempfile.mkdtemp(dir=Path(path).parent, prefix=f".{Path(path).name}.spool."))
            try:
                whole, streams = self._streams(spool)
                atomic_write(path, lambda fh: write_npz_streamed(fh, whole, streams, compress), fsync)
            finally:
                shutil.rmtree(spool, ignore_errors=True)
        if self.checkpoint_path is not None and Path(path).resolve() == self.checkpoint_path.resolve():
            shutil.rmtree(parts_dir(path), ignore_errors=True)
        return Path(path)


def _raw_chunks(
    path: Path, shape: tuple, dtype: DTypeLike, n: int, rows: int = 65536
) -> Iterator[np.ndarray]:
    """The ``n`` rows of a raw spool file, in blocks of ``rows``."""
    dtype = np.dtype(dtype)
    row_bytes = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
    if row_bytes == 0:
        yield np.empty((n, *shape), dtype=dtype)
        return
    with open(path, "rb") as f:
        while True:
            b = f.read(row_bytes * rows)
            if not b:
                return
            yield np.frombuffer(b, dtype=dtype).reshape(-1, *shape)


def _savez(fh: IO[bytes], arrays: dict) -> None:
    np.savez(fh, **arrays)


def write_parts(
    path: str | Path, series: dict[str, np.ndarray], meta: dict[str, Any], rows_per_part: int
) -> list[Path]:
    """Write ``series`` (equal numbers of rows) as checkpoint parts of the log ``path`` (``log.npz``
    or its run directory), ``rows_per_part`` rows each, numbered after the parts already there, with
    ``meta`` in each: what a process that holds a run's rows but not its Logger (the driver of
    ``cmstack rt`` after its controller died) leaves for :func:`read_log` and ``cmstack view``.  Each
    part is atomic.  Returns the parts written."""
    path = Path(path)
    if path.is_dir():
        path = path / "log.npz"
    n = len(next(iter(series.values()), ()))
    if any(len(x) != n for x in series.values()):
        raise ValueError(
            f"write_parts: series of unequal lengths { ({k: len(x) for k, x in series.items()}) }"
        )
    d = parts_dir(path)
    d.mkdir(exist_ok=True)
    first = len(_part_files(path)) + 1
    step = max(1, int(rows_per_part))
    out = []
    for j, a in enumerate(range(0, n, step)):
        arrays = {k: np.asarray(x[a : a + step]) for k, x in series.items()}
        for k, v in meta.items():
            arrays.setdefault(k, np.asarray(v))
        arrays["__series__"] = np.array(list(series))
        out.append(atomic_write(d / f"{first + j:06d}.npz", partial(_savez, arrays=arrays), fsync=False))
    return out


def assemble(path: str | Path, compress: bool = True) -> Path:
    """Write ``log.npz`` from the checkpoint parts a run left (a ``kill -9``, or an interrupted run too
    long to assemble within its Ctrl-C bound), one chunk at a time, and remove the parts: ``path`` is
    the run directory or its ``log.npz``.  Returns the log's path."""
    path = Path(path)
    if path.is_dir():
        path = path / "log.npz"
    parts = _part_files(path)
    if not parts:
        raise FileNotFoundError(f"no checkpoint parts in {parts_dir(path)}")
    log = Logger(checkpoint=path)
    log.checkpoints = len(parts)
    log.meta.update(_read_part(parts[-1], allow_pickle=True)[1])
    return log.save(path, compress=compress)

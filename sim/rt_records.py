"""The records ``cmstack rt`` streams to its run directory while it runs, and the log they make after a
crash that left nobody to write one.

    RUN_DIR/.rt/driver/<column>.npy      the driver's log (sim/rt_driver.DriverLog), one ``.npy`` per column
                                         (n_cycles rows), header.npy [cycles done, clock start, 0, 0] and,
                                         when q, v are the plant's own qpos, qvel entries, qadr.npy, dadr.npy
    RUN_DIR/.rt/controller/<name>.npy    the controller loop's per-cycle arrays (sim/rt_loop.control_loop):
                                         latency_us, compute_us, wake_us, info__<field>, error__<name>, and
                                         loop.npy [states answered]
    RUN_DIR/.rt/meta.json                the log's meta entries (mjcf_path, joint names, ...)

Each file is a shared mapping of the process that writes it (:func:`record_array`): a row is in the
kernel's page cache as soon as it is stored, and a ``kill -9`` of the writer does not take it away.
A run that ends normally, or whose surviving process wrote the record, removes ``.rt/``; one whose
two processes both died leaves it, and :func:`read_records_log` (which ``read_log``, hence
``cmstack view``, falls back on) makes the log of it: the cycles the driver ran, with the
controller's captured ``info`` fields at the step whose torque was applied at each cycle.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

#: the records' folder in a run directory
RECORDS = ".rt"


def record_array(
    records: Path | None, name: str, shape: tuple[int, ...], dtype: Any, fill: float
) -> np.ndarray:
    """A preallocated array of ``shape`` and ``dtype`` filled with ``fill``: in memory, or with
    ``records`` (a directory) a shared mapping of the file ``records/<name>.npy`` (a ``.npy`` file any
    process can open with ``np.load``), every page written now (no first-touch fault later): the rows
    stored reach the page cache at once and survive a ``kill -9`` of this process.  (A page the kernel
    has written back since faults once more when next stored to: a few µs, p99 4-5 µs against 1 µs for
    a row store measured on this machine.)"""
    if records is None:
        return np.full(shape, fill, dtype=dtype)
    safe = "".join(c if c.isalnum() or c in "_-." else "_" for c in name)
    mm = np.lib.format.open_memmap(records / f"{safe}.npy", mode="w+", dtype=dtype, shape=shape)
    mm[...] = fill
    return mm.view(np.ndarray)  # (a plain array over the same mapping: the hot path as in memory)


def write_meta(records: Path, meta: dict[str, Any]) -> None:
    """``records/meta.json``: the log's meta entries that JSON can hold (arrays as lists)."""
    out = {}
    for k, v in meta.items():
        v = v.tolist() if isinstance(v, np.ndarray) else v
        try:
            json.dumps(v)
        except (TypeError, ValueError):
            continue
        out[k] = v
    (records / "meta.json").write_text(json.dumps(out))


def _load(f: Path) -> np.ndarray | None:
    try:
        return np.load(f, mmap_mode="r")
    except (OSError, ValueError):  # a file the kill left half-made
        return None


def log_series(driver: dict[str, np.ndarray], info: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The log's series from the driver's columns (``t``, ``q``, ``v``, ``tau``, ``qpos``, ``qvel``,
    ``answers``; the cycles run) and the controller's captured info fields: per cycle k, t, q, v
    (published), tau (applied), plant_qpos, plant_qvel, and each info field at the step whose torque
    was applied at k (row ``answers[k]``; NaN while braking or before any answer), as the replay of a
    normal run logs them."""
    out = {k: np.asarray(driver[k], dtype=float) for k in ("t", "q", "v", "tau")}
    out["plant_qpos"], out["plant_qvel"] = np.asarray(driver["qpos"]), np.asarray(driver["qvel"])
    ans = np.asarray(driver["answers"], dtype=np.int64)
    n = len(ans)
    for name, buf in info.items():
        if name in out or buf.ndim == 0:
            continue
        ok = (ans >= 0) & (ans < len(buf))
        x = np.full((n, *buf.shape[1:]), np.nan)
        x[ok] = buf[ans[ok]]
        out[name] = x
    return out


def read_records_log(run_dir: str | Path) -> dict[str, np.ndarray] | None:
    """The log of a run whose records are still in ``run_dir/.rt/`` (both processes died): the series of
    :func:`log_series` over the cycles the driver's header counts, and the meta of ``meta.json``; None
    when there are no driver records."""
    d = Path(run_dir) / RECORDS
    header = _load(d / "driver" / "header.npy")
    if header is None:
        return None
    n = int(header[0])
    cols = {}
    for f in (d / "driver").glob("*.npy"):
        a = _load(f)
        if a is not None and f.stem not in ("header", "qadr", "dadr"):
            cols[f.stem] = a[:n]
    if "q" not in cols:
        qadr, dadr = _load(d / "driver" / "qadr.npy"), _load(d / "driver" / "dadr.npy")
        if qadr is None or dadr is None:
            return None
        cols["q"], cols["v"] = cols["qpos"][:, np.asarray(qadr)], cols["qvel"][:, np.asarray(dadr)]
    info = {}
    for f in (d / "controller").glob("info__*.npy"):
        a = _load(f)
        if a is not None:
            info[f.stem[len("info__") :]] = a
    out = log_series(cols, info)
    try:
        meta = json.loads((d / "meta.json").read_text())
    except (OSError, ValueError):
        meta = {}
    out.update({k: np.asarray(v) for k, v in meta.items() if k not in out})
    return out

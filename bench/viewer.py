"""Cost of the Meshcat viewer per control step: a skipped call of ``maybe_update`` (trails only), one
frame built and serialised without a server (Recorder) and one frame sent to a real local Meshcat
server, on the YuMi-with-bar plant (37 drawn geoms, 3 frames, 1 trail); the start-up of a server;
and ``write_html`` of a 10 s log at 200 Hz (2001 rows: plant, a frame, a trail, a segment) with the
file's size. Never asserted in tests.

    python -m bench.viewer [--frames 300]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from cmstack.bench import results_dir
from cmstack.sim.logger import Logger
from cmstack.sim.viewer import MeshcatViewer, Recorder, write_html


def _median_us(fn, n):
    ts = []
    for k in range(n):
        c0 = time.perf_counter()
        fn(k)
        ts.append((time.perf_counter() - c0) * 1e6)
    return float(np.median(ts))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.viewer")
    ap.add_argument("--frames", type=int, default=300)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    out = {}
    frames = {"E1": np.eye(4), "E2": np.eye(4), "desired": np.eye(4)}
    for label, vis in (("recorder", Recorder()), ("meshcat_server", None)):
        v = MeshcatViewer("mjcf/yumi_bar.xml", visualizer=vis, realtime=False, fps=1e-9)
        qs = rng.uniform(-1, 1, (args.frames, v.model.nq))
        try:
            v.maybe_update(0.0, qs[0])  # the first call always sends
            out[f"{label}_skipped_call_us"] = _median_us(
                lambda k: v.maybe_update(1e-3 * (k + 1), qs[k], frames=frames, trails={"E1": qs[k, :3]}),
                args.frames,
            )
            out[f"{label}_frame_us"] = _median_us(
                lambda k: v.show(qs[k], frames=frames, trails={"E1": qs[k, :3]}, t=1.0 + k * 0.01),
                args.frames,
            )
        finally:
            v.close()
        out["drawn_geoms"] = v.model.ngeom - len(v.skipped)
    for _ in range(3):  # server start-up (process, URLs, zmq), then stop
        c0 = time.perf_counter()
        v = MeshcatViewer("mjcf/yumi_bar.xml", realtime=False)
        out.setdefault("_start", []).append(time.perf_counter() - c0)
        v.close()
    out["server_start_and_scene_s"] = float(np.median(out.pop("_start")))
    with tempfile.TemporaryDirectory() as tmp:
        m = MeshcatViewer("mjcf/yumi_bar.xml", visualizer=Recorder()).model
        log = Logger()
        log.meta["mjcf_path"] = "mjcf/yumi_bar.xml"
        q = rng.uniform(-1, 1, m.nq)
        for k in range(2001):
            T = np.eye(4)
            T[:3, 3] = [0.4, 0.1 * np.cos(k / 100), 0.3]
            log.append(
                t=0.005 * k,
                plant_qpos=q + 0.001 * k,
                frame__E1=T,
                trail__E1=T[:3, 3],
                segment__rod=np.array([T[:3, 3], [0.4, -0.2, 0.3]]),
            )
        log.save(Path(tmp) / "log.npz")
        write_html(tmp, Path(tmp) / "warm.html")  # imports and caches out of the timing
        ts = []
        for _ in range(3):
            c0 = time.perf_counter()
            p = write_html(tmp, Path(tmp) / "replay.html")
            ts.append(time.perf_counter() - c0)
        out["html_10s_yumi_write_s"] = float(np.median(ts))
        out["html_10s_yumi_mb"] = p.stat().st_size / 1e6
    for k, x in out.items():
        print(f"  {k:34s} {x:10.3f}")
    res = results_dir()
    res.mkdir(exist_ok=True)
    (res / "viewer.json").write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()

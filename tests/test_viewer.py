"""The Meshcat viewer: geoms posed as MuJoCo poses them, shapes oriented as MuJoCo orients them,
trails, pacing, replay of a saved run and its errors, and one real Meshcat server (localhost)."""

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import mujoco
import numpy as np
import pytest

from cmstack.models.errors import ConfigError, ModelFileError
from cmstack.sim.runner import Logger
from cmstack.sim.viewer import MeshcatViewer, Recorder, replay


def random_qpos(m, seed=0):
    d = mujoco.MjData(m)
    rng = np.random.default_rng(seed)
    mujoco.mj_resetData(m, d)
    J = mujoco.mjtJoint
    for j in range(m.njnt):
        a, typ = m.jnt_qposadr[j], J(int(m.jnt_type[j]))  # (a numpy int never equals the enum)
        if typ in (J.mjJNT_HINGE, J.mjJNT_SLIDE):
            d.qpos[a] = rng.uniform(-1, 1) * (0.3 if typ == J.mjJNT_SLIDE else 1.5)
        elif typ == J.mjJNT_FREE:
            d.qpos[a : a + 3] = rng.normal(size=3)
            qu = rng.normal(size=4)
            d.qpos[a + 3 : a + 7] = qu / np.linalg.norm(qu)
        elif typ == J.mjJNT_BALL:
            qu = rng.normal(size=4)
            d.qpos[a : a + 4] = qu / np.linalg.norm(qu)
    return d.qpos.copy()


def world_poses(m, qpos):
    d = mujoco.MjData(m)
    d.qpos[:] = qpos
    mujoco.mj_forward(m, d)  # independent of the viewer's mj_kinematics
    return d.geom_xpos.copy(), d.geom_xmat.reshape(-1, 3, 3).copy()


@pytest.mark.parametrize(
    "mjcf",
    [
        "mjcf/yumi_bar.xml",
        "mjcf/slider_crank.xml",
        "mjcf/chain5.xml",
        "mjcf/balloon.xml",
        "mjcf/series_parallel.xml",
    ],
)
def test_every_drawn_geom_sits_where_mujoco_puts_it(mjcf):
    rec = Recorder()
    v = MeshcatViewer(mjcf, visualizer=rec, realtime=False)
    m = v.model
    drawn = [g for g in range(m.ngeom) if g not in v.skipped]
    assert len(drawn) >= 1 and len(drawn) + len(v.skipped) == m.ngeom
    for g, why in v.skipped.items():  # only hidden groups / invisible geoms are left out
        assert m.geom_group[g] not in (0, 1, 2) or m.geom_rgba[g][3] == 0, why
    q = random_qpos(m, seed=1)
    v.show(q)
    xpos, xmat = world_poses(m, q)
    for g in drawn:
        T = v.sent_geom_pose(g)
        np.testing.assert_allclose(T[:3, 3], xpos[g], atol=1e-12)
        np.testing.assert_allclose(T[:3, :3], xmat[g], atol=1e-12)
        np.testing.assert_allclose(T[3], [0, 0, 0, 1])


def test_bar_of_the_closed_chain_plant_is_drawn():
    rec = Recorder()
    v = MeshcatViewer("mjcf/yumi_bar.xml", visualizer=rec)
    bar = mujoco.mj_name2id(v.model, mujoco.mjtObj.mjOBJ_BODY, "bar")
    assert bar >= 0
    geoms = [g for g in range(v.model.ngeom) if v.model.geom_bodyid[g] == bar]
    assert geoms and all(g not in v.skipped for g in geoms)
    assert all(any(p.startswith(v._geom_path(g) + "/") for p in rec.objects) for g in geoms)


def test_cylinder_and_capsule_axes_follow_mujoco_z():
    """Meshcat's cylinder axis is its local y: the shape node must turn it onto the geom's z axis,
    and a capsule's end spheres must sit at ±half-length along that axis."""
    xml = """<mujoco><worldbody><body name="b" pos="0.1 0.2 0.3" euler="0.3 -0.4 0.5">
      <freejoint/><geom name="cyl" type="cylinder" size="0.05 0.2"/>
      <geom name="cap" type="capsule" size="0.03 0.15" pos="0.1 0 0" euler="1 0 0"/></body></worldbody></mujoco>"""
    m = mujoco.MjModel.from_xml_string(xml)
    rec = Recorder()
    v = MeshcatViewer(m, visualizer=rec)
    q = random_qpos(m, seed=4)
    v.show(q)
    xpos, xmat = world_poses(m, q)
    for g in range(2):
        path = v._geom_path(g)
        T = v.sent_geom_pose(g) @ rec.transforms[path + "/shape"]
        np.testing.assert_allclose(T[:3, 1], xmat[g][:, 2], atol=1e-12)  # meshcat y = MuJoCo z
        obj = {"geometry": rec.objects[path + "/shape"].geometry.lower(None)}
        assert obj["geometry"]["height"] == pytest.approx(2 * m.geom_size[g][1])
        assert obj["geometry"]["radiusTop"] == pytest.approx(m.geom_size[g][0])
    path = v._geom_path(1)
    for k, sgn in (("cap0", 1), ("cap1", -1)):
        p = (v.sent_geom_pose(1) @ rec.transforms[f"{path}/{k}"])[:3, 3]
        np.testing.assert_allclose(p, xpos[1] + sgn * m.geom_size[1][1] * xmat[1][:, 2], atol=1e-12)


def test_box_is_full_size_and_static_geoms_are_sent_once():
    xml = """<mujoco><worldbody><geom name="floor" type="plane" size="1 1 0.1"/>
      <body name="b"><joint type="hinge" axis="0 0 1"/><geom name="box" type="box" size="0.1 0.2 0.3"/></body>
      </worldbody></mujoco>"""
    rec = Recorder()
    v = MeshcatViewer(mujoco.MjModel.from_xml_string(xml), visualizer=rec, realtime=False)
    box = rec.objects[v._geom_path(1) + "/shape"].geometry.lower(None)
    assert (box["width"], box["height"], box["depth"]) == pytest.approx((0.2, 0.4, 0.6))
    assert [p for _, p in v._moving] == [v._body_path(1)]
    v.show([0.1])  # the first frame also frames the camera
    n0 = rec.n_transforms
    v.show([0.3])
    assert rec.n_transforms == n0 + 1  # only the moving body


def test_trails_decimate_old_points_and_restart_with_time():
    v = MeshcatViewer("mjcf/slider_crank.xml", visualizer=Recorder(), trail_len=100, trail_dt=0.0)
    for k in range(1000):
        v.append_trail("p", [k, 0, 0], t=0.001 * k)
    pts = np.array(v._trails["p"])
    assert len(pts) <= 100
    assert pts[0, 0] == 0 and pts[-1, 0] == 999 and np.all(np.diff(pts[:, 0]) > 0)
    v.append_trail("p", [5, 5, 5], t=0.0)  # time went back: a new run starts a new trail
    assert len(v._trails["p"]) == 1
    v2 = MeshcatViewer("mjcf/slider_crank.xml", visualizer=Recorder(), trail_dt=0.01)
    for k in range(100):
        v2.append_trail("p", [k, 0, 0], t=0.001 * k)  # 0.1 s at 1 kHz, kept every 10 ms
    assert len(v2._trails["p"]) == 10


def test_frames_are_throttled_and_paced_to_real_time():
    rec = Recorder()
    v = MeshcatViewer("mjcf/slider_crank.xml", visualizer=rec, fps=20, realtime=True)
    q = np.zeros(v.model.nq)
    w0 = time.perf_counter()
    sent = sum(v.maybe_update(0.001 * k, q) for k in range(401))  # 0.4 s of simulated time
    wall = time.perf_counter() - w0
    assert wall >= 0.3  # not faster than real time
    assert 2 <= sent <= 0.4 * 20 + 3  # at most fps frames per second
    v.realtime = False
    v.speed = 1.0
    w0 = time.perf_counter()
    for k in range(1000):
        v.maybe_update(10 + 0.001 * k, q)  # unpaced: as fast as it comes
    assert time.perf_counter() - w0 < 5.0


def test_segment_spans_its_two_end_points():
    rec = Recorder()
    v = MeshcatViewer("mjcf/yumi.xml", visualizer=rec)
    rng = np.random.default_rng(7)
    for _ in range(5):
        p0, p1 = rng.normal(size=3), rng.normal(size=3)
        v.set_segment("rod", p0, p1)
        T = rec.transforms["segments/rod"]
        np.testing.assert_allclose((T @ [0, -0.5, 0, 1])[:3], p0, atol=1e-12)  # unit cylinder ends (axis y)
        np.testing.assert_allclose((T @ [0, 0.5, 0, 1])[:3], p1, atol=1e-12)
        R = T[:3, :3] / np.linalg.norm(T[:3, :3], axis=0)
        np.testing.assert_allclose(R.T @ R, np.eye(3), atol=1e-12)  # no shear: radius kept
        np.testing.assert_allclose(np.linalg.norm(T[:3, [0, 2]], axis=0), 1.0)
    assert rec.objects["segments/rod"].geometry.lower(None)["height"] == 1.0


def test_wrong_qpos_and_bad_model_are_clear_errors():
    v = MeshcatViewer("mjcf/yumi.xml", visualizer=Recorder())
    with pytest.raises(ConfigError, match="nq=14"):
        v.show(np.zeros(13))
    with pytest.raises(ModelFileError, match="nope.xml"):
        MeshcatViewer("mjcf/nope.xml", visualizer=Recorder())
    with pytest.raises(ConfigError, match="MjModel"):
        MeshcatViewer(42, visualizer=Recorder())
    with pytest.raises(ConfigError, match="4×4"):
        v.set_frame("E", np.eye(3))


def saved_run(tmp_path, n=50, **extra):
    m = mujoco.MjModel.from_xml_path("mjcf/yumi_bar.xml")
    log = Logger()
    log.meta["mjcf_path"] = "mjcf/yumi_bar.xml"
    qs = [random_qpos(m, seed=s) for s in range(n)]
    for k, q in enumerate(qs):
        T = np.eye(4)
        T[:3, 3] = [k, 0, 0]
        log.append(t=0.01 * k, plant_qpos=q, frame__E=T, trail__E=T[:3, 3])
    log.meta.update(extra)
    log.save(tmp_path / "log.npz")
    return m, qs


def test_replay_of_a_saved_run_ends_on_its_last_state(tmp_path):
    m, qs = saved_run(tmp_path, sphere__keep_out=[0.5, 0, 0.3, 0.1])
    rec = Recorder()
    v = replay(tmp_path, visualizer=rec, realtime=False, progress=False)
    xpos, xmat = world_poses(m, qs[-1])
    moving = {b for b, _ in v._moving}
    for g in (g for g in range(m.ngeom) if m.geom_bodyid[g] in moving and g not in v.skipped):
        np.testing.assert_allclose(v.sent_geom_pose(g)[:3, 3], xpos[g], atol=1e-12)
    np.testing.assert_allclose(rec.transforms["frames/E"][:3, 3], [49, 0, 0])
    assert len(v._trails["E"]) == 50
    np.testing.assert_allclose(rec.transforms["spheres/keep_out"][:3, 3], [0.5, 0, 0.3])
    assert "trails/E" in rec.objects


def test_replay_errors_name_the_file_and_key(tmp_path):
    with pytest.raises(ModelFileError, match="no run log"):
        replay(tmp_path / "missing", visualizer=Recorder(), progress=False)
    saved_run(tmp_path, n=3)
    with pytest.raises(ConfigError, match="no 'model_qpos' series.*plant_qpos"):
        replay(tmp_path, visualizer=Recorder(), qpos_key="model_qpos", progress=False)
    log = Logger()
    log.meta["mjcf_path"] = "mjcf/yumi.xml"  # 14 joints; the log has 13
    log.append(t=0.0, plant_qpos=np.zeros(13))
    (tmp_path / "b").mkdir()
    log.save(tmp_path / "b" / "log.npz")
    with pytest.raises(ConfigError, match="13 columns.*nq=14"):
        replay(tmp_path / "b", visualizer=Recorder(), progress=False)


def test_live_scenario_streams_frames_and_trails(tmp_path, monkeypatch):
    """--viewer meshcat on a real scenario, with the server swapped for a recorder."""
    import cmstack.sim.viewer
    from cmstack.scenarios._common import run_scenario
    from cmstack.scenarios.yumi_dual_arm import NAME, run

    rec = Recorder()
    monkeypatch.setattr(cmstack.sim.viewer.MeshcatViewer, "_start_server", staticmethod(lambda *a, **k: rec))
    run_scenario(NAME, run, out=tmp_path, overrides={"duration": 0.3}, viewer="meshcat")
    assert {"frames/E1", "frames/E2", "trails/E1", "segments/coupling"} <= set(rec.objects)
    assert rec.n_transforms > 20 * 5  # several frames of the 20+ moving geoms


def test_real_meshcat_server_round_trip():
    """One real local Meshcat server (zmq on localhost): start, draw, move, serve the scene, stop."""
    v = MeshcatViewer("mjcf/slider_crank.xml", realtime=False)
    try:
        assert v.url().startswith("http://")
        v.show(np.zeros(v.model.nq), frames={"O": np.eye(4)}, trails={"p": [0, 0, 0]})
        v.set_sphere("s", [0, 0, 0], 0.1)
        html = v.vis.static_html()
        assert "<html>" in html and len(html) > 1000
    finally:
        v.close()
    assert v.vis.window.server_proc.poll() is not None  # the server is gone


# ------------------------------------------------------------------ the server process (issue 13, rows 1-3)

PROBE = '''"""probe: start the live viewer, then end as the config says"""
import time

import mujoco

from cmstack.models.robot import resolve_asset
from cmstack.scenarios._common import Outcome

NAME = "viewer_probe"


def run(ctx):
    v = ctx.make_viewer(mujoco.MjModel.from_xml_path(str(resolve_asset("mjcf/slider_crank.xml"))))
    print(f"probe: viewer up, server pid {v.vis.window.server_proc.pid}", flush=True)
    if ctx.cfg["mode"] == "error":
        raise RuntimeError("probe failure")
    if ctx.cfg["mode"] == "sleep":
        time.sleep(120)
    return Outcome(metrics={"done": 1.0})
'''

needs_proc = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="needs Linux /proc to find the server"
)


class Run:
    """A CLI process whose output is drained by a thread (a test must not block it either)."""

    def __init__(self, args, cwd):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cmstack.cli", *args],
            cwd=cwd,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, "MPLBACKEND": "Agg"},
        )
        self.lines: list[str] = []
        self._t = threading.Thread(
            target=lambda: self.lines.extend(iter(self.proc.stdout.readline, "")), daemon=True
        )
        self._t.start()

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, needle: str, timeout: float = 120.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for ln in list(self.lines):
                if needle in ln:
                    return ln
            if self.proc.poll() is not None and needle not in self.text:
                break
            time.sleep(0.1)
        raise AssertionError(f"no {needle!r} in the output (exit {self.proc.poll()}):\n{self.text[-3000:]}")

    def server_pids(self) -> list[int]:
        """The Meshcat server processes this run started (children whose command line names our server)."""
        out = []
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
                    cmd = (d / "cmdline").read_bytes()
                except (OSError, IndexError, ValueError):
                    continue
                if ppid == self.proc.pid and b"_meshcat_server" in cmd:
                    out.append(int(d.name))
        return out


def gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state in ("Z", "X"):  # exited (a zombie waiting for a reaper)
            return True
        time.sleep(0.1)
    return False


def probe_dir(tmp_path, mode):
    (tmp_path / "probe.py").write_text(PROBE)
    (tmp_path / "probe.toml").write_text(f'mode = "{mode}"\nduration = 0.5\n')
    return str(tmp_path / "probe.py")


@needs_proc
@pytest.mark.parametrize("how", ["normal", "error", "SIGINT", "SIGTERM", "SIGKILL"])
def test_no_server_is_left_behind_whatever_ends_the_run(tmp_path, how):
    """Row 3: any exit of a live run (normal, error, Ctrl-C, kill, even kill -9) takes its server with it."""
    mode = {"normal": "normal", "error": "error"}.get(how, "sleep")
    run = Run(
        [
            "run",
            probe_dir(tmp_path, mode),
            "--viewer",
            "meshcat",
            "--no-wait",
            "--no-html",
            "--out",
            str(tmp_path / "out"),
        ],
        cwd=tmp_path,
    )
    try:
        pid = int(run.wait_for("probe: viewer up").split()[-1])
        if how.startswith("SIG"):
            assert run.server_pids() == [pid]
            run.proc.send_signal(getattr(signal, how))
        code = run.proc.wait(timeout=60)
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    assert {"normal": 0, "error": 3}.get(how, code) == code, run.text
    assert gone(pid), f"server {pid} survived {how}"  # (its port may be reused at once by a parallel test)


@needs_proc
def test_replay_killed_with_sigterm_takes_its_server_along(tmp_path):
    """Row 3 as reported: `kill` of `python -m sim.viewer` (replaying, then waiting) used to orphan the
    server on port 7000."""
    saved_run(tmp_path, n=20)
    run = Run(["view", str(tmp_path)], cwd=tmp_path)
    try:
        run.wait_for("Meshcat: open")
        run.wait_for("stays up")
        pids = run.server_pids()
        assert pids
        run.proc.send_signal(signal.SIGTERM)
        run.proc.wait(timeout=30)
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    assert all(gone(p) for p in pids)
    assert "Traceback" not in run.text


@needs_proc
def test_live_run_keeps_the_scene_up_until_ctrl_c(tmp_path):
    """Row 2: a live run used to exit right after printing the URL, taking the scene with it. Now the
    scene stays up (the page answers) until Ctrl-C, which exits cleanly with the run's exit code."""
    run = Run(
        [
            "run",
            probe_dir(tmp_path, "normal"),
            "--viewer",
            "meshcat",
            "--no-html",
            "--out",
            str(tmp_path / "out"),
        ],
        cwd=tmp_path,
    )
    try:
        url = run.wait_for("Meshcat: open").split()[2]
        run.wait_for("stays up")
        time.sleep(1.0)
        assert run.proc.poll() is None, "the run exited instead of keeping the scene up"
        with urllib.request.urlopen(url, timeout=10) as r:
            assert r.status == 200 and b"MeshCat" in r.read()
        pids = run.server_pids()
        run.proc.send_signal(signal.SIGINT)
        code = run.proc.wait(timeout=30)
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    assert code == 0, run.text
    assert "Traceback" not in run.text
    assert pids and all(gone(p) for p in pids)


WS_CLIENT = """import sys
from websockets.sync.client import connect
with connect(sys.argv[1], max_size=None) as ws:
    n = 0
    while True:
        ws.recv()
        n += 1
        if n == 200:
            print("client: 200 messages", flush=True)
"""


@needs_proc
def test_browser_killed_abruptly_costs_the_run_nothing(tmp_path):
    """Row 1: a websocket client (a browser's stand-in) reading the live stream is killed with SIGKILL
    mid-run. The run must end on its own in its normal time (it used to hang forever: the server stopped
    answering), the server must keep answering (no "did not answer" fallback) and its log stays small."""
    pytest.importorskip("websockets")
    run = Run(
        [
            "run",
            "yumi_dual_arm",
            "--viewer",
            "meshcat",
            "--set",
            "plant=bar",
            "--duration",
            "4",
            "--no-wait",
            "--no-html",
            "--no-progress",
            "--out",
            str(tmp_path / "out"),
        ],
        cwd=tmp_path,
    )
    client = None
    try:
        url = run.wait_for("Meshcat: open").split()[2]
        ws = "ws://" + url.split("//")[1].split("/")[0] + "/"
        (tmp_path / "client.py").write_text(WS_CLIENT)
        client = subprocess.Popen(
            [sys.executable, str(tmp_path / "client.py"), ws],
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        assert "200 messages" in client.stdout.readline()
        client.kill()  # abruptly: no closing handshake
        client.wait()
        t_kill = time.monotonic()
        code = run.proc.wait(timeout=180)  # a hang detector, not a timing assertion
        waited = time.monotonic() - t_kill
    finally:
        for p in (client, run.proc):
            if p is not None and p.poll() is None:
                p.kill()
    assert code in (0, 1), run.text[-3000:]
    assert "did not answer" not in run.text, run.text[-3000:]
    log = tmp_path / "out" / "meshcat.log"
    assert log.is_file() and log.stat().st_size < 200_000
    print(f"run ended {waited:.1f} s after the client was killed; meshcat.log {log.stat().st_size} bytes")


# ------------------------------------------------------------------ standalone HTML (issue 15 §3)
def decode_html(path):
    """The msgpack commands embedded in a page written by write_html, decoded."""
    import base64
    import re

    import umsgpack

    text = Path(path).read_text(encoding="utf-8")
    body = text.split("var cmstack_commands = [", 1)[1].split("];", 1)[0]
    return text, [umsgpack.unpackb(base64.b64decode(b)) for b in re.findall(r'"([A-Za-z0-9+/=]+)"', body)]


def f32(ext):
    return np.frombuffer(ext.data, dtype=np.float32)


def test_html_animates_every_body_as_mujoco_poses_it(tmp_path):
    """10 s of a YuMi-with-bar log at 200 Hz: the page is one file under 20 MB, its animation has one
    frame per 1/30 s, and every moving body's keyframes are MuJoCo's body poses of the sampled rows."""
    from cmstack.sim.viewer import write_html

    m = mujoco.MjModel.from_xml_path("mjcf/yumi_bar.xml")
    log = Logger()
    log.meta["mjcf_path"] = "mjcf/yumi_bar.xml"
    log.meta["sphere__zone"] = np.array([0.4, 0.0, 0.3, 0.05])
    q0, q1 = random_qpos(m, 1), random_qpos(m, 2)
    N = 2001
    for k in range(N):
        s = k / (N - 1)
        T = np.eye(4)
        T[:3, 3] = [0.4, 0.1 * np.cos(4 * s), 0.3 + 0.1 * np.sin(4 * s)]
        log.append(
            t=0.005 * k,
            plant_qpos=(1 - s) * q0 + s * q1,
            frame__E1=T,
            trail__E1=T[:3, 3],
            segment__rod=np.array([T[:3, 3], [0.4, -0.2, 0.3]]),
        )
    log.save(tmp_path / "log.npz")
    out = write_html(tmp_path, tmp_path / "replay.html")
    size = out.stat().st_size
    print(f"10 s YuMi (bar) log of {N} rows -> {size / 1e6:.2f} MB")
    assert size < 20e6
    text, cmds = decode_html(out)
    assert "<script src" not in text and "<link" not in text  # nothing fetched from elsewhere
    (anim,) = [c for c in cmds if c["type"] == "set_animation"]
    clips = {a["path"]: a["clip"] for a in anim["animations"]}
    n = 301  # 10 s at 30 frames/s, both ends
    v = MeshcatViewer("mjcf/yumi_bar.xml", visualizer=Recorder())
    d = mujoco.MjData(m)
    rows = [0, 150, 300]
    Qlog = np.load(tmp_path / "log.npz")["plant_qpos"]
    for bid, path in v._moving:
        clip = clips["/meshcat/" + path]
        assert clip["fps"] == 30
        tracks = {tr["name"]: tr for tr in clip["tracks"]}
        np.testing.assert_array_equal(f32(tracks[".position"]["times"]), np.arange(n))
        P = f32(tracks[".position"]["values"]).reshape(n, 3)
        Qt = f32(tracks[".quaternion"]["values"]).reshape(n, 4)
        for j in rows:
            i = int(round(j / 30 / 0.005))  # the log row shown at frame j
            d.qpos[:] = Qlog[i]
            mujoco.mj_kinematics(m, d)
            np.testing.assert_allclose(P[j], d.xpos[bid], atol=1e-5)
            w, x, y, z = d.xquat[bid]  # MuJoCo (w, x, y, z) vs three.js (x, y, z, w)
            assert min(np.abs(Qt[j] - [x, y, z, w]).max(), np.abs(Qt[j] + [x, y, z, w]).max()) < 1e-5
    seg = {tr["name"]: tr for tr in clips["/meshcat/segments/rod"]["tracks"]}
    Lk = f32(seg[".scale"]["values"]).reshape(n, 3)[:, 1]
    Pend = f32(clips["/meshcat/frames/E1"]["tracks"][0]["values"]).reshape(n, 3)
    np.testing.assert_allclose(Lk, np.linalg.norm(Pend - [0.4, -0.2, 0.3], axis=1), atol=1e-5)
    parts = sorted(p for p in clips if p.startswith("/meshcat/trails/E1/part"))
    assert len(parts) == 38  # 300 segments of frames, 8 per part
    for p in parts:
        (tr,) = clips[p]["tracks"]
        assert tr["name"] == ".visible" and tr["values"] == [False, True]
    assert any(c["type"] == "set_object" and c["path"] == "/meshcat/spheres/zone" for c in cmds)
    cam = [c for c in cmds if c["type"] == "set_property" and c["path"].startswith("/Cameras/default")]
    assert cam and cam[-1]["property"] == "position"


def test_view_html_command_and_its_errors(tmp_path, capsys):
    from cmstack.cli import main

    saved_run(tmp_path, n=10)
    assert main(["view", str(tmp_path), "--html", str(tmp_path / "x" / "r.html")]) == 0
    assert (tmp_path / "x" / "r.html").stat().st_size > 500_000  # the viewer's code is inside
    assert "no server needed" in capsys.readouterr().out
    assert main(["view", str(tmp_path / "nope"), "--html", str(tmp_path / "r.html")]) == 2
    assert "no run log" in capsys.readouterr().err
    assert main(["view", str(tmp_path), "--html", str(tmp_path / "r.html"), "--qpos-key", "model_qpos"]) == 2
    assert "model_qpos" in capsys.readouterr().err


def test_camera_frames_the_plant_on_start():
    """Every corner of the plant's geoms projects inside the view, and the tightest one reaches the
    edge of the fraction CAMERA_FILL (independent pinhole projection of the camera the viewer set)."""
    for mjcf in (
        "mjcf/yumi_bar.xml",
        "mjcf/chain5.xml",
        "mjcf/series_parallel.xml",
        "mjcf/balloon.xml",
        "mjcf/slider_crank.xml",
    ):
        rec = Recorder()
        v = MeshcatViewer(mjcf, visualizer=rec)
        v.show(random_qpos(v.model, seed=3))
        shift = rec.transforms["/meshcat"][:3, 3]
        ex, ey, ez = rec.properties[("/Cameras/default/rotated/<object>", "position")]
        eye = np.array([ex, -ez, ey])  # rotated frame (x, y, z) -> world (x, -z, y)
        f = -eye / np.linalg.norm(eye)  # looks at the origin, z up
        r = np.cross(f, [0, 0, 1.0])
        r /= np.linalg.norm(r)
        up = np.cross(r, f)
        X = v.plant_corners() + shift - eye
        depth = X @ f
        assert np.all(depth > 0)
        h = np.tan(np.radians(v.CAMERA_FOV_DEG) / 2)
        ny, nx = (X @ up) / (depth * h), (X @ r) / (depth * h * v.CAMERA_ASPECT)
        reach = max(np.abs(ny).max(), np.abs(nx).max())
        assert reach == pytest.approx(v.CAMERA_FILL, rel=1e-6), mjcf
        np.testing.assert_allclose(rec.transforms["/Grid"], rec.transforms["/meshcat"])


def _strip_uuids(x):
    if isinstance(x, dict):
        return {
            k: _strip_uuids(v)
            for k, v in x.items()
            if k not in ("uuid", "geometry", "material") or not isinstance(v, str)
        }
    if isinstance(x, list):
        return [_strip_uuids(v) for v in x]
    return x


def _final_scene(cmds):
    """path -> {"object", "transform", (property, key)} after applying the commands in order."""
    scene = {}
    for c in cmds:
        node = scene.setdefault(c["path"], {})
        if c["type"] == "set_object":
            node["object"] = _strip_uuids(c["object"])
        elif c["type"] == "set_transform":
            node["transform"] = list(np.round(np.asarray(c["matrix"], dtype=float), 12))
        elif c["type"] == "set_property":
            node[("property", c["property"])] = c["value"]
        elif c["type"] == "delete":
            for p in [p for p in scene if p == c["path"] or p.startswith(c["path"] + "/")]:
                scene[p] = {}
    return {p: n for p, n in scene.items() if n}


def test_html_commands_build_the_scene_meshcat_itself_exports():
    """The page's command stream and the page Meshcat's own server exports (static_html) for the same
    scene decode to the same objects (uuids aside), transforms and properties at every path."""
    import base64
    import re

    import umsgpack

    def draw(vis):
        v = MeshcatViewer("mjcf/series_parallel.xml", visualizer=vis, realtime=False)
        q = v.model.qpos0 + np.linspace(0.1, 0.5, v.model.nq)  # any pose: drawing needs no closure
        T = np.eye(4)
        T[:3, 3] = [0.3, 0.2, 0.1]
        v.show(q, frames={"F": T}, trails={"p": [0, 0, 0]}, t=0.0, segments={"s": ([0, 0, 0], [0.2, 0.1, 0])})
        v.show(q, trails={"p": [0.1, 0, 0]}, t=0.1)
        v.set_sphere("zone", [0.5, 0, 0.2], 0.1)
        return v

    rec = Recorder(keep=True)
    draw(rec)
    v = draw(None)  # a real server
    try:
        exported = v.vis.static_html()
    finally:
        v.close()
    blobs = re.findall(r'data:application/octet-binary;base64,([A-Za-z0-9+/=]+)"', exported)
    theirs = _final_scene(umsgpack.unpackb(base64.b64decode(b)) for b in blobs)
    ours = _final_scene(umsgpack.unpackb(umsgpack.packb(c)) for c in rec.commands)
    assert len(ours) > 20
    assert ours.keys() == theirs.keys()
    for p in ours:
        assert ours[p] == theirs[p], p


def listening(pid: int) -> set[tuple[str, int]]:
    """(address, port) of the TCP sockets process ``pid`` listens on, read from the live process
    (psutil: /proc/PID/fd and /proc/net/tcp, tcp6)."""
    psutil = pytest.importorskip("psutil")
    return {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }


@needs_proc
@pytest.mark.parametrize("host", [None, "0.0.0.0"])
def test_the_web_server_listens_on_the_loopback_unless_asked(tmp_path, host):
    """Issue 34: meshcat's web server listened on every interface (0.0.0.0:7000 and [::]:7000). By default
    every socket of the live server is on the loopback, with no warning; --viewer-host 0.0.0.0 opens the
    web server (only it: the ZMQ command socket stays on the loopback) and says who can then connect."""
    args = ["run", probe_dir(tmp_path, "sleep"), "--viewer", "meshcat", "--no-html"]
    args += ["--out", str(tmp_path / "out")] + (["--viewer-host", host] if host else [])
    run = Run(args, cwd=tmp_path)
    try:
        url = run.wait_for("Meshcat: open").split()[2]
        pid = int(run.wait_for("probe: viewer up").split()[-1])
        socks = listening(pid)
        with urllib.request.urlopen(url, timeout=10) as r:  # the page answers on the loopback either way
            assert r.status == 200
    finally:
        run.proc.kill()
        run.proc.wait(timeout=30)
    web_port = int(url.split(":")[-1].split("/")[0])
    assert any(port == web_port for _, port in socks), socks
    if host is None:
        assert socks and all(ip == "127.0.0.1" for ip, _ in socks), socks
        assert "warning" not in run.text.lower()
    else:
        assert ("0.0.0.0", web_port) in socks, socks
        assert all(ip == "127.0.0.1" for ip, port in socks if port != web_port), socks  # ZMQ: loopback
        warn = [ln for ln in run.lines if ln.startswith("warning: the Meshcat web server listens on")]
        assert len(warn) == 1, run.text
        assert f"0.0.0.0:{web_port}" in warn[0] and "anyone who can reach this machine" in warn[0]


def test_a_viewer_host_this_machine_cannot_listen_on_is_one_line(tmp_path):
    """--viewer-host that is not an address of this machine: one line naming it, exit 2, no server."""
    saved_run(tmp_path, n=5)
    r = subprocess.run(
        [sys.executable, "-m", "cmstack.cli", "view", str(tmp_path), "--viewer-host", "192.0.2.1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "--viewer-host '192.0.2.1'" in r.stderr

"""Meshcat viewer of a MuJoCo plant: live during a run, or replaying a saved run.

What is drawn is the *plant* — every MuJoCo geom of groups 0–2 (MuJoCo's own viewer default),
including bodies the controller's model does not have (the YuMi's bar, the balloon's envelope) —
plus what a scenario adds: coordinate frames (triads), trails (polylines of points), segments (rods
between two points, e.g. the YuMi's virtual coupling body) and spheres (keep-out zones).

Geometry, once per geom:  box → Box(2·size), sphere → Sphere(size₀), ellipsoid → Ellipsoid(size₀..₂),
cylinder → Cylinder(2·size₁, size₀), capsule → that cylinder plus two end spheres, plane → a thin
box (an infinite plane is drawn 10 m wide), mesh → its vertices and faces from ``mjModel``.
Meshcat's cylinder axis is its local y, MuJoCo's is z: the shape node carries the fixed rotation
R_x(+π/2) (it maps y to z), and the geom ends where MuJoCo puts it:

    T_world_geom = [geom_xmat  geom_xpos; 0 1]   (after mj_kinematics on the given qpos).

Each geom sits at its fixed pose under its body's node; per frame only the bodies that move are sent
(T_world_body from ``xpos``/``xmat``), so a geom's world pose is T_world_body · T_body_geom. Frames are throttled to ``fps``
and, with ``realtime``, paced so that simulated time does not run ahead of the wall clock (a run
faster than real time is slowed down for watching; a slower one is shown as it comes).

Replay:  ``python -m sim.viewer RUN_DIR [--speed S] [--loop] [--qpos-key K]`` reads
``RUN_DIR/log.npz``: ``mjcf_path``, ``t``, ``plant_qpos`` (N×nq) and any ``frame__<name>`` (N×4×4)
and ``trail__<name>`` (N×3) and ``segment__<name>`` (N×2×3, rod end points) series the scenario logged,
and ``sphere__<name>`` ([x, y, z, r]) entries.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from cmstack.models.errors import ConfigError, ModelFileError, StackError

_GROUPS = (0, 1, 2)
_TRAIL_COLORS = (0xE6194B, 0x3CB44B, 0x4363D8, 0xF58231, 0x911EB4, 0x42D4F4)


def _rx90() -> np.ndarray:
    T = np.eye(4)
    T[1:3, 1:3] = [[0.0, -1.0], [1.0, 0.0]]          # R_x(+π/2): y ↦ z
    return T


def _hex(rgba) -> int:
    r, g, b = (int(round(255 * float(np.clip(c, 0, 1)))) for c in rgba[:3])
    return (r << 16) | (g << 8) | b


class Recorder:
    """A stand-in for ``meshcat.Visualizer`` that keeps the scene in memory instead of sending it.

    Same path interface (``rec["a"]["b"].set_object(obj)``, ``.set_transform(T)``, ``.delete()``);
    ``objects[path]`` is the last object set at a path, ``transforms[path]`` its last transform and
    ``n_transforms`` how many transforms were sent. Every command is serialised exactly as Meshcat
    would serialise it, so an object Meshcat cannot send fails here too. Used by the tests.
    """

    def __init__(self, path: str = "", root: "Recorder | None" = None):
        self._path = path
        self._root = root or self
        if root is None:
            self.objects: dict[str, object] = {}
            self.transforms: dict[str, np.ndarray] = {}
            self.n_transforms = 0

    def __getitem__(self, name: str) -> "Recorder":
        return Recorder(f"{self._path}/{name}" if self._path else name, self._root)

    def set_object(self, obj, material=None) -> None:
        from meshcat.commands import SetObject

        SetObject(obj, material, self._path).lower()     # serialise as Meshcat would: bad objects fail here
        self._root.objects[self._path] = obj

    def set_transform(self, T) -> None:
        from meshcat.commands import SetTransform

        T = np.array(T, dtype=float)
        SetTransform(T, self._path).lower()
        self._root.transforms[self._path] = T
        self._root.n_transforms += 1

    def delete(self) -> None:
        for d in (self._root.objects, self._root.transforms):
            for k in [k for k in d if k == self._path or k.startswith(self._path + "/")]:
                del d[k]

    def url(self) -> str:
        return "(recorder: nothing is served)"


class MeshcatViewer:
    """Draw a MuJoCo model in Meshcat and move it with ``qpos``.

    Parameters
    ----------
    model : ``mujoco.MjModel`` or a path to an MJCF file (relative to the repository or absolute).
    visualizer : a ``meshcat.Visualizer`` (default: start a local Meshcat server) or a ``Recorder``.
    fps : frames sent per wall-clock second by ``maybe_update``.
    realtime : pace ``maybe_update`` so that simulated time does not run ahead of the wall clock.
    speed : playback speed factor used by the pacing (2 = twice real time).
    groups : MuJoCo geom groups drawn.
    trail_len : points kept per trail (older halves are decimated, never dropped).
    """

    def __init__(self, model, *, visualizer=None, fps: float = 30.0, realtime: bool = True,
                 speed: float = 1.0, groups=_GROUPS, trail_len: int = 4000, trail_dt: float = 0.005,
                 frame_scale: float = 0.08, prefix: str = "plant"):
        import mujoco

        if isinstance(model, (str, Path)):
            from cmstack.sim.plant import load_mjcf

            model = load_mjcf(model)
        if not isinstance(model, mujoco.MjModel):
            raise ConfigError(f"MeshcatViewer needs a mujoco.MjModel or an MJCF path, got {type(model).__name__}")
        if not fps > 0 or not speed > 0:
            raise ConfigError(f"MeshcatViewer: fps and speed must be > 0 (got fps={fps}, speed={speed})")
        self.model = model
        self.data = mujoco.MjData(model)
        self._kin = mujoco.mj_kinematics
        if visualizer is None:
            visualizer = self._start_server()
        self.vis = visualizer
        self.fps, self.realtime, self.speed = float(fps), bool(realtime), float(speed)
        self.trail_len, self.trail_dt, self.frame_scale = int(trail_len), float(trail_dt), float(frame_scale)
        self.prefix = prefix
        self.groups = tuple(int(x) for x in groups)
        self.skipped: dict[int, str] = {}            # geom id -> why it is not drawn
        self._moving: list[tuple[int, str]] = []      # (body id, meshcat path) sent every frame
        self._frames: set[str] = set()
        self._segments: set[str] = set()
        self._trails: dict[str, list] = {}
        self._trail_t: dict[str, float] = {}
        self._trail_dirty: set[str] = set()
        self._t0 = None
        self._wall0 = 0.0
        self._last_send = -np.inf
        self._last_t = -np.inf
        self.frames_sent = 0
        self._build()

    # ------------------------------------------------------------------------------------ set-up
    @staticmethod
    def _start_server():
        try:
            import meshcat

            return meshcat.Visualizer()
        except Exception as e:                          # zmq/port/subprocess trouble: say what to do
            raise StackError(f"could not start a Meshcat server ({type(e).__name__}: {e}); "
                             "check that the 'meshcat' package is installed in .venv and that a local "
                             "port (7000+) is free, or run without --viewer") from e

    def url(self) -> str:
        return self.vis.url()

    def _material(self, gid: int):
        import meshcat.geometry as g

        m = self.model
        rgba = m.mat_rgba[m.geom_matid[gid]] if m.geom_matid[gid] >= 0 else m.geom_rgba[gid]
        return g.MeshLambertMaterial(color=_hex(rgba), opacity=float(rgba[3]), transparent=bool(rgba[3] < 1))

    def _shapes(self, gid: int):
        """[(sub-path, meshcat geometry, fixed 4×4 transform in the geom frame)] or a reason string."""
        import mujoco
        import meshcat.geometry as g

        m, T = self.model, mujoco.mjtGeom
        typ, s = int(m.geom_type[gid]), m.geom_size[gid]
        if typ == T.mjGEOM_BOX:
            return [("shape", g.Box(2 * s[:3]), np.eye(4))]
        if typ == T.mjGEOM_SPHERE:
            return [("shape", g.Sphere(float(s[0])), np.eye(4))]
        if typ == T.mjGEOM_ELLIPSOID:
            return [("shape", g.Ellipsoid(s[:3]), np.eye(4))]
        if typ == T.mjGEOM_CYLINDER:
            return [("shape", g.Cylinder(2 * float(s[1]), float(s[0])), _rx90())]
        if typ == T.mjGEOM_CAPSULE:
            ends = []
            for k, z in (("cap0", s[1]), ("cap1", -s[1])):
                E = np.eye(4)
                E[2, 3] = z
                ends.append((k, g.Sphere(float(s[0])), E))
            return [("shape", g.Cylinder(2 * float(s[1]), float(s[0])), _rx90())] + ends
        if typ == T.mjGEOM_PLANE:
            sx, sy = (float(x) if x > 0 else 5.0 for x in s[:2])
            E = np.eye(4)
            E[2, 3] = -0.0005
            return [("shape", g.Box([2 * sx, 2 * sy, 0.001]), E)]
        if typ == T.mjGEOM_MESH:
            k = int(m.geom_dataid[gid])
            va, vn = int(m.mesh_vertadr[k]), int(m.mesh_vertnum[k])
            fa, fn = int(m.mesh_faceadr[k]), int(m.mesh_facenum[k])
            verts = np.array(m.mesh_vert[va:va + vn], dtype=float)
            faces = np.array(m.mesh_face[fa:fa + fn], dtype=np.int64)
            return [("shape", g.TriangularMeshGeometry(verts, faces), np.eye(4))]
        return f"geom type {mujoco.mjtGeom(typ).name} is not drawn"

    def _body_path(self, bid: int) -> str:
        import mujoco

        return f"{self.prefix}/" + (mujoco.mj_id2name(self.model, mujoco.mjtObj.mjOBJ_BODY, bid) or f"body{bid}")

    def _geom_path(self, gid: int) -> str:
        import mujoco

        name = mujoco.mj_id2name(self.model, mujoco.mjtObj.mjOBJ_GEOM, gid) or ""
        return f"{self._body_path(int(self.model.geom_bodyid[gid]))}/geom{gid}" + (f"_{name}" if name else "")

    def _build(self) -> None:
        """Scene tree: plant/<body> (world pose, sent per frame for moving bodies) ⊃ geom (its fixed pose
        in the body, T_bg = T_wb⁻¹ T_wg, sent once) ⊃ shape(s). One transform per moving body per frame."""
        import meshcat.geometry as g

        m = self.model
        self.vis[self.prefix].delete()
        self._kin(m, self.data)
        bodies = set()
        for gid in range(m.ngeom):
            if int(m.geom_group[gid]) not in self.groups:
                self.skipped[gid] = f"group {int(m.geom_group[gid])} is hidden"
                continue
            rgba = m.mat_rgba[m.geom_matid[gid]] if m.geom_matid[gid] >= 0 else m.geom_rgba[gid]
            if rgba[3] <= 0:
                self.skipped[gid] = "transparent (alpha 0)"
                continue
            shapes = self._shapes(gid)
            if isinstance(shapes, str):
                self.skipped[gid] = shapes
                continue
            path = self._geom_path(gid)
            mat = self._material(gid)
            for sub, geom, E in shapes:
                node = self.vis[path][sub]
                node.set_object(g.Mesh(geom, mat))
                node.set_transform(E)
            bid = int(m.geom_bodyid[gid])
            self.vis[path].set_transform(np.linalg.inv(self._body_pose(bid)) @ self._geom_pose(gid))
            bodies.add(bid)
        for bid in sorted(bodies):
            self.vis[self._body_path(bid)].set_transform(self._body_pose(bid))
            if int(m.body_weldid[bid]) != 0:                     # moves with the joints
                self._moving.append((bid, self._body_path(bid)))

    def _body_pose(self, bid: int) -> np.ndarray:
        T = np.eye(4)
        T[:3, :3] = self.data.xmat[bid].reshape(3, 3)
        T[:3, 3] = self.data.xpos[bid]
        return T

    def _geom_pose(self, gid: int) -> np.ndarray:
        T = np.eye(4)
        T[:3, :3] = self.data.geom_xmat[gid].reshape(3, 3)
        T[:3, 3] = self.data.geom_xpos[gid]
        return T

    def sent_geom_pose(self, gid: int) -> np.ndarray:
        """World pose of geom ``gid`` as the scene tree now places it (with a Recorder only; for tests)."""
        tr = self.vis.transforms
        return tr[self._body_path(int(self.model.geom_bodyid[gid]))] @ tr[self._geom_path(gid)]

    # ------------------------------------------------------------------------------------ drawing
    def set_qpos(self, qpos) -> None:
        """Pose every moving body from ``qpos`` (MuJoCo order, length nq)."""
        qpos = np.asarray(qpos, dtype=float).ravel()
        if qpos.shape[0] != self.model.nq:
            raise ConfigError(f"viewer: qpos has {qpos.shape[0]} entries, the plant model has nq={self.model.nq}")
        self.data.qpos[:] = qpos
        self._kin(self.model, self.data)
        for bid, path in self._moving:
            self.vis[path].set_transform(self._body_pose(bid))

    def set_frame(self, name: str, T) -> None:
        """A coordinate triad (x red, y green, z blue) at pose ``T`` (4×4 or an object with .homogeneous)."""
        import meshcat.geometry as g

        T = np.asarray(getattr(T, "homogeneous", T), dtype=float)
        if T.shape != (4, 4):
            raise ConfigError(f"viewer: frame '{name}' must be a 4×4 pose, got shape {T.shape}")
        path = f"frames/{name}"
        if name not in self._frames:
            self.vis[path].set_object(g.triad(self.frame_scale))
            self._frames.add(name)
        self.vis[path].set_transform(T)

    def append_trail(self, name: str, p, t: float | None = None) -> None:
        """Add a point to trail ``name`` (drawn at the next frame). With ``t``, points closer than
        ``trail_dt`` in time are skipped; a full trail keeps every other point of its older half."""
        if t is not None:
            if t < self._trail_t.get(name, -np.inf):          # time went back: a new run
                self._trails[name] = []
            elif t - self._trail_t.get(name, -np.inf) < self.trail_dt:
                return
            self._trail_t[name] = t
        pts = self._trails.setdefault(name, [])
        pts.append(np.asarray(p, dtype=float).ravel()[:3].copy())
        if len(pts) > self.trail_len:
            half = len(pts) // 2
            pts[:] = pts[:half:2] + pts[half:]
        self._trail_dirty.add(name)

    def _flush_trails(self) -> None:
        import meshcat.geometry as g

        for name in sorted(self._trail_dirty):
            pts = self._trails[name]
            if len(pts) >= 2:
                color = _TRAIL_COLORS[sorted(self._trails).index(name) % len(_TRAIL_COLORS)]
                self.vis[f"trails/{name}"].set_object(
                    g.Line(g.PointsGeometry(np.array(pts).T), g.LineBasicMaterial(color=color)))
        self._trail_dirty.clear()

    def set_sphere(self, name: str, center, radius: float, rgba=(0.9, 0.2, 0.2, 0.3)) -> None:
        """A (by default translucent red) sphere, e.g. a keep-out zone."""
        import meshcat.geometry as g

        path = f"spheres/{name}"
        self.vis[path].set_object(g.Mesh(g.Sphere(float(radius)), g.MeshLambertMaterial(
            color=_hex(rgba), opacity=float(rgba[3]), transparent=bool(rgba[3] < 1))))
        T = np.eye(4)
        T[:3, 3] = np.asarray(center, dtype=float).ravel()[:3]
        self.vis[path].set_transform(T)

    def set_segment(self, name: str, p0, p1, radius: float = 0.012, rgba=(0.95, 0.75, 0.1, 0.8)) -> None:
        """A rod from ``p0`` to ``p1`` (e.g. a coupling body the plant does not have). A unit-height
        Meshcat cylinder (axis y) is mapped by T = [R·diag(1, ‖p1 − p0‖, 1)  (p0 + p1)/2], R taking y
        onto the rod's direction."""
        import meshcat.geometry as g

        p0, p1 = (np.asarray(p, dtype=float).ravel()[:3] for p in (p0, p1))
        path = f"segments/{name}"
        if name not in self._segments:
            self.vis[path].set_object(g.Mesh(g.Cylinder(1.0, float(radius)), g.MeshLambertMaterial(
                color=_hex(rgba), opacity=float(rgba[3]), transparent=bool(rgba[3] < 1))))
            self._segments.add(name)
        d = p1 - p0
        L = float(np.linalg.norm(d))
        y = d / L if L > 1e-12 else np.array([0.0, 1.0, 0.0])
        a = np.array([1.0, 0.0, 0.0]) if abs(y[0]) < 0.9 else np.array([0.0, 0.0, 1.0])
        x = np.cross(y, a)
        x /= np.linalg.norm(x)
        T = np.eye(4)
        T[:3, :3] = np.column_stack([x, y * L, np.cross(x, y)])
        T[:3, 3] = 0.5 * (p0 + p1)
        self.vis[path].set_transform(T)

    def show(self, qpos, frames: dict | None = None, trails: dict | None = None, t: float | None = None,
             segments: dict | None = None) -> None:
        """Send one frame now: plant pose, frames, segments, trails (points appended), no pacing."""
        self.set_qpos(qpos)
        for k, T in (frames or {}).items():
            self.set_frame(k, T)
        for k, (p0, p1) in (segments or {}).items():
            self.set_segment(k, p0, p1)
        for k, p in (trails or {}).items():
            self.append_trail(k, p, t)
        self._flush_trails()
        self.frames_sent += 1

    def maybe_update(self, t: float, qpos, frames: dict | None = None, trails: dict | None = None,
                     segments: dict | None = None) -> bool:
        """Call every control step. Trails collect points every ``trail_dt`` of simulated time; a
        frame is sent at most ``fps`` times per wall-clock second and, with ``realtime``, not before
        the wall clock has caught up with simulated time. Returns True when a frame was sent."""
        wall = time.perf_counter()
        if self._t0 is None or t < self._last_t:        # first call, or time went back (a new run)
            self._t0, self._wall0, self._last_send = t, wall, -np.inf
        self._last_t = t
        for k, p in (trails or {}).items():
            self.append_trail(k, p, t)
        period = 1.0 / self.fps
        lead = (t - self._t0) / self.speed - (wall - self._wall0)      # > 0: simulation ahead of the clock
        if self.realtime and lead >= period:
            time.sleep(min(lead, 1.0))                # wait for the clock, then show this state
        elif wall - self._last_send < period:
            return False
        self._last_send = time.perf_counter()
        self.show(qpos, frames, segments=segments)
        return True

    def close(self) -> None:
        """Stop the Meshcat server this viewer started (meshcat 0.3's own close() is broken)."""
        proc = getattr(getattr(self.vis, "window", None), "server_proc", None)
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except Exception:
                proc.kill()


# ---------------------------------------------------------------------------------------- replay
def load_run(run) -> dict:
    """The arrays of a saved run (a run directory or its log.npz), checked for what replay needs."""
    p = Path(run)
    f = p / "log.npz" if p.is_dir() else p
    if not f.is_file():
        raise ModelFileError(f"no run log at {f}: give a run directory (runs/<scenario>/<timestamp>) "
                             "or its log.npz")
    try:
        with np.load(f, allow_pickle=False) as z:
            L = {k: z[k] for k in z.files}
    except Exception as e:
        raise ModelFileError(f"{f} is not a readable run log ({type(e).__name__}: {e})") from e
    for k in ("t", "mjcf_path"):
        if k not in L:
            raise ModelFileError(f"{f} has no '{k}' entry, which replay needs (keys: {sorted(L)[:20]})")
    L["_file"] = str(f)
    return L


def replay(run, *, visualizer=None, speed: float = 1.0, loop: bool = False, qpos_key: str = "plant_qpos",
           realtime: bool = True, fps: float = 30.0, progress: bool = True) -> MeshcatViewer:
    """Play a saved run in Meshcat (see the module docstring for the log keys it reads)."""
    L = load_run(run)
    if qpos_key not in L:
        keys = [k for k in L if k.endswith("qpos")]
        raise ConfigError(f"{L['_file']} has no '{qpos_key}' series; it has {keys or 'no qpos series'}")
    t, Q = np.asarray(L["t"], dtype=float).ravel(), np.asarray(L[qpos_key], dtype=float)
    if Q.ndim != 2 or Q.shape[0] != t.shape[0]:
        raise ConfigError(f"{L['_file']}: '{qpos_key}' has shape {Q.shape}, expected ({t.shape[0]}, nq)")
    mjcf = str(L["mjcf_path"])
    viewer = MeshcatViewer(mjcf, visualizer=visualizer, realtime=realtime, speed=speed, fps=fps)
    if Q.shape[1] != viewer.model.nq:
        raise ConfigError(f"{L['_file']}: '{qpos_key}' has {Q.shape[1]} columns but {mjcf} has nq={viewer.model.nq}")
    for k in (k for k in L if k.startswith("sphere__")):          # [x, y, z, radius], e.g. keep-out zones
        c = np.asarray(L[k], dtype=float).ravel()
        viewer.set_sphere(k[len("sphere__"):], c[:3], c[3])
    frames = {k[len("frame__"):]: L[k] for k in L if k.startswith("frame__")}
    trails = {k[len("trail__"):]: L[k] for k in L if k.startswith("trail__")}
    segs = {k[len("segment__"):]: L[k] for k in L if k.startswith("segment__")}
    while True:
        it = range(t.shape[0])
        if progress:
            from tqdm import tqdm

            it = tqdm(it, desc=f"replay {Path(L['_file']).parent.name}", unit="step", leave=False)
        for i in it:
            viewer.maybe_update(float(t[i]), Q[i], frames={k: v[i] for k, v in frames.items()},
                                trails={k: v[i] for k, v in trails.items()},
                                segments={k: v[i] for k, v in segs.items()})
        viewer.show(Q[-1], {k: v[-1] for k, v in frames.items()}, {k: v[-1] for k, v in trails.items()},
                    t=float(t[-1]), segments={k: v[-1] for k, v in segs.items()})
        if not loop:
            return viewer


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.viewer", description="Replay a saved run in Meshcat.")
    ap.add_argument("run", help="run directory (runs/<scenario>/<timestamp>) or its log.npz")
    ap.add_argument("--speed", type=float, default=1.0, help="playback speed (1 = real time)")
    ap.add_argument("--loop", action="store_true", help="replay until interrupted")
    ap.add_argument("--qpos-key", default="plant_qpos",
                    help="which logged qpos series to show (e.g. model_qpos for the tensor model)")
    ap.add_argument("--no-wait", action="store_true", help="exit when the replay ends (closes the server)")
    args = ap.parse_args(argv)
    try:
        vis = MeshcatViewer._start_server()
        print(f"Meshcat: open {vis.url()} in a browser", flush=True)
        time.sleep(0.5)
        viewer = replay(args.run, visualizer=vis, speed=args.speed, loop=args.loop, qpos_key=args.qpos_key)
    except StackError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    if not args.no_wait:
        print("replay done; the scene stays up until Ctrl-C", flush=True)
        try:
            while True:
                time.sleep(1.0)
        except KeyboardInterrupt:
            pass
    viewer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

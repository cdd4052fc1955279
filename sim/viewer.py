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
(T_world_body from ``xpos``/``xmat``), so a geom's world pose is T_world_body · T_body_geom. Frames are
throttled to ``fps``
and, with ``realtime``, paced so that simulated time does not run ahead of the wall clock (a run
faster than real time is slowed down for watching; a slower one is shown as it comes).

Replay:  ``python -m sim.viewer RUN_DIR [--speed S] [--loop] [--qpos-key K]`` reads
``RUN_DIR/log.npz``: ``mjcf_path``, ``t``, ``plant_qpos`` (N×nq) and any ``frame__<name>`` (N×4×4)
and ``trail__<name>`` (N×3) and ``segment__<name>`` (N×2×3, rod end points) series the scenario logged,
and ``sphere__<name>`` ([x, y, z, r]) and ``style__frame__<name>`` / ``style__segment__<name>`` ([size, r, g,
b, a]: a triad's length, a rod's radius and colour; ``MeshcatViewer.apply_styles``) entries.

Standalone page:  ``python -m sim.viewer RUN_DIR --html OUT.html`` (``write_html``; every scenario run
writes ``replay.html``) plays the same log as a Meshcat animation with a time slider, from one file
that needs no server.

Camera: on start (and again on the first frame, the run's real pose) the scene is framed so that the
plant fills the view (``frame_plant``).

Server: ``start_server`` runs Meshcat's bridge in ``sim/_meshcat_server.py``: its output goes to a
log file (the run directory's ``meshcat.log``), a browser that vanishes costs the run nothing, it exits
with the process that started it however that ends, and a request that takes longer than
``REQUEST_TIMEOUT_S`` turns the viewer off instead of blocking the run.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from cmstack.models.errors import ConfigError, ModelFileError, StackError

_GROUPS = (0, 1, 2)
#: where the viewer's web server listens unless asked otherwise (``--viewer-host``)
VIEWER_HOST = "127.0.0.1"
_TRAIL_COLORS = (0xE6194B, 0x3CB44B, 0x4363D8, 0xF58231, 0x911EB4, 0x42D4F4)


def _rx90() -> np.ndarray:
    T = np.eye(4)
    T[1:3, 1:3] = [[0.0, -1.0], [1.0, 0.0]]  # R_x(+π/2): y ↦ z
    return T


def _hex(rgba: Sequence[float] | np.ndarray) -> int:
    r, g, b = (int(round(255 * float(np.clip(c, 0, 1)))) for c in rgba[:3])
    return (r << 16) | (g << 8) | b


def _end_process(p: Any) -> None:
    """End the child process ``p`` (a Popen, or None) if it still runs: SIGTERM, then SIGKILL after 5 s, reaped."""
    if p is not None and p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=5)
        except Exception:
            p.kill()
            p.wait()


class Recorder:
    """A stand-in for ``meshcat.Visualizer`` that keeps the scene in memory instead of sending it.

    Same path interface (``rec["a"]["b"].set_object(obj)``, ``.set_transform(T)``,
    ``.set_property(key, value)``, ``.delete()``; a name starting with "/" is absolute, as in
    Meshcat: ``rec["/Grid"]``); ``objects[path]`` is the last object set at a path,
    ``transforms[path]`` its last transform, ``properties[(path, key)]`` its last property value and
    ``n_transforms`` how many transforms were sent. Every command is serialised exactly as Meshcat
    would serialise it, so an object Meshcat cannot send fails here too. With ``keep=True``,
    ``commands`` keeps every lowered command in order (what ``write_html`` embeds). Used by the tests.
    """

    def __init__(self, path: str = "", root: Recorder | None = None, keep: bool = False) -> None:
        self._path = path
        self._root = root or self
        if root is None:
            self.objects: dict[str, object] = {}
            self.transforms: dict[str, np.ndarray] = {}
            self.properties: dict[tuple[str, str], object] = {}
            self.n_transforms = 0
            self.keep = bool(keep)
            self.commands: list[dict] = []

    def __getitem__(self, name: str) -> Recorder:
        if name.startswith("/"):
            return Recorder("/" + name.strip("/"), self._root)
        return Recorder(f"{self._path}/{name}" if self._path else name, self._root)

    def _mc_path(self) -> Any:
        from meshcat.path import Path as McPath

        return (
            McPath(()).append(self._path)
            if self._path.startswith("/")
            else McPath(("meshcat",)).append(self._path)
        )

    def _log(self, cmd: Any) -> None:
        low = cmd.lower()  # serialise as Meshcat would: bad objects fail here
        if self._root.keep:
            self._root.commands.append(low)

    def set_object(self, obj: Any, material: Any = None) -> None:
        from meshcat.commands import SetObject

        self._log(SetObject(obj, material, self._mc_path()))
        self._root.objects[self._path] = obj

    def set_transform(self, T: ArrayLike) -> None:
        from meshcat.commands import SetTransform

        T = np.array(T, dtype=float)
        self._log(SetTransform(T, self._mc_path()))
        self._root.transforms[self._path] = T
        self._root.n_transforms += 1

    def set_property(self, key: str, value: Any) -> None:
        from meshcat.commands import SetProperty

        self._log(SetProperty(key, value, self._mc_path()))
        self._root.properties[(self._path, key)] = value

    def set_animation(self, animation: Any, play: bool = True, repetitions: int = 1) -> None:
        from meshcat.commands import SetAnimation

        self._log(SetAnimation(animation, play=play, repetitions=repetitions))

    def delete(self) -> None:
        from meshcat.commands import Delete

        self._log(Delete(self._mc_path()))
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
    host : the address the web server of a server started here listens on (default 127.0.0.1: this
        machine only; ``start_server``).
    """

    def __init__(
        self,
        model: Any,
        *,
        visualizer: Any = None,
        fps: float = 30.0,
        realtime: bool = True,
        speed: float = 1.0,
        groups: tuple[int, ...] = _GROUPS,
        trail_len: int = 4000,
        trail_dt: float = 0.005,
        frame_scale: float = 0.08,
        prefix: str = "plant",
        log: str | Path | None = None,
        frame_camera: bool = True,
        host: str = VIEWER_HOST,
    ) -> None:
        import mujoco

        if isinstance(model, (str, Path)):
            from cmstack.sim.plant import load_mjcf

            model = load_mjcf(model)
        if not isinstance(model, mujoco.MjModel):
            raise ConfigError(
                f"MeshcatViewer needs a mujoco.MjModel or an MJCF path, got {type(model).__name__}"
            )
        if not fps > 0 or not speed > 0:
            raise ConfigError(f"MeshcatViewer: fps and speed must be > 0 (got fps={fps}, speed={speed})")
        self.model = model
        self.data = mujoco.MjData(model)
        self._kin = mujoco.mj_kinematics
        if visualizer is None:
            visualizer = self._start_server(log, host)
        self.vis = visualizer
        self.fps, self.realtime, self.speed = float(fps), bool(realtime), float(speed)
        self.trail_len, self.trail_dt, self.frame_scale = int(trail_len), float(trail_dt), float(frame_scale)
        self.prefix = prefix
        self.groups = tuple(int(x) for x in groups)
        self.skipped: dict[int, str] = {}  # geom id -> why it is not drawn
        self._moving: list[tuple[int, str]] = []  # (body id, meshcat path) sent every frame
        self._frames: set[str] = set()
        self._segments: set[str] = set()
        self._styles: dict[tuple[str, str], np.ndarray] = {}  # (kind, name) -> [size, r, g, b, a]
        self._trails: dict[str, list] = {}
        self._trail_t: dict[str, float] = {}
        self._trail_dirty: set[str] = set()
        self._t0: float | None = None
        self._wall0 = 0.0
        self._last_send = -np.inf
        self._last_t = -np.inf
        self.frames_sent = 0
        self.frame_camera = bool(frame_camera)
        self.camera: dict | None = None  # the last framing (centre, radius, eye), for tests
        self._build()
        if self.frame_camera:
            self.frame_plant()

    # ------------------------------------------------------------------------------------ set-up
    @staticmethod
    def _start_server(log: str | Path | None = None, host: str = VIEWER_HOST) -> Any:
        """A ``meshcat.Visualizer`` on a server of our own (``sim/_meshcat_server.py``): see ``start_server``."""
        return start_server(log, host=host)

    def url(self) -> str:
        return self.vis.url()

    def _material(self, gid: int) -> Any:
        import meshcat.geometry as g

        m = self.model
        rgba = m.mat_rgba[m.geom_matid[gid]] if m.geom_matid[gid] >= 0 else m.geom_rgba[gid]
        return g.MeshLambertMaterial(color=_hex(rgba), opacity=float(rgba[3]), transparent=bool(rgba[3] < 1))

    def _shapes(self, gid: int) -> list[tuple[str, Any, np.ndarray]] | str:
        """[(sub-path, meshcat geometry, fixed 4×4 transform in the geom frame)] or a reason string."""
        import meshcat.geometry as g
        import mujoco

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
            mesh = int(m.geom_dataid[gid])
            va, vn = int(m.mesh_vertadr[mesh]), int(m.mesh_vertnum[mesh])
            fa, fn = int(m.mesh_faceadr[mesh]), int(m.mesh_facenum[mesh])
            verts = np.array(m.mesh_vert[va : va + vn], dtype=float)
            faces = np.array(m.mesh_face[fa : fa + fn], dtype=np.int64)
            return [("shape", g.TriangularMeshGeometry(verts, faces), np.eye(4))]
        return f"geom type {mujoco.mjtGeom(typ).name} is not drawn"

    def _body_path(self, bid: int) -> str:
        import mujoco

        return f"{self.prefix}/" + (
            mujoco.mj_id2name(self.model, mujoco.mjtObj.mjOBJ_BODY, bid) or f"body{bid}"
        )

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
            if int(m.body_weldid[bid]) != 0:  # moves with the joints
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

    # ------------------------------------------------------------------------------------ camera
    #: preferred horizontal direction from the plant towards the eye (world x, y): in front (+x), a
    #: little to the left (+y); the camera turns about z from it to face the plant's widest side
    CAMERA_AZIMUTH_DIR = (1.0, 0.45)
    #: elevation of the eye above the plant's centre (deg)
    CAMERA_ELEVATION_DEG = 25.0
    #: fraction of the view (from its centre to its edges) the plant may take
    CAMERA_FILL = 0.92
    #: Meshcat's default camera: vertical field of view (deg); the width/height ratio assumed of the page
    CAMERA_FOV_DEG = 75.0
    CAMERA_ASPECT = 1.6

    def _drawn_solids(self) -> list[int]:
        import mujoco

        m = self.model
        return [
            g
            for g in range(m.ngeom)
            if g not in self.skipped and m.geom_type[g] != mujoco.mjtGeom.mjGEOM_PLANE
        ]

    def plant_corners(self) -> np.ndarray:
        """World corners (8 per geom, m) of the oriented bounding boxes of the drawn geoms at the current
        pose: p_g + R_g (a_g ± h_g), with (a_g, h_g) = ``geom_aabb`` (centre and half sizes in the geom
        frame). Planes (floors, drawn 10 m wide) are left out: they are not the plant."""
        ids = self._drawn_solids()
        if not ids:
            return np.zeros((1, 3))
        signs = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)], dtype=float)
        box = self.model.geom_aabb[ids].reshape(-1, 2, 3)
        local = box[:, None, 0, :] + signs[None] * box[:, None, 1, :]  # (g, 8, 3)
        R = self.data.geom_xmat[ids].reshape(-1, 3, 3)
        return (np.einsum("gij,gkj->gki", R, local) + self.data.geom_xpos[ids][:, None, :]).reshape(-1, 3)

    def plant_bounds(self) -> tuple[np.ndarray, float]:
        """(centre c, half diagonal R) of the world box around ``plant_corners`` (m)."""
        P = self.plant_corners()
        lo, hi = P.min(axis=0), P.max(axis=0)
        return 0.5 * (lo + hi), max(0.5 * float(np.linalg.norm(hi - lo)), 1e-3)

    def camera_direction(self, P: np.ndarray) -> np.ndarray:
        """Unit vector u from the plant towards the eye. Horizontally it is the direction of least
        spread of the corners P (the eigenvector of the smallest eigenvalue of their 2×2 horizontal
        covariance), so the widest side faces the camera, signed towards ``CAMERA_AZIMUTH_DIR``
        (that direction itself when the spread is nearly round); it is raised by
        ``CAMERA_ELEVATION_DEG``. Meshcat keeps world z up on screen, so z is never tilted."""
        pref = np.asarray(self.CAMERA_AZIMUTH_DIR, dtype=float)
        pref /= np.linalg.norm(pref)
        X = P[:, :2] - P[:, :2].mean(axis=0)
        lam, V = np.linalg.eigh(X.T @ X)
        d = V[:, 0] if lam[1] > 1.5 * lam[0] + 1e-12 else pref
        d = d if d @ pref >= 0 else -d
        el = np.radians(self.CAMERA_ELEVATION_DEG)
        return np.array([np.cos(el) * d[0], np.cos(el) * d[1], np.sin(el)])

    def frame_plant(self) -> None:
        """Point Meshcat's default camera at the plant so that it fills the view.

        Meshcat's orbit camera always looks at the world origin, so the scene is moved instead of the
        target: the roots /meshcat (everything drawn), /Grid and /Axes get the translation −c, which
        puts the centre c of the plant's box (``plant_bounds``) on the origin. The eye sits at e = D·u
        (u from ``camera_direction``) looking along −u, with right r = −u × z/‖·‖ and up w = r × (−u).
        A corner x (relative to c, from ``plant_corners``) lies at depth D − x·u and projects inside
        the fraction F = ``CAMERA_FILL`` of the half-height h = tan(fov/2) and of the half-width a·h
        (a = ``CAMERA_ASPECT``) when
            D ≥ x·u + |x·w|/(F h)   and   D ≥ x·u + |x·r|/(F a h);
        D is the largest such bound over the corners. The camera node ("rotated", R_x(+π/2), local
        (x, y, z) ↦ world (x, −z, y)) takes the eye as (e_x, e_z, −e_y)."""
        self._kin(self.model, self.data)
        P = self.plant_corners()
        c, R = self.plant_bounds()
        u = self.camera_direction(P)
        r = np.cross(-u, [0.0, 0.0, 1.0])
        r /= np.linalg.norm(r)
        w = np.cross(r, -u)
        h = np.tan(np.radians(self.CAMERA_FOV_DEG) / 2)
        x = P - c
        D = float(
            max(
                np.max(x @ u + np.abs(x @ w) / (self.CAMERA_FILL * h)),
                np.max(x @ u + np.abs(x @ r) / (self.CAMERA_FILL * self.CAMERA_ASPECT * h)),
                np.max(x @ u) + 0.05,
            )
        )
        e = D * u
        T = np.eye(4)
        T[:3, 3] = -c
        for root in ("/meshcat", "/Grid", "/Axes"):
            self.vis[root].set_transform(T)
        self.vis["/Cameras/default/rotated/<object>"].set_property(
            "position", [float(e[0]), float(e[2]), float(-e[1])]
        )
        self.camera = {"centre": c, "radius": R, "eye": e, "distance": D, "direction": u}

    # ------------------------------------------------------------------------------------ drawing
    def set_qpos(self, qpos: ArrayLike) -> None:
        """Pose every moving body from ``qpos`` (MuJoCo order, length nq)."""
        qpos = np.asarray(qpos, dtype=float).ravel()
        if qpos.shape[0] != self.model.nq:
            raise ConfigError(
                f"viewer: qpos has {qpos.shape[0]} entries, the plant model has nq={self.model.nq}"
            )
        self.data.qpos[:] = qpos
        self._kin(self.model, self.data)
        for bid, path in self._moving:
            self.vis[path].set_transform(self._body_pose(bid))

    def apply_styles(self, styles: dict) -> None:
        """How named frames and segments are drawn, before they first are: ``styles`` maps
        ``"style__frame__<name>"`` (or ``"style__segment__<name>"``) to [size, r, g, b, a]: a triad's axis
        length (m; its colours stay x red, y green, z blue) or a rod's radius (m) and colour.  The same
        entries in a run's log (meta) style its replay and replay.html: a scenario logs what it applies."""
        for key, val in styles.items():
            parts = key.split("__", 2)
            if len(parts) != 3 or parts[0] != "style" or parts[1] not in ("frame", "segment") or not parts[2]:
                raise ConfigError(
                    f"viewer: style key '{key}' is not style__frame__<name> or style__segment__<name>"
                )
            val = np.asarray(val, dtype=float).ravel()
            if val.shape != (5,) or not val[0] > 0:
                raise ConfigError(f"viewer: style '{key}' must be [size > 0, r, g, b, a], got {val.tolist()}")
            self._styles[(parts[1], parts[2])] = val

    def set_frame(self, name: str, T: Any) -> None:
        """A coordinate triad (x red, y green, z blue) at pose ``T`` (4×4 or an object with .homogeneous),
        of axis length ``frame_scale`` or its style's (``apply_styles``)."""
        import meshcat.geometry as g

        T = np.asarray(getattr(T, "homogeneous", T), dtype=float)
        if T.shape != (4, 4):
            raise ConfigError(f"viewer: frame '{name}' must be a 4×4 pose, got shape {T.shape}")
        path = f"frames/{name}"
        if name not in self._frames:
            style = self._styles.get(("frame", name))
            self.vis[path].set_object(g.triad(float(style[0]) if style is not None else self.frame_scale))
            self._frames.add(name)
        self.vis[path].set_transform(T)

    def append_trail(self, name: str, p: ArrayLike, t: float | None = None) -> None:
        """Add a point to trail ``name`` (drawn at the next frame). With ``t``, points closer than
        ``trail_dt`` in time are skipped; a full trail keeps every other point of its older half."""
        if t is not None:
            if t < self._trail_t.get(name, -np.inf):  # time went back: a new run
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
                    g.Line(g.PointsGeometry(np.array(pts).T), g.LineBasicMaterial(color=color))
                )
        self._trail_dirty.clear()

    def set_sphere(
        self,
        name: str,
        center: ArrayLike,
        radius: float,
        rgba: tuple[float, float, float, float] = (0.9, 0.2, 0.2, 0.3),
    ) -> None:
        """A (by default translucent red) sphere, e.g. a keep-out zone."""
        import meshcat.geometry as g

        path = f"spheres/{name}"
        self.vis[path].set_object(
            g.Mesh(
                g.Sphere(float(radius)),
                g.MeshLambertMaterial(
                    color=_hex(rgba), opacity=float(rgba[3]), transparent=bool(rgba[3] < 1)
                ),
            )
        )
        T = np.eye(4)
        T[:3, 3] = np.asarray(center, dtype=float).ravel()[:3]
        self.vis[path].set_transform(T)

    def set_segment(
        self,
        name: str,
        p0: ArrayLike,
        p1: ArrayLike,
        radius: float = 0.012,
        rgba: ArrayLike = (0.95, 0.75, 0.1, 0.8),
    ) -> None:
        """A rod from ``p0`` to ``p1`` (e.g. a coupling body the plant does not have). A unit-height
        Meshcat cylinder (axis y) is mapped by T = [R·diag(1, ‖p1 − p0‖, 1)  (p0 + p1)/2], R taking y
        onto the rod's direction.  A style (``apply_styles``) overrides ``radius`` and ``rgba``."""
        import meshcat.geometry as g

        p0, p1 = (np.asarray(p, dtype=float).ravel()[:3] for p in (p0, p1))
        path = f"segments/{name}"
        style = self._styles.get(("segment", name))
        color = np.asarray(rgba, dtype=float) if style is None else np.asarray(style[1:], dtype=float)
        if style is not None:
            radius = float(style[0])
        if name not in self._segments:
            self.vis[path].set_object(
                g.Mesh(
                    g.Cylinder(1.0, float(radius)),
                    g.MeshLambertMaterial(
                        color=_hex(color), opacity=float(color[3]), transparent=bool(color[3] < 1)
                    ),
                )
            )
            self._segments.add(name)
        T = segment_pose(p0, p1)
        self.vis[path].set_transform(T)

    def show(
        self,
        qpos: ArrayLike,
        frames: dict | None = None,
        trails: dict | None = None,
        t: float | None = None,
        segments: dict | None = None,
    ) -> None:
        """Send one frame now: plant pose, frames, segments, trails (points appended), no pacing."""
        self.set_qpos(qpos)
        if self.frame_camera and self.frames_sent == 0:
            self.frame_plant()  # the run's first pose, not the model's qpos0
        for k, T in (frames or {}).items():
            self.set_frame(k, T)
        for k, (p0, p1) in (segments or {}).items():
            self.set_segment(k, p0, p1)
        for k, p in (trails or {}).items():
            self.append_trail(k, p, t)
        self._flush_trails()
        self.frames_sent += 1

    def maybe_update(
        self,
        t: float,
        qpos: ArrayLike,
        frames: dict | None = None,
        trails: dict | None = None,
        segments: dict | None = None,
    ) -> bool:
        """Call every control step. Trails collect points every ``trail_dt`` of simulated time; a
        frame is sent at most ``fps`` times per wall-clock second and, with ``realtime``, not before
        the wall clock has caught up with simulated time. Returns True when a frame was sent."""
        if getattr(getattr(self.vis, "window", None), "failed", None) is not None:
            return False  # the server is gone: nothing to pace for
        wall = time.perf_counter()
        if self._t0 is None or t < self._last_t:  # first call, or time went back (a new run)
            self._t0, self._wall0, self._last_send = t, wall, -np.inf
        self._last_t = t
        for k, p in (trails or {}).items():
            self.append_trail(k, p, t)
        period = 1.0 / self.fps
        lead = (t - self._t0) / self.speed - (wall - self._wall0)  # > 0: simulation ahead of the clock
        if self.realtime and lead >= period:
            time.sleep(min(lead, 1.0))  # wait for the clock, then show this state
        elif wall - self._last_send < period:
            return False
        self._last_send = time.perf_counter()
        self.show(qpos, frames, segments=segments)
        return True

    def close(self) -> None:
        """Stop the Meshcat server this viewer started (if any); idempotent."""
        window = getattr(self.vis, "window", None)
        if isinstance(window, _window_class()):
            window.shutdown()
            return
        proc = getattr(
            window, "server_proc", None
        )  # a plain meshcat.Visualizer (meshcat's close() is broken)
        _end_process(proc)

    def wait(self, message: str | None = None) -> None:
        """Keep the scene up until Ctrl-C (SIGINT) or SIGTERM, or until the server is gone. Prints
        ``message`` (default: where the scene is and how to leave). Does not close the server."""
        import signal
        import threading

        print(
            message or f"the scene stays up at {self.url()} until Ctrl-C (--no-wait to exit at the end)",
            flush=True,
        )
        window = getattr(self.vis, "window", None)
        proc = getattr(window, "server_proc", None)
        stop = threading.Event()
        old = {}
        try:
            for sig in (signal.SIGINT, signal.SIGTERM):
                old[sig] = signal.signal(sig, lambda *_: stop.set())
        except ValueError:  # not the main thread: Ctrl-C arrives as KeyboardInterrupt
            pass
        try:
            while not stop.wait(0.2):
                if proc is not None and proc.poll() is not None:
                    break
        except KeyboardInterrupt:
            pass
        finally:
            for sig, h in old.items():
                signal.signal(sig, h)


def segment_pose(p0: ArrayLike, p1: ArrayLike) -> np.ndarray:
    """Pose (with scale) mapping Meshcat's unit cylinder (axis y, height 1, centred) onto the rod from
    ``p0`` to ``p1``: T = [R·diag(1, L, 1)  (p0 + p1)/2], L = ‖p1 − p0‖, R = [x y z] a rotation whose
    y is the rod's direction."""
    p0, p1 = (np.asarray(p, dtype=float).ravel()[:3] for p in (p0, p1))
    d = p1 - p0
    L = float(np.linalg.norm(d))
    y = d / L if L > 1e-12 else np.array([0.0, 1.0, 0.0])
    a = np.array([1.0, 0.0, 0.0]) if abs(y[0]) < 0.9 else np.array([0.0, 0.0, 1.0])
    x = np.cross(y, a)
    x /= np.linalg.norm(x)
    T = np.eye(4)
    T[:3, :3] = np.column_stack([x, y * L, np.cross(x, y)])
    T[:3, 3] = 0.5 * (p0 + p1)
    return T


# ---------------------------------------------------------------------------------------- server
#: seconds a request to the Meshcat server may take before the viewer gives up (the run goes on)
REQUEST_TIMEOUT_S = 10.0
_WINDOW_CLASS = None


def _window_class() -> Any:
    """``meshcat.visualizer.ViewerWindow`` with a request timeout, a give-up state and a shutdown
    that stops its server (built on first use: importing meshcat is not free)."""
    global _WINDOW_CLASS
    if _WINDOW_CLASS is not None:
        return _WINDOW_CLASS
    import zmq
    from meshcat.visualizer import ViewerWindow

    class _Window(ViewerWindow):
        def __init__(
            self, proc: Any, zmq_url: str, web_url: str, timeout_s: float = REQUEST_TIMEOUT_S
        ) -> None:
            self.server_proc, self.zmq_url, self.web_url = proc, zmq_url, web_url
            self.timeout_ms = int(1000 * timeout_s)
            self.failed: str | None = None
            self.connect_zmq()

        def connect_zmq(self) -> None:
            s = self.context.socket(zmq.REQ)
            for opt in (zmq.RCVTIMEO, zmq.SNDTIMEO):
                s.setsockopt(opt, self.timeout_ms)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(self.zmq_url)
            self.zmq_socket = s

        def send(self, command: Any) -> None:
            if self.failed is not None:
                return
            try:
                super().send(command)
            except zmq.ZMQError as e:
                self.failed = f"{type(e).__name__}: {e}"
                print(
                    f"viewer: the Meshcat server did not answer within {self.timeout_ms / 1000:g} s "
                    f"({self.failed}); the run goes on without the viewer",
                    file=sys.stderr,
                    flush=True,
                )
                self.zmq_socket.close(0)

        def shutdown(self) -> None:
            try:
                self.zmq_socket.close(0)
            except Exception:
                pass
            p = self.server_proc
            _end_process(p)
            if p is not None and p.stdin is not None and not p.stdin.closed:
                p.stdin.close()

    _WINDOW_CLASS = _Window
    return _Window


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_viewer_host(host: str) -> str:
    """``host`` if this machine can listen on it (a TCP socket is bound to it, port 0, and closed);
    otherwise a ConfigError naming it."""
    import socket

    try:
        infos = socket.getaddrinfo(host or None, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        fam, _, _, _, addr = infos[0]
        with socket.socket(fam, socket.SOCK_STREAM) as s:
            s.bind(addr)
    except OSError as e:
        raise ConfigError(
            f"--viewer-host {host!r}: the viewer's web server cannot listen there ({e}); "
            f"use {VIEWER_HOST} (this machine only), an address of this machine, or 0.0.0.0 (every interface)"
        ) from None
    return host


def exposure_warning(host: str, web_url: str) -> str | None:
    """The one-line warning for a web server listening beyond the loopback on ``host`` (None: loopback)."""
    if _is_loopback(host):
        return None
    port = web_url.rstrip("/").split(":")[-1].split("/")[0]
    who = (
        f"anyone who can reach this machine on TCP port {port} (every interface)"
        if host in ("", "0.0.0.0", "::")
        else f"anyone who can reach {host}:{port}"
    )
    return (
        f"warning: the Meshcat web server listens on {host or '*'}:{port}, not only on this machine: "
        f"{who} can watch the robot and open websockets to it"
    )


def start_server(log: str | Path | None = None, timeout: float = 30.0, host: str = VIEWER_HOST) -> Any:
    """Start a Meshcat server process and return a ``meshcat.Visualizer`` connected to it.

    The server (``sim/_meshcat_server.py``) survives browsers that vanish, writes its output to
    ``log`` (e.g. the run directory's ``meshcat.log``; default: nowhere) and never to a pipe, and
    exits with this process whatever ends it (its stdin is a pipe only this process holds). Every
    request times out after ``REQUEST_TIMEOUT_S``; the viewer then stops sending and the run goes on.
    ``timeout`` (s) bounds the start-up.  Its web server listens on ``host`` only (default the
    loopback, 127.0.0.1: this machine's users; another address, or 0.0.0.0 for every interface,
    opens it to whoever can reach it, and a one-line warning on stderr says so); its ZMQ side
    (commands) is always on the loopback."""
    import atexit
    import select
    import subprocess

    check_viewer_host(host)
    try:
        import meshcat

        cmd = [sys.executable, "-u", "-m", "cmstack.sim._meshcat_server", "--host", host]
        if log is not None:
            cmd += ["--log", str(log)]
        proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
        urls: dict[str, str] = {}
        deadline = time.monotonic() + timeout
        out, err_pipe = proc.stdout, proc.stderr
        assert out is not None and err_pipe is not None  # both are pipes (Popen above)
        while len(urls) < 2:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([out], [], [], left)[0]:
                proc.kill()
                raise TimeoutError(f"no URL from the server within {timeout:g} s")
            line = out.readline().decode("utf-8", "replace").strip()
            if not line:  # end of file: it died
                err = err_pipe.read().decode("utf-8", "replace").strip().splitlines()
                raise RuntimeError(
                    f"the server exited with code {proc.wait()}: {err[-1] if err else 'no output'}"
                )
            k, _, v = line.partition("=")
            if k in ("zmq_url", "web_url"):
                urls[k] = v
        out.close()  # it writes to its log from now on
        err_pipe.close()
        window = _window_class()(proc, urls["zmq_url"], urls["web_url"])
        atexit.register(window.shutdown)
        warning = exposure_warning(host, urls["web_url"])
        if warning is not None:
            print(warning, file=sys.stderr, flush=True)
        return meshcat.Visualizer(window=window)
    except Exception as e:  # zmq/port/subprocess trouble: say what to do
        raise StackError(
            f"could not start a Meshcat server ({type(e).__name__}: {e}); "
            "check that the 'meshcat' package is installed in .venv and that a local "
            "port (7000+) is free, or run without --viewer"
        ) from e


# ---------------------------------------------------------------------------------------- replay
def load_run(run: str | Path) -> dict[str, Any]:
    """The arrays of a saved run (a run directory or its log.npz), checked for what replay needs; a run
    killed before its final save is read from its checkpoint parts (sim/logger.py: read_log)."""
    from cmstack.sim.logger import read_log

    f = _run_log_path(run)
    try:
        L: dict[str, Any] = read_log(f)
    except Exception as e:
        raise ModelFileError(f"{f} is not a readable run log ({type(e).__name__}: {e})") from e
    for k in ("t", "mjcf_path"):
        if k not in L:
            raise ModelFileError(f"{f} has no '{k}' entry, which replay needs (keys: {sorted(L)[:20]})")
    L["_file"] = str(f)
    return L


def _qpos_series(L: dict, qpos_key: str) -> tuple[np.ndarray, np.ndarray]:
    if qpos_key not in L:
        # every entry of the file (L may hold only the entries a sampled read asked for: write_html)
        try:
            from cmstack.sim.logger import log_keys

            every = set(log_keys(L["_file"])) | set(L)
        except (OSError, KeyError, ValueError):
            every = set(L)
        keys = sorted(k for k in every if k.endswith("qpos"))
        raise ConfigError(
            f"{L['_file']} has no '{qpos_key}' series; "
            + (
                f"its qpos series: {keys} (give one with --qpos-key)"
                if keys
                else f"it has no qpos series (entries: {sorted(k for k in every if not k.startswith('_'))[:20]})"
            )
        )
    t, Q = np.asarray(L["t"], dtype=float).ravel(), np.asarray(L[qpos_key], dtype=float)
    if Q.ndim != 2 or Q.shape[0] != t.shape[0] or t.shape[0] == 0:
        raise ConfigError(
            f"{L['_file']}: '{qpos_key}' has shape {Q.shape}, expected ({t.shape[0]}, nq) with at least one row"
        )
    return t, Q


def _overlays(L: dict, prefix: str) -> dict:
    return {k[len(prefix) :]: L[k] for k in L if k.startswith(prefix)}


def _viewer_for(L: dict, Q: np.ndarray, qpos_key: str, **kw: Any) -> MeshcatViewer:
    mjcf = str(L["mjcf_path"])
    viewer = MeshcatViewer(mjcf, **kw)
    if Q.shape[1] != viewer.model.nq:
        viewer.close()
        raise ConfigError(
            f"{L['_file']}: '{qpos_key}' has {Q.shape[1]} columns but {mjcf} has nq={viewer.model.nq}"
        )
    viewer.apply_styles({k: L[k] for k in L if k.startswith("style__")})
    for name, c in _overlays(L, "sphere__").items():  # [x, y, z, radius], e.g. keep-out zones
        c = np.asarray(c, dtype=float).ravel()
        viewer.set_sphere(name, c[:3], c[3])
    return viewer


def replay(
    run: str | Path | dict[str, Any],
    *,
    visualizer: Any = None,
    speed: float = 1.0,
    loop: bool = False,
    qpos_key: str = "plant_qpos",
    realtime: bool = True,
    fps: float = 30.0,
    progress: bool = True,
) -> MeshcatViewer:
    """Play a saved run in Meshcat (see the module docstring for the log keys it reads); ``run``: a run
    directory, its log.npz, or what :func:`load_run` returned."""
    L = run if isinstance(run, dict) else load_run(run)
    t, Q = _qpos_series(L, qpos_key)
    viewer = _viewer_for(L, Q, qpos_key, visualizer=visualizer, realtime=realtime, speed=speed, fps=fps)
    frames, trails, segs = (_overlays(L, p) for p in ("frame__", "trail__", "segment__"))
    while True:
        it = range(t.shape[0])
        if progress:
            from tqdm import tqdm

            it = tqdm(it, desc=f"replay {Path(L['_file']).parent.name}", unit="step", leave=False)
        for i in it:
            viewer.maybe_update(
                float(t[i]),
                Q[i],
                frames={k: v[i] for k, v in frames.items()},
                trails={k: v[i] for k, v in trails.items()},
                segments={k: v[i] for k, v in segs.items()},
            )
        if progress:  # the bar's last frame ended, so what is printed next starts its own line
            from cmstack.sim.runner import close_bar

            close_bar(it)
        viewer.show(
            Q[-1],
            {k: v[-1] for k, v in frames.items()},
            {k: v[-1] for k, v in trails.items()},
            t=float(t[-1]),
            segments={k: v[-1] for k, v in segs.items()},
        )
        if not loop:
            return viewer


# ------------------------------------------------------------------------------------ standalone HTML
class _Clips:
    """Meshcat animation clips in three.js' JSON form (what ``meshcat.animation.Animation.lower()``
    produces), but with each track as flat ``times``/``values`` arrays sent as float32 blobs instead
    of one {time, value} map per key: three.js' ``AnimationClip.parse`` takes either; this one is
    ~30× smaller to pack. Times are frame numbers; the viewer divides them by ``fps``."""

    def __init__(self, fps: float) -> None:
        self.fps = float(fps)
        self.tracks: dict[str, list[dict]] = {}

    @staticmethod
    def _f32(x: ArrayLike) -> Any:
        """A float32 array as Meshcat's msgpack extension (decoded as a Float32Array by the viewer)."""
        import umsgpack
        from meshcat.geometry import threejs_type

        x = np.ascontiguousarray(np.asarray(x, dtype=np.float32).ravel())
        return umsgpack.Ext(threejs_type(x.dtype)[1], x.tobytes())

    def add(
        self, path: str, prop: str, jstype: str, frames: ArrayLike, values: Sequence[float] | np.ndarray
    ) -> None:
        vals = [bool(x) for x in values] if jstype == "boolean" else self._f32(values)
        self.tracks.setdefault(path, []).append(
            {"name": "." + prop, "type": jstype, "times": self._f32(frames), "values": vals}
        )

    def lower(self) -> list[dict]:
        return [
            {"path": path, "clip": {"fps": self.fps, "name": "default", "tracks": tracks}}
            for path, tracks in self.tracks.items()
        ]


def _quat_xyzw(R: np.ndarray) -> np.ndarray:
    """three.js quaternions (x, y, z, w) of rotation matrices R (…×3×3)."""
    from scipy.spatial.transform import Rotation

    return Rotation.from_matrix(np.asarray(R, dtype=float).reshape(-1, 3, 3)).as_quat()


#: at most this many animation frames in replay.html: a run longer than MAX_HTML_FRAMES / fps simulated
#: seconds (100 s at 30 fps) is sampled at MAX_HTML_FRAMES / duration frames per second instead, so that
#: the page (and the memory that writing it takes) stays the size of a 100 s run's whatever the duration
MAX_HTML_FRAMES = 3000


def _run_log_path(run: str | Path) -> Path:
    """The log of a saved run (a run directory or its log.npz; a run killed before its final save has only
    its checkpoint parts beside it, a ``cmstack rt`` run whose processes both died only its records in
    ``.rt/``), or a one-line ModelFileError."""
    from cmstack.sim.logger import parts_dir
    from cmstack.sim.rt_records import RECORDS

    p = Path(run)
    f = p / "log.npz" if p.is_dir() else p
    if not f.is_file() and not parts_dir(f).is_dir() and not (f.parent / RECORDS / "driver").is_dir():
        raise ModelFileError(
            f"no run log at {f}: give a run directory (runs/<scenario>/<timestamp>) or its log.npz"
        )
    return f


def _load_sampled(
    run: str | Path, qpos_key: str, fps: float, max_frames: int
) -> tuple[dict[str, Any], np.ndarray, int, float]:
    """What write_html needs of a saved run, read row-sampled (sim/logger.py: read_log_rows): the log
    entries with every series at the frame rows, the full time axis' ends, the frame rows and the
    frame rate (``fps``, lowered so that there are at most ``max_frames`` frames)."""
    from cmstack.sim.logger import log_keys, read_log_rows

    f = _run_log_path(run)
    try:
        head = read_log_rows(f, ["t", "mjcf_path"])
    except Exception as e:
        raise ModelFileError(f"{f} is not a readable run log ({type(e).__name__}: {e})") from e
    for k in ("t", "mjcf_path"):
        if k not in head:
            raise ModelFileError(f"{f} has no '{k}' entry, which replay needs")
    t = np.asarray(head["t"], dtype=float).ravel()
    if t.size == 0:
        raise ConfigError(f"{f}: 't' has no rows")
    span = float(t[-1] - t[0])
    if span * fps + 1 > max_frames:
        fps = (max_frames - 1) / span
    n = int(np.floor(span * fps + 1e-9)) + 1  # frames k = 0 … n−1
    idx = np.clip(np.searchsorted(t, t[0] + np.arange(n) / fps), 0, t.shape[0] - 1)
    whole = ("sphere__", "style__")  # entries, not series: read as they are
    want = [qpos_key] + [k for k in log_keys(f) if k.startswith(("frame__", "trail__", "segment__") + whole)]
    series = read_log_rows(f, [k for k in want if not k.startswith(whole)], np.unique(idx))
    pos = np.searchsorted(np.unique(idx), idx)  # frame k -> its row in the sampled series
    L = {k: v[pos] for k, v in series.items()}
    L.update(read_log_rows(f, [k for k in want if k.startswith(whole)]))
    L["t"], L["mjcf_path"], L["_file"] = t[idx], head["mjcf_path"], str(f)
    return L, t, n, fps


def write_html(
    run: str | Path,
    out: str | Path,
    *,
    qpos_key: str = "plant_qpos",
    fps: float = 30.0,
    max_chunks: int = 100,
    max_frames: int = MAX_HTML_FRAMES,
) -> Path:
    """Write one self-contained HTML file that plays a saved run, with Meshcat's time slider.

    The scene is built as a live replay builds it (plant, camera, frames, segments, spheres), but
    into a ``Recorder``; the motion is a Meshcat animation (``set_animation``) sampled at ``fps``
    frames per second of simulated time (frame k shows the first log row at or after t₀ + k/fps;
    at most ``max_frames`` frames: a longer run is sampled at a lower rate, see MAX_HTML_FRAMES): a
    position and a quaternion track per moving body and per frame, plus a scale track per segment
    (its length). A trail is drawn as up to ``max_chunks`` polyline pieces, each made visible (a
    boolean track) when the motion reaches its end. The file holds Meshcat's viewer
    (``main.min.js``) and every command as msgpack, as Meshcat's own static-HTML export does, decoded
    in order on load: it needs no server and no network. The controls panel opens on the
    "Animations" folder (play, pause, reset, time slider, speed).  Only the sampled rows of the log
    are read (memory: that of the page, whatever the run's length)."""
    import base64
    import importlib.util

    import meshcat.geometry as g
    import umsgpack

    if not fps > 0:
        raise ConfigError(f"write_html: fps must be > 0, got {fps}")
    L, t_full, n, fps = _load_sampled(run, qpos_key, fps, max_frames)
    t, Q = _qpos_series(L, qpos_key)
    rec = Recorder(keep=True)
    viewer = _viewer_for(L, Q, qpos_key, visualizer=rec, realtime=False)
    frames, trails, segs = (_overlays(L, p) for p in ("frame__", "trail__", "segment__"))
    idx = np.arange(n)  # the series are sampled already
    i0 = 0
    viewer.show(Q[i0], {k: v[i0] for k, v in frames.items()}, segments={k: v[i0] for k, v in segs.items()})

    k = np.arange(n)
    clips = _Clips(fps)
    bodies = [b for b, _ in viewer._moving]
    P, R = np.empty((n, len(bodies), 3)), np.empty((n, len(bodies), 3, 3))
    for j, i in enumerate(idx):
        viewer.data.qpos[:] = Q[i]
        viewer._kin(viewer.model, viewer.data)
        P[j] = viewer.data.xpos[bodies]
        R[j] = viewer.data.xmat[bodies].reshape(-1, 3, 3)
    for col, (_, path) in enumerate(viewer._moving):
        mc = "/meshcat/" + path
        clips.add(mc, "position", "vector3", k, P[:, col])
        clips.add(mc, "quaternion", "quaternion", k, _quat_xyzw(R[:, col]))
    for name, v in frames.items():
        T = np.asarray(v, dtype=float)[idx]
        clips.add(f"/meshcat/frames/{name}", "position", "vector3", k, T[:, :3, 3])
        clips.add(f"/meshcat/frames/{name}", "quaternion", "quaternion", k, _quat_xyzw(T[:, :3, :3]))
    for name, v in segs.items():
        T = np.array([segment_pose(*v[i]) for i in idx])
        Lk = np.linalg.norm(T[:, :3, 1], axis=1)
        T[:, :3, 1] = np.cross(T[:, :3, 2], T[:, :3, 0])  # the unit y = z × x, also of a rod of length 0
        clips.add(f"/meshcat/segments/{name}", "position", "vector3", k, T[:, :3, 3])
        clips.add(f"/meshcat/segments/{name}", "quaternion", "quaternion", k, _quat_xyzw(T[:, :3, :3]))
        clips.add(
            f"/meshcat/segments/{name}", "scale", "vector3", k, np.column_stack([np.ones(n), Lk, np.ones(n)])
        )
    step = max(8, int(np.ceil(n / max_chunks)))
    for ci, (name, v) in enumerate(sorted(trails.items())):
        pts = np.asarray(v, dtype=float)[idx]
        color = _TRAIL_COLORS[ci % len(_TRAIL_COLORS)]
        for j, s0 in enumerate(range(0, max(n - 1, 1), step)):
            e = min(s0 + step, n - 1)
            if e <= s0:
                continue
            path = f"trails/{name}/part{j:03d}"
            rec[path].set_object(
                g.Line(g.PointsGeometry(pts[s0 : e + 1].T), g.LineBasicMaterial(color=color))
            )
            clips.add("/meshcat/" + path, "visible", "boolean", [0, e], [False, True])
    rec.set_animation(clips, play=True, repetitions=1)

    meshcat_spec = importlib.util.find_spec("meshcat")  # a dependency of cmstack
    assert meshcat_spec is not None and meshcat_spec.origin is not None
    dist = Path(meshcat_spec.origin).parent / "viewer" / "dist"
    js = (dist / "main.min.js").read_text(encoding="utf-8")
    title = f"{Path(L['_file']).parent.name} — cmstack replay ({t_full[-1] - t_full[0]:.2f} s)"
    head, tail = _HTML.split("{commands}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:  # one command at a time: never the whole page in memory
        fh.write(head.format(title=title.replace("<", "&lt;"), mainjs=js))
        for ic, c in enumerate(rec.commands):
            fh.write(
                ("" if ic == 0 else ",\n") + '"' + base64.b64encode(umsgpack.packb(c)).decode("ascii") + '"'
            )
        fh.write(tail.format())
    tmp.replace(out)  # atomic: a reader never sees half a file
    return out


_HTML = """<!DOCTYPE html>
<html>
<head><meta charset="utf-8"><title>{title}</title>
<style>body {{ margin: 0; }} #meshcat-pane {{ width: 100vw; height: 100vh; overflow: hidden; }}</style>
</head>
<body>
<div id="meshcat-pane"></div>
<script>{mainjs}</script>
<script>
var viewer = new MeshCat.Viewer(document.getElementById("meshcat-pane"));
var cmstack_commands = [
{commands}
];
for (const c of cmstack_commands) {{
    const s = atob(c);
    const bytes = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) bytes[i] = s.charCodeAt(i);
    viewer.handle_command_bytearray(bytes);
}}
viewer.gui.open();
for (const name of ["Scene", "Save / Load / Capture"]) {{
    if (viewer.gui.__folders[name]) viewer.gui.__folders[name].close();
}}
window.cmstack_ready = true;
</script>
</body>
</html>
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m sim.viewer",
        description="Replay a saved run in Meshcat, or write it as one standalone HTML file (--html).",
    )
    ap.add_argument("run", help="run directory (runs/<scenario>/<timestamp>) or its log.npz")
    ap.add_argument("--speed", type=float, default=1.0, help="playback speed (1 = real time)")
    ap.add_argument("--loop", action="store_true", help="replay until interrupted")
    ap.add_argument(
        "--qpos-key",
        default="plant_qpos",
        help="which logged qpos series to show (e.g. model_qpos for the tensor model)",
    )
    ap.add_argument("--no-wait", action="store_true", help="exit when the replay ends (closes the server)")
    ap.add_argument(
        "--viewer-host",
        default=VIEWER_HOST,
        metavar="HOST",
        help=f"address the web server listens on (default {VIEWER_HOST}: this machine only; "
        "0.0.0.0 opens it to every interface, with a warning)",
    )
    ap.add_argument(
        "--html",
        metavar="OUT.html",
        help="write a standalone HTML file that plays the run "
        "(Meshcat animation with a time slider; opens offline) instead of serving it",
    )
    args = ap.parse_args(argv)
    if args.html:
        try:
            out = write_html(args.run, args.html, qpos_key=args.qpos_key)
        except StackError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        except OSError as e:
            print(f"error: cannot write {args.html}: {e}", file=sys.stderr)
            return 2
        print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): open it in a browser, no server needed")
        return 0
    viewer = None
    try:  # validate the run (log, qpos series, MJCF) before a server starts or a URL is printed
        check_viewer_host(args.viewer_host)
        L = load_run(args.run)
        _viewer_for(
            L, _qpos_series(L, args.qpos_key)[1], args.qpos_key, visualizer=Recorder(), realtime=False
        )
    except StackError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        vis = start_server(host=args.viewer_host)
        print(f"Meshcat: open {vis.url()} in a browser", flush=True)
        time.sleep(0.5)
        viewer = replay(L, visualizer=vis, speed=args.speed, loop=args.loop, qpos_key=args.qpos_key)
        if not args.no_wait:
            viewer.wait("replay done; the scene stays up until Ctrl-C")
    except StackError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    finally:
        if viewer is not None:
            viewer.close()
        elif "vis" in locals():
            vis.window.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

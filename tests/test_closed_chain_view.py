"""closed_chain in Meshcat (issue 23 item 6): each loop closure's two frames (frame_a·offset, frame_b·offset_b of
the plant's state) with the residual segment between them, and the end effector's trail beside its reference's,
live (--viewer meshcat, the server swapped for a Recorder), in a replay of the run and in its replay.html."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest
from test_viewer import decode_html, f32

import cmstack.sim.viewer
from cmstack.models.loops import ClosureSet
from cmstack.scenarios import closed_chain
from cmstack.scenarios._common import run_scenario
from cmstack.sim.viewer import MeshcatViewer, Recorder, replay, segment_pose

LOOPS = {
    "mjcf/five_bar.xml": ["tip_loop"],
    "mjcf/four_bar.xml": ["c_joint"],
    "mjcf/delta.xml": ["leg1_platform", "leg2_platform"],
}


def _live_run(tmp_path, monkeypatch, model, duration=0.3):
    rec = Recorder()
    monkeypatch.setattr(cmstack.sim.viewer.MeshcatViewer, "_start_server", staticmethod(lambda *a, **k: rec))
    m, out = run_scenario(
        closed_chain.NAME,
        closed_chain.run,
        out=tmp_path / "r",
        viewer="meshcat",
        plots=False,
        sets=[f"model='{model}'", "track_after=0.1"],
        duration=duration,
    )
    return rec, m, out


def _plant_q(out, model):
    """The logged plant configurations in the robot's joint order, and the robot."""
    robot = closed_chain.load_robot({"model": model, "loops": ""})
    L = dict(np.load(out / "log.npz", allow_pickle=True))
    plant = closed_chain.MujocoPlant(str(out / "plant.xml"), robot.joint_names)
    return robot, L, L["plant_qpos"][:, plant.map.qadr]


@pytest.mark.parametrize("model", sorted(LOOPS))
def test_live_run_draws_each_loop_its_residual_and_the_ee_trails(tmp_path, monkeypatch, model):
    rec, m, out = _live_run(tmp_path, monkeypatch, model)
    keys = LOOPS[model]
    for k in keys:
        assert {f"frames/{k}_a", f"frames/{k}_b", f"segments/{k}"} <= set(rec.objects)
    assert {"trails/ee", "trails/ee_ref"} <= set(rec.objects)
    robot, L, Q = _plant_q(out, model)
    # the last frame sent shows a logged plant state: its loop frames are those of one logged row, and the
    # segment spans their origins (the loop's position residual)
    for k in keys:
        Ta = rec.transforms[f"frames/{k}_a"]
        row = int(np.argmin(np.abs(L[f"frame__{k}_a"] - Ta).reshape(len(Q), -1).max(axis=1)))
        np.testing.assert_allclose(L[f"frame__{k}_a"][row], Ta, atol=1e-12)
        np.testing.assert_allclose(L[f"frame__{k}_b"][row], rec.transforms[f"frames/{k}_b"], atol=1e-12)
        np.testing.assert_allclose(
            rec.transforms[f"segments/{k}"],
            segment_pose(Ta[:3, 3], rec.transforms[f"frames/{k}_b"][:3, 3]),
            atol=1e-12,
        )
    # the live ee trail holds the plant's end-effector positions of the run, the reference's trail the reference
    pts = np.array(rec.objects["trails/ee"].geometry.position).T
    assert len(pts) >= 10
    d = np.min(np.linalg.norm(pts[:, None, :] - L["trail__ee"][None], axis=2), axis=1)
    assert d.max() < 1e-12
    ref = np.array(rec.objects["trails/ee_ref"].geometry.position).T
    d = np.min(np.linalg.norm(ref[:, None, :] - L["ee_ref"][None], axis=2), axis=1)
    assert d.max() < 1e-9


def test_logged_series_are_the_closures_of_the_plant_state(tmp_path, monkeypatch):
    """Five-bar: frame__<loop>_a/_b are frame_a·offset and frame_b·offset_b at the plant's configurations, the
    segment's ends their origins (segment end − start = the closure's point rows φ), trail__ee the ee, trail__ee_ref
    the reference; the styles are logged for the replay."""
    model = "mjcf/five_bar.xml"
    _, m, out = _live_run(tmp_path, monkeypatch, model)
    robot, L, Q = _plant_q(out, model)
    (c,) = robot.loops
    cs = ClosureSet([c])
    d = robot.model.createData()
    for i in (0, len(Q) // 2, len(Q) - 1):
        pin.framesForwardKinematics(robot.model, d, Q[i])
        np.testing.assert_allclose(L["frame__tip_loop_a"][i], d.oMf[c.fa].homogeneous, atol=1e-14)
        np.testing.assert_allclose(L["frame__tip_loop_b"][i], d.oMf[c.fb].homogeneous, atol=1e-14)
        seg = L["segment__tip_loop"][i]
        np.testing.assert_allclose(seg[1] - seg[0], cs.phi(Q[i])[:3], atol=1e-14)
        np.testing.assert_allclose(L["trail__ee"][i], d.oMf[robot.frame_id("ee")].translation, atol=1e-14)
    np.testing.assert_array_equal(L["trail__ee_ref"], L["ee_ref"])
    gap = np.linalg.norm(L["segment__tip_loop"][:, 1] - L["segment__tip_loop"][:, 0], axis=1)
    assert gap.max() <= m["plant_equality_violation_max"] + 1e-6  # closed: the residual is a point
    np.testing.assert_array_equal(L["style__segment__tip_loop"], closed_chain.LOOP_SEGMENT_STYLE)
    np.testing.assert_array_equal(L["style__frame__tip_loop_a"], closed_chain.LOOP_FRAME_STYLE)


def test_an_open_loop_shows_its_gap_as_a_rod():
    """Turn the right base joint of the assembled five-bar by 0.1 rad: the loop opens, the segment becomes a rod
    from frame_a·offset to frame_b·offset_b whose length is the closure's position residual."""
    robot = closed_chain.load_robot({"model": "mjcf/five_bar.xml", "loops": ""})
    keys = closed_chain.loop_keys(robot)
    q = robot.q_initial.copy()
    q[robot.joint_index("base_r")] += 0.1
    frames, segments = closed_chain.loop_overlays(robot, keys, robot.model.createData(), q)
    gap = float(np.linalg.norm(ClosureSet(robot.loops).phi(q)[:3]))
    assert gap > 0.01
    rec = Recorder()
    v = MeshcatViewer("mjcf/five_bar.xml", visualizer=rec)
    v.apply_styles(closed_chain.view_styles(keys))
    v.show(np.zeros(v.model.nq), frames, segments=segments)
    T = rec.transforms["segments/tip_loop"]
    assert np.linalg.norm(T[:3, 1]) == pytest.approx(gap, rel=1e-12)
    np.testing.assert_allclose(T[:3, 3], 0.5 * (frames["tip_loop_a"][:3, 3] + frames["tip_loop_b"][:3, 3]))
    assert rec.objects["segments/tip_loop"].geometry.radiusTop == closed_chain.LOOP_SEGMENT_STYLE[0]
    triad = rec.objects["frames/tip_loop_a"].geometry.position
    assert np.abs(triad).max() == pytest.approx(closed_chain.LOOP_FRAME_STYLE[0])


def test_replay_and_replay_html_show_the_loops_and_trails(tmp_path, monkeypatch):
    """Delta (two loops): `cmstack view RUN_DIR` ends on the last logged loop frames and segments; replay.html
    animates each loop frame and segment from the log (the segment's length track is the logged residual), draws
    them with the logged styles and has the ee and reference trails."""
    model = "mjcf/delta.xml"
    _, _, out = _live_run(tmp_path, monkeypatch, model)
    robot, L, Q = _plant_q(out, model)
    rec = Recorder()
    replay(out, visualizer=rec, realtime=False, progress=False)
    for k in LOOPS[model]:
        np.testing.assert_allclose(rec.transforms[f"frames/{k}_a"], L[f"frame__{k}_a"][-1], atol=1e-12)
        np.testing.assert_allclose(rec.transforms[f"frames/{k}_b"], L[f"frame__{k}_b"][-1], atol=1e-12)
        np.testing.assert_allclose(
            rec.transforms[f"segments/{k}"], segment_pose(*L[f"segment__{k}"][-1]), atol=1e-12
        )
        assert rec.objects[f"segments/{k}"].geometry.radiusTop == closed_chain.LOOP_SEGMENT_STYLE[0]
    assert len(v := rec.objects["trails/ee"].geometry.position.T) >= 2 and v.shape[1] == 3

    _, cmds = decode_html(out / "replay.html")
    (anim,) = [c for c in cmds if c["type"] == "set_animation"]
    clips = {a["path"]: {tr["name"]: tr for tr in a["clip"]["tracks"]} for a in anim["animations"]}
    t = L["t"]
    for k in LOOPS[model]:
        pos = f32(clips[f"/meshcat/frames/{k}_a"][".position"]["values"]).reshape(-1, 3)
        n = len(pos)
        rows = np.clip(
            np.searchsorted(t, t[0] + np.arange(n) / 30.0), 0, len(t) - 1
        )  # frame j shows these rows
        np.testing.assert_allclose(pos, L[f"frame__{k}_a"][rows, :3, 3], atol=1e-6)
        seg = L[f"segment__{k}"][rows]
        length = f32(clips[f"/meshcat/segments/{k}"][".scale"]["values"]).reshape(n, 3)[:, 1]
        np.testing.assert_allclose(length, np.linalg.norm(seg[:, 1] - seg[:, 0], axis=1), atol=1e-7)
        (cyl,) = [c for c in cmds if c["type"] == "set_object" and c["path"] == f"/meshcat/segments/{k}"]
        assert cyl["object"]["geometries"][0]["radiusTop"] == pytest.approx(
            closed_chain.LOOP_SEGMENT_STYLE[0]
        )
    for name in ("ee", "ee_ref"):
        assert any(p.startswith(f"/meshcat/trails/{name}/part") for p in clips)

"""A welded closed chain built from the configured coupling offset.

The YuMi bar plant (``mjcf/yumi_bar.xml``) closes the chain with a rigid bar: body ``bar`` is fixed
to E1 (its frame is E1's) and a MuJoCo weld equality holds E2 at the pose T_A^B relative to it,

    relpose(weld) = T_A^B = (R, p):   E2 = E1 · T_A^B.

The file holds one such pose.  :func:`welded_bar_model` rewrites it (and the bar that spans it) from
the configured T_A^B at load time, so the plant's weld and the controller's coupling are always the
same pose:

* weld data: relative position p and relative quaternion q(R) (MuJoCo order w, x, y, z);
* the bar: a uniform rod of the body's mass m from E1's origin to p, its capsule ``fromto = (0, p)``,
  centre of mass p/2, principal inertia (m L²/12, m L²/12, m r²/2) with L = |p| and r the capsule
  radius, its principal z axis along p; the ``bar_end`` site at (p, q(R)).

A file whose bar is not attached to ``frame1`` or whose weld does not hold ``frame2`` is refused with
both names (a ConfigError); when the configured pose equals the file's (to 1e-9) the file is used as is.
"""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np

from cmstack.models.errors import ConfigError, ModelFileError
from cmstack.models.robot import resolve_asset


def _quat(R: np.ndarray) -> np.ndarray:
    q = np.zeros(4)
    mujoco.mju_mat2Quat(q, np.ascontiguousarray(R, dtype=float).ravel())
    return q / np.linalg.norm(q)


def _rot(q: np.ndarray) -> np.ndarray:
    R = np.zeros(9)
    mujoco.mju_quat2Mat(R, np.asarray(q, dtype=float) / np.linalg.norm(q))
    return R.reshape(3, 3)


def _pose_text(R: np.ndarray, p: np.ndarray) -> str:
    return (
        f"translation {np.array2string(np.asarray(p), precision=4, suppress_small=True)} m, rotation "
        f"{np.array2string(np.asarray(R), precision=4, suppress_small=True, separator=', ')}".replace(
            "\n", ""
        )
    )


def weld_pose(model: mujoco.MjModel, weld: str = "bar_weld") -> tuple[np.ndarray, np.ndarray]:
    """(R, p) of the weld ``weld``'s relative pose (body2 in body1's frame) in a compiled model."""
    i = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_EQUALITY, weld)
    if i < 0:
        raise ModelFileError(f"the plant has no weld equality named '{weld}'")
    d = model.eq_data[i]
    return _rot(d[6:10]), d[3:6].copy()


def welded_bar_model(
    mjcf_path: str | Path,
    R: np.ndarray,
    p: np.ndarray,
    frame1: str,
    frame2: str,
    *,
    weld: str = "bar_weld",
    body: str = "bar",
    site: str = "bar_end",
) -> mujoco.MjModel:
    """The compiled bar plant of ``mjcf_path`` with its weld and bar built from T_A^B = (R, p)
    (R: 3×3 rotation, p: translation in m, both in E1 = ``frame1``); see the module docstring."""
    path = resolve_asset(mjcf_path)
    try:
        spec = mujoco.MjSpec.from_file(str(path))
    except Exception as exc:
        raise ModelFileError(f"MJCF {path} could not be read by MuJoCo: {exc}") from None
    eq = next((e for e in spec.equalities if e.name == weld), None)
    if eq is None or eq.type != mujoco.mjtEq.mjEQ_WELD:
        raise ModelFileError(
            f"{path.name}: no weld equality named '{weld}' (the bar plant closes the chain with it)"
        )
    bar = spec.body(body)
    if bar is None:
        raise ModelFileError(f"{path.name}: no body '{body}' (the bar the weld '{weld}' holds)")
    if eq.name1 != body or eq.name2 != frame2 or bar.parent.name != frame1:
        raise ConfigError(
            f"{path.name}: the bar '{body}' hangs from '{bar.parent.name}' and the weld '{weld}' holds "
            f"'{eq.name2}', but the coupling is frame1 = '{frame1}' to frame2 = '{frame2}'"
        )
    R, p = np.asarray(R, dtype=float), np.asarray(p, dtype=float)
    q = _quat(R)
    d = np.array(eq.data, dtype=float)
    if np.allclose(d[3:6], p, atol=1e-9, rtol=0) and np.allclose(_rot(d[6:10]), R, atol=1e-9, rtol=0):
        return spec.compile()  # the file's own pose: nothing to rebuild
    L = float(np.linalg.norm(p))
    if not L > 1e-6:
        raise ConfigError(
            f"T_AB_translation {p.tolist()} puts E2 on E1's origin: the bar would have no length"
        )
    d[3:6], d[6:10] = p, q
    eq.data = d
    m = float(bar.mass)
    caps = [g for g in bar.geoms if g.type == mujoco.mjtGeom.mjGEOM_CAPSULE]
    r = float(caps[0].size[0]) if caps else 0.0
    for g in caps:
        g.fromto = np.r_[0.0, 0.0, 0.0, p]
    bar.ipos = p / 2
    bar.inertia = np.array([m * L * L / 12, m * L * L / 12, m * r * r / 2])
    iq = np.zeros(4)
    mujoco.mju_quatZ2Vec(iq, p / L)
    bar.iquat = iq
    for s in bar.sites:
        if s.name == site:
            s.pos, s.quat = p, q
    try:
        return spec.compile()
    except Exception as exc:
        raise ModelFileError(
            f"{path.name} with the bar rebuilt for T_A^B ({_pose_text(R, p)}) does not compile: {exc}"
        ) from None

"""Toy scenario for the campaign tests: a damped oscillator x'' + 2ζw x' + w² x = 0 integrated by
semi-implicit Euler from x0 = 1 plus seeded noise; cheap and deterministic given its config."""

from __future__ import annotations

import importlib
import os
import signal
import sys
import time

import numpy as np

from cmstack.scenarios._common import Outcome, Row

NAME = "toy"


def run(ctx) -> Outcome:
    cfg = ctx.cfg
    if cfg["crash"] == "raise":
        raise RuntimeError(f"toy variant asked to raise (gain={cfg['gain']})")
    if cfg["crash"] == "exit":
        os._exit(7)
    if cfg["crash"] == "kill_parent":  # Dask path only: SIGKILLs the fork server (locally: the driver)
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(60)  # and dies with it (parent-death signal)
        os._exit(8)
    preloaded = float(bool(cfg["lazy_import"]) and cfg["lazy_import"] in sys.modules)
    if cfg["lazy_import"]:
        importlib.import_module(cfg["lazy_import"])
    time.sleep(cfg["sleep_s"])
    rng = np.random.default_rng(cfg["seed"])
    w, z, dt = cfg["gain"], cfg["damping"], 1e-3
    x, v = 1.0 + 0.01 * rng.normal(), 0.0
    for _ in range(int(cfg["duration"] / dt)):
        v += dt * (-2 * z * w * v - w * w * x)
        x += dt * v
        ctx.logger.append(t=_ * dt, x=x)
    err = abs(x)
    plots = []
    if ctx.plots:  # the variant's own plot (campaign ``plots = true``)
        plt = ctx.pyplot()
        fig, ax = plt.subplots(figsize=(3, 2))
        ax.plot(ctx.logger.arrays()["t"], ctx.logger.arrays()["x"])
        ax.set_xlabel("t [s]")
        ax.set_ylabel("x [m]")
        plots.append(ctx.save_figure(fig, "x"))
    return Outcome(
        dict(final_error=err, gain=cfg["gain"], lazy_preloaded=preloaded),
        [Row("final_error", err, None, f"<= {cfg['tol']}", err <= cfg["tol"])],
        plots,
    )

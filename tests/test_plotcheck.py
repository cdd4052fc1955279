"""The plot check itself: it refuses a missing file, a blank figure and a one-colour figure, and
accepts a real plot (so the checks in the scenario tests can fail)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from plotcheck import assert_plots_ok  # noqa: E402


def _save(fig, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def test_plot_check_refuses_blank_and_missing(tmp_path):
    _save(plt.figure(figsize=(8, 4)), tmp_path / "plots" / "blank.png")
    with pytest.raises(AssertionError):
        assert_plots_ok(tmp_path, ["blank"])
    with pytest.raises(AssertionError, match="missing"):
        assert_plots_ok(tmp_path, ["nope"])
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.set_facecolor("white")
    ax.axis("off")
    _save(fig, tmp_path / "plots" / "empty_axes.png")
    with pytest.raises(AssertionError):
        assert_plots_ok(tmp_path, ["empty_axes"])


def test_plot_check_accepts_a_plot(tmp_path):
    fig, ax = plt.subplots(figsize=(8, 4))
    t = np.linspace(0, 10, 500)
    for k in range(5):
        ax.plot(t, np.sin(t + k), lw=2)
    ax.set_xlabel("t [s]")
    _save(fig, tmp_path / "plots" / "real.png")
    assert_plots_ok(tmp_path, ["real"])

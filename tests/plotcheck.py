"""Checks that a run directory's plots are real pictures (issue: every plot file exists and is
non-trivial): each expected PNG exists, is larger than a blank figure, decodes, and is not a single
colour (at least a few percent of its pixels differ from the most common one, the background)."""

from pathlib import Path

import numpy as np


def assert_plots_ok(run_dir: Path, stems) -> None:
    import matplotlib.image as mpimg

    for stem in stems:
        path = Path(run_dir) / "plots" / f"{stem}.png"
        assert path.is_file(), f"missing plot {path}"
        assert path.stat().st_size > 10_000, f"{path} is only {path.stat().st_size} bytes"
        img = mpimg.imread(path)[..., :3]
        flat = (np.round(img.reshape(-1, 3) * 255)).astype(np.int64)
        codes = flat[:, 0] * 65536 + flat[:, 1] * 256 + flat[:, 2]
        _, counts = np.unique(codes, return_counts=True)
        background = counts.max() / codes.size
        assert background < 0.97, f"{path} is {100 * background:.1f} % one colour: nothing drawn?"
        assert counts.size > 8, f"{path} has only {counts.size} colours"

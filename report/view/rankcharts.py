"""The rank x step heat map of step time (SVG, in the style of :mod:`.charts`).

Greyscale: darker is slower, so it prints the same; a step missing on a rank is left white. With
many ranks or steps only every n-th one is labelled.
"""

from __future__ import annotations

import numpy as np
from matplotlib import colormaps, rc_context
from matplotlib.figure import Figure

from nprof_report.report.view.charts import CHART_RC
from nprof_report.report.view.chartsvg import figure_svg

MAX_RANK_LABELS = 32
MAX_STEP_LABELS = 24


def step_heatmap(
    ranks: list[int],
    steps: list[int],
    step_time_us: list[list[float | None]],
    step_label: str = "step (ProfilerStep#N)",
) -> str:
    """One row per rank, one column per step, shaded by step time (ms); without steps, one
    empty column (a map of no width is singular)."""
    values = np.array(
        [[np.nan if v is None else v / 1000 for v in row] for row in step_time_us], dtype=float
    )
    if not steps:
        values = np.full((len(ranks), 1), np.nan)
        step_label = "no step in the traces"
    with rc_context(CHART_RC):  # type: ignore[arg-type]
        height = min(9.0, 1.0 + 0.16 * len(ranks))
        fig = Figure(figsize=(6.2, height))
        ax = fig.subplots()
        cmap = colormaps["Greys"].with_extremes(bad="white")
        image = ax.imshow(
            np.ma.masked_invalid(values), aspect="auto", cmap=cmap, interpolation="nearest"
        )
        every_rank = max(1, -(-len(ranks) // MAX_RANK_LABELS))
        every_step = max(1, -(-len(steps) // MAX_STEP_LABELS))
        ax.set_yticks(range(0, len(ranks), every_rank), [str(r) for r in ranks[::every_rank]])
        ax.set_xticks(range(0, len(steps), every_step), [str(s) for s in steps[::every_step]])
        ax.tick_params(axis="x", labelrotation=90 if len(steps) > 12 else 0)
        ax.set_xlabel(step_label)
        ax.set_ylabel("rank")
        for side in ("top", "right"):
            ax.spines[side].set_visible(True)
        bar = fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02)
        bar.set_label("step time (ms)")
        return figure_svg(fig)

"""Scaling charts of a size sweep: time against size on log-log axes.

Same conventions as :mod:`nprof_report.report.view.charts` (its rc settings, greyscale-safe, SVG text):
the series differ by line style and marker, never by hue alone. Figures are made without pyplot,
so importing this module selects no backend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib import rc_context
from matplotlib.figure import Figure

from nprof_report.report.view.charts import CHART_RC, SHADES
from nprof_report.report.view.chartsvg import figure_svg

# (summary point key, legend, line style, marker)
SCALING_SERIES = (
    ("unprofiled_median_us", "un-profiled call (median)", "-", "o"),
    ("step_median_us", "profiled step (median)", "--", "s"),
    ("dispatch_per_step_us", "host dispatch per step", ":", "^"),
    ("device_per_step_us", "device time per step", "-.", "v"),
)
LINE_STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "v", "D", "P")


def _size_axis(ax: Any, sizes: list[str], x: list[int]) -> None:
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(x, sizes, rotation=30, ha="right")
    ax.minorticks_off()
    ax.grid(color="#dddddd", linewidth=0.6)


def scaling_by_implementation(
    labels: list[str], points: Sequence[Sequence[Mapping[str, Any]]], ylabel: str = "µs (log)"
) -> str:
    """One log-log panel per implementation, all on the same y range: un-profiled and profiled
    time, host dispatch and device time per step against the input's element count."""
    n = max(len(labels), 1)
    cols = min(n, 3)
    rows = (n + cols - 1) // cols
    with rc_context(CHART_RC):  # type: ignore[arg-type]
        fig = Figure(figsize=(6.4, 0.6 + 2.3 * rows))
        axes = fig.subplots(rows, cols, sharey=True, squeeze=False)
        drawn: dict[str, Any] = {}
        for k, ax in enumerate(axes.flat):
            if k >= n:
                ax.set_visible(False)
                continue
            pts = points[k]
            x = [p["elements"] for p in pts]
            for key, legend, style, marker in SCALING_SERIES:
                xs = [xi for xi, p in zip(x, pts) if p.get(key)]
                ys = [p[key] for p in pts if p.get(key)]
                if ys:
                    (line,) = ax.plot(
                        xs, ys, linestyle=style, marker=marker, color=SHADES[0], markersize=4
                    )
                    drawn[legend] = line
            _size_axis(ax, [p["size_label"] for p in pts], x)
            ax.set_title(labels[k], loc="left", fontsize=8)
            if k % cols == 0:
                ax.set_ylabel(ylabel)
        fig.legend(
            list(drawn.values()),
            list(drawn),
            loc="lower center",
            bbox_to_anchor=(0.5, 1.0),
            ncol=2,
            frameon=False,
        )
        fig.tight_layout()
        return figure_svg(fig)


def scaling_overlay(
    labels: list[str], points: Sequence[Sequence[Mapping[str, Any]]], key: str
) -> str:
    """Every implementation's ``key`` against size on one log-log axes, so crossings show."""
    with rc_context(CHART_RC):  # type: ignore[arg-type]
        fig = Figure(figsize=(6.2, 2.8))
        ax = fig.subplots()
        sizes: dict[int, str] = {}
        for i, (label, pts) in enumerate(zip(labels, points)):
            xs = [p["elements"] for p in pts if p.get(key)]
            ys = [p[key] for p in pts if p.get(key)]
            sizes.update({p["elements"]: p["size_label"] for p in pts})
            ax.plot(
                xs,
                ys,
                linestyle=LINE_STYLES[i % len(LINE_STYLES)],
                marker=MARKERS[i % len(MARKERS)],
                color=SHADES[i % 3],
                markersize=4,
                label=label,
            )
        order = sorted(sizes)
        _size_axis(ax, [sizes[e] for e in order], order)
        ax.set_ylabel("µs per call (log)")
        ax.legend(frameon=False)
        return figure_svg(fig)

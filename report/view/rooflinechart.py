"""The roofline chart: achieved FLOP/s against arithmetic intensity, log-log, under the roofs.

Same conventions as :mod:`nprof_report.report.view.charts` (its rc settings, greyscale-safe, SVG
text): an implementation is a marker shape, a size a shade, never a hue alone. The bandwidth roof
is the line ``peak GB/s × intensity``, the compute roof the level ``peak GFLOP/s``; they meet at the
ridge intensity. Made without pyplot, so importing this module selects no backend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from nprof_report.report.figures import RooflineRecord
from nprof_report.report.view.charts import CHART_RC
from nprof_report.report.view.chartsvg import figure_svg

MARKERS = ("o", "s", "^", "v", "D", "P")
SIZE_SHADES = ("#ffffff", "#bbbbbb", "#777777", "#222222")  # smallest to largest


def _shade(k: int, n: int) -> str:
    """The shade of the ``k``-th of ``n`` sizes: white for the smallest, black for the largest."""
    if n <= 1:
        return SIZE_SHADES[-1]
    return SIZE_SHADES[round(k * (len(SIZE_SHADES) - 1) / (n - 1))]


def roofline_chart(
    records: Sequence[RooflineRecord], peak_gbps: float | None, peak_gflops: float | None
) -> str:
    """One marker per implementation and size at (FLOPs/byte, achieved GFLOP/s), and the roofs."""
    drawn = [r for r in records if r["intensity"] and r["achieved_gflops"]]
    labels = list(dict.fromkeys(r["label"] for r in drawn))
    sizes = sorted({tuple(r["size"]) for r in drawn}, key=math.prod)
    xs = [float(r["intensity"] or 0) for r in drawn]
    ys = [float(r["achieved_gflops"] or 0) for r in drawn]
    lo, hi = min(xs) / 8, max(xs) * 8
    if peak_gbps and peak_gflops:
        ridge = peak_gflops / peak_gbps
        lo, hi = min(lo, ridge / 8), max(hi, ridge * 8)
    with rc_context(CHART_RC):  # type: ignore[arg-type]
        fig = Figure(figsize=(6.2, 3.2))
        ax = fig.subplots()
        ax.set_xscale("log")
        ax.set_yscale("log")
        roofs: list[tuple[Line2D, str]] = []
        if peak_gbps:
            top = peak_gflops if peak_gflops else peak_gbps * hi
            knee = top / peak_gbps
            (bw,) = ax.plot(
                [lo, min(knee, hi)], [peak_gbps * lo, min(top, peak_gbps * hi)], color="#444444"
            )
            roofs.append((bw, f"bandwidth roof {peak_gbps:g} GB/s"))
            if peak_gflops and knee < hi:
                (fl,) = ax.plot([knee, hi], [peak_gflops, peak_gflops], "--", color="#444444")
                roofs.append((fl, f"compute roof {peak_gflops:g} GFLOP/s"))
        elif peak_gflops:
            (fl,) = ax.plot([lo, hi], [peak_gflops, peak_gflops], "--", color="#444444")
            roofs.append((fl, f"compute roof {peak_gflops:g} GFLOP/s"))
        for r, x, y in zip(drawn, xs, ys):
            ax.plot(
                [x],
                [y],
                linestyle="none",
                marker=MARKERS[labels.index(r["label"]) % len(MARKERS)],
                markerfacecolor=_shade(sizes.index(tuple(r["size"])), len(sizes)),
                markeredgecolor="black",
                markersize=6,
            )
        ax.set_xlim(lo, hi)
        ax.set_xlabel("arithmetic intensity, FLOPs per byte (log)")
        ax.set_ylabel("achieved GFLOP/s (log)")
        ax.grid(color="#dddddd", linewidth=0.6)
        handles: list[Line2D] = [h for h, _ in roofs]
        names = [n for _, n in roofs]
        for i, label in enumerate(labels):
            handles.append(
                Line2D([], [], linestyle="none", marker=MARKERS[i % len(MARKERS)], color="black")
            )
            names.append(label)
        for k, size in enumerate(sizes):
            handles.append(
                Line2D(
                    [],
                    [],
                    linestyle="none",
                    marker="s",
                    markerfacecolor=_shade(k, len(sizes)),
                    markeredgecolor="black",
                )
            )
            names.append("×".join(map(str, size)))
        ax.legend(handles, names, frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
        return figure_svg(fig)

"""Vector charts (SVG) drawn with matplotlib, the same markup inlined in the HTML and the PDF.

Greyscale-safe: series differ by shade and hatch, never by hue alone. ``svg.hashsalt`` makes the
output deterministic.

Text stays text (``svg.fonttype: none``) in DejaVu Sans, the font matplotlib measures it with and
the one the report's body already uses, with ``sans-serif`` as the fallback. Drawn as glyph paths
instead, each character became a ``<use>`` of a path that WeasyPrint parsed again at every use:
half of the PDF's drawing time went to the charts' text.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import matplotlib
import numpy as np
from matplotlib import rc_context

from nprof_report.report.view.chartsvg import Figure, figure_svg

# for pyplot, which diff_render uses; the figures here are made without it (as Figure()), so
# that nothing is kept by pyplot's figure manager
matplotlib.use("Agg")

SHADES = ["#222222", "#777777", "#bbbbbb", "#444444", "#999999", "#dddddd"]
# lines only: a dotted hatch ("..") drew as a pattern of hundreds of tiny circles, 0.15 s of
# WeasyPrint's drawing for one chart; hatches of lines draw in a tenth of that
HATCHES = ["", "//", "\\\\", "xx", "--", "++"]


@dataclass(frozen=True)
class Chart:
    """An SVG chart, placed as an ``<img>`` with the SVG inlined in a ``data:`` URI."""

    title: str
    svg: str
    caption: str

    @property
    def data_uri(self) -> str:
        """The SVG as ``data:image/svg+xml;base64,…``.

        Inside an ``<img>`` the SVG is read by WeasyPrint's XML parser and stays out of its HTML
        parser and CSS cascade, where the charts' ~2,000 elements took about a third of the PDF
        layout; browsers draw it the same either way (the page's CSP allows ``img-src data:``).
        """
        return "data:image/svg+xml;base64," + base64.b64encode(self.svg.encode()).decode("ascii")


def _series_style(i: int) -> dict[str, Any]:
    """Fill of the ``i``-th bar series: a shade and a hatch, outlined."""
    return {
        "color": SHADES[i % len(SHADES)],
        "hatch": HATCHES[i % len(HATCHES)],
        "edgecolor": "black",
        "linewidth": 0.5,
    }


CHART_RC: dict[str, Any] = {
    "svg.fonttype": "none",
    "svg.hashsalt": "nprof-report",
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],
    "font.size": 8,
    "axes.spines.top": False,
    "axes.spines.right": False,
}


MAX_DOTS = 100
"""Samples drawn as dots per box; more are thinned to this many (the box uses them all). Each
dot is an SVG element that WeasyPrint draws in about a millisecond: 400 took 0.3-0.5 s of the
PDF's drawing of a trace with 100,000 op calls, and 100 show the spread as well."""


def spread(samples: list[float], limit: int = MAX_DOTS) -> list[float]:
    """At most ``limit`` of ``samples``, evenly spaced in sorted order (the smallest and the
    largest among them): 100,000 dots drew as many SVG elements for the PDF to draw."""
    if len(samples) <= limit:
        return samples
    ordered = sorted(samples)
    last = len(ordered) - 1
    return [ordered[round(k * last / (limit - 1))] for k in range(limit)]


def step_times(
    labels: list[str], samples_us: list[list[float]], xlabel: str = "profiled step time (µs)"
) -> str:
    """Box plot per implementation, with every sample drawn as a point."""
    with rc_context(CHART_RC):  # type: ignore[arg-type]
        fig = Figure(figsize=(6.2, 0.55 + 0.55 * max(len(labels), 1)))
        ax = fig.subplots()
        data = [np.asarray(s if s else [0.0], dtype=float) for s in samples_us]
        ax.boxplot(
            data,
            orientation="horizontal",
            tick_labels=labels,
            widths=0.5,
            showfliers=False,
            medianprops={"color": "black", "linewidth": 1.6},
        )
        for i, s in enumerate(samples_us, start=1):
            dots = spread(s)
            ax.scatter(dots, [i] * len(dots), s=9, color=SHADES[1], zorder=3, marker="o")
        ax.set_xlabel(xlabel)
        ax.invert_yaxis()
        ax.grid(axis="x", color="#dddddd", linewidth=0.6)
        return figure_svg(fig)


def stacked_breakdown(labels: list[str], parts: dict[str, list[float]], xlabel: str) -> str:
    """Horizontal stacked bars; ``parts`` maps a component name to one value per label."""
    with rc_context(CHART_RC):  # type: ignore[arg-type]
        fig = Figure(figsize=(6.2, 0.8 + 0.5 * max(len(labels), 1)))
        ax = fig.subplots()
        left = [0.0] * len(labels)
        for i, (name, values) in enumerate(parts.items()):
            ax.barh(
                labels,
                values,
                left=left,
                label=name,
                **_series_style(i),
            )
            left = [a + b for a, b in zip(left, values)]
        ax.set_xlabel(xlabel)
        ax.invert_yaxis()
        fig.legend(loc="lower center", bbox_to_anchor=(0.5, -0.02), ncol=2, frameon=False)
        fig.subplots_adjust(bottom=0.38)
        ax.grid(axis="x", color="#dddddd", linewidth=0.6)
        return figure_svg(fig)


def paired_bars(labels: list[str], series: dict[str, list[float | None]], xlabel: str) -> str:
    """Grouped horizontal bars, one group per label (missing values are skipped)."""
    with rc_context(CHART_RC):  # type: ignore[arg-type]
        return figure_svg(paired_bars_figure(labels, series, xlabel))


def paired_bars_figure(
    labels: list[str], series: dict[str, list[float | None]], xlabel: str
) -> Any:
    """:func:`paired_bars`' figure. The legend sits above the axes: inside them, at the lower
    right, it covered the longest bar of the last group."""
    fig = Figure(figsize=(6.2, 0.8 + 0.6 * max(len(labels), 1)))
    ax = fig.subplots()
    n = max(len(series), 1)
    height = 0.8 / n
    for i, (name, values) in enumerate(series.items()):
        ys = [k + i * height for k in range(len(labels))]
        vals = [v if v is not None else 0.0 for v in values]
        ax.barh(
            ys,
            vals,
            height=height,
            label=name,
            **_series_style(i),
        )
    ax.set_yticks([k + height * (n - 1) / 2 for k in range(len(labels))], labels)
    ax.set_xlabel(xlabel)
    ax.invert_yaxis()
    ax.legend(frameon=False, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=n, borderaxespad=0.2)
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    return fig


LANE_ORDER = ["framework L0", "framework L1", "framework L2", "runtime", "device"]


def timelines(
    labels: list[str], bars: list[list[dict[str, Any]]], durations_us: list[float]
) -> str:
    """One timeline per implementation (its median step): lanes for ops, runtime and device.

    Up to six fit on a page at 1.3 in each; more share about 8 in (a page's height)."""
    n = max(len(labels), 1)
    with rc_context(CHART_RC):  # type: ignore[arg-type]
        fig = Figure(figsize=(6.4, min(1.3, 8 / n) * n + 0.4))
        axes = fig.subplots(n, 1, squeeze=False)
        for ax, label, impl_bars, dur in zip(axes[:, 0], labels, bars, durations_us):
            lanes = [lane for lane in LANE_ORDER if any(b["lane"] == lane for b in impl_bars)]
            for y, lane in enumerate(lanes):
                spans = [(b["start_us"], b["dur_us"]) for b in impl_bars if b["lane"] == lane]
                shade = SHADES[y % len(SHADES)]
                ax.broken_barh(
                    spans,
                    (y - 0.4, 0.8),
                    facecolors=shade,
                    edgecolor="black",
                    linewidth=0.3,
                )
                for b in impl_bars:
                    if b["lane"] == lane and b["label"] and b["dur_us"] > 0.12 * dur:
                        ax.text(
                            b["start_us"] + b["dur_us"] / 2,
                            y,
                            b["label"][:28],
                            ha="center",
                            va="center",
                            fontsize=6,
                            bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5},
                        )
            ax.set_xlim(0, dur)
            ax.set_yticks(range(len(lanes)), lanes)
            ax.invert_yaxis()
            ax.set_title(label, loc="left", fontsize=8)
            ax.grid(axis="x", color="#dddddd", linewidth=0.6)
        axes[-1, 0].set_xlabel("µs from the start of the median step")
        fig.tight_layout()
        return figure_svg(fig)


def histogram(labels: list[str], samples_us: list[list[float]], xlabel: str) -> str:
    """Overlaid step histograms (log-spaced bins) of one sample per implementation."""
    values = [v for s in samples_us for v in s if v > 0]
    with rc_context(CHART_RC):  # type: ignore[arg-type]
        fig = Figure(figsize=(6.2, 2.4))
        ax = fig.subplots()
        if values:
            lo, hi = min(values), max(values)
            edges = (
                [lo * (hi / lo) ** (k / 20) for k in range(21)] if hi > lo else [lo * 0.9, hi * 1.1]
            )
            for i, (label, s) in enumerate(zip(labels, samples_us)):
                ax.hist(
                    [v for v in s if v > 0],
                    bins=edges,
                    histtype="step",
                    linewidth=1.4,
                    color=SHADES[i % len(SHADES)],
                    linestyle=["-", "--", ":", "-."][i % 4],
                    label=label,
                )
            if hi / lo > 20:
                ax.set_xscale("log")
            ax.legend(frameon=False)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("count")
        return figure_svg(fig)

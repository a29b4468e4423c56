"""Vector charts (SVG) drawn with matplotlib, the same markup inlined in the HTML and the PDF.

Greyscale-safe: series differ by shade and hatch, never by hue alone. Text is drawn as paths so
the PDF needs no extra font, and ``svg.hashsalt`` makes the output deterministic.
"""

from __future__ import annotations

import io
import re
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

SHADES = ["#222222", "#777777", "#bbbbbb", "#444444", "#999999", "#dddddd"]
HATCHES = ["", "//", "..", "xx", "\\\\", "++"]
_RC: dict[str, Any] = {
    "svg.fonttype": "path",
    "svg.hashsalt": "nprof-report",
    "font.family": "DejaVu Sans",
    "font.size": 8,
    "axes.spines.top": False,
    "axes.spines.right": False,
}


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    # matplotlib's RDF metadata block only names namespaces; drop it to keep the markup small.
    return re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)


def step_times(labels: list[str], samples_us: list[list[float]]) -> str:
    """Box plot of step times per implementation, with every step drawn as a point."""
    with plt.rc_context(_RC):  # type: ignore[arg-type]
        fig, ax = plt.subplots(figsize=(6.2, 0.55 + 0.55 * max(len(labels), 1)))
        data = [s if s else [0.0] for s in samples_us]
        ax.boxplot(
            data,
            orientation="horizontal",
            tick_labels=labels,
            widths=0.5,
            showfliers=False,
            medianprops={"color": "black", "linewidth": 1.6},
        )
        for i, s in enumerate(samples_us, start=1):
            ax.scatter(s, [i] * len(s), s=9, color=SHADES[1], zorder=3, marker="o")
        ax.set_xlabel("profiled step time (µs)")
        ax.invert_yaxis()
        ax.grid(axis="x", color="#dddddd", linewidth=0.6)
        return _svg(fig)


def stacked_breakdown(labels: list[str], parts: dict[str, list[float]], xlabel: str) -> str:
    """Horizontal stacked bars; ``parts`` maps a component name to one value per label."""
    with plt.rc_context(_RC):  # type: ignore[arg-type]
        fig, ax = plt.subplots(figsize=(6.2, 0.8 + 0.5 * max(len(labels), 1)))
        left = [0.0] * len(labels)
        for i, (name, values) in enumerate(parts.items()):
            ax.barh(
                labels,
                values,
                left=left,
                color=SHADES[i % len(SHADES)],
                hatch=HATCHES[i % len(HATCHES)],
                edgecolor="black",
                linewidth=0.5,
                label=name,
            )
            left = [a + b for a, b in zip(left, values)]
        ax.set_xlabel(xlabel)
        ax.invert_yaxis()
        ax.legend(
            loc="upper center",
            bbox_to_anchor=(0.5, -0.35 - 0.05 * len(labels)),
            ncol=min(len(parts), 3),
            frameon=False,
        )
        ax.grid(axis="x", color="#dddddd", linewidth=0.6)
        return _svg(fig)


def paired_bars(labels: list[str], series: dict[str, list[float | None]], xlabel: str) -> str:
    """Grouped horizontal bars, one group per label (missing values are skipped)."""
    with plt.rc_context(_RC):  # type: ignore[arg-type]
        fig, ax = plt.subplots(figsize=(6.2, 0.8 + 0.6 * max(len(labels), 1)))
        n = max(len(series), 1)
        height = 0.8 / n
        for i, (name, values) in enumerate(series.items()):
            ys = [k + i * height for k in range(len(labels))]
            vals = [v if v is not None else 0.0 for v in values]
            ax.barh(
                ys,
                vals,
                height=height,
                color=SHADES[i % len(SHADES)],
                hatch=HATCHES[i % len(HATCHES)],
                edgecolor="black",
                linewidth=0.5,
                label=name,
            )
        ax.set_yticks([k + height * (n - 1) / 2 for k in range(len(labels))], labels)
        ax.set_xlabel(xlabel)
        ax.invert_yaxis()
        ax.legend(frameon=False, loc="lower right")
        ax.grid(axis="x", color="#dddddd", linewidth=0.6)
        return _svg(fig)

"""Chart layout: what the figure shows stays readable; the SVG is cropped as matplotlib's
``bbox_inches="tight"`` crops and written in the lean markup WeasyPrint draws faster."""

from __future__ import annotations

import io
import re
from typing import Any
from xml.etree import ElementTree

import matplotlib.pyplot as plt
import pytest
from matplotlib import rc_context
from matplotlib.figure import Figure

from nprof_report.report.view import charts, chartsvg

# the medians of a CPU capture (µs), where the legend once covered the last long bar
PROFILED = {
    "profiled step (median)": [155.0, 191.0, 159.0],
    "un-profiled call (median)": [52.0, 48.0, 57.0],
}


@pytest.mark.parametrize("loc", [None, "lower right"])
def test_paired_bars_legend_covers_no_bar(loc: str | None) -> None:
    fig = charts.paired_bars_figure(["naive", "fused", "compiled"], PROFILED, "µs")
    ax = fig.axes[0]
    if loc is not None:  # the old placement, to show the check can fail
        ax.legend(frameon=False, loc=loc)
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    bars = [patch.get_window_extent() for patch in ax.patches]
    plt.close(fig)
    assert len(bars) == 6
    covered = [b for b in bars if legend.overlaps(b)]
    assert (covered == []) == (loc is None)


def test_many_samples_are_thinned_to_dots_that_span_them() -> None:
    samples = [float((k * 7919) % 100_000) for k in range(100_000)]
    dots = charts.spread(samples)
    assert len(dots) == charts.MAX_DOTS
    assert dots == sorted(dots) and dots[0] == min(samples) and dots[-1] == max(samples)
    assert charts.spread(samples[:10]) == samples[:10]
    svg = charts.step_times(["a"], [samples])
    assert svg.count("<use ") < 2 * charts.MAX_DOTS  # one marker use per dot drawn


def _reference(fig: Any) -> str:
    """The figure as matplotlib's own ``bbox_inches="tight"`` writes it (what charts did)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    return buf.getvalue()


def _size(svg: str) -> tuple[float, float]:
    root = ElementTree.fromstring(svg[svg.index("<svg") :])
    return float(root.get("width", "").removesuffix("pt")), float(
        root.get("height", "").removesuffix("pt")
    )


def _timelines_figure() -> Any:
    """What :func:`charts.timelines` draws for two implementations, a figure laid out by
    ``tight_layout()`` (its engine left in place), as the chart is."""
    fig = Figure(figsize=(6.4, 3.0))
    axes = fig.subplots(2, 1, squeeze=False)
    for ax, label in zip(axes[:, 0], ["a rather long implementation label", "b"]):
        ax.broken_barh([(0, 5), (7, 2)], (-0.4, 0.8), facecolors="#777777")
        ax.set_yticks([0], ["framework L0"])
        ax.set_title(label, loc="left")
    axes[-1, 0].set_xlabel("µs from the start of the median step")
    fig.tight_layout()
    return fig


@pytest.mark.parametrize("make", ["paired_bars", "timelines", "legend_below"])
def test_charts_are_cropped_as_bbox_inches_tight_crops(make: str) -> None:
    """One drawing cropped with the viewBox: the size matplotlib's two-pass tight crop gives."""

    def figure() -> Any:
        if make == "paired_bars":
            return charts.paired_bars_figure(["naive", "fused", "compiled"], PROFILED, "µs")
        if make == "timelines":
            return _timelines_figure()
        fig = Figure(figsize=(6.2, 2.0))  # a legend below the axes, outside the figure
        ax = fig.subplots()
        ax.barh(["x", "a longer label"], [3.0, 4.0], label="part", hatch="//")
        fig.legend(loc="lower center", bbox_to_anchor=(0.5, -0.3), frameon=False)
        return fig

    with rc_context(charts.CHART_RC):  # type: ignore[arg-type]
        ours, reference = chartsvg.figure_svg(figure()), _reference(figure())
    assert _size(ours) == pytest.approx(_size(reference), abs=1e-3)
    x, y, width, height = map(float, ElementTree.fromstring(ours).get("viewBox", "").split())
    assert (width, height) == pytest.approx(_size(reference), abs=1e-3)
    assert (x, y) != (0.0, 0.0)  # the figure was larger than what it draws


def test_chart_markup_is_lean_and_keeps_what_overrides_the_stylesheet() -> None:
    svg = charts.stacked_breakdown(
        ["naive", "fused"], {"a": [1.0, 2.0], "b": [2.0, 1.0], "c": [0.5, 0.5]}, "µs"
    )
    root = ElementTree.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    # groups that only named themselves are gone; clipping stays
    assert all(set(g.attrib) - {"id"} for g in root.iter(f"{ns}g"))
    assert root.find(".//*[@clip-path]") is not None
    # only what must win over matplotlib's `*{stroke-linejoin: ...}` rule is left in style
    for el in root.iter():
        for declaration in filter(None, el.get("style", "").split(";")):
            assert declaration.split(":")[0].strip() in ("stroke-linejoin", "stroke-linecap")
    assert root.find(f".//{ns}path[@fill]") is not None
    texts = list(root.iter(f"{ns}text"))
    assert {"naive", "fused", "µs"} <= {t.text for t in texts}
    assert all(t.get("font-family") == "'DejaVu Sans', sans-serif" for t in texts)
    assert not [t for t in texts if t.get("transform", "").startswith("rotate(-0 ")]
    assert "<metadata" not in svg
    # every reference still resolves
    ids = {el.get("id") for el in root.iter()}
    assert set(re.findall(r'(?:href="|url\()#([^")]+)', svg)) <= ids


def test_markup_of_another_namespace_is_written_with_its_own_prefix() -> None:
    root = ElementTree.fromstring(
        '<svg xmlns="http://www.w3.org/2000/svg" xmlns:q="urn:x"><q:a q:b="1">t&amp;</q:a></svg>'
    )
    out: list[str] = []
    chartsvg._write(root, out)
    assert "".join(out) == '<svg><ns0:a xmlns:ns0="urn:x" ns0:b="1">t&amp;</ns0:a></svg>'


def test_a_control_character_in_a_label_leaves_a_chart_that_parses() -> None:
    # matplotlib writes the character into the SVG as it is, which no XML parser reads
    with pytest.warns(UserWarning, match="missing from font"):
        svg = charts.step_times(["a\x01b", "x<y&z"], [[1.0, 2.0], [3.0]])
    texts = {t.text for t in ElementTree.fromstring(svg).iter("{http://www.w3.org/2000/svg}text")}
    assert {"a\ufffdb", "x<y&z"} <= texts


def test_matplotlib_writes_its_setter_docstrings_again_after_the_charts_import() -> None:
    import matplotlib.artist
    from matplotlib.lines import Line2D

    assert "linewidth" in matplotlib.artist.kwdoc(Line2D)

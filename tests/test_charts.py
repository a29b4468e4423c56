"""Chart layout: what the figure shows stays readable."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from nprof_report.report import charts

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

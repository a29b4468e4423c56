"""The roofline in the report: how close each implementation comes to the device's limit.

Everything comes from ``summary["roofline"]`` and ``summary["roofline_basis"]``
(:mod:`nprof_report.report.figures.roofline`); ``templates/roofline.html.j2`` places the section
and the model puts its sentences on page 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nprof_report.report.figures import (
    RooflineBasis,
    RooflineRecord,
    Summary,
    at_largest,
    roof_pct,
)
from nprof_report.report.view.charts import Chart
from nprof_report.report.view.columns import ROOFLINE_COLUMNS
from nprof_report.report.view.rooflinechart import roofline_chart
from nprof_report.report.view.tables import Table, make_table

GLOSSARY = [
    (
        "Roofline",
        "Per implementation and size: the bytes and FLOPs the study declares for one call, "
        "divided by the time per call (device time per step where the trace has device "
        "activities, else the un-profiled median), against the device's peak memory bandwidth "
        "and FLOP/s. A point whose FLOPs per byte (arithmetic intensity) are below the ridge "
        "(peak FLOP/s ÷ peak bandwidth) is memory-bound: its roof is the bandwidth. An achieved "
        "figure above the peak means the declared work or the peak is wrong (or, on the CPU, "
        "that the data fits in a cache): a caveat, not a result.",
    ),
]


@dataclass(frozen=True)
class RooflineView:
    """What ``templates/roofline.html.j2`` shows."""

    heading: str
    intro: str
    charts: list[Chart]
    tables: list[Table]


@dataclass(frozen=True)
class RooflineSection:
    """The roofline's section and the sentences it adds to page 1's verdict."""

    view: RooflineView
    sentences: list[str]


def _peaks_text(basis: RooflineBasis) -> str:
    figures = [
        f"{v:g} {unit}"
        for v, unit in ((basis["peak_gbps"], "GB/s"), (basis["peak_gflops"], "GFLOP/s"))
        if v is not None
    ]
    if not figures:
        return f"no peak is known for {basis['device'] or 'the device'}"
    kind = basis["peak_kind"]
    label = "measured on the capture host" if kind == "measured" else kind
    return f"{' and '.join(figures)}, {label}"


def _intro(basis: RooflineBasis) -> str:
    text = (
        f"Against {basis['device'] or 'the device'}: peak {_peaks_text(basis)}"
        + (
            f" (FLOP/s for {basis['dtype']})"
            if basis["dtype"] and basis["peak_gflops"] and basis["peak_kind"] == "published"
            else ""
        )
        + ". "
    )
    if basis["peak_source"]:
        text += f"Source: {basis['peak_source']}. "
    if basis["note"]:
        text += basis["note"] + " "
    return (
        text + "Bytes and FLOPs are what the study declares for one call; time per call is "
        "device time per step where the trace records device activities, else the un-profiled "
        "median. GB/s and GFLOP/s are 10⁹ per second."
    )


def sentences(records: list[RooflineRecord], basis: RooflineBasis) -> list[str]:
    """Page 1: how far the best implementation is from the limit at the largest size, and which
    one wastes the most bandwidth."""
    if not records:
        return []
    points = at_largest(records)
    largest = max(records, key=lambda r: math.prod(r["size"]))
    size = largest["size_label"]
    if not points:
        if any(r["above_peak"] for r in records if r["size"] == largest["size"]):
            return [
                f"Roofline at {size}: achieved figures above the peak, so the declared work or "
                "the peak is wrong (see the caveats); no share of the limit is stated."
            ]
        return [f"Roofline at {size}: {_peaks_text(basis)}, so no share of the limit is stated."]
    best = max(points, key=lambda r: roof_pct(r) or 0.0)
    what = "FLOP/s" if best["bound"] == "compute" else "memory bandwidth"
    peak = best["peak_gflops"] if best["bound"] == "compute" else best["peak_gbps"]
    unit = "GFLOP/s" if best["bound"] == "compute" else "GB/s"
    text = (
        f"Roofline at {size}: the closest to the hardware limit is {best['label']}, at "
        f"{roof_pct(best):.3g} % of the peak {what} ({peak:g} {unit}, "
        f"{'measured' if basis['peak_kind'] == 'measured' else basis['peak_kind']})"
    )
    bw = [r for r in points if r["pct_of_peak_bw"] is not None and r["bound"] != "compute"]
    worst = min(bw, key=lambda r: r["pct_of_peak_bw"] or 0.0) if len(bw) > 1 else None
    if worst is not None and worst is not best:
        text += (
            f"; {worst['label']} wastes the most bandwidth, at {worst['pct_of_peak_bw']:.3g} % "
            "for the same declared bytes"
        )
    above = [r["label"] for r in records if r["size"] == largest["size"] and r["above_peak"]]
    if above:
        text += (
            f"; {', '.join(above)} {'is' if len(above) == 1 else 'are'} above the peak, a caveat "
            "rather than a result"
        )
    return [text + "."]


def _sources(records: list[RooflineRecord]) -> str:
    names = {"device": "device time per step", "unprofiled": "un-profiled median", None: "none"}
    used = list(dict.fromkeys(r["time_source"] for r in records))
    if len(used) == 1:
        return names[used[0]] + " everywhere"
    return "; ".join(
        f"{names[s]} for "
        + ", ".join(f"{r['label']} @ {r['size_label']}" for r in records if r["time_source"] == s)
        for s in used
    )


def roofline_section(summary: Summary) -> RooflineSection | None:
    """The roofline's section and page-1 sentences; None for inputs without a run manifest."""
    basis = summary.get("roofline_basis")
    if basis is None:
        return None
    records = summary.get("roofline") or []
    heading = "How close to the hardware limit"
    if not records:
        return RooflineSection(RooflineView(heading, basis["note"] or "", [], []), [])
    charts = []
    if any(r["intensity"] and r["achieved_gflops"] for r in records):
        charts.append(
            Chart(
                "Roofline",
                roofline_chart(records, basis["peak_gbps"], basis["peak_gflops"]),
                "Achieved GFLOP/s against FLOPs per byte, log-log, one marker per implementation "
                "(shape) and size (shade), under the bandwidth roof (slanted) and the compute "
                "roof (level). A point far below the roof at its intensity leaves performance "
                "on the table.",
            )
        )
    table = make_table(
        "Achieved against peak, per implementation and size",
        "roofline.csv",
        ROOFLINE_COLUMNS,
        records,
        note=f"Time per call: {_sources(records)}. % of peak above 100 is flagged and listed in "
        "the caveats: the declared work or the peak is wrong there. FLOPs, the peaks and their "
        "source are in roofline.csv.",
    )
    return RooflineSection(
        RooflineView(heading, _intro(basis), charts, [table]), sentences(records, basis)
    )

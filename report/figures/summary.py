"""Analyses into ``summary.json``: every number the report shows, in one versioned document.

Schema ``nprof-summary`` version 2 (documented in docs/file-formats.md; :mod:`.stored` writes the
lists that grow with the trace to Parquet beside it):

* ``run``: provenance from the manifest (null fields when the input was a bare trace);
* ``implementations[]``: per source, ``label``, ``trace``, ``status``, ``steps`` (per-step rows),
  ``step_time_us`` (n, median, mean, min, max, p25, p75, iqr, stdev), ``headline`` (the page-1
  figures), ``top_ops`` and ``key_averages`` rows, ``links`` (count per kind and method),
  ``diff_profile`` (per-step op series and step parts that ``diff`` and ``check`` compare,
  :mod:`~nprof_report.report.figures.diff_profile`);
* ``comparisons[]``: each implementation against the baseline (the first one);
* ``findings[]``: ranked rule results, each with its evidence;
* ``caveats[]``: recovered damage and warnings;
* ``ranks``: present when the inputs are several ranks of one job (:mod:`.ranks`): per-rank
  figures, the rank x step matrix of step times and the stragglers.

All times are microseconds (``_us``) unless the key says otherwise. The document's keys and
value types are declared in :mod:`.summary_types`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Literal, cast, overload

import polars as pl

from nprof_report.bundle import Manifest
from nprof_report.parse import NeuronFigures
from nprof_report.report.figures.analyses import ImplementationAnalysis
from nprof_report.report.figures.breakdown import median_step
from nprof_report.report.figures.findings import find
from nprof_report.report.figures.ranks import RankFigures, cross_rank
from nprof_report.report.figures.records import FrameRecords
from nprof_report.report.figures.summary_types import (
    ONE_STEP,
    Comparison,
    ComparisonFigures,
    ConstructedInput,
    Gaps,
    Headline,
    ImplementationRecord,
    KeyAverageRow,
    MedianStep,
    NeuronRecord,
    NeuronStep,
    RunRecord,
    StepRow,
    Summary,
    TopOpRow,
)

SUMMARY_FORMAT = "nprof-summary"
SUMMARY_VERSION = 2


@overload
def _r(x: float, nd: int = 3) -> float: ...
@overload
def _r(x: float | None, nd: int = 3) -> float | None: ...
def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(float(x), nd)


def headline(a: ImplementationAnalysis) -> Headline:
    """The page-1 figures of one implementation."""
    st = a.step_time
    ops_per_step = a.median_of("top_ops")
    dispatch = a.median_of("dispatch_ns")
    device = a.median_of("device_ns") if a.has_device else None
    unprof = a.implementation.unprofiled if a.implementation else None
    overhead = (st.median - unprof.median_us) if (st and unprof) else None
    return {
        "steps": st.n if st else 0,
        "step_median_us": _r(st.median) if st else None,
        "step_p25_us": _r(st.p25) if st else None,
        "step_p75_us": _r(st.p75) if st else None,
        "step_iqr_us": _r(st.iqr) if st else None,
        "step_min_us": _r(st.minimum) if st else None,
        "step_max_us": _r(st.maximum) if st else None,
        "framework_ops_per_step": _r(ops_per_step, 2),
        "all_ops_per_step": _r(a.median_of("all_ops"), 2),
        "dispatch_per_step_us": _r(dispatch),
        "dispatch_per_op_us": _r(dispatch / ops_per_step) if ops_per_step else None,
        "op_self_cpu_per_step_us": _r(a.median_of("op_self_ns")),
        "runtime_calls_per_step": _r(a.median_of("runtime_calls"), 2),
        "runtime_per_step_us": _r(a.median_of("runtime_ns")),
        "device_per_step_us": _r(device),
        "device_activities_per_step": _r(a.median_of("device_activities"), 2)
        if a.has_device
        else None,
        "device_per_op_us": _r(device / ops_per_step)
        if (device is not None and ops_per_step)
        else None,
        "device_busy_pct": _r(100 * device / st.median, 2)
        if (device is not None and st and st.median)
        else None,
        "unprofiled_median_us": _r(unprof.median_us) if unprof else None,
        "unprofiled_iqr_us": _r(unprof.iqr_us) if unprof else None,
        "profiler_overhead_us": _r(overhead),
        "profiler_overhead_pct": _r(100 * overhead / unprof.median_us, 1)
        if (overhead is not None and unprof and unprof.median_us)
        else None,
        "first_call_s": a.implementation.first_call_s if a.implementation else None,
        "bound_by": bound_by(dispatch, device) if st else None,
    }


def bound_by(dispatch_us: float, device_us: float | None) -> Literal["dispatch", "device"] | None:
    """What bounds a step: ``device`` when the device works at least as long per step as the
    host dispatches, else ``dispatch`` (the device waits on the host); None without device
    activity."""
    if device_us is None:
        return None
    return "device" if device_us >= dispatch_us else "dispatch"


def compare(base: Headline, other: Headline) -> ComparisonFigures:
    """One implementation's headline against the baseline's.

    A difference *exceeds the noise* when the interquartile ranges of the two step-time samples
    do not overlap (and likewise for the un-profiled timings). The quartiles and the IQR are
    present wherever the median is (:func:`headline`). Where a side has one step, its range is
    no spread: ``step_exceeds_noise`` is None and ``step_spread`` says so (:data:`ONE_STEP`).
    """
    out: ComparisonFigures = {}
    b, o = base.get("step_median_us"), other.get("step_median_us")
    if b is not None and o is not None:
        b25, b75 = cast(float, base["step_p25_us"]), cast(float, base["step_p75_us"])
        o25, o75 = cast(float, other["step_p25_us"]), cast(float, other["step_p75_us"])
        out["step_delta_us"] = _r(o - b)
        out["step_ratio"] = _r(o / b, 3) if b else None
        if min(base["steps"], other["steps"]) < 2:
            out["step_exceeds_noise"] = None
            out["step_spread"] = ONE_STEP
        else:
            out["step_exceeds_noise"] = bool(o75 < b25 or o25 > b75)
    b, o = base.get("unprofiled_median_us"), other.get("unprofiled_median_us")
    if b is not None and o is not None:
        out["unprofiled_delta_us"] = _r(o - b)
        out["unprofiled_ratio"] = _r(o / b, 3) if b else None
        bi = cast(float, base["unprofiled_iqr_us"]) / 2
        oi = cast(float, other["unprofiled_iqr_us"]) / 2
        out["unprofiled_exceeds_noise"] = bool(abs(o - b) > bi + oi)
    b_ops, o_ops = base.get("framework_ops_per_step"), other.get("framework_ops_per_step")
    if b_ops is not None and o_ops is not None:
        out["ops_per_step_delta"] = _r(o_ops - b_ops, 2)
    return out


def build_summary(
    analyses: list[ImplementationAnalysis],
    manifest: Manifest | None,
    caveats: list[str],
    ranks: list[RankFigures] | None = None,
    *,
    pairs: Sequence[tuple[int, int]] | None = None,
    output_wrong: Sequence[str] = (),
) -> Summary:
    """The ``summary.json`` document; ``ranks``: the figures of each source as a rank.

    ``pairs``: which analyses are compared, as (baseline, other) indices (default: each against
    the first); ``output_wrong``: the labels whose output failed the numerical check (findings
    that rank them say so). Rows copied from a frame or a dataclass are cast to their declared
    shape (:mod:`.summary_types`; ``tests/test_summary_types.py`` holds the two together).
    """
    impls: list[ImplementationRecord] = []
    for a in analyses:
        impls.append(
            {
                "label": a.label,
                "trace": a.trace_path,
                "description": a.implementation.description if a.implementation else None,
                "timestamp_convention": a.meta.timestamp_convention,
                "headline": headline(a),
                "step_time_us": None
                if a.step_time is None
                else {
                    "n": _r(a.step_time.n),
                    "median": _r(a.step_time.median),
                    "mean": _r(a.step_time.mean),
                    "minimum": _r(a.step_time.minimum),
                    "maximum": _r(a.step_time.maximum),
                    "p25": _r(a.step_time.p25),
                    "p75": _r(a.step_time.p75),
                    "stdev": _r(a.step_time.stdev),
                    "iqr": _r(a.step_time.iqr),
                },
                "steps": [
                    cast(
                        StepRow,
                        {
                            (k[:-3] + "_us" if k.endswith("_ns") else k): (
                                _r(v / 1000) if k.endswith("_ns") else v
                            )
                            for k, v in row.items()
                        },
                    )
                    for row in a.steps.to_dicts()
                ],
                # columns until read or written (:mod:`.records`): 300,000 of them for a trace
                # of 100,000 op names, 25 of which the report shows
                "top_ops": cast(Sequence[TopOpRow], FrameRecords(a.top_ops)),
                "key_averages": cast(Sequence[KeyAverageRow], FrameRecords(a.key_averages)),
                "median_step": _median_step_breakdown(a),
                "dispatch_samples_us": [_r(v) for v in a.dispatch_samples_us],
                "gaps": _gaps_record(a),
                "timeline": [
                    {**b, "start_us": _r(b["start_us"]), "dur_us": _r(b["dur_us"])}
                    for b in a.timeline
                ],
                "chains": a.chains,
                "links": a.links_by_method,
                "has_device_activities": a.has_device,
                "device_time_source": a.device_source,
                "neuron": [_neuron_record(f) for f in a.neuron],
                "diff_profile": a.diff_profile,
                "step_rule": a.step_rule,
            }
        )
    if pairs is None:
        pairs = [(0, k) for k in range(1, len(impls))]
    comparisons: list[Comparison] = [
        {
            "baseline": impls[b]["label"],
            "label": impls[o]["label"],
            **compare(impls[b]["headline"], impls[o]["headline"]),
        }
        for b, o in pairs
    ]
    all_caveats = list(caveats) + [n for a in analyses for n in a.notes]
    summary: Summary = {
        "format": SUMMARY_FORMAT,
        "format_version": SUMMARY_VERSION,
        "run": run_record(manifest),
        "implementations": impls,
        "comparisons": comparisons,
        "caveats": all_caveats,
        "findings": [],  # below, from the rest of the document
    }
    record = cross_rank(ranks or [])
    if record is not None:
        summary["ranks"] = record
    constructed = constructed_inputs(analyses)
    if constructed:
        summary["constructed"] = constructed
    if output_wrong:
        summary["output_wrong"] = list(output_wrong)
    summary["findings"] = find(summary)
    return summary


CONSTRUCTED_MARK = "CONSTRUCTED trace, not a capture"
"""How parse notes a trace that says it was constructed (its ``nprof_constructed`` key,
parse/read/reference.py): ``trace.json: CONSTRUCTED trace, not a capture: <how it was made>``."""


def constructed_inputs(analyses: Sequence[ImplementationAnalysis]) -> list[ConstructedInput]:
    """The sources whose trace says it was constructed, with how it was made."""
    out: list[ConstructedInput] = []
    for a in analyses:
        note = next((n for n in a.notes if CONSTRUCTED_MARK in n), None)
        if note is not None:
            how = note.split(CONSTRUCTED_MARK, 1)[1].lstrip(": ").strip()
            out.append({"label": a.label, "note": how or "constructed, not captured"})
    return out


def _median_step_breakdown(a: ImplementationAnalysis) -> MedianStep | None:
    """The host breakdown of the median step (its components add up to its duration)."""
    step = median_step(a.steps)
    if step is None:
        return None
    row = a.steps.filter(pl.col("step") == step).row(0, named=True)
    return {
        "step": step,
        "dur_us": _r(row["dur_ns"] / 1000),
        "framework_us": _r(row["host_framework_ns"] / 1000),
        "runtime_us": _r(row["host_runtime_ns"] / 1000),
        "sync_us": _r(row["host_sync_ns"] / 1000),
        "outside_us": _r(row["host_outside_ns"] / 1000),
        "device_us": _r(row["device_ns"] / 1000),
    }


def _gaps_record(a: ImplementationAnalysis, largest: int = 10) -> Gaps:
    """Device idle gaps: totals by cause and the largest ones."""
    g = a.gaps
    by_cause = (
        g.group_by("cause")
        .agg(count=pl.len(), total_us=pl.col("dur_ns").sum() / 1000)
        .sort(["total_us", "cause"], descending=[True, False])  # ties in a stated order
    )
    top = g.sort(["dur_ns", "start_ns"], descending=[True, False]).head(largest)
    return {
        "count": g.height,
        "total_us": _r(int(g["dur_ns"].sum()) / 1000) if g.height else 0.0,
        "by_cause": [
            {"cause": c, "count": n, "total_us": _r(t)} for c, n, t in by_cause.iter_rows()
        ],
        "durations_us": [_r(d / 1000) for d in g["dur_ns"].to_list()],
        "largest": [
            {
                "step": s,
                "offset_us": _r((st - a.step_start_ns.get(s, st)) / 1000),
                "dur_us": _r(d / 1000),
                "cause": c,
            }
            for s, st, d, c in top.iter_rows()
        ],
    }


def _neuron_record(figures: NeuronFigures) -> NeuronRecord:
    """Neuron system-trace figures per step (times in µs) and device-profile figures."""
    steps = [
        cast(
            NeuronStep,
            {
                (k[:-3] + "_us" if k.endswith("_ns") else k): (
                    _r(v / 1000) if (k.endswith("_ns") and v is not None) else v
                )
                for k, v in asdict(s).items()
                if k not in ("start_ns", "end_ns")
            },
        )
        for s in figures.steps
    ]
    d = figures.device
    c = figures.clock
    return {
        "steps": steps,
        "engine_active_pct": {k: _r(v, 2) for k, v in d.engine_active_percent.items()},
        "mfu_estimated_pct": _r(d.mfu_estimated_percent, 3),
        "mbu_estimated_pct": _r(d.mbu_estimated_percent, 3),
        "clock": {
            "framework_matches": c.framework_matches,
            "framework_offset_us": _r(c.framework_offset_ns / 1000)
            if c.framework_offset_ns is not None
            else None,
            "framework_error_us": _r(c.framework_error_ns / 1000)
            if c.framework_error_ns is not None
            else None,
            "sync_points": c.sync_points,
        },
        # trace.json's device executions against the system trace (None: not applicable)
        "trace_json_cross_check": None
        if figures.cross_check is None
        else {
            "ops": figures.cross_check.ops,
            "trace_json_us": _r(figures.cross_check.trace_ns / 1000),
            "system_trace_us": _r(figures.cross_check.system_ns / 1000),
            "max_per_op_difference_us": _r(figures.cross_check.max_diff_ns / 1000),
            "clock_offset_us": _r(figures.cross_check.offset_ns / 1000)
            if figures.cross_check.offset_ns is not None
            else None,
            "agree": figures.cross_check.agree,
            "per_op": [
                {
                    "name": name,
                    "calls": calls,
                    "trace_json_us": _r(t / 1000),
                    "system_trace_us": _r(y / 1000),
                    "max_difference_us": _r(d / 1000),
                }
                for name, calls, t, y, d in figures.cross_check.by_name().iter_rows()
            ],
        },
    }


def run_record(manifest: Manifest | None) -> RunRecord | None:
    """``run``: the manifest without its implementations."""
    if manifest is None:
        return None
    record = asdict(manifest)
    record.pop("implementations")
    return cast(RunRecord, record)

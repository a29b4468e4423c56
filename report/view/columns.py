"""The columns of the report's tables, as data: header, the summary record's key, formatter,
relative width, text or number, shown or only in the CSV (:class:`~.tables.Col`).

:mod:`.model` fills these from the summary records whose keys they name
(:mod:`.summary_types`; ``tests/test_summary_types.py`` checks that every key is one of its
record's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from nprof_report.report.figures import top_ops_rank
from nprof_report.report.view.tables import (
    Col,
    as_number,
    as_sci,
    as_text,
    as_us,
    as_us_signed,
    as_yesno,
)

HEADLINE_COLUMNS = [
    Col("Implementation", "label", as_text, 2.2, text=True),
    Col("Step median", "step_median_us", as_us),
    Col("Step IQR", "step_iqr_us", as_us),
    Col("Steps", "steps", as_text, shown=False),
    Col("Framework ops / step", "framework_ops_per_step", as_number),
    Col("Host dispatch / step", "dispatch_per_step_us", as_us),
    Col("Dispatch / op", "dispatch_per_op_us", as_us, shown=False),
    Col("Device time / step", "device_per_step_us", as_us),
    Col("Bound by", "bound_by", as_text),
    Col("Device busy", "device_busy_pct", lambda v: as_number(v, "%"), shown=False),
    Col("Device activities / step", "device_activities_per_step", as_number, shown=False),
    Col("Un-profiled / call", "unprofiled_median_us", as_us),
    Col("Profiler overhead", "profiler_overhead_pct", lambda v: as_number(v, "%"), shown=False),
]
"""The page-1 table: the columns a verdict needs are shown (host dispatch against device time
per step, and which bounds the step), the others go to each implementation's section and to
headline.csv."""

ACROSS_RUNS_COLUMNS = [
    Col("Implementation", "label", as_text, 2.0, text=True),
    Col("Against", "baseline", as_text, 2.0, text=True),
    Col("Step ratio", "step_ratio", lambda v: as_number(v, "×")),
    Col("Exceeds noise (steps)", "step_exceeds_noise", as_yesno, 1.1),
    Col("Un-profiled ratio", "unprofiled_ratio", lambda v: as_number(v, "×")),
    Col("Exceeds noise (un-profiled)", "unprofiled_exceeds_noise", as_yesno, 1.3),
    Col("Verdict", "holds", as_text, 1.1, text=True),
    Col("Times", "times", lambda v: as_number(v, "×")),
    Col("Step Δ", "step_delta_us", as_us_signed, shown=False),
    Col("Un-profiled Δ", "unprofiled_delta_us", as_us_signed, shown=False),
    Col("Framework ops Δ / step", "ops_per_step_delta", as_number, shown=False),
    Col("Implementation name", "implementation", as_text, shown=False),
    Col("Size", "size_label", as_text, shown=False),
    Col("Run", "run", as_text, shown=False),
    Col("Baseline run", "baseline_run", as_text, shown=False),
    Col("Metric", "metric", as_text, shown=False),
]
"""Each run against the study's first run, the same implementation at the same size
(``across_runs[]``)."""

BACKEND_OP_FIGURES: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("Calls / step", "calls_per_step", as_number),
    ("Dispatch / call", "dispatch_per_call_us", as_us),
    ("Device / call", "device_per_call_us", as_us),
    ("Device acts / call", "device_activities_per_call", as_number),
)
"""What the backends section shows of a framework op on each backend (``BackendOpSide``), one
column per backend."""

COMPARISON_COLUMNS = [
    Col("Implementation", "label", as_text, 2.0, text=True),
    Col("Step Δ", "step_delta_us", as_us_signed),
    Col("Step ratio", "step_ratio", lambda v: as_number(v, "×")),
    Col("Exceeds noise (steps)", "step_exceeds_noise", as_yesno, 1.1),
    Col("Un-profiled Δ", "unprofiled_delta_us", as_us_signed),
    Col("Un-profiled ratio", "unprofiled_ratio", lambda v: as_number(v, "×")),
    Col("Exceeds noise (un-profiled)", "unprofiled_exceeds_noise", as_yesno, 1.3),
    Col("Framework ops Δ / step", "ops_per_step_delta", as_number, shown=False),
]

FILES_COLUMNS = [
    Col("Path", "path", as_text, 3.0, text=True),
    Col("Role", "role", as_text, 1.2, text=True),
    Col("Bytes", "bytes", as_text),
    Col("sha256", "sha256", as_text, 3.0, text=True),
]

TOP_OPS_COLUMNS = [
    Col("Op", "name", as_text, 3.0, text=True),
    Col("Calls / step", "calls_per_step", as_number),
    Col("Dispatch median", "dispatch_median_us", as_us),
    Col("Dispatch p90", "dispatch_p90_us", as_us),
    Col("Framework self median", "self_cpu_median_us", as_us),
    Col("Runtime calls median", "runtime_median_us", as_us),
    Col("Launch → device start", "launch_latency_median_us", as_us),
    Col("Device median", "device_median_us", as_us),
    Col("Device activities", "device_activities", as_text),
]
TOP_OPS_RANK: tuple[str, Callable[[Mapping[str, Any]], Any]] = (
    "dispatch time per step",
    top_ops_rank,
)
"""What a long top-ops table keeps (:func:`~.tables.make_table`'s ``rank``)."""

STEPS_COLUMNS = [
    Col("Step", "step", as_text),
    Col("Duration", "dur_us", as_us),
    Col("Top ops", "top_ops", as_text),
    Col("All ops", "all_ops", as_text),
    Col("Dispatch", "dispatch_us", as_us),
    Col("Op self", "op_self_us", as_us),
    Col("Runtime calls", "runtime_calls", as_text),
    Col("Runtime", "runtime_us", as_us),
    Col("Device acts", "device_activities", as_text),
    Col("Device", "device_us", as_us),
]

KEY_AVERAGES_COLUMNS = [
    Col("Name", "name", as_text, 4.0, text=True),
    Col("Type", "device_type", as_text, 1.2, text=True),
    Col("Calls", "calls", as_text),
    Col("Self CPU", "self_cpu_us", as_us),
    Col("CPU total", "cpu_total_us", as_us),
    Col("Self device", "self_device_us", as_us),
    Col("Device total", "device_total_us", as_us),
]

LINKS_COLUMNS = [
    Col("Link (method)", "link", as_text, 4.0, text=True),
    Col("Count", "count", as_text),
]

CHAINS_COLUMNS = [
    Col("Op", "op", as_text, 2.5, text=True),
    Col("Calls", "calls", as_text, 0.8),
    Col("Device / call", "device_us_per_call", as_us),
    Col("Runtime calls per op call", "runtime", as_text, 3.0, text=True),
    Col("Device activities per op call", "device", as_text, 3.0, text=True),
]

GAP_CAUSES_COLUMNS = [
    Col("Cause", "cause", as_text, 3.0, text=True),
    Col("Gaps", "count", as_text),
    Col("Total", "total_us", as_us),
]

LARGEST_GAPS_COLUMNS = [
    Col("Step", "step", as_text),
    Col("Offset in step", "offset_us", as_us),
    Col("Duration", "dur_us", as_us),
    Col("Cause", "cause", as_text, 3.0, text=True),
]

NEURON_STEPS_COLUMNS = [
    Col("Submissions", "submissions", as_text),
    Col("HW executions", "executions", as_text),
    Col("Model switches", "model_switches", as_text),
    Col("Loads", "loads", as_text),
    Col("Copies in", "copyin_count", as_text),
    Col("Copy-in time", "copyin_us", as_us),
    Col("Copies out", "copyout_count", as_text),
    Col("Host blocked", "host_blocked_us", as_us),
    Col("Submit→start median", "submit_to_start_median_us", as_us),
    Col("Device busy", "device_busy_us", as_us),
    Col("Device idle", "device_idle_us", as_us),
]

NUMERICAL_CHECK_COLUMNS = [
    Col("Implementation", "label", as_text, 1.5, text=True),
    Col("Size", "size_label", as_text, text=True),
    Col("Check", "check", as_text, 1.5, text=True),
    Col("Status", "status", as_text, shown=False),
    Col("Max abs error", "max_abs_error", as_sci),
    Col("Max rel error", "max_rel_error", as_sci),
    Col("Tolerance", "tolerance", as_text, 1.5, text=True),
    Col("atol", "atol", as_text, shown=False),
    Col("rtol", "rtol", as_text, shown=False),
    Col("Mismatched", "mismatched", as_text, shown=False),
    Col("Note", "note", as_text, shown=False),
]
"""The numerical check (:mod:`.sweepview`): a check record with ``check`` and ``tolerance`` in
words."""

TimeKey = Literal[
    "unprofiled_median_us", "step_median_us", "dispatch_per_step_us", "device_per_step_us"
]
SWEEP_TIME_COLUMNS: tuple[tuple[str, TimeKey], ...] = (
    ("Un-profiled / call", "unprofiled_median_us"),
    ("Profiled step", "step_median_us"),
    ("Host dispatch / step", "dispatch_per_step_us"),
    ("Device / step", "device_per_step_us"),
)
"""The headline figures the sweep table shows at every size."""

SWEEP_COLUMNS = [
    Col("Implementation", "label", as_text, 1.5, text=True),
    Col("Size", "size_label", as_text, text=True),
    *(Col(h, k, as_us) for h, k in SWEEP_TIME_COLUMNS),
    Col("Ratio to baseline", "ratio", lambda v: as_number(v, "×")),
    Col("vs baseline", "verdict", as_text, 1.3, text=True),
]

RANKS_COLUMNS = [
    Col("Rank", "rank", as_text, text=True),
    Col("Steps", "steps", as_text, text=True),
    Col("Step median", "step_median_us", as_us),
    Col("Step IQR", "step_iqr_us", as_us),
    Col("Step min", "step_min_us", as_us),
    Col("Step max", "step_max_us", as_us),
    Col("Host dispatch", "dispatch_median_us", as_us),
    Col("Device busy", "device_median_us", as_us),
    Col("Device busy %", "device_busy_pct", lambda v: as_number(v, "%")),
    Col("Device compute", "compute_median_us", as_us),
    Col("Communication", "comm_median_us", as_us),
    Col("Comm %", "comm_pct", lambda v: as_number(v, "%")),
]
"""Per rank (:mod:`.ranksection`)."""


def _as_pct_of_peak(x: float | None) -> str:
    """A share of the peak; above 100 % it is flagged, never read as a result (see caveats)."""
    if x is None:
        return "–"
    return f"{x:.3g} %" + (" (above peak)" if x > 100 else "")


def _as_bytes(x: int | None) -> str:
    """Decimal units, as GB/s counts them: ``2.114 MB``; the CSV keeps the count."""
    if x is None:
        return "–"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if x >= scale:
            return f"{x / scale:.4g} {unit}"
    return f"{x} B"


ROOFLINE_COLUMNS = [
    Col("Implementation", "label", as_text, 1.2, text=True),
    Col("Size", "size_label", as_text, 1.0),
    Col("Bytes", "bytes", _as_bytes, 1.5),
    Col("FLOPs", "flops", lambda v: "–" if v is None else f"{v:,}", shown=False),
    Col("FLOPs / byte", "intensity", as_number, 1.1),
    Col("Time / call", "time_us", as_us, 1.7),
    Col("Time source", "time_source", as_text, shown=False),
    Col("GB/s", "achieved_gbps", as_number, 1.1),
    Col("% of peak GB/s", "pct_of_peak_bw", _as_pct_of_peak, 1.3),
    Col("GFLOP/s", "achieved_gflops", as_number, 1.1),
    Col("% of peak FLOP/s", "pct_of_peak_flops", _as_pct_of_peak, 1.6),
    Col("Bound", "bound", as_text, 0.8),
    Col("Peak GB/s", "peak_gbps", as_number, shown=False),
    Col("Peak GFLOP/s", "peak_gflops", as_number, shown=False),
    Col("Peak source", "peak_source", as_text, shown=False),
    Col("Above peak", "above_peak", as_yesno, shown=False),
]

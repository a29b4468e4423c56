"""Per-step Neuron figures and warnings (formats.md §4.3, §5, §5.5).

Events are assigned to a step window ``[start_ns, end_ns)`` by their start time (steps are matched
by interval, not nesting, §1.4). Device busy time is the union of merged executions (one span per
execution across physical cores, :func:`merge_executions`) clipped to the window.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

SUBMIT = "nrt_model_submit"
SWITCH = ("nc_model_switch", "nrt_model_switch")
COPYIN = "dmem_buf_copyin"
COPYOUT = "dmem_buf_copyout"
WAIT = "kbl_exec_wait"
LOADS = ("nrt_load", "model_load")  # §5.2 "Load"
ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")
# Kineto names that mean compilation happened (torch.compile / dynamo_timed record_function
# names and the Neuron compiler). Unconfirmed for TorchNeuron [INF].
COMPILE_NAME_RE = re.compile(
    r"compile_inner|call_user_compiler|compile_fx|neuronx-cc|neuron_compile|NeffCompile",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class StepFigures:
    """Neuron figures of one step window (all times ns)."""

    start_ns: int
    end_ns: int
    submissions: int
    hw_rows: int
    executions: int
    distinct_models: int
    model_switches: int
    copyin_count: int
    copyin_ns: int
    copyout_count: int
    copyout_ns: int
    host_blocked_ns: int
    submit_to_start_median_ns: int | None
    submit_to_start_max_ns: int | None
    device_busy_ns: int
    device_idle_ns: int
    loads: int


@dataclass(frozen=True)
class DeviceSummaryFigures:
    """Device-profile figures weighted over the measured executions (from ``Summary``).

    ``engine_active_percent`` maps engine (and ``dma``) to its active-time percentage, weighted by
    each model's executions x ``total_time``; ``per_model`` is the frame it was computed from.
    """

    engine_active_percent: dict[str, float]
    mfu_estimated_percent: float | None
    mbu_estimated_percent: float | None
    per_model: pl.DataFrame


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    total = 0
    cur_s: int | None = None
    cur_e = 0
    for s, e in sorted(intervals):
        if cur_s is None or s > cur_e:
            if cur_s is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_s is not None:
        total += cur_e - cur_s
    return total


def _in(df: pl.DataFrame, start: int, end: int) -> pl.DataFrame:
    return df.filter((pl.col("start_ns") >= start) & (pl.col("start_ns") < end))


def _sum(df: pl.DataFrame, col: str = "dur_ns") -> int:
    v = df.get_column(col).sum() if df.height else 0
    return int(v) if isinstance(v, (int, float)) else 0


def submit_latencies(
    sys_events: pl.DataFrame, rt_hw: pl.DataFrame, executions: pl.DataFrame
) -> pl.DataFrame:
    """Per ``nrt_model_submit``: ``start_ns`` of the submit and ``latency_ns`` to the start of the
    execution it led to (link (b))."""
    sub = sys_events.filter(pl.col("name") == SUBMIT).select(
        pl.col("event_id").alias("rt_id"), "start_ns"
    )
    j = (
        sub.join(rt_hw.select("rt_id", "exec_key").unique(), on="rt_id")
        .join(executions.select("exec_key", pl.col("start_ns").alias("x_start")), on="exec_key")
        .group_by("rt_id")
        .agg(pl.col("start_ns").first(), pl.col("x_start").min())
    )
    return j.select(
        "rt_id", "start_ns", (pl.col("x_start") - pl.col("start_ns")).alias("latency_ns")
    )


def step_figures(
    sys_events: pl.DataFrame,
    executions: pl.DataFrame,
    rt_hw: pl.DataFrame,
    steps: Sequence[tuple[int, int]],
) -> list[StepFigures]:
    """Figures per step window: submissions, executions, switches, copies, blocking, busy/idle.

    Args:
        sys_events: SYSTEM_EVENTS.
        executions: EXECUTIONS (merged ``nc_exec_running``).
        rt_hw: RT_HW_LINKS (for submit -> device start latency).
        steps: ``(start_ns, end_ns)`` per step, epoch ns.
    """
    lat = submit_latencies(sys_events, rt_hw, executions)
    hw = sys_events.filter(pl.col("name") == "nc_exec_running")
    out = []
    for start, end in steps:
        ev = _in(sys_events, start, end)
        ex = _in(executions, start, end)
        busy = _union_ns(
            [
                (max(s, start), min(e, end))
                for s, e in executions.filter(
                    (pl.col("end_ns") > start) & (pl.col("start_ns") < end)
                )
                .select("start_ns", "end_ns")
                .iter_rows()
            ]
        )
        lt = _in(lat, start, end).get_column("latency_ns")
        med = lt.median() if len(lt) else None
        mx = lt.max() if len(lt) else None
        cin = ev.filter(pl.col("name") == COPYIN)
        cout = ev.filter(pl.col("name") == COPYOUT)
        out.append(
            StepFigures(
                start_ns=start,
                end_ns=end,
                submissions=ev.filter(pl.col("name") == SUBMIT).height,
                hw_rows=_in(hw, start, end).height,
                executions=ex.height,
                distinct_models=ex.get_column("model_id").n_unique() if ex.height else 0,
                model_switches=ev.filter(pl.col("name").is_in(SWITCH)).height,
                copyin_count=cin.height,
                copyin_ns=_sum(cin),
                copyout_count=cout.height,
                copyout_ns=_sum(cout),
                host_blocked_ns=_sum(ev.filter(pl.col("name") == WAIT)),
                submit_to_start_median_ns=int(med) if isinstance(med, (int, float)) else None,
                submit_to_start_max_ns=int(mx) if isinstance(mx, (int, float)) else None,
                device_busy_ns=busy,
                device_idle_ns=(end - start) - busy,
                loads=ev.filter(pl.col("name").is_in(LOADS)).height,
            )
        )
    return out


def device_summary_figures(summary: pl.DataFrame, executions: pl.DataFrame) -> DeviceSummaryFigures:
    """Engine active percentages and MFU/MBU estimates from ``Summary`` (§3.2).

    Each model's Summary row is weighted by (executions of that model) x ``total_time_ns``, so a
    NEFF that ran often counts more; models never executed get weight 0.
    """
    counts = executions.group_by("model_id").agg(pl.len().alias("executions"))
    per = (
        summary.filter(pl.col("model_id").is_not_null())
        .unique("model_id", keep="first", maintain_order=True)
        .join(counts, on="model_id", how="left")
        .with_columns(pl.col("executions").fill_null(0).cast(pl.Int64))
        .with_columns(
            (pl.col("executions") * pl.col("total_time_ns").fill_null(0)).alias("weight_ns")
        )
        .sort("model_id")
    )
    cols = {e: f"{e}_engine_active_time_percent" for e in ENGINES}
    cols["dma"] = "dma_active_time_percent"

    def wavg(col: str) -> float | None:
        d = per.filter(pl.col(col).is_not_null() & (pl.col("weight_ns") > 0))
        w = d.get_column("weight_ns").sum() if d.height else 0
        if not isinstance(w, int) or w <= 0:
            return None
        v = (d.get_column(col) * d.get_column("weight_ns")).sum() / w
        return float(v) if isinstance(v, (int, float)) else None

    eng = {k: v for k, c in cols.items() if (v := wavg(c)) is not None}
    return DeviceSummaryFigures(
        engine_active_percent=eng,
        mfu_estimated_percent=wavg("mfu_estimated_percent"),
        mbu_estimated_percent=wavg("mbu_estimated_percent"),
        per_model=per,
    )


def step_warnings(
    sys_events: pl.DataFrame,
    steps: Sequence[tuple[int, int]],
    kineto_events: pl.DataFrame | None = None,
) -> list[str]:
    """Warnings about the measurement itself (§2.1 warm-up advice, §5.2).

    * no hardware events at all: device time is empty;
    * NEFF loading (``nrt_load``/``model_load``) inside a measured step;
    * compilation (Kineto events named like a compiler pass) inside a measured step [INF].
    """
    out = []
    if sys_events.filter(pl.col("name") == "nc_exec_running").height == 0:
        out.append(
            "no Neuron hardware events (nc_exec_running): device time is empty; check that "
            "ProfileMode.RUNTIME was on and capture_enabled_for_nc covers the cores used"
        )
    for i, (start, end) in enumerate(steps):
        loads = _in(sys_events.filter(pl.col("name").is_in(LOADS)), start, end)
        if loads.height:
            out.append(
                f"step window {i}: {loads.height} NEFF load event(s) "
                f"({', '.join(sorted(set(loads.get_column('name'))))}) inside the measured step; "
                "warm up for 3 or more iterations before the active steps"
            )
        if kineto_events is not None and kineto_events.height:
            comp = kineto_events.filter(
                (pl.col("ts_ns") >= start)
                & (pl.col("ts_ns") < end)
                & pl.col("name").cast(pl.String).str.contains("(?i)" + COMPILE_NAME_RE.pattern)
            )
            if comp.height:
                out.append(
                    f"step window {i}: {comp.height} compilation event(s) inside the measured "
                    "step; warm up so compilation finishes before the active steps"
                )
    return out

"""Frames in, per-implementation figures out: step times, dispatch, device time, overhead.

Definitions (the report's glossary repeats them):

* *step time*: duration of a ``ProfilerStep#N`` annotation (one loop iteration: the call, the
  synchronisation and ``prof.step()``); in a trace without them, of an instance of the user
  annotation that marks the iterations, else of the whole profiled window
  (``ImplementationAnalysis.step_rule``, ``parse/steps.py``);
* *framework ops per step*: top-level ``cpu_op`` events in the step, i.e. ops with no op around
  them -- what the Python code dispatched (nested aten calls are not counted again);
* *host dispatch per step*: the summed duration of those top-level ops, the host time spent inside
  the framework for the step; *per op* divides it by the ops per step;
* *framework self time*: summed self CPU time of all ops in the step (time in the ops' own code,
  excluding runtime calls and nested ops);
* *runtime time*: summed duration of runtime/driver calls (``cudaLaunchKernel``,
  ``privateuse1_runtime`` ...) in the step;
* *device time per step*: summed duration of device activities launched from the step;
* *profiler overhead*: median profiled step time minus the median un-profiled call time.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import polars as pl

from nprof_report.bundle import Implementation
from nprof_report.parse import (
    LoadedSource,
    NeuronFigures,
    TraceFrames,
    TraceMeta,
    key_averages,
)
from nprof_report.report.figures.breakdown import (
    Busy,
    device_gaps,
    host_breakdown,
    merged_columns,
    op_chains,
    op_context,
    timeline,
)
from nprof_report.report.figures.diff_profile import diff_profile
from nprof_report.report.figures.summary_types import Chain, DiffProfile, TimelineBar

STEP_COLUMNS = pl.Schema(
    {
        "step": pl.Int32,
        "dur_ns": pl.Int64,
        "top_ops": pl.UInt32,
        "all_ops": pl.UInt32,
        "dispatch_ns": pl.Int64,
        "op_self_ns": pl.Int64,
        "runtime_calls": pl.UInt32,
        "runtime_ns": pl.Int64,
        "device_activities": pl.UInt32,
        "device_ns": pl.Int64,
        "host_framework_ns": pl.Int64,
        "host_runtime_ns": pl.Int64,
        "host_sync_ns": pl.Int64,
        "host_outside_ns": pl.Int64,
    }
)


@dataclass(frozen=True)
class Distribution:
    """Summary statistics of a sample, in microseconds."""

    n: int
    median: float
    mean: float
    minimum: float
    maximum: float
    p25: float
    p75: float
    stdev: float

    @property
    def iqr(self) -> float:
        """Interquartile range."""
        return self.p75 - self.p25


def distribution(values_us: list[float]) -> Distribution | None:
    """Statistics of a sample (None when empty)."""
    if not values_us:
        return None
    ordered = sorted(values_us)
    if len(ordered) >= 2:
        q = statistics.quantiles(ordered, n=4, method="inclusive")
        p25, p75 = q[0], q[2]
    else:
        p25 = p75 = ordered[0]
    return Distribution(
        n=len(ordered),
        median=statistics.median(ordered),
        mean=statistics.fmean(ordered),
        minimum=ordered[0],
        maximum=ordered[-1],
        p25=p25,
        p75=p75,
        stdev=statistics.stdev(ordered) if len(ordered) > 1 else 0.0,
    )


@dataclass(frozen=True)
class ImplementationAnalysis:
    """Everything the report shows about one source."""

    label: str
    trace_path: str
    meta: TraceMeta
    implementation: Implementation | None
    steps: pl.DataFrame  # STEP_COLUMNS
    key_averages: pl.DataFrame
    top_ops: pl.DataFrame  # per top-level op name: calls per step, dispatch and device time
    dispatch_samples_us: list[float]  # every top-level op duration in the steps
    gaps: pl.DataFrame  # device idle gaps: step, start_ns, dur_ns, cause
    timeline: list[TimelineBar]  # bars of the median step
    chains: list[Chain]  # op -> runtime -> device of the heaviest ops
    step_start_ns: dict[int, int]
    step_time: Distribution | None
    links_by_method: dict[str, int]
    has_device: bool
    device_source: str
    neuron: list[NeuronFigures] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    diff_profile: DiffProfile | None = None  # what `diff` compares (report/diff_profile.py)
    step_rule: str = "ProfilerStep"  # what the steps are (parse/steps.py)

    def median_of(self, column: str) -> float:
        """Median over steps of a per-step column, in µs (counts as they are)."""
        values = self.steps[column].drop_nulls().to_list()
        if not values:
            return 0.0
        med = float(statistics.median(values))
        return med / 1000 if column.endswith("_ns") else med


def _extra_device(frames: TraceFrames, extra: dict[int, int]) -> pl.DataFrame:
    """Device time attached to ops from outside the trace, as (step, event_id, dev_ns) rows."""
    return pl.DataFrame(
        {"event_id": list(extra), "dev_ns": list(extra.values())},
        schema={"event_id": pl.Int64, "dev_ns": pl.Int64},
    ).join(frames.ops.select("event_id", "step"), on="event_id")


def per_step(
    frames: TraceFrames, ctx: pl.DataFrame, extra_device_ns: dict[int, int] | None = None
) -> pl.DataFrame:
    """One row per profiled step with dispatch, host breakdown, runtime and device figures.

    ``ctx`` is ``frames.ops`` with :func:`~.breakdown.op_context` columns. With
    ``extra_device_ns`` (Neuron), device time and activities per step come from the ops'
    attributed device time instead of the trace's device activities.
    """
    # lazy: only the columns the sums read are filtered (not a copy of every column of the ops)
    op_rows = (
        ctx.lazy()
        .filter(pl.col("step").is_not_null())
        .with_columns(top=(pl.col("cls") == "op") & ~pl.col("under_op"))
        .group_by("step")
        .agg(
            top_ops=(pl.col("top")).sum().cast(pl.UInt32),
            all_ops=(pl.col("cls") == "op").sum().cast(pl.UInt32),
            dispatch_ns=pl.col("dur_ns").filter(pl.col("top")).sum(),
            op_self_ns=pl.col("self_ns").filter(pl.col("cls") == "op").sum(),
            runtime_calls=(pl.col("cls") == "runtime").sum().cast(pl.UInt32),
            runtime_ns=pl.col("dur_ns").filter(pl.col("cls") == "runtime").sum(),
        )
        .collect()
    )
    if extra_device_ns:
        dev_rows = (
            _extra_device(frames, extra_device_ns)
            .filter(pl.col("step").is_not_null())
            .group_by("step")
            .agg(device_activities=pl.len().cast(pl.UInt32), device_ns=pl.col("dev_ns").sum())
        )
    else:
        dev_rows = (
            frames.device.filter(pl.col("step").is_not_null())
            .group_by("step")
            .agg(device_activities=pl.len().cast(pl.UInt32), device_ns=pl.col("dur_ns").sum())
        )
    host = host_breakdown(ctx, frames.steps).select(
        "step",
        pl.col("framework_ns").alias("host_framework_ns"),
        pl.col("runtime_ns").alias("host_runtime_ns"),
        pl.col("sync_ns").alias("host_sync_ns"),
        pl.col("outside_ns").alias("host_outside_ns"),
    )
    steps = (
        frames.steps.select("step", "dur_ns")
        .join(op_rows, on="step", how="left")
        .join(dev_rows, on="step", how="left")
        .join(host, on="step", how="left")
        .sort("step")
        .fill_null(0)
    )
    return steps.select([pl.col(n).cast(t) for n, t in STEP_COLUMNS.items()])


def per_top_op(
    frames: TraceFrames,
    ctx: pl.DataFrame,
    n_steps: int,
    extra_device_ns: dict[int, int] | None = None,
) -> pl.DataFrame:
    """Top-level ops by name: calls per step, median dispatch, and device time per call."""
    # only the columns each part reads, before any filter: a filtered copy of every column of
    # 1.5 million ops was 126 MB at build's peak (issue 32)
    top = ctx.select("event_id", "name", "dur_ns", "cls", "under_op", "step").filter(
        (pl.col("cls") == "op") & ~pl.col("under_op") & pl.col("step").is_not_null()
    )
    # the ops under those top-level ops only: outside the steps there may be many more (a
    # 530 MB trace: 33,000 top-level ops in steps, 308,000 in all; their sums were 70 MiB)
    in_steps = (
        ctx.lazy()
        .select("event_id", "top_id", "cls", "self_ns", "start_ns")
        .filter(pl.col("top_id").is_in(top["event_id"].implode()))
        .collect()
    )
    kernels = (
        frames.links.filter(pl.col("kind") == "op->device")
        .join(frames.device.select(pl.col("event_id").alias("dst_id"), "dur_ns"), on="dst_id")
        .select(pl.col("src_id").alias("event_id"), pl.col("dur_ns").alias("dev_ns"))
    )
    if extra_device_ns:
        kernels = pl.concat([kernels, _extra_device(frames, extra_device_ns).drop("step")])
    # Device time of a top-level op includes what its nested ops launched.
    dev_by_top = (
        kernels.join(in_steps.select("event_id", "top_id"), on="event_id")
        .group_by("top_id")
        .agg(pl.col("dev_ns").sum(), pl.len().alias("device_activities"))
    )
    # Per call: framework self time and runtime-call time of the op's whole subtree, and the
    # launch latency (device start - runtime call start) of what it launched.
    subtree = in_steps.group_by("top_id").agg(
        fw_ns=pl.col("self_ns").filter(pl.col("cls") != "runtime").sum(),
        rt_ns=pl.col("self_ns").filter(pl.col("cls") == "runtime").sum(),
    )
    launches = (
        frames.links.select("kind", "src_id", "dst_id")
        .filter(pl.col("kind") == "runtime->device")
        .join(
            in_steps.select(pl.col("event_id").alias("src_id"), "start_ns", "top_id"), on="src_id"
        )
        .join(
            frames.device.select(
                pl.col("event_id").alias("dst_id"), pl.col("start_ns").alias("dev_start")
            ),
            on="dst_id",
        )
        .group_by("top_id")
        .agg(latency_ns=(pl.col("dev_start") - pl.col("start_ns")).median())
    )
    per = (
        top.join(dev_by_top, left_on="event_id", right_on="top_id", how="left")
        .join(subtree, left_on="event_id", right_on="top_id", how="left")
        .join(launches, left_on="event_id", right_on="top_id", how="left")
        .with_columns(pl.col("dev_ns", "device_activities", "fw_ns", "rt_ns").fill_null(0))
    )
    steps = max(n_steps, 1)
    return (
        per.group_by("name", maintain_order=True)
        .agg(
            calls=pl.len(),
            dispatch_median_us=pl.col("dur_ns").median() / 1000,
            dispatch_p90_us=pl.col("dur_ns").quantile(0.9, "nearest") / 1000,
            self_cpu_median_us=pl.col("fw_ns").median() / 1000,
            runtime_median_us=pl.col("rt_ns").median() / 1000,
            launch_latency_median_us=pl.col("latency_ns").median() / 1000,
            device_median_us=pl.col("dev_ns").median() / 1000,
            device_activities=pl.col("device_activities").sum(),
        )
        .with_columns(calls_per_step=pl.col("calls") / steps)
    )


def analyse(loaded: LoadedSource, *, figures: bool = True) -> ImplementationAnalysis:
    """Compute one source's figures from its frames and Neuron device time (loaded by
    :func:`nprof_report.parse.load_sources` or :func:`~nprof_report.parse.load_source`).

    ``figures`` false: only what ``diff`` and ``check`` read (the steps, their distribution,
    the gaps and the op series); key_averages, top ops, dispatch samples, timeline and chains
    are left empty (on the 530 MB trace, key_averages alone took 100 MiB above the rest)."""
    source = loaded.source
    frames, extra = loaded.frames, loaded.neuron_device_ns
    # first, as ``ops`` does: its working memory comes before the figures' results are held,
    # not on top of them (the peak of ``build`` on a 530 MB trace, issue 32); names as the
    # trace's Categorical: a long name is then held once, not once more here
    averages = (
        key_averages(frames, extra).with_columns(pl.col("name").cast(pl.Categorical))
        if figures
        else pl.DataFrame()
    )
    ctx = op_context(frames.ops, frames.links, frames.steps)
    steps = per_step(frames, ctx, extra)
    notes = list(frames.notes) + loaded.notes
    if steps.is_empty():
        notes.append(f"{source.label}: the trace holds no events in a step; step figures are empty")
    step_time = distribution([d / 1000 for d in steps["dur_ns"].to_list()])
    busy = (
        Busy.of(loaded.neuron_busy)
        if loaded.neuron_busy
        else merged_columns(frames.device["start_ns"], frames.device["end_ns"])
    )
    copy_rows = frames.device.filter(pl.col("cat") == "gpu_memcpy")
    copies = list(zip(copy_rows["start_ns"].to_list(), copy_rows["end_ns"].to_list()))
    links = frames.links.group_by("kind", "method").len()
    gaps = device_gaps(ctx, frames.steps, busy, copies, loaded.neuron_loads)
    # first of the figures: its Python objects at their peak (100 MB for a trace of 100,000 op
    # names) fill memory the ones after it reuse, instead of coming on top of them
    profile = diff_profile(frames, steps, busy, gaps, extra, source.implementation)
    return ImplementationAnalysis(
        label=source.label,
        trace_path=str(source.trace),
        meta=frames.meta,
        implementation=source.implementation,
        steps=steps,
        key_averages=averages,
        top_ops=per_top_op(frames, ctx, steps.height, extra) if figures else pl.DataFrame(),
        dispatch_samples_us=[
            d / 1000
            for d in ctx.lazy()
            .filter((pl.col("cls") == "op") & ~pl.col("under_op") & pl.col("step").is_not_null())
            .select("dur_ns")
            .collect()
            .to_series()
            .to_list()
        ]
        if figures
        else [],
        gaps=gaps,
        timeline=timeline(ctx, frames, busy) if figures else [],
        chains=op_chains(frames, ctx, extra) if figures else [],
        step_start_ns=dict(zip(frames.steps["step"].to_list(), frames.steps["start_ns"].to_list())),
        step_time=step_time,
        links_by_method={
            f"{k} ({m})": int(n)
            for k, m, n in zip(
                links["kind"].to_list(), links["method"].to_list(), links["len"].to_list()
            )
        },
        has_device=frames.device.height > 0 or bool(extra),
        device_source=loaded.device_source,
        neuron=[figures for _, figures in loaded.neuron],
        notes=notes,
        diff_profile=profile,
        step_rule=frames.step_rule,
    )

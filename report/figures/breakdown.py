"""Where step time goes: the host breakdown, device idle gaps and their causes, timelines, op chains.

Host breakdown (exclusive, adds up to the step time, because self times of a nesting tree add up
to its root's duration):

==========================  ============================================================
component                   events (self time, inside the step)
==========================  ============================================================
framework dispatch          ``cpu_op``, nested annotations and Python frames
runtime calls               runtime/driver calls made inside a framework op (launches)
waiting on the device       runtime calls outside any op (the loop's synchronize)
outside ops                 the step annotation's own time: Python between ops, prof.step()
==========================  ============================================================

Device idle gaps are the holes between the merged device-busy intervals of a step (Kineto device
activities, or Neuron hardware executions). The cause of a gap is the host activity that overlaps
it most: a framework op (*host dispatch*), a runtime call inside an op (*runtime call*), a
runtime call outside ops (*synchronization*), a copy activity ending the gap (*transfer*), a
Neuron load (*compilation or loading*), else *host outside ops*.
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np
import polars as pl

from nprof_report.parse import TraceFrames
from nprof_report.report.figures.records import cut_text
from nprof_report.report.figures.summary_types import Chain, TimelineBar

GAP_CAUSES = (
    "host dispatch",
    "runtime call",
    "synchronization",
    "transfer",
    "compilation or loading",
    "host outside ops",
)


def op_context(ops: pl.DataFrame) -> pl.DataFrame:
    """Add ``under_op`` (an ``op`` is among the ancestors) and ``top_id`` (outermost op, or null)."""
    order = ops.sort("depth")
    cls = dict(zip(order["event_id"].to_list(), order["cls"].to_list()))
    under: dict[int, bool] = {}
    top: dict[int, int | None] = {}
    for eid, parent in zip(order["event_id"].to_list(), order["parent_id"].to_list()):
        if parent is None or parent not in under:
            under[eid] = False
            top[eid] = eid if cls[eid] == "op" else None
            continue
        under[eid] = cls[parent] == "op" or under[parent]
        top[eid] = top[parent] if top[parent] is not None else (eid if cls[eid] == "op" else None)
    context = pl.DataFrame(
        {
            "event_id": list(under),
            "under_op": list(under.values()),
            "top_id": [top[e] for e in under],
        },
        schema={"event_id": pl.Int64, "under_op": pl.Boolean, "top_id": pl.Int64},
    )
    return ops.join(context, on="event_id", how="left", maintain_order="left")


def main_thread(ctx: pl.DataFrame) -> pl.DataFrame:
    """Events of each step on the thread that dispatched most of its top-level ops.

    Other threads (a driver's stream track, helper threads) run concurrently, so their time does
    not add up inside the step.
    """
    inside = ctx.filter(pl.col("step").is_not_null())
    tops = inside.filter((pl.col("cls") == "op") & ~pl.col("under_op"))
    main = (
        tops.group_by("step", "thread")
        .agg(pl.col("dur_ns").sum())
        .sort(["step", "dur_ns", "thread"], descending=[False, True, False])
        .unique("step", keep="first")
        .select("step", "thread")
    )
    return inside.join(main, on=["step", "thread"])


def host_breakdown(ctx: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Per step: ``framework_ns``, ``runtime_ns``, ``sync_ns``, ``outside_ns`` (sum = ``dur_ns``)."""
    inside = main_thread(ctx)
    is_step = (pl.col("cls") == "annotation") & pl.col("name").cat.starts_with("ProfilerStep#")
    rows = inside.group_by("step").agg(
        framework_ns=pl.col("self_ns").filter(~is_step & (pl.col("cls") != "runtime")).sum(),
        runtime_ns=pl.col("self_ns")
        .filter((pl.col("cls") == "runtime") & pl.col("under_op"))
        .sum(),
        sync_ns=pl.col("self_ns").filter((pl.col("cls") == "runtime") & ~pl.col("under_op")).sum(),
    )
    out = steps.select("step", "start_ns", "dur_ns").join(rows, on="step", how="left").fill_null(0)
    return out.with_columns(
        outside_ns=pl.col("dur_ns")
        - pl.col("framework_ns")
        - pl.col("runtime_ns")
        - pl.col("sync_ns")
    ).sort("step")


def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Union of intervals, sorted."""
    merged: list[tuple[int, int]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


def device_gaps(
    ctx: pl.DataFrame,
    steps: pl.DataFrame,
    busy: list[tuple[int, int]],
    copies: list[tuple[int, int]],
    loads: list[tuple[int, int]],
) -> pl.DataFrame:
    """Device idle gaps inside each step with their cause (``step, start_ns, dur_ns, cause``)."""
    host = main_thread(ctx).filter(~pl.col("name").cat.starts_with("ProfilerStep#"))
    kinds = host.select(
        "start_ns",
        "end_ns",
        kind=pl.when(pl.col("cls") == "runtime")
        .then(
            pl.when(pl.col("under_op"))
            .then(pl.lit("runtime call"))
            .otherwise(pl.lit("synchronization"))
        )
        .otherwise(pl.lit("host dispatch")),
    )
    merged = merge_intervals(busy)
    busy_starts = [s for s, _ in merged]
    busy_ends = [e for _, e in merged]
    gap_step: list[int] = []
    gap_start: list[int] = []
    gap_end: list[int] = []
    for step, s0, e0 in zip(
        steps["step"].to_list(), steps["start_ns"].to_list(), steps["end_ns"].to_list()
    ):
        # the busy intervals that reach into the step (disjoint and sorted, so by bisection)
        lo, hi = bisect.bisect_right(busy_ends, s0), bisect.bisect_left(busy_starts, e0)
        inside = [(max(s, s0), min(e, e0)) for s, e in merged[lo:hi]]
        if not inside:
            continue
        edges = [s0, *[x for iv in inside for x in iv], e0]
        for gs, ge in zip(edges[0::2], edges[1::2]):
            if ge > gs:
                gap_step.append(step)
                gap_start.append(gs)
                gap_end.append(ge)
    starts = np.array(gap_start, dtype=np.int64)
    ends = np.array(gap_end, dtype=np.int64)
    weight = {
        kind: _overlap_sums(
            part["start_ns"].to_numpy().astype(np.int64),
            part["end_ns"].to_numpy().astype(np.int64),
            starts,
            ends,
        ).tolist()
        for (kind,), part in kinds.group_by("kind")
    }
    none = [0] * len(gap_start)
    copy_ends = {e for _, e in copies}
    causes = [
        _cause(gs, ge, sync, runtime, dispatch, copy_ends, loads)
        for gs, ge, sync, runtime, dispatch in zip(
            gap_start,
            gap_end,
            weight.get("synchronization", none),
            weight.get("runtime call", none),
            weight.get("host dispatch", none),
        )
    ]
    return pl.DataFrame(
        {"step": gap_step, "start_ns": gap_start, "dur_ns": (ends - starts), "cause": causes},
        schema={"step": pl.Int32, "start_ns": pl.Int64, "dur_ns": pl.Int64, "cause": pl.String},
    )


def _overlap(a0: int, a1: int, b0: int, b1: int) -> int:
    return max(0, min(a1, b1) - max(a0, b0))


def _overlap_sums(starts: np.ndarray, ends: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For each query [a[k], b[k]), the summed overlap of the intervals [starts, ends) with it.

    That sum is the integral over [a, b) of how many intervals cover each instant, ``F(b) -
    F(a)`` with ``F`` the integral from the first interval's start: piecewise linear, with a
    kink at each start and end. Intervals may nest and overlap. (A loop over every interval for
    every gap took hours on 100,000 ops.)
    """
    points = np.concatenate([starts, ends])
    delta = np.concatenate([np.ones_like(starts), -np.ones_like(ends)])
    order = np.argsort(points, kind="stable")
    points, delta = points[order], delta[order]
    knots, first = np.unique(points, return_index=True)
    if knots.size == 0:
        return np.zeros_like(a)
    depth = np.cumsum(np.add.reduceat(delta, first))  # intervals covering [knots[k], knots[k+1])
    integral = np.concatenate([[0], np.cumsum(depth[:-1] * np.diff(knots))])  # F(knots[k])

    def f(x: np.ndarray) -> np.ndarray:
        k = np.searchsorted(knots, x, side="right") - 1
        at = np.clip(k, 0, None)
        return np.where(k < 0, 0, integral[at] + depth[at] * (x - knots[at]))

    result: np.ndarray = f(b) - f(a)
    return result


def _cause(
    gs: int,
    ge: int,
    sync: int,
    runtime: int,
    dispatch: int,
    copy_ends: set[int],
    loads: list[tuple[int, int]],
) -> str:
    """The cause of the gap [gs, ge), from the summed overlaps of each kind of host activity."""
    if any(_overlap(gs, ge, s, e) for s, e in loads):
        return "compilation or loading"
    # Runtime calls sit inside ops: a runtime overlap is the more specific cause.
    if sync * 2 >= ge - gs:
        return "synchronization"
    if runtime * 2 >= ge - gs:
        return "runtime call"
    if dispatch:
        return "host dispatch"
    return "transfer" if ge in copy_ends else "host outside ops"


def median_step(steps: pl.DataFrame) -> int | None:
    """The step whose duration is the median (the lower middle for an even count)."""
    if steps.is_empty():
        return None
    ordered = steps.sort(["dur_ns", "step"])
    return int(ordered["step"][(ordered.height - 1) // 2])


MAX_TIMELINE_BARS = 400


def timeline(
    ctx: pl.DataFrame, frames: TraceFrames, busy: list[tuple[int, int]]
) -> list[TimelineBar]:
    """Bars of the median step: framework ops by nesting level, runtime calls, device activity.

    Each bar is ``{lane, start_us, dur_us, label}`` with times relative to the step's start.
    """
    step = median_step(frames.steps)
    if step is None:
        return []
    row = frames.steps.filter(pl.col("step") == step).row(0, named=True)
    s0, e0 = row["start_ns"], row["end_ns"]
    host = main_thread(ctx).filter(
        (pl.col("step") == step) & ~pl.col("name").cat.starts_with("ProfilerStep#")
    )
    bars: list[TimelineBar] = []
    if not host.is_empty():
        base = int(host["depth"].min())  # type: ignore[arg-type]
        for r in host.filter(pl.col("cls") != "runtime").iter_rows(named=True):
            level = min(r["depth"] - base, 2)
            bars.append(_bar(f"framework L{level}", r, s0))
    runtime = ctx.filter((pl.col("step") == step) & (pl.col("cls") == "runtime"))
    bars += [_bar("runtime", r, s0) for r in runtime.iter_rows(named=True)]
    for s, e in merge_intervals([(s, e) for s, e in busy if e > s0 and s < e0]):
        bars.append(
            {"lane": "device", "start_us": (s - s0) / 1000, "dur_us": (e - s) / 1000, "label": ""}
        )
    bars.sort(key=lambda b: -b["dur_us"])
    return sorted(bars[:MAX_TIMELINE_BARS], key=lambda b: (b["lane"], b["start_us"]))


def _bar(lane: str, r: dict[str, Any], s0: int) -> TimelineBar:
    return {
        "lane": lane,
        "start_us": (r["start_ns"] - s0) / 1000,
        "dur_us": r["dur_ns"] / 1000,
        "label": cut_text(r["name"]),  # a chart's label: a name of any length is not kept whole
    }


def op_chains(
    frames: TraceFrames, ctx: pl.DataFrame, extra_device_ns: dict[int, int], limit: int = 5
) -> list[Chain]:
    """The op -> runtime -> device chain of the top-level ops with the most device time.

    Per op name: calls, device time per call, and the runtime calls and device activities one
    call leads to (names with count per call and mean duration).
    """
    tops = ctx.filter((pl.col("cls") == "op") & ~pl.col("under_op") & pl.col("step").is_not_null())
    if tops.is_empty():
        return []
    # names stay Categorical (one copy of a long name, in the trace's categories) until chosen
    top_names = tops.select(pl.col("event_id").alias("top_id"), "name")
    tops_of = ctx.select(pl.col("event_id").alias("src_id"), "top_id").join(top_names, on="top_id")
    # (op name, device activity name, duration) of what each top-level op led to
    dev = (
        frames.links.filter(pl.col("kind") == "op->device")
        .join(
            frames.device.select(
                pl.col("event_id").alias("dst_id"),
                pl.col("name").cast(pl.String).alias("part"),
                "dur_ns",
            ),
            on="dst_id",
        )
        .join(tops_of, on="src_id")
        .select("name", "part", "dur_ns")
    )
    if extra_device_ns:
        extra = pl.DataFrame(
            {"src_id": list(extra_device_ns), "dur_ns": list(extra_device_ns.values())},
            schema={"src_id": pl.Int64, "dur_ns": pl.Int64},
        ).join(tops_of, on="src_id")
        dev = pl.concat(
            [dev, extra.select("name", pl.lit("Neuron hardware execution").alias("part"), "dur_ns")]
        )
    calls = top_names.group_by("name").len()
    per_name = calls.join(
        dev.group_by("name").agg(pl.col("dur_ns").sum()), on="name", how="left"
    ).fill_null(0)
    # only names that can rank among the first `limit` are made text: a value more than 0.001
    # below the limit-th largest rounds (to 3 decimals) below it
    per_call = per_name["dur_ns"] / per_name["len"] / 1000
    if len(per_call) > limit:
        floor = per_call.sort(descending=True)[limit - 1] - 0.001
        per_name = per_name.filter(per_call >= floor)
    ranked = sorted(
        (
            (round(device_ns / n / 1000, 3), name, n)
            for name, n, device_ns in per_name.select("name", "len", "dur_ns").iter_rows()
        ),
        key=lambda r: (-r[0], r[1]),
    )[:limit]
    chosen = [name for _, name, _ in ranked]
    runtime = (
        ctx.filter(pl.col("cls") == "runtime")
        .select("top_id", pl.col("name").cast(pl.String).alias("part"), "dur_ns")
        .join(top_names.filter(pl.col("name").is_in(chosen)), on="top_id")
    )
    rt = _parts(runtime)
    devs = _parts(dev.filter(pl.col("name").is_in(chosen)))

    def describe(parts: dict[str, list[int]], n: int) -> str:
        return (
            "; ".join(
                f"{name} ×{len(d) / n:g} ({sum(d) / len(d) / 1000:.3f} µs)"
                for name, d in sorted(parts.items())
            )
            or "–"
        )

    return [
        {
            "op": name,
            "calls": n,
            "device_us_per_call": device_us,
            "runtime": describe(rt.get(name, {}), n),
            "device": describe(devs.get(name, {}), n),
        }
        for device_us, name, n in ranked
    ]


def _parts(frame: pl.DataFrame) -> dict[str, dict[str, list[int]]]:
    """``name, part, dur_ns`` rows as {op name: {part name: [durations]}}."""
    out: dict[str, dict[str, list[int]]] = {}
    for name, part, dur in frame.select("name", "part", "dur_ns").iter_rows():
        out.setdefault(name, {}).setdefault(part, []).append(dur)
    return out

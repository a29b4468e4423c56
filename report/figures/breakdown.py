"""Where step time goes: the host breakdown, device idle gaps and their causes, timelines, op chains.

Host breakdown: each instant of a step, on the thread that dispatched its ops, belongs to exactly
one part, that of the innermost event running then (the one started last; of two that started
together, the shorter), so the parts are never negative and add up to the step's duration
whatever overlaps the trace holds (a runtime call that outlasts the op that made it, events that
run past the step's end):

==========================  ============================================================
part                        instants whose innermost event is
==========================  ============================================================
framework dispatch          a ``cpu_op``, a nested annotation or a Python frame
runtime calls               a runtime/driver call made by a framework op (nested in one, or
                            linked to one by ``External id``): a launch
waiting on the device       a runtime call no op made (the loop's synchronize)
outside ops                 none: the step annotation's own time, Python between ops, prof.step()
==========================  ============================================================

The step's own annotation (``ProfilerStep#N``, or the user annotation that marks the steps) is
no part: its instants are *outside ops*. Where the events nest properly, each part is the sum of
the events' self times.

Device idle gaps are the holes between the merged device-busy intervals of a step (Kineto device
activities, or Neuron hardware executions). The cause of a gap is the host activity that overlaps
it most: a framework op (*host dispatch*), a runtime call made by an op (*runtime call*), a
runtime call outside ops (*synchronization*), a copy activity ending the gap (*transfer*), a
Neuron load (*compilation or loading*), else *host outside ops*.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from nprof_report.parse import TraceFrames, rows_of
from nprof_report.report.figures.records import LABEL_CHARS, cut_text
from nprof_report.report.figures.summary_types import Chain, TimelineBar

GAP_CAUSES = (
    "host dispatch",
    "runtime call",
    "synchronization",
    "transfer",
    "compilation or loading",
    "host outside ops",
)


def op_context(
    ops: pl.DataFrame, links: pl.DataFrame | None = None, steps: pl.DataFrame | None = None
) -> pl.DataFrame:
    """Add ``under_op`` (an ``op`` is among the ancestors), ``top_id`` (outermost op, or null)
    and ``launch`` (a runtime call made by a framework op: nested in one, or linked by an
    ``op->runtime`` link of ``links`` to an op or to a scope inside one).

    A step's own event recorded as an op (``ProfilerStep#N`` in the 2021 layout, category
    ``Operator``) is an annotation here, as later layouts record it: the ops of the step are
    not nested in an op (``key_averages`` keeps it an op, as PyTorch does).
    """
    if steps is not None and steps.height and "name" in steps.columns:
        # only ops named like a step can be one: the join is over those few rows, not all ops
        own = (
            ops.filter((pl.col("cls") == "op") & pl.col("name").is_in(steps["name"].implode()))
            .select("event_id", pl.col("name").cast(pl.String), "start_ns", "end_ns")
            .join(steps.select("name", "start_ns", "end_ns"), on=["name", "start_ns", "end_ns"])
            .get_column("event_id")
        )
        if own.len():
            ops = ops.with_columns(
                cls=pl.when(pl.col("event_id").is_in(own.implode()))
                .then(pl.lit("annotation", pl.Categorical()))
                .otherwise(pl.col("cls"))
            )
    # the new columns beside the frame's own (a join would copy every column: 150 MB at 1.5
    # million ops, held through the analysis)
    eid = ops["event_id"].to_numpy()
    is_op = (ops["cls"] == "op").fill_null(False).to_numpy()
    under, top_id = _context(ops, eid, is_op)
    by_op = pl.lit(False)
    if links is not None and links.height:
        # the calls linked to an op or to a scope inside one, found by row (a set of the 1.5
        # million ids of such ops took 40 MiB at the peak of ``build``; issue 32)
        op_rt = links.filter(pl.col("kind") == "op->runtime")
        rows = rows_of(eid, op_rt["src_id"].fill_null(-1).to_numpy())
        made = (rows >= 0) & (is_op | under)[np.maximum(rows, 0)]
        by_op = pl.col("event_id").is_in(op_rt["dst_id"].filter(pl.Series(made)).implode())
    return ops.with_columns(pl.Series("under_op", under, dtype=pl.Boolean), top_id).with_columns(
        launch=(pl.col("cls") == "runtime") & (pl.col("under_op") | by_op)
    )


def _context(ops: pl.DataFrame, eid: np.ndarray, is_op: np.ndarray) -> tuple[np.ndarray, pl.Series]:
    """``under_op`` and ``top_id`` of every op in frame order (``eid``: their event ids,
    ``is_op``: which are framework ops), a depth level at a time in NumPy (Python dicts of 1.5
    million ops took 460 MB at the peak of ``build``); an op whose parent is not among ``ops``
    or not shallower is at the top, as it would be met first."""
    n = len(eid)
    under = np.zeros(n, dtype=bool)
    top = np.full(n, -1, dtype=np.int64)
    if n:
        depth = ops["depth"].to_numpy()
        pos = rows_of(eid, ops["parent_id"].fill_null(-1).to_numpy())
        has = pos >= 0
        np.maximum(pos, 0, out=pos)
        has &= depth[pos] < depth
        order = np.argsort(depth, kind="stable")
        for level in np.split(order, np.flatnonzero(np.diff(depth[order])) + 1):
            p, h = pos[level], has[level]
            under[level] = h & (is_op[p] | under[p])
            inherited = np.where(h, top[p], -1)
            top[level] = np.where(inherited >= 0, inherited, np.where(is_op[level], eid[level], -1))
    top_id = pl.Series("top_id", top, dtype=pl.Int64)
    return under, top_id.set(top_id < 0, None)


def main_thread(ctx: pl.DataFrame) -> pl.LazyFrame:
    """Events of each step on the thread that dispatched most of its top-level ops.

    Other threads (a driver's stream track, helper threads) run concurrently, so their time does
    not add up inside the step. Lazy: the caller's ``select`` and ``filter`` reach the frame
    before anything is copied (a filtered copy of every column of 1.5 million ops was 120 MB at
    ``build``'s peak, made three times; issue 32).
    """
    inside = ctx.lazy().filter(pl.col("step").is_not_null())
    tops = inside.filter((pl.col("cls") == "op") & ~pl.col("under_op"))
    main = (
        tops.group_by("step", "thread")
        .agg(pl.col("dur_ns").sum())
        .sort(["step", "dur_ns", "thread"], descending=[False, True, False])
        .unique("step", keep="first")
        .select("step", "thread")
    )
    return inside.join(main, on=["step", "thread"])


def host_events(ctx: pl.DataFrame, steps: pl.DataFrame) -> pl.LazyFrame:
    """:func:`main_thread`'s events without the steps' own annotations (``ProfilerStep#N``, or
    the user annotation whose instances are the steps: same name, start and end as its step).
    Lazy, as :func:`main_thread`."""
    inside = main_thread(ctx)
    is_step = pl.col("name").cast(pl.String).str.starts_with("ProfilerStep#")
    if "name" in steps.columns:
        keys = steps.select("step", pl.col("name").alias("_name"), "start_ns", "end_ns").unique()
        own = (
            inside.select(
                "event_id", "step", "start_ns", "end_ns", _name=pl.col("name").cast(pl.String)
            )
            .join(keys.lazy(), on=["step", "_name", "start_ns", "end_ns"], how="semi")
            .select("event_id")
            .collect()
            .to_series()
        )
        is_step = is_step | pl.col("event_id").is_in(own.implode())
    return inside.filter(~((pl.col("cls") == "annotation") & is_step))


def _launch(ctx: pl.DataFrame) -> pl.Expr:
    """A runtime call made by an op (:func:`op_context`'s ``launch``, else nested in an op)."""
    if "launch" in ctx.columns:
        return pl.col("launch")
    return (pl.col("cls") == "runtime") & pl.col("under_op")


FRAMEWORK, RUNTIME, SYNC, OUTSIDE = range(4)


def host_breakdown(ctx: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Per step: ``framework_ns``, ``runtime_ns``, ``sync_ns``, ``outside_ns`` (sum = ``dur_ns``,
    none negative): each instant of the step goes to the part of its innermost event (module
    docstring)."""
    host = host_events(ctx, steps)
    kind = (
        pl.when(pl.col("cls") != "runtime")
        .then(pl.lit(FRAMEWORK))
        .when(_launch(ctx))
        .then(pl.lit(RUNTIME))
        .otherwise(pl.lit(SYNC))
    )
    # of equal events the later in the file is the inner one, as PyTorch's stable sort nests it
    events = (
        host.select("step", "start_ns", "end_ns", "event_id", kind=kind.cast(pl.Int8))
        .sort(["step", "start_ns", "end_ns", "event_id"], descending=[False, False, True, False])
        .collect()
    )
    bounds = steps.select("step", "start_ns", "end_ns")
    sums = exclusive_parts(
        events["step"].to_list(),
        events["start_ns"].to_list(),
        events["end_ns"].to_list(),
        events["kind"].to_list(),
        dict(
            zip(
                bounds["step"].to_list(),
                zip(bounds["start_ns"].to_list(), bounds["end_ns"].to_list()),
            )
        ),
    )
    rows = [(step, *parts) for step, parts in sums.items()]
    return (
        pl.DataFrame(
            rows,
            schema={
                "step": pl.Int32,
                "framework_ns": pl.Int64,
                "runtime_ns": pl.Int64,
                "sync_ns": pl.Int64,
                "outside_ns": pl.Int64,
            },
            orient="row",
        )
        .join(steps.select("step", "start_ns", "dur_ns"), on="step")
        .sort("step")
    )


def exclusive_parts(
    step: list[int],
    start: list[int],
    end: list[int],
    kind: list[int],
    bounds: dict[int, tuple[int, int]],
) -> dict[int, list[int]]:
    """Per step of ``bounds`` (``step: (start, end)``), the time of each part (``FRAMEWORK``,
    ``RUNTIME``, ``SYNC``, ``OUTSIDE``): each instant of ``[start, end)`` goes to the innermost
    event covering it, the one started last, else to ``OUTSIDE``.

    The events (``step``, ``start``, ``end``, ``kind``) are sorted by step, then by start, then
    by end descending (so of two that start together the shorter one is inner). The events
    covering an instant are a stack in start order: the innermost is the top once every event
    that ended is popped, so one pass does it (linear in the events).
    """
    out = {s: [0, 0, 0, 0] for s in bounds}
    n = len(step)
    i = 0
    for s, (s0, e0) in sorted(bounds.items(), key=lambda b: b[0]):
        acc = out[s]
        while i < n and step[i] < s:
            i += 1
        stack: list[int] = []
        t = s0
        while True:
            nxt = e0
            if i < n and step[i] == s:
                nxt = min(max(start[i], s0), e0)
            # the instants [t, nxt) go to the stack's top while it runs
            while t < nxt and stack:
                top = stack[-1]
                stop = min(end[top], nxt)
                if stop > t:
                    acc[kind[top]] += stop - t
                    t = stop
                if end[top] <= t:
                    stack.pop()
            if t < nxt:
                acc[OUTSIDE] += nxt - t
                t = nxt
            if i < n and step[i] == s:
                if min(end[i], e0) > t:  # a later start, clipped to the step, with some length
                    stack.append(i)
                i += 1
                continue
            break
    return out


def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Union of intervals, sorted."""
    merged: list[tuple[int, int]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


@dataclass(frozen=True)
class Busy:
    """Where the device is busy: sorted, disjoint intervals ``[starts[i], ends[i])`` in ns, as
    two arrays (the 230,000 intervals of a 530 MB trace were 30 MB of Python pairs, held through
    the analysis and copied by each reader; issue 32)."""

    starts: np.ndarray
    ends: np.ndarray

    @staticmethod
    def of(intervals: list[tuple[int, int]]) -> Busy:
        """The union of ``intervals`` (:func:`merge_intervals`)."""
        merged = merge_intervals(intervals)
        return Busy(
            np.array([s for s, _ in merged], dtype=np.int64),
            np.array([e for _, e in merged], dtype=np.int64),
        )

    def __len__(self) -> int:
        return len(self.starts)

    def overlapping(self, start: int, end: int) -> list[tuple[int, int]]:
        """The intervals that reach into ``[start, end)``, whole (by two binary searches)."""
        lo = int(np.searchsorted(self.ends, start, side="right"))
        hi = int(np.searchsorted(self.starts, end, side="left"))
        return list(zip(self.starts[lo:hi].tolist(), self.ends[lo:hi].tolist()))


def merged_columns(starts: pl.Series, ends: pl.Series) -> Busy:
    """The union of the intervals ``[starts, ends)`` given as columns, in NumPy: no Python pair
    is made of an interval that merges into another."""
    if starts.is_empty():
        return Busy(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    s, e = starts.to_numpy(), ends.to_numpy()
    order = np.lexsort((e, s))
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    # a new interval starts where its start lies beyond everything before it
    first = np.flatnonzero(np.concatenate([[True], s[1:] > reach[:-1]]))
    last = np.concatenate([first[1:] - 1, [len(s) - 1]])
    return Busy(s[first].astype(np.int64), reach[last].astype(np.int64))


def device_gaps(
    ctx: pl.DataFrame,
    steps: pl.DataFrame,
    busy: Busy,
    copies: list[tuple[int, int]],
    loads: list[tuple[int, int]],
) -> pl.DataFrame:
    """Device idle gaps inside each step with their cause (``step, start_ns, dur_ns, cause``)."""
    host = host_events(ctx, steps)
    kinds = host.select(
        "start_ns",
        "end_ns",
        kind=pl.when(pl.col("cls") == "runtime")
        .then(
            pl.when(_launch(ctx)).then(pl.lit("runtime call")).otherwise(pl.lit("synchronization"))
        )
        .otherwise(pl.lit("host dispatch")),
    ).collect()
    gap_step: list[int] = []
    gap_start: list[int] = []
    gap_end: list[int] = []
    for step, s0, e0 in zip(
        steps["step"].to_list(), steps["start_ns"].to_list(), steps["end_ns"].to_list()
    ):
        inside = [(max(s, s0), min(e, e0)) for s, e in busy.overlapping(s0, e0)]
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


def timeline(ctx: pl.DataFrame, frames: TraceFrames, busy: Busy) -> list[TimelineBar]:
    """Bars of the median step: framework ops by nesting level, runtime calls, device activity.

    Each bar is ``{lane, start_us, dur_us, label}`` with times relative to the step's start.
    """
    step = median_step(frames.steps)
    if step is None:
        return []
    row = frames.steps.filter(pl.col("step") == step).row(0, named=True)
    s0, e0 = row["start_ns"], row["end_ns"]
    host = host_events(ctx, frames.steps).filter(pl.col("step") == step).collect()
    bars: list[TimelineBar] = []
    if not host.is_empty():
        base = int(host["depth"].min())  # type: ignore[arg-type]
        for r in host.filter(pl.col("cls") != "runtime").iter_rows(named=True):
            level = min(r["depth"] - base, 2)
            bars.append(_bar(f"framework L{level}", r, s0))
    runtime = ctx.filter((pl.col("step") == step) & (pl.col("cls") == "runtime"))
    bars += [_bar("runtime", r, s0) for r in runtime.iter_rows(named=True)]
    for s, e in busy.overlapping(s0, e0):
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
        "label": cut_text(r["name"], LABEL_CHARS),  # a chart's label, not a name kept whole
    }


def op_chains(
    frames: TraceFrames, ctx: pl.DataFrame, extra_device_ns: dict[int, int], limit: int = 5
) -> list[Chain]:
    """The op -> runtime -> device chain of the top-level ops with the most device time.

    Per op name: calls, device time per call, and the runtime calls and device activities one
    call leads to (names with count per call and mean duration).
    """
    # the columns each part reads before any filter, and every name Categorical until chosen: a
    # copy of every column of 1.5 million ops, and 290,000 kernel names as text, were 57 MB at
    # the peak of build (issue 32)
    tops = ctx.select("event_id", "name", "cls", "under_op", "step").filter(
        (pl.col("cls") == "op") & ~pl.col("under_op") & pl.col("step").is_not_null()
    )
    if tops.is_empty():
        return []
    # names stay Categorical (one copy of a long name, in the trace's categories) until chosen
    top_names = tops.select(pl.col("event_id").alias("top_id"), "name")
    tops_of = ctx.select(pl.col("event_id").alias("src_id"), "top_id").join(top_names, on="top_id")
    # (op name, device activity name, duration) of what each top-level op led to
    dev = (
        frames.links.lazy()
        .filter(pl.col("kind") == "op->device")
        .select("src_id", "dst_id")
        .collect()
        .join(
            frames.device.select(
                pl.col("event_id").alias("dst_id"), pl.col("name").alias("part"), "dur_ns"
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
            [
                dev,
                extra.select(
                    "name",
                    pl.lit("Neuron hardware execution", pl.Categorical()).alias("part"),
                    "dur_ns",
                ),
            ]
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
        ctx.select("top_id", "cls", pl.col("name").alias("part"), "dur_ns")
        .filter(pl.col("cls") == "runtime")
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
    texts = frame.select(pl.col("name", "part").cast(pl.String), "dur_ns")
    for name, part, dur in texts.iter_rows():
        out.setdefault(name, {}).setdefault(part, []).append(dur)
    return out

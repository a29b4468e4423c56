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

from typing import Any

import polars as pl

from nprof_report.parse import TraceFrames

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
    host_rows = list(
        zip(kinds["start_ns"].to_list(), kinds["end_ns"].to_list(), kinds["kind"].to_list())
    )
    merged = merge_intervals(busy)
    copy_ends = {e for _, e in copies}
    rows = []
    for step, s0, e0 in zip(
        steps["step"].to_list(), steps["start_ns"].to_list(), steps["end_ns"].to_list()
    ):
        inside = [(max(s, s0), min(e, e0)) for s, e in merged if e > s0 and s < e0]
        if not inside:
            continue
        edges = [s0, *[x for iv in inside for x in iv], e0]
        for gs, ge in zip(edges[0::2], edges[1::2]):
            if ge <= gs:
                continue
            rows.append(
                {
                    "step": step,
                    "start_ns": gs,
                    "dur_ns": ge - gs,
                    "cause": _cause(gs, ge, host_rows, copy_ends, loads),
                }
            )
    return pl.DataFrame(
        rows,
        schema={"step": pl.Int32, "start_ns": pl.Int64, "dur_ns": pl.Int64, "cause": pl.String},
    )


def _overlap(a0: int, a1: int, b0: int, b1: int) -> int:
    return max(0, min(a1, b1) - max(a0, b0))


def _cause(
    gs: int,
    ge: int,
    host: list[tuple[int, int, str]],
    copy_ends: set[int],
    loads: list[tuple[int, int]],
) -> str:
    if any(_overlap(gs, ge, s, e) for s, e in loads):
        return "compilation or loading"
    weight: dict[str, int] = {}
    for s, e, kind in host:
        ov = _overlap(gs, ge, s, e)
        if ov:
            weight[kind] = weight.get(kind, 0) + ov
    # Runtime calls sit inside ops: a runtime overlap is the more specific cause.
    for kind in ("synchronization", "runtime call"):
        if weight.get(kind, 0) * 2 >= ge - gs:
            return kind
    if weight.get("host dispatch"):
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
) -> list[dict[str, Any]]:
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
    bars: list[dict[str, Any]] = []
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


def _bar(lane: str, r: dict[str, Any], s0: int) -> dict[str, Any]:
    return {
        "lane": lane,
        "start_us": (r["start_ns"] - s0) / 1000,
        "dur_us": r["dur_ns"] / 1000,
        "label": r["name"],
    }


def op_chains(
    frames: TraceFrames, ctx: pl.DataFrame, extra_device_ns: dict[int, int], limit: int = 5
) -> list[dict[str, Any]]:
    """The op -> runtime -> device chain of the top-level ops with the most device time.

    Per op name: calls, device time per call, and the runtime calls and device activities one
    call leads to (names with count per call and mean duration).
    """
    tops = ctx.filter((pl.col("cls") == "op") & ~pl.col("under_op") & pl.col("step").is_not_null())
    if tops.is_empty():
        return []
    name_of_top = dict(zip(tops["event_id"].to_list(), tops["name"].to_list()))
    calls = tops.group_by("name").len()
    calls_of = dict(zip(calls["name"].to_list(), calls["len"].to_list()))
    top_of = dict(zip(ctx["event_id"].to_list(), ctx["top_id"].to_list()))

    runtime = ctx.filter((pl.col("cls") == "runtime") & pl.col("top_id").is_in(list(name_of_top)))
    rt: dict[str, dict[str, list[int]]] = {}
    for tid, name, dur in zip(
        runtime["top_id"].to_list(), runtime["name"].to_list(), runtime["dur_ns"].to_list()
    ):
        rt.setdefault(name_of_top[tid], {}).setdefault(name, []).append(dur)
    dev_links = frames.links.filter(pl.col("kind") == "op->device").join(
        frames.device.select(pl.col("event_id").alias("dst_id"), "name", "dur_ns"), on="dst_id"
    )
    dev: dict[str, dict[str, list[int]]] = {}
    for src, name, dur in zip(
        dev_links["src_id"].to_list(), dev_links["name"].to_list(), dev_links["dur_ns"].to_list()
    ):
        top = top_of.get(src)
        if top in name_of_top:
            dev.setdefault(name_of_top[top], {}).setdefault(name, []).append(dur)
    for eid, ns in extra_device_ns.items():
        top = top_of.get(eid)
        if top in name_of_top:
            dev.setdefault(name_of_top[top], {}).setdefault("Neuron hardware execution", []).append(
                ns
            )

    def describe(parts: dict[str, list[int]], n: int) -> str:
        return (
            "; ".join(
                f"{name} ×{len(d) / n:g} ({sum(d) / len(d) / 1000:.3f} µs)"
                for name, d in sorted(parts.items())
            )
            or "–"
        )

    rows = []
    for name, n in calls_of.items():
        device_ns = sum(sum(d) for d in dev.get(name, {}).values())
        rows.append(
            {
                "op": name,
                "calls": n,
                "device_us_per_call": round(device_ns / n / 1000, 3),
                "runtime": describe(rt.get(name, {}), n),
                "device": describe(dev.get(name, {}), n),
            }
        )
    rows.sort(key=lambda r: (-r["device_us_per_call"], r["op"]))
    return rows[:limit]

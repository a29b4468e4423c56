"""Kineto events into nested framework ops, device activities, steps and links.

Nesting follows ``EventList._populate_cpu_children`` in ``torch/autograd/profiler_util.py``: per
thread, events sorted by ``(start, -end)``, walked with a stack; the top is popped while the new
event starts at or after its end or ends after it, so partial overlaps never nest. A runtime call
linked to an op by ``External id`` is moved onto the op's thread first, as PyTorch does.

Links (each row records the method that made it):

==============  ===========================================================================
kind            how
==============  ===========================================================================
op->runtime     ``external_id``: the runtime event's ``External id`` is an op's and that op
                encloses it (current Kineto layout); else ``enclosing``: the innermost
                ``cpu_op`` around it on the launching thread (2023 layout, where the runtime
                event's ``External id`` is only its correlation id)
runtime->device ``correlation``: equal ``args.correlation``; else ``flow``: an ``ac2g`` pair
                whose ``s`` end sits on the runtime event and ``f`` end on the device event
op->device      through the op's runtime call (method of that call's link), or, for a device
                activity with no runtime call, ``external_id`` when the trace's External ids
                are op ids
==============  ===========================================================================

Steps come from ``ProfilerStep#N`` annotations; an event belongs to the step whose interval
holds its start, by time and not by nesting, because a step annotation may sit on another
pid than the ops (formats.md 1.4). A device activity belongs to the step of its launching op.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from nprof_report.parse.classify import DEVICE_CATS, KNOWN_CATS, host_class
from nprof_report.parse.load import Trace, TraceMeta
from nprof_report.parse.schema import DEVICE, LINKS, OPS, STEPS, conform
from nprof_report.parse.stream import read_trace_stream


@dataclass(frozen=True)
class TraceFrames:
    """Every frame parse derives from one trace (schemas in :mod:`.schema`)."""

    meta: TraceMeta
    events: pl.DataFrame
    ops: pl.DataFrame
    device: pl.DataFrame
    links: pl.DataFrame
    steps: pl.DataFrame
    notes: list[str] = field(default_factory=list)


def _thread_key(pid: str | None, tid: str | None) -> str:
    return f"{pid}/{tid}"


def _nest(
    ids: list[int], threads: list[str], starts: list[int], ends: list[int]
) -> tuple[list[int | None], list[int], int]:
    """Parent index and depth of each event, and how many events partially overlap another."""
    order = sorted(range(len(ids)), key=lambda i: (threads[i], starts[i], -ends[i]))
    parent: list[int | None] = [None] * len(ids)
    depth = [0] * len(ids)
    stack: list[int] = []
    current = None
    overlaps = 0
    for i in order:
        if threads[i] != current:
            stack, current = [], threads[i]
        while stack:
            top = stack[-1]
            if starts[i] >= ends[top] or ends[i] > ends[top]:
                if starts[i] < ends[top]:
                    overlaps += 1
                stack.pop()
            else:
                parent[i] = top
                depth[i] = depth[top] + 1
                break
        stack.append(i)
    return parent, depth, overlaps


def _steps(events: pl.DataFrame) -> pl.DataFrame:
    ann = events.filter(
        (pl.col("ph") == "X")
        & (pl.col("cat") == "user_annotation")
        & pl.col("name").str.starts_with("ProfilerStep#")
    ).with_columns(step=pl.col("name").str.extract(r"^ProfilerStep#(\d+)$").cast(pl.Int32))
    ann = ann.filter(pl.col("step").is_not_null()).sort("ts_ns")
    return conform(
        ann.with_columns(
            start_ns=pl.col("ts_ns"),
            end_ns=pl.col("ts_ns") + pl.col("dur_ns"),
        ).with_columns(dur_ns=pl.col("end_ns") - pl.col("start_ns")),
        STEPS,
    )


def _assign_step(df: pl.DataFrame, steps: pl.DataFrame, time_col: str) -> pl.Series:
    """Step whose [start, end) interval holds ``time_col`` (null outside every step)."""
    if steps.is_empty() or df.is_empty():
        return pl.Series("step", [None] * len(df), dtype=pl.Int32)
    probe = df.select(pl.int_range(pl.len()).alias("_row"), pl.col(time_col).alias("_t"))
    joined = (
        probe.sort("_t")
        .join_asof(
            steps.select("start_ns", "end_ns", "step").sort("start_ns"),
            left_on="_t",
            right_on="start_ns",
            strategy="backward",
        )
        .with_columns(
            step=pl.when(pl.col("_t") < pl.col("end_ns")).then(pl.col("step")).otherwise(None)
        )
        .sort("_row")
    )
    return joined["step"].cast(pl.Int32)


def build_frames(trace: Trace) -> TraceFrames:
    """Derive ops, device activities, steps and links from a loaded trace."""
    events = trace.events
    notes = list(trace.notes)
    complete = events.filter((pl.col("ph") == "X") & pl.col("dur_ns").is_not_null())
    unknown = sorted(
        c for c in complete["cat"].drop_nulls().unique().to_list() if c not in KNOWN_CATS
    )
    if unknown:
        notes.append(
            f"{trace.meta.path.name}: unknown categories treated as CPU work: {', '.join(unknown)}"
        )
    host = complete.with_columns(
        cls=pl.col("cat").map_elements(host_class, return_dtype=pl.String)
    ).filter(pl.col("cls").is_not_null())
    device = complete.filter(pl.col("cat").is_in(list(DEVICE_CATS)))

    ids = host["event_id"].to_list()
    cls = host["cls"].to_list()
    pids = host["pid"].to_list()
    tids = host["tid"].to_list()
    starts = host["ts_ns"].to_list()
    durs = host["dur_ns"].to_list()
    ends = [s + d for s, d in zip(starts, durs)]
    ext = host["external_id"].to_list()
    threads = [_thread_key(p, t) for p, t in zip(pids, tids)]

    # A runtime call whose External id names an op that encloses it is that op's launch: move it
    # onto the op's thread (PyTorch does this before nesting).
    op_by_ext: dict[int, int] = {}
    for i, c in enumerate(cls):
        if c in ("op", "annotation") and ext[i] is not None:
            op_by_ext.setdefault(ext[i], i)
    rt_link: dict[int, tuple[int, str]] = {}
    for i, c in enumerate(cls):
        if c != "runtime" or ext[i] is None:
            continue
        j = op_by_ext.get(ext[i])
        if j is not None and cls[j] == "op" and starts[j] <= starts[i] and ends[i] <= ends[j]:
            rt_link[i] = (j, "external_id")
    with_ext = sum(1 for i, c in enumerate(cls) if c == "runtime" and ext[i] is not None)
    if 2 * len(rt_link) < with_ext:
        # 2023 layout: a runtime event's External id is its correlation id, and the few that
        # happen to match an enclosing op are coincidences.
        rt_link.clear()
    for i, (j, _) in rt_link.items():
        # PyTorch moves linked runtime calls onto the op's thread. A driver event recorded on a
        # stream track (another tid) stays there: it is not a call the op's thread made.
        if tids[i] == tids[j] or not str(host["cat"][i]).endswith("_driver"):
            threads[i] = threads[j]
    parent, depth, overlaps = _nest(ids, threads, starts, ends)
    if overlaps:
        notes.append(
            f"{trace.meta.path.name}: {overlaps} events partially overlap an event on the same "
            "thread; they are not nested (as in PyTorch), so self times around them may be off"
        )
    child_sum = [0] * len(ids)
    for i, p in enumerate(parent):
        if p is not None:
            child_sum[p] += durs[i]
    for i, c in enumerate(cls):
        if c == "runtime" and i not in rt_link:
            p = parent[i]
            while p is not None and cls[p] != "op":
                p = parent[p]
            if p is not None:
                rt_link[i] = (p, "enclosing")

    ops = pl.DataFrame(
        {
            "event_id": ids,
            "cls": cls,
            "cat": host["cat"],
            "name": host["name"],
            "pid": pids,
            "tid": tids,
            "thread": threads,
            "start_ns": starts,
            "end_ns": ends,
            "dur_ns": durs,
            "external_id": ext,
            "correlation": host["correlation"],
            "parent_id": [None if p is None else ids[p] for p in parent],
            "depth": depth,
            "self_ns": [d - s for d, s in zip(durs, child_sum)],
        },
        schema_overrides={k: v for k, v in OPS.items() if k != "step"},
    )
    steps = _steps(events)
    ops = ops.with_columns(step=_assign_step(ops, steps, "start_ns"))

    links = _links(events, ops, device, rt_link, ids)
    flows = events.filter((pl.col("cat") == "ac2g") & (pl.col("ph") == "s"))
    duplicated = flows.height - flows["flow_id"].n_unique() if flows.height else 0
    if duplicated:
        notes.append(
            f"{trace.meta.path.name}: {duplicated} ac2g flow ids occur more than once; "
            "the first occurrence was used"
        )
    device = device.with_columns(
        start_ns=pl.col("ts_ns"), end_ns=pl.col("ts_ns") + pl.col("dur_ns")
    )
    op_of_device = links.filter(pl.col("kind") == "op->device").select(
        pl.col("dst_id").alias("event_id"), pl.col("src_id").alias("_op")
    )
    device = (
        device.join(op_of_device, on="event_id", how="left")
        .join(
            ops.select(pl.col("event_id").alias("_op"), pl.col("step").alias("_op_step")),
            on="_op",
            how="left",
        )
        .with_columns(_time_step=_assign_step(device, steps, "start_ns"))
        .with_columns(step=pl.coalesce("_op_step", "_time_step"))
        .sort("event_id")
    )
    unlinked = device.filter(pl.col("_op").is_null()).height
    if unlinked:
        notes.append(
            f"{trace.meta.path.name}: {unlinked} of {device.height} device activities have no "
            "link to a framework op"
        )
    return TraceFrames(
        meta=trace.meta,
        events=events,
        ops=conform(ops, OPS),
        device=conform(device, DEVICE),
        links=links,
        steps=steps,
        notes=notes,
    )


def _links(
    events: pl.DataFrame,
    ops: pl.DataFrame,
    device: pl.DataFrame,
    rt_link: dict[int, tuple[int, str]],
    ids: list[int],
) -> pl.DataFrame:
    op_rt = pl.DataFrame(
        {
            "src_id": [ids[j] for j, _ in rt_link.values()],
            "dst_id": [ids[i] for i in rt_link],
            "kind": "op->runtime",
            "method": [m for _, m in rt_link.values()],
        },
        schema=LINKS,
    )
    runtime = ops.filter(pl.col("cls") == "runtime")
    dev = device.select("event_id", "correlation", "pid", "tid", "ts_ns", "external_id")
    by_corr = (
        runtime.filter(pl.col("correlation").is_not_null())
        .select(pl.col("event_id").alias("src_id"), "correlation")
        .unique("correlation", keep="first")
        .join(
            dev.filter(pl.col("correlation").is_not_null()).select(
                pl.col("event_id").alias("dst_id"), "correlation"
            ),
            on="correlation",
        )
        .select("src_id", "dst_id", kind=pl.lit("runtime->device"), method=pl.lit("correlation"))
    )
    flows = events.filter(pl.col("cat") == "ac2g")
    starts = flows.filter(pl.col("ph") == "s").select("flow_id", "pid", "tid", "ts_ns")
    ends = flows.filter(pl.col("ph") == "f").select("flow_id", "pid", "tid", "ts_ns")
    rt_pos = runtime.select(
        pl.col("event_id").alias("src_id"), "pid", "tid", pl.col("start_ns").alias("ts_ns")
    )
    dev_pos = dev.select(pl.col("event_id").alias("dst_id"), "pid", "tid", "ts_ns")
    by_flow = (
        starts.join(rt_pos, on=["pid", "tid", "ts_ns"])
        .select("flow_id", "src_id")
        .unique("flow_id", keep="first")
        .join(
            ends.join(dev_pos, on=["pid", "tid", "ts_ns"]).select("flow_id", "dst_id"), on="flow_id"
        )
        .select("src_id", "dst_id", kind=pl.lit("runtime->device"), method=pl.lit("flow"))
    )
    rt_dev = pl.concat([by_corr, by_flow.join(by_corr, on="dst_id", how="anti")])
    rt_dev = conform(rt_dev, LINKS)

    via_runtime = rt_dev.join(
        op_rt.select(pl.col("src_id").alias("op_id"), pl.col("dst_id").alias("src_id"), "method"),
        on="src_id",
    ).select(
        pl.col("op_id").alias("src_id"), "dst_id", kind=pl.lit("op->device"), method="method_right"
    )
    # External ids are op ids in this trace when at least one runtime call was linked by them,
    # or when there are no runtime calls at all (a backend that writes only device activities).
    ext_is_op_id = op_rt.filter(pl.col("method") == "external_id").height > 0 or runtime.is_empty()
    direct = pl.DataFrame(schema=LINKS)
    if ext_is_op_id:
        op_ids = (
            ops.filter(pl.col("cls") == "op")
            .select(pl.col("event_id").alias("src_id"), "external_id")
            .unique("external_id", keep="first")
        )
        direct = (
            dev.filter(pl.col("external_id").is_not_null())
            .join(via_runtime, left_on="event_id", right_on="dst_id", how="anti")
            .join(op_ids, on="external_id")
            .select(
                "src_id",
                pl.col("event_id").alias("dst_id"),
                kind=pl.lit("op->device"),
                method=pl.lit("external_id"),
            )
        )
    return pl.concat([op_rt, rt_dev, conform(via_runtime, LINKS), conform(direct, LINKS)])


def load_frames(path: Path) -> TraceFrames:
    """Read a trace file (streaming, bounded memory) and derive its frames."""
    return build_frames(read_trace_stream(path))

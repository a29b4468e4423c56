"""What a diff compares, per step: each op in its context, and where the step's time went.

*Op paths.* An op is identified by its name and the chain of what encloses it: framework ops,
``record_function`` scopes and ``nn.Module`` frames (``ProfilerStep#N`` and other Python frames
are left out, they differ from run to run). ``aten::mm`` under ``aten::linear`` and a bare
``aten::mm`` are two paths; the same op called twice in one context is one path with two calls.
Kernels are not part of the path, so a renamed kernel under the same op keeps its row.

Per path and step: ``calls``; host ``self``/``total`` (the ops' self time and duration, summed);
device ``self`` (activities the op launched itself, or Neuron execution time attributed to it)
and ``total`` (its whole subtree's); ``launch`` (median runtime call start -> device start of
what it launched; null without launches). The structural counts beside ``calls``, which ``check``
compares exactly (:mod:`~nprof_report.report.diff.structure`): ``runtime_calls`` (the runtime
calls the op made itself) and ``device_activities`` (the device activities it launched itself,
or its Neuron executions). Per path ``order``: the rank of its first call in the trace, so
paths can be named in the order a step runs them.

*Step parts.* Each step's duration split into parts that add up to it. With device activity in
the step: the device's busy time (*device execution*) plus its idle gaps by cause
(:func:`~nprof_report.report.figures.breakdown.device_gaps`). Without: the host breakdown (framework
dispatch, runtime calls, waiting on the device, outside ops).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from nprof_report.parse import TraceFrames
from nprof_report.report.figures.breakdown import Busy
from nprof_report.report.figures.records import cut_column
from nprof_report.report.figures.summary_types import DiffProfile

PARTS = (
    "framework dispatch",
    "runtime calls",
    "device execution",
    "device idle / waiting",
    "transfers",
    "compilation or loading",
    "outside ops",
)
_GAP_PART = {
    "host dispatch": "framework dispatch",
    "runtime call": "runtime calls",
    "synchronization": "device idle / waiting",
    "transfer": "transfers",
    "compilation or loading": "compilation or loading",
    "host outside ops": "outside ops",
}
_HOST_PART = {
    "host_framework_ns": "framework dispatch",
    "host_runtime_ns": "runtime calls",
    "host_sync_ns": "device idle / waiting",
    "host_outside_ns": "outside ops",
}
OP_SERIES = ("calls", "host_self_us", "host_total_us", "device_self_us", "device_total_us")
COUNT_SERIES = ("runtime_calls", "device_activities")
"""Per-path counts per step besides ``calls`` (summary documents written before them lack them)."""
MAX_KERNEL_NAMES = 4


def op_paths(ops: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Each op or scope's path id (``event_id``, ``path``), and the paths, a row each in the
    order of their ids: ``above`` (the parent path's id, or -1), ``name``, ``kind``.

    Paths are interned: a path is its parent path plus a name, so memory stays one entry per
    distinct path however deep the nesting. Ids follow the order paths are first met going down
    the depth levels, each level in frame order, and a path's kind is its first event's. A
    level is done at once (a walk in Python kept a dict entry per op: 150 MB at 1.5 million).
    """
    # names as summary.json holds them: the key diff and check compare (a long one cut)
    cut = cut_column(ops["name"])
    name = (cut if cut is not None else ops["name"]).cast(pl.Categorical)
    # read as Categoricals: the texts of every op's name and class were 60 MB on a 530 MB trace
    cls = ops["cls"].cast(pl.Categorical)
    context = (
        (cls.is_in(["op", "annotation"]) & ~name.cat.starts_with("ProfilerStep#"))
        | ((cls == "python") & name.cat.starts_with("nn.Module:"))
    ).to_numpy()
    rows = ops.height
    eid = ops["event_id"].to_numpy()
    depth = ops["depth"].to_numpy()
    parent = ops["parent_id"].fill_null(-1).to_numpy()
    codes = name.to_physical().to_numpy()
    chain = np.full(rows, -1, dtype=np.int64)  # path id of the innermost context at or above
    known = pl.DataFrame(
        schema={"above": pl.Int64, "code": pl.UInt32, "row": pl.Int64, "path": pl.Int64}
    )
    if rows:
        sorter = np.argsort(eid, kind="stable")
        pos = sorter[np.minimum(np.searchsorted(eid, parent, sorter=sorter), rows - 1)]
        has = (parent >= 0) & (eid[pos] == parent) & (depth[pos] < depth)
        order = np.argsort(depth, kind="stable")
        for level in np.split(order, np.flatnonzero(np.diff(depth[order])) + 1):
            above = np.where(has[level], chain[pos[level]], -1)
            chain[level] = above
            mine = level[context[level]]
            if not len(mine):
                continue
            keys = pl.DataFrame(
                {"above": above[context[level]], "code": codes[mine], "row": mine},
                schema={"above": pl.Int64, "code": pl.UInt32, "row": pl.Int64},
            )
            fresh = (
                keys.join(known, on=["above", "code"], how="anti")
                .unique(["above", "code"], keep="first", maintain_order=True)
                .with_columns(path=pl.int_range(pl.len(), dtype=pl.Int64) + known.height)
            )
            known = pl.concat([known, fresh])
            chain[mine] = keys.join(
                known.select("above", "code", "path"), on=["above", "code"], maintain_order="left"
            )["path"].to_numpy()
    counted = context & (cls != "python").to_numpy()
    of_event = pl.DataFrame(
        {"event_id": eid[counted], "path": chain[counted]},
        schema={"event_id": pl.Int64, "path": pl.Int64},
    )
    first = known["row"]
    paths = pl.DataFrame(
        [
            known["above"],
            name.gather(first).cast(pl.String).alias("name"),
            cls.gather(first).cast(pl.String).replace("python", "module").alias("kind"),
        ]
    )
    return of_event, paths


def _contexts(paths: pl.DataFrame, ids: pl.Series) -> pl.Series:
    """The context of each path of ``ids``: the names of the paths above it, outermost first.

    Found a level of ancestors at a time, as (row, level, name) rows gathered into lists (a
    Python list of names per path took 40 MB for 100,000 paths, and held them after)."""
    above = paths["above"].to_numpy()
    rows = np.arange(len(ids))
    up = above[ids.to_numpy()]
    levels = []
    level = 0
    while len(rows):
        inside = up >= 0
        rows, up = rows[inside], up[inside]
        levels.append(
            pl.DataFrame(
                {"row": rows, "level": np.full(len(rows), level), "path": up},
                schema={"row": pl.Int64, "level": pl.Int64, "path": pl.Int64},
            )
        )
        up = above[up]
        level += 1
    ancestors = pl.concat(levels).sort("row", "level", descending=[False, True])
    found = (
        ancestors.select("row", paths["name"].gather(ancestors["path"]))
        .group_by("row", maintain_order=True)
        .agg(context="name")
    )
    return (
        pl.DataFrame({"row": np.arange(len(ids))})
        .join(found, on="row", how="left", maintain_order="left")["context"]
        .fill_null([])
    )


def _device_rows(frames: TraceFrames, extra_device_ns: dict[int, int]) -> pl.DataFrame:
    """``event_id`` (the launching op), ``dev_ns``, ``kernel`` for every device activity."""
    linked = (
        frames.links.filter(pl.col("kind") == "op->device")
        .join(
            frames.device.select(pl.col("event_id").alias("dst_id"), "dur_ns", "name"),
            on="dst_id",
        )
        .select(
            pl.col("src_id").alias("event_id"),
            pl.col("dur_ns").alias("dev_ns"),
            # a Categorical: every activity's name as text took 25 MB on a 530 MB trace
            pl.col("name").cast(pl.Categorical).alias("kernel"),
        )
    )
    extra = pl.DataFrame(
        {
            "event_id": list(extra_device_ns),
            "dev_ns": list(extra_device_ns.values()),
            "kernel": ["Neuron hardware execution"] * len(extra_device_ns),
        },
        schema=linked.schema,
    )
    return pl.concat([linked, extra])


def _launches(frames: TraceFrames) -> pl.DataFrame:
    """``event_id`` (the op that made the runtime call), ``launch_ns`` (device start - call start)."""
    op_rt = frames.links.filter(pl.col("kind") == "op->runtime").select(
        pl.col("src_id").alias("event_id"), pl.col("dst_id").alias("rt_id")
    )
    rt_dev = frames.links.filter(pl.col("kind") == "runtime->device").select(
        pl.col("src_id").alias("rt_id"), pl.col("dst_id").alias("dev_id")
    )
    return (
        op_rt.join(rt_dev, on="rt_id")
        .join(frames.ops.select(pl.col("event_id").alias("rt_id"), "start_ns"), on="rt_id")
        .join(
            frames.device.select(
                pl.col("event_id").alias("dev_id"), pl.col("start_ns").alias("d0")
            ),
            on="dev_id",
        )
        .select("event_id", launch_ns=pl.col("d0") - pl.col("start_ns"))
    )


def _us(values: list[int]) -> list[float]:
    """ns as µs to three decimals (per_step's durations are never null)."""
    return [round(v / 1000, 3) for v in values]


def op_series(
    frames: TraceFrames, extra_device_ns: dict[int, int], steps: list[int]
) -> pl.DataFrame:
    """Per op path: its name, context, kind, kernels, order and one value per step of each
    series, as a frame of :data:`OP_SERIES_SCHEMA`."""
    ev, paths = op_paths(frames.ops)
    if ev.is_empty():
        return OP_SERIES_SCHEMA.to_frame()
    # the sums in a function of their own: its frames of every op are let go before the
    # series are laid out (held to the end, they took 30 MB more at the peak of diff on
    # 100,000 op paths)
    per_step, kernels = _per_path_step(frames, ev, extra_device_ns)
    del ev
    if per_step.is_empty():
        return OP_SERIES_SCHEMA.to_frame()
    # one row per path, one column per step, filled in one assignment per series
    per_step = per_step.join(
        pl.DataFrame(
            {"step": steps, "col": range(len(steps))}, schema={"step": pl.Int32, "col": pl.Int64}
        ),
        on="step",
    ).with_columns(row=pl.col("path").rank("dense").cast(pl.Int64) - 1)
    path_of_row = (
        per_step.group_by("row")
        .agg(pl.col("path").first(), pl.col("first_ns").min())
        .sort("row")
        .join(kernels, on="path", how="left", maintain_order="left")
        # the order of the paths' first calls (ties: by path id, the order they were met)
        .with_columns(order=pl.struct("first_ns", "path").rank("ordinal").cast(pl.Int64) - 1)
    )
    ids = path_of_row["path"]
    keys = pl.DataFrame([paths["name"].gather(ids), _contexts(paths, ids)])
    # sorted by (context, name): Polars orders lists of texts as Python does
    order = keys.with_row_index("row").sort("context", "name")["row"].to_numpy()
    frame = keys[order].with_columns(
        kind=paths["kind"].gather(ids.gather(order)),
        kernels=path_of_row["kernel"].gather(order).fill_null([]),
        order=path_of_row["order"].gather(order),
    )
    cells = Cells(
        per_step["row"].to_numpy(),
        per_step["col"].to_numpy(),
        (path_of_row.height, len(steps)),
        order,
    )
    columns = [_list_column(k, cells.grid(per_step[k])) for k in ("calls", *COUNT_SERIES)]
    for k in OP_SERIES[1:]:
        # ns / 1000 is already the nearest double to the three-decimal µs figure
        columns.append(_list_column(k, cells.grid(per_step[k[:-3] + "_ns"]) / 1000))
    launch = cells.grid(per_step["launch_ns"].cast(pl.Float64).fill_null(np.nan))
    columns.append(_list_column("launch_us", _launch_us(launch)))
    return frame.with_columns(columns).select(OP_SERIES_SCHEMA.names())


@dataclass(frozen=True)
class Cells:
    """Where each (path, step) row of the sums goes in a paths x steps table: its ``rows`` and
    ``cols``, the table's ``shape``, and the ``order`` of its rows in the op series."""

    rows: np.ndarray
    cols: np.ndarray
    shape: tuple[int, int]
    order: np.ndarray

    def grid(self, values: pl.Series) -> np.ndarray:
        """``values`` (one per row of the sums) as a table, rows in the op series' order, one
        series at a time (all eight at once took 26 MB for 100,000 paths); a cell without a
        row: 0, or NaN for a float series."""
        floats = values.dtype.is_float()
        table = np.full(self.shape, np.nan) if floats else np.zeros(self.shape, dtype=np.int64)
        table[self.rows, self.cols] = values.to_numpy()
        ordered: np.ndarray = table[self.order]
        return ordered


def _per_path_step(
    frames: TraceFrames, ev: pl.DataFrame, extra_device_ns: dict[int, int]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The sums per (path, step) of the ops of ``ev`` (:func:`op_paths`' ``event_id``, ``path``):
    ``calls``, ``host_self_ns``, ``host_total_ns``, ``first_ns``, ``device_self_ns``,
    ``device_activities``, ``device_total_ns``, ``runtime_calls``, ``launch_ns`` (the median);
    and each path's first :data:`MAX_KERNEL_NAMES` kernel names (``kernel``)."""
    # each op's path and step; the events' figures are summed per (path, step) from narrow
    # frames, never joined onto a frame of every op (four left joins of 1.2 million ops were
    # the peak of build on a 530 MB trace, issue 32)
    ops = (
        frames.ops.lazy()
        .select("event_id", "step", "start_ns", "self_ns", "dur_ns")
        .filter(pl.col("step").is_not_null())
        .join(ev.lazy(), on="event_id")
        .collect()
    )
    keys = ops.select("event_id", "path", "step")

    def per_path_step(rows: pl.LazyFrame | pl.DataFrame, **agg: pl.Expr) -> pl.LazyFrame:
        return rows.lazy().join(keys.lazy(), on="event_id").group_by("path", "step").agg(**agg)

    dev = _device_rows(frames, extra_device_ns)
    # device total: each activity counts for the op that launched it and every op around it,
    # one level of ancestors a join (Python dicts of every op and its parent took 30 MB for a
    # trace of 100,000 op names), each level summed per (path, step) as it is found (all levels
    # held for one sum took 40 MB more on a 530 MB trace; integer sums, the same in any order)
    parent = frames.ops.select("event_id", "parent_id").filter(pl.col("parent_id").is_not_null())
    level = dev.select("event_id", "dev_ns")
    around = [per_path_step(level, device_total_ns=pl.col("dev_ns").sum()).collect()]
    while not level.is_empty():
        level = level.join(parent, on="event_id").select(
            pl.col("parent_id").alias("event_id"), "dev_ns"
        )
        around.append(per_path_step(level, device_total_ns=pl.col("dev_ns").sum()).collect())
    launch = _launches(frames)
    runtime_calls = (
        frames.links.lazy()
        .filter(pl.col("kind") == "op->runtime")
        .select(pl.col("src_id").alias("event_id"))
    )

    sums = [
        per_path_step(dev, device_self_ns=pl.col("dev_ns").sum(), device_activities=pl.len()),
        pl.concat(around).lazy().group_by("path", "step").agg(pl.col("device_total_ns").sum()),
        per_path_step(runtime_calls, runtime_calls=pl.len()),
    ]
    per_step = ops.group_by("path", "step").agg(
        calls=pl.len(),
        host_self_ns=pl.col("self_ns").sum(),
        host_total_ns=pl.col("dur_ns").sum(),
        first_ns=pl.col("start_ns").min(),
    )
    # one after the other: each joins every op's keys, and three hash tables of them built at
    # once were the peak of op_series on a 530 MB trace (+20 MB)
    for part in sums:
        per_step = per_step.join(part.collect(), on=["path", "step"], how="left")
    per_step = per_step.with_columns(
        pl.col("device_self_ns", "device_total_ns", "device_activities", "runtime_calls").fill_null(
            0
        )
    )
    launch_step = (
        launch.join(keys, on="event_id")
        .group_by("path", "step")
        .agg(launch_ns=pl.col("launch_ns").median())
    )
    per_step = per_step.join(launch_step, on=["path", "step"], how="left")
    kernels = (
        dev.join(ops.select("event_id", "path"), on="event_id")
        .group_by("path")
        .agg(pl.col("kernel").unique())
        .with_columns(
            pl.col("kernel").cast(pl.List(pl.String)).list.sort().list.head(MAX_KERNEL_NAMES)
        )
    )
    return per_step, kernels


def _launch_us(ns: np.ndarray) -> np.ndarray:
    """Median launch latencies (ns; NaN: none) in µs to three decimals, as Python's ``round``
    gives them: a whole ns / 1000 is already that figure; a median that ends in .5 ns is
    rounded by ``round`` itself (a few)."""
    us = ns / 1000
    half = np.flatnonzero(np.isfinite(ns) & (ns != np.floor(ns)))
    flat = us.reshape(-1)
    for i, v in zip(half.tolist(), flat[half].tolist()):
        flat[i] = round(v, 3)
    return us


_STRINGS: dict[str, pl.DataType] = {
    "name": pl.String(),
    "context": pl.List(pl.String),
    "kind": pl.String(),
    "kernels": pl.List(pl.String),
    "order": pl.Int64(),
}
OP_SERIES_SCHEMA = pl.Schema(
    _STRINGS
    | {k: pl.List(pl.Int64) for k in ("calls", *COUNT_SERIES)}
    | {k: pl.List(pl.Float64) for k in (*OP_SERIES[1:], "launch_us")}
)
"""The op series of a ``diff_profile`` (:func:`op_series`): one row per op path, sorted by
(context, name); per series a list of one value per step, in the order of ``steps``
(``launch_us``: null where the step launched nothing; ``order``, ``runtime_calls`` and
``device_activities``: null where a summary written before them is read)."""


def _list_column(name: str, values: np.ndarray) -> pl.Series:
    """A paths x steps table as a List column (NaN: null)."""
    dtype = pl.Int64 if values.dtype.kind in "iu" else pl.Float64
    if values.shape[1] == 0:
        return pl.Series(name, [[] for _ in range(values.shape[0])], dtype=pl.List(dtype))
    column = pl.Series(name, values).cast(pl.List(dtype))
    if dtype == pl.Float64:
        column = column.list.eval(pl.element().fill_nan(None))
    return column


def op_series_frame(records: Sequence[Mapping[str, Any]]) -> pl.DataFrame:
    """The op series of a ``summary.json`` or ``diff.json`` of version 1 (a list of records, one
    per op path, as :func:`op_series` used to make them) as the frame :func:`op_series` makes;
    the keys such a document may lack (``runtime_calls``, ``device_activities``, ``order``)
    null."""
    columns = {
        k: [r.get(k) for r in records]
        for k in OP_SERIES_SCHEMA.names()
        if k not in ("kernels", "context")
    }
    columns["kernels"] = [r.get("kernels") or [] for r in records]
    columns["context"] = [r["context"] for r in records]
    return pl.DataFrame(columns, schema=OP_SERIES_SCHEMA, strict=False)


def step_parts(
    frames: TraceFrames,
    steps: pl.DataFrame,
    busy: Busy,
    gaps: pl.DataFrame,
) -> dict[str, list[float]]:
    """Per part, one value per step (µs); the parts of a step add up to its duration.

    ``steps`` are the per-step rows of :func:`~nprof_report.report.figures.analyses.per_step` (host
    breakdown columns), ``busy`` the device's busy intervals and ``gaps`` the device idle gaps.
    """
    busy_ns = _busy_within(busy, frames.steps.select("step", "start_ns", "end_ns"), steps["step"])
    gap_ns: dict[tuple[int, str], int] = {}
    for step, dur, cause in zip(gaps["step"], gaps["dur_ns"], gaps["cause"]):
        key = (step, _GAP_PART[cause])
        gap_ns[key] = gap_ns.get(key, 0) + dur
    parts: dict[str, list[float]] = {p: [] for p in PARTS}
    for row, busy_in in zip(steps.iter_rows(named=True), busy_ns):
        values = dict.fromkeys(PARTS, 0)
        if busy_in > 0:
            values["device execution"] = busy_in
            for p in PARTS:
                values[p] += gap_ns.get((row["step"], p), 0)
        else:
            for col, p in _HOST_PART.items():
                values[p] += row[col]
        for p in PARTS:
            parts[p].append(round(values[p] / 1000, 3))
    return parts


def _busy_within(busy: Busy, bounds: pl.DataFrame, steps: pl.Series) -> list[int]:
    """Per step of ``steps``, the length of the busy intervals inside its ``[start_ns,
    end_ns)`` (prefix sums and two binary searches a step)."""
    window = pl.DataFrame({"step": steps}).join(
        bounds, on="step", how="left", maintain_order="left"
    )
    s0, e0 = window["start_ns"].to_numpy(), window["end_ns"].to_numpy()
    if not len(busy):
        return [0] * len(s0)
    starts, ends = busy.starts, busy.ends
    cum = np.concatenate([[0], np.cumsum(ends - starts)])
    first = np.searchsorted(ends, s0, side="right")  # first interval ending after the start
    stop = np.searchsorted(starts, e0, side="left")  # first interval starting at or after the end
    total = cum[stop] - cum[first]
    some = stop > first
    head = np.where(some, np.maximum(0, s0 - starts[np.minimum(first, len(busy) - 1)]), 0)
    tail = np.where(some, np.maximum(0, ends[np.maximum(stop - 1, 0)] - e0), 0)
    inside: list[int] = np.where(some, total - head - tail, 0).astype(np.int64).tolist()
    return inside


DECLARED = ("bytes_moved", "flops")
"""What a study may declare per call of an implementation, read where the run's manifest has it."""


def declared_work(implementation: object) -> dict[str, float]:
    """The declared bytes moved and FLOPs per call of the manifest's implementation record, those
    it has (a number each; an older manifest, a bare trace or a study without them: none)."""
    out = {}
    for key in DECLARED:
        value = getattr(implementation, key, None)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            out[key] = float(value)
    return out


def diff_profile(
    frames: TraceFrames,
    steps: pl.DataFrame,
    busy: Busy,
    gaps: pl.DataFrame,
    extra_device_ns: dict[int, int],
    implementation: object = None,
) -> DiffProfile:
    """The ``diff_profile`` record of ``summary.json``: steps, their parts, the op series, and
    (``declared``, only when the manifest's ``implementation`` record declares them) the bytes
    moved and FLOPs per call."""
    numbers = steps["step"].to_list()
    profile: DiffProfile = {
        "steps": numbers,
        "step_us": _us(steps["dur_ns"].to_list()),
        "parts_us": step_parts(frames, steps, busy, gaps),
        "ops": op_series(frames, extra_device_ns, numbers),
    }
    declared = declared_work(implementation)
    if declared:
        profile["declared"] = declared
    return profile

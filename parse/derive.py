"""A trace's rows into nested framework ops, device activities, steps and links.

:func:`derive` takes what :func:`~nprof_report.parse.read.read` returns (:class:`~.parts.TraceRows`)
and imports no reader. Host events nest per thread as PyTorch nests them (:mod:`.nesting`); a
runtime call linked to an op by ``External id`` is moved onto the op's thread first, as PyTorch
does.

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

from concurrent.futures import Executor, ThreadPoolExecutor

import numpy as np
import polars as pl

from nprof_report.parse.nesting import climb, nest_halves, rows_of
from nprof_report.parse.parts import Parts, TraceRows
from nprof_report.parse.privateuse1 import retype
from nprof_report.parse.schema import DEVICE, LINKS, OPS, TraceFrames, TraceMeta, conform


def _assign_step(df: pl.DataFrame, steps: pl.DataFrame, time_col: str) -> pl.Series:
    """Step whose [start, end) interval holds ``time_col`` (null outside every step).

    ``steps`` is in start order (as :func:`_steps` makes it); of steps starting at the same
    time, the last one is taken.
    """
    if steps.is_empty() or df.is_empty():
        return pl.Series("step", [None] * len(df), dtype=pl.Int32)
    t = df[time_col]
    last = np.searchsorted(steps["start_ns"].to_numpy(), t.to_numpy(), side="right") - 1
    pick = pl.Series(np.maximum(last, 0))
    inside = pl.Series(last >= 0) & (t < steps["end_ns"].gather(pick)).fill_null(False)
    return (
        steps["step"].gather(pick).zip_with(inside, pl.Series([None], dtype=pl.Int32)).alias("step")
    )


def _step_of_op(ops: pl.DataFrame, op_ids: pl.Series) -> pl.Series:
    """The ``step`` of each op in ``op_ids`` (null where null or not an op)."""
    if ops.is_empty():
        return pl.Series([None] * len(op_ids), dtype=pl.Int32)
    row = rows_of(ops["event_id"].to_numpy(), op_ids.fill_null(-1).to_numpy())
    found = pl.Series(row >= 0)
    step = ops["step"].gather(pl.Series(np.maximum(row, 0)))
    return step.zip_with(found, pl.Series([None], dtype=pl.Int32))


def derive(rows: TraceRows) -> TraceFrames:
    """Ops, device activities, steps and links of a trace's rows; ``events`` kept when read."""
    return _derive(rows.meta, rows.notes, rows.parts, rows.events)


def _derive(
    meta: TraceMeta, trace_notes: list[str], parts: Parts, events: pl.DataFrame | None
) -> TraceFrames:
    notes = [*trace_notes, *parts.notes]
    host, device, steps, flows = parts.host, parts.device, parts.steps, parts.flows
    parts.host = parts.flows = pl.DataFrame()  # the locals hold the only references now
    # privateuse1_driver rows: device executions or host calls, decided per trace (privateuse1.py)
    host, device, driver = retype(host, device, flows)
    if driver.meaning != "none":
        notes.append(f"{meta.path.name}: {driver.note}")
    name = meta.path.name
    with ThreadPoolExecutor(2) as pool:
        # Polars joins on one thread while NumPy nests on the other: both release the GIL
        runtime_device = pool.submit(_runtime_device, flows, host, device)
        by_ext = _launches(host)
        thread, tcode = _threads(host, by_ext)
        ops, op_rt, overlaps = _nested_ops(host, thread, tcode, by_ext, pool)
        del host, thread, tcode
        rt_dev, has_runtime = runtime_device.result()
    if overlaps:
        notes.append(
            f"{name}: {overlaps} events partially overlap an event on the same "
            "thread; they are not nested (as in PyTorch), so self times around them may be off"
        )
    ops = ops.with_columns(step=_assign_step(ops, steps, "start_ns"))

    links = _links(rt_dev, has_runtime, ops, device, op_rt)
    del rt_dev
    flow_ids = flows.filter(pl.col("ph") == "s")["flow_id"]
    del flows
    duplicated = flow_ids.len() - flow_ids.n_unique() if flow_ids.len() else 0
    del flow_ids
    if duplicated:
        notes.append(
            f"{name}: {duplicated} ac2g flow ids occur more than once; "
            "the first occurrence was used"
        )
    device = device.with_columns(
        start_ns=pl.col("ts_ns"), end_ns=pl.col("ts_ns") + pl.col("dur_ns")
    )
    op_of_device = links.filter(pl.col("kind") == "op->device").select(
        pl.col("dst_id").alias("event_id"), pl.col("src_id").alias("_op")
    )
    device = device.join(op_of_device, on="event_id", how="left")
    device = (
        device.with_columns(_op_step=_step_of_op(ops, device["_op"]))
        .with_columns(_time_step=_assign_step(device, steps, "start_ns"))
        .with_columns(step=pl.coalesce("_op_step", "_time_step"))
        .sort("event_id")
    )
    unlinked = device.filter(pl.col("_op").is_null()).height
    if unlinked:
        notes.append(
            f"{name}: {unlinked} of {device.height} device activities have no "
            "link to a framework op"
        )
    return TraceFrames(
        meta=meta,
        events=events,
        ops=conform(ops, OPS),
        device=conform(device, DEVICE),
        links=links,
        steps=steps,
        notes=notes,
    )


def _launches(host: pl.DataFrame) -> pl.DataFrame:
    """Runtime calls (row ``_i``) whose External id names an op (row ``_j``) that encloses them.

    That op launched the call (current Kineto layout). Empty in the 2023 layout, where a runtime
    event's External id is its correlation id and the few that match an enclosing op are
    coincidences.
    """
    h = (
        host.with_row_index("_i")  # numbered before any filter
        .lazy()
        .select(
            pl.col("_i").cast(pl.Int64),
            "cls",
            "cat",
            "tid",
            "external_id",
            pl.col("ts_ns").alias("_s"),
            (pl.col("ts_ns") + pl.col("dur_ns")).alias("_e"),
        )
        .filter(pl.col("external_id").is_not_null())
    )
    first_op = (
        h.filter(pl.col("cls").is_in(["op", "annotation"]))
        .filter(pl.col("external_id").is_first_distinct())
        .collect()
    )
    launches = h.filter(pl.col("cls") == "runtime").collect()
    by_ext = (
        launches.join(
            first_op.select(
                "external_id",
                pl.col("_i").alias("_j"),
                pl.col("cls").alias("_jcls"),
                pl.col("_s").alias("_js"),
                pl.col("_e").alias("_je"),
                pl.col("tid").alias("_jtid"),
            ),
            on="external_id",
        )
        .filter(
            (pl.col("_jcls") == "op")
            & (pl.col("_js") <= pl.col("_s"))
            & (pl.col("_e") <= pl.col("_je"))
        )
        .sort("_i")
        .select("_i", "_j", "cat", "tid", "_jtid")
    )
    return by_ext.clear() if 2 * by_ext.height < launches.height else by_ext


def _threads(host: pl.DataFrame, by_ext: pl.DataFrame) -> tuple[pl.Series, np.ndarray]:
    """The ``thread`` ("pid/tid") each host event nests on, and an integer code per thread.

    PyTorch moves linked runtime calls onto the op's thread. A driver event recorded on a
    stream track (another tid) stays there: it is not a call the op's thread made. Computed per
    distinct (pid, tid) pair and gathered, so no per-row text is built.
    """
    # one integer per (pid, tid) from the Categorical codes (null: 2**32 - 1); few distinct
    none = 2**32 - 1
    key = host.select(
        pl.col("pid").to_physical().fill_null(none).cast(pl.UInt64) * 2**32
        + pl.col("tid").to_physical().fill_null(none).cast(pl.UInt64)
    ).to_series()
    first = key.is_first_distinct()
    distinct = key.filter(first)
    code = key.replace_strict(
        distinct, pl.int_range(len(distinct), dtype=pl.Int64, eager=True)
    ).to_numpy(writable=True)
    pairs = host.filter(first).select("pid", "tid")
    moved = by_ext.filter(
        pl.col("tid").eq_missing(pl.col("_jtid"))
        | ~pl.col("cat").cat.ends_with("_driver").fill_null(False)
    )
    code[moved["_i"].to_numpy()] = code[moved["_j"].to_numpy()]
    names = pairs.select(
        pl.concat_str(
            [pl.col("pid").fill_null("None"), pl.lit("/"), pl.col("tid").fill_null("None")]
        ).cast(pl.Categorical())
    ).to_series()
    return names.gather(code).alias("thread"), code


def _nested_ops(
    host: pl.DataFrame, thread: pl.Series, tcode: np.ndarray, by_ext: pl.DataFrame, pool: Executor
) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """``OPS`` rows (without ``step``), the op->runtime links, and the partial-overlap count."""
    n = host.height
    ids = host["event_id"].to_numpy().astype(np.int64, copy=False)
    starts = host["ts_ns"].to_numpy().astype(np.int64, copy=False)
    durs = host["dur_ns"].to_numpy().astype(np.int64, copy=False)
    ends = starts + durs
    # stable: ties keep file order (Polars sorts on both cores; numpy's lexsort on one, 2x slower)
    keys = pl.DataFrame({"t": tcode, "s": starts, "e": -ends})
    sorted_rows = keys.select(pl.arg_sort_by(["t", "s", "e"], maintain_order=True)).to_series()
    order = sorted_rows.to_numpy().astype(np.int64)
    del keys, sorted_rows
    p_sorted, d_sorted, overlaps = nest_halves(tcode[order], starts[order], ends[order], pool)
    del starts, ends
    parent = np.full(n, -1, dtype=np.int64)
    parent[order] = np.where(p_sorted >= 0, order[np.maximum(p_sorted, 0)], -1)
    depth = np.zeros(n, dtype=np.int32)
    depth[order] = d_sorted
    del order, p_sorted, d_sorted
    has_parent = parent >= 0
    self_ns = durs.copy()
    np.subtract.at(self_ns, parent[has_parent], durs[has_parent])
    del durs
    cls = host["cls"]
    linked = np.zeros(n, dtype=bool)
    linked[by_ext["_i"].to_numpy()] = True
    loose = np.flatnonzero((cls == "runtime").to_numpy() & ~linked)
    encl = climb(parent, parent[loose], ~(cls == "op").to_numpy())
    loose, encl = loose[encl >= 0], encl[encl >= 0]
    j_ext = by_ext["_j"].to_numpy()
    i_ext = by_ext["_i"].to_numpy()
    op_rt = pl.DataFrame(
        {
            "src_id": np.concatenate([ids[j_ext], ids[encl]]),
            "dst_id": np.concatenate([ids[i_ext], ids[loose]]),
            "kind": "op->runtime",
            "method": pl.Series(["external_id", "enclosing"]).gather(
                np.repeat([0, 1], [len(i_ext), len(loose)])
            ),
        },
        schema=LINKS,
    )
    parent_id = pl.Series("parent_id", ids[np.maximum(parent, 0)] if n else ids)
    del ids
    ops = host.select(
        "event_id",
        pl.col("cls").cast(pl.Categorical()),
        "cat",
        "name",
        "pid",
        "tid",
        thread,
        pl.col("ts_ns").alias("start_ns"),
        (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"),
        "dur_ns",
        "external_id",
        "correlation",
        pl.when(pl.Series(has_parent)).then(parent_id).alias("parent_id"),
        pl.Series("depth", depth, dtype=pl.Int32),
        pl.Series("self_ns", self_ns),
    )
    return ops, op_rt, overlaps


def _runtime_device(
    flows: pl.DataFrame, host: pl.DataFrame, device: pl.DataFrame
) -> tuple[pl.DataFrame, bool]:
    """The runtime->device links (``LINKS``), and whether the trace has runtime calls.

    Needs no nesting, so :func:`_derive` computes it while the ops are nested.
    """
    runtime = (
        host.lazy()
        .filter(pl.col("cls") == "runtime")
        .select("event_id", "correlation", "pid", "tid", "ts_ns")
        .collect()
    )
    dev = device.select("event_id", "correlation", "pid", "tid", "ts_ns")
    by_corr = (
        runtime.filter(pl.col("correlation").is_not_null())
        .select(pl.col("event_id").alias("src_id"), "correlation")
        .filter(pl.col("correlation").is_first_distinct())
        .join(
            dev.filter(pl.col("correlation").is_not_null()).select(
                pl.col("event_id").alias("dst_id"), "correlation"
            ),
            on="correlation",
            maintain_order="left",
        )
        .select("src_id", "dst_id", kind=pl.lit("runtime->device"), method=pl.lit("correlation"))
    )
    # flows only for the device activities that correlation ids did not link
    dev_pos = dev.join(
        by_corr.select(pl.col("dst_id").alias("event_id")), on="event_id", how="anti"
    ).select(pl.col("event_id").alias("dst_id"), "pid", "tid", "ts_ns")
    by_flow = pl.DataFrame(schema=by_corr.schema)
    if dev_pos.height:
        starts, ends = (
            flows.filter(pl.col("ph") == ph).select("flow_id", "pid", "tid", "ts_ns")
            for ph in ("s", "f")
        )
        rt_pos = runtime.select(pl.col("event_id").alias("src_id"), "pid", "tid", "ts_ns")
        by_flow = (
            starts.join(rt_pos, on=["pid", "tid", "ts_ns"], maintain_order="left")
            .select("flow_id", "src_id")
            .filter(pl.col("flow_id").is_first_distinct())
            .join(
                ends.join(dev_pos, on=["pid", "tid", "ts_ns"], maintain_order="left").select(
                    "flow_id", "dst_id"
                ),
                on="flow_id",
                maintain_order="left",
            )
            .select("src_id", "dst_id", kind=pl.lit("runtime->device"), method=pl.lit("flow"))
        )
    return conform(pl.concat([by_corr, by_flow]), LINKS), not runtime.is_empty()


def _links(
    rt_dev: pl.DataFrame,
    has_runtime: bool,
    ops: pl.DataFrame,
    device: pl.DataFrame,
    op_rt: pl.DataFrame,
) -> pl.DataFrame:
    """Every link (``LINKS``): op->runtime, runtime->device, and op->device through both."""
    via_runtime = rt_dev.join(
        op_rt.select(pl.col("src_id").alias("op_id"), pl.col("dst_id").alias("src_id"), "method"),
        on="src_id",
        maintain_order="left",
    ).select(
        pl.col("op_id").alias("src_id"), "dst_id", kind=pl.lit("op->device"), method="method_right"
    )
    # External ids are op ids in this trace when at least one runtime call was linked by them,
    # or when there are no runtime calls at all (a backend that writes only device activities).
    ext_is_op_id = op_rt.filter(pl.col("method") == "external_id").height > 0 or not has_runtime
    direct = pl.DataFrame(schema=LINKS)
    dev = device.select("event_id", "external_id")
    orphans = (
        dev.filter(pl.col("external_id").is_not_null()).join(
            via_runtime, left_on="event_id", right_on="dst_id", how="anti"
        )
        if ext_is_op_id
        else dev.clear()
    )
    if orphans.height:
        op_ids = (
            ops.lazy()
            .filter(pl.col("cls") == "op")
            .select(pl.col("event_id").alias("src_id"), "external_id")
            .filter(pl.col("external_id").is_first_distinct())
            .collect()
        )
        direct = orphans.join(op_ids, on="external_id", maintain_order="left").select(
            "src_id",
            pl.col("event_id").alias("dst_id"),
            kind=pl.lit("op->device"),
            method=pl.lit("external_id"),
        )
    return pl.concat([op_rt, rt_dev, conform(via_runtime, LINKS), conform(direct, LINKS)])

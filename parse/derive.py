"""A trace's rows into nested framework ops, device activities, steps and links.

The rules are written down once, in ``RULES.md`` beside this module; this is the derive side.
:func:`derive` takes what :func:`~nprof_report.parse.read.read` returns (:class:`~.parts.TraceRows`)
and imports no reader.

Nesting follows ``EventList._populate_cpu_children`` in ``torch/autograd/profiler_util.py``
(:mod:`.nesting`): per thread, events sorted by ``(start, -end)``, walked with a stack; the top is
popped while the new event starts at or after its end or ends after it, so partial overlaps never
nest. As in ``_parse_kineto_results`` (``torch/autograd/profiler.py``), the names PyTorch filters
out take no part in the walk, and a runtime call linked to a scope by ``External id`` is moved
onto the scope's thread first (``RULES.md`` §3).

Links (each row records the method that made it); a *scope* is an op or a user annotation, the
RecordFunctions whose ids PyTorch pushes for the runtime calls made inside them:

==============  ===========================================================================
kind            how
==============  ===========================================================================
op->runtime     ``external_id``: the scope whose External id the call carries (2021 and
                current layouts); ``enclosing``: where the layout lost that link (2022/2023:
                every runtime call's External id is its own correlation id), the innermost
                scope around the call on its thread
runtime->device ``correlation``: equal ``args.correlation``; else ``flow``: an ``ac2g`` pair
                whose ``s`` end sits on the runtime event and ``f`` end on the device event
op->device      ``external_id``: the scope whose External id the activity carries (a GPU user
                annotation: its CPU annotation, in every layout); where the layout lost the
                link, through the activity's runtime call (``enclosing``)
==============  ===========================================================================

Steps come from ``ProfilerStep#N`` annotations; an event belongs to the step whose interval
holds its start, by time and not by nesting, because a step annotation may sit on another
pid than the ops (formats.md 1.4). A device activity belongs to the step of its launching op.
A trace without them gets its steps from :mod:`.steps`: the user annotation that repeats at the
top of the dispatch thread, else the whole profiled window (``TraceFrames.step_rule`` says which).
"""

from __future__ import annotations

from concurrent.futures import Executor, ThreadPoolExecutor

import numpy as np
import polars as pl

from nprof_report.parse.classify import FILTERED_NAMES, KNOWN_CATS, lost_link
from nprof_report.parse.nesting import climb, give_back_freed, nest_halves, nest_kept, positions
from nprof_report.parse.parts import Parts, TraceRows
from nprof_report.parse.privateuse1 import retype
from nprof_report.parse.schema import LINKS, TraceFrames, TraceMeta, conform
from nprof_report.parse.steps import PROFILER_STEP, assign, with_steps


def derive(rows: TraceRows) -> TraceFrames:
    """Ops, device activities, steps and links of a trace's rows; ``events`` kept when read."""
    return _derive(rows.meta, rows.notes, rows.parts, rows.events)


def _derive(
    meta: TraceMeta, trace_notes: list[str], parts: Parts, events: pl.DataFrame | None
) -> TraceFrames:
    host, device, steps, flows = parts.host, parts.device, parts.steps, parts.flows
    parts.host = parts.flows = pl.DataFrame()  # the locals hold the only references now
    # privateuse1_driver rows: device executions or host calls, decided per trace (privateuse1.py)
    host, device, driver = retype(host, device, flows)
    name = meta.path.name
    # the parts' own note on unknown categories has no counts: this one replaces it
    notes = [*trace_notes, *(n for n in parts.notes if ": unknown categories " not in n)]
    if driver.meaning != "none":
        notes.append(f"{name}: {driver.note}")
    notes += _unknown_categories(host, name)
    # the runtime->device links first, on their own: their joins (133 MiB at their peak on a
    # 530 MB trace) made alongside the launches and the nesting added up to the process's peak
    rt_dev = _runtime_device(flows, host, device)
    duplicated = _duplicated_flows(flows)
    del flows
    give_back_freed()
    with ThreadPoolExecutor(2) as pool:  # the nesting runs in two halves (nesting.nest_halves)
        by_ext, moves, lost_link = _launches(host)
        thread, tcode = _threads(host, moves)
        give_back_freed()
        ops, op_rt, overlaps = _nested_ops(host, thread, tcode, by_ext, lost_link, pool)
        del host, thread, tcode
        give_back_freed()
    if overlaps:
        notes.append(
            f"{name}: {overlaps} events partially overlap an event on the same "
            "thread; they are not nested (as in PyTorch), so self times around them may be off"
        )
    links = _links(rt_dev, lost_link, ops, device, op_rt)
    del rt_dev
    give_back_freed()
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
    unlinked = device.join(op_of_device, on="event_id", how="anti").height
    if unlinked:
        notes.append(
            f"{name}: {unlinked} of {device.height} device activities have no link to a "
            "framework op; their time is in their own rows only, as in PyTorch"
        )
    ops, device = assign(ops, device, links, steps)
    give_back_freed()
    frames = TraceFrames(
        meta=meta,
        events=events,
        ops=ops,
        device=device,
        links=links,
        steps=steps,
        notes=notes,
        step_rule=PROFILER_STEP,
        facts={
            "partial_overlaps": int(overlaps),
            "privateuse1_driver": {
                "meaning": driver.meaning,
                "rows": driver.rows,
                "evidence": driver.evidence,
            },
        },
    )
    # without ProfilerStep#N: a repeating user annotation, else the whole window (steps.py)
    return frames if not steps.is_empty() else with_steps(frames)


def _duplicated_flows(flows: pl.DataFrame) -> int:
    """How many ``ac2g`` flow starts repeat an earlier start's id."""
    flow_ids = flows.filter(pl.col("ph") == "s")["flow_id"]
    return flow_ids.len() - flow_ids.n_unique() if flow_ids.len() else 0


def _unknown_categories(host: pl.DataFrame, name: str) -> list[str]:
    """A note counting the complete events whose category PyTorch does not know (it types them
    CPU, with a warning, and so does :mod:`.classify`)."""
    # the distinct categories first (Categorical codes: cheap); rows are counted only if needed
    unknown = [c for c in host["cat"].drop_nulls().unique().to_list() if c not in KNOWN_CATS]
    if not unknown:
        return []
    counts = (
        host.lazy()
        .filter(pl.col("cat").cast(pl.String).is_in(unknown))
        .group_by("cat")
        .len()
        .sort(pl.col("cat").cast(pl.String))
        .collect()
    )
    each = ", ".join(f"{c} ({n} event{'s' * (n != 1)})" for c, n in counts.iter_rows())
    return [f"{name}: unknown categories counted as CPU work, as PyTorch does: {each}"]


def _launches(host: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, bool]:
    """Runtime calls (row ``_i``) and the scope (row ``_j``: op or annotation) whose External id
    they carry; the row ``_m`` whose thread each linked call nests on; and whether the layout lost
    the link.

    PyTorch links a runtime call to the RecordFunction scope innermost on its thread when it was
    made, and Kineto writes that scope's id as the call's External id (2021 and current layouts),
    whether or not the recorded times nest. The 2022 and 2023 layouts wrote the call's own
    correlation id there instead: every runtime call's External id equals its correlation. Then
    both results are empty and the caller links by enclosure.

    ``_parse_kineto_results`` moves a call whose linked id is X onto the thread of the CPU event
    with id X that it meets last, in the order of the events: a scope with External id X (not
    one it filters out), or a runtime call without an External id whose correlation id is X (the
    id collision of ``RULES.md`` §4).
    """
    h = host.lazy().with_row_index("_i")  # numbered before any filter
    linked = pl.col("external_id").is_not_null() & (pl.col("external_id") != 0)
    runtime = pl.col("cls") == "runtime"
    row = pl.col("_i").cast(pl.Int64)
    launches = h.filter(runtime & linked).select(row, "external_id", "correlation").collect()
    lost = lost_link(launches)
    if lost:
        launches = launches.clear()
    # only the events with an id some call carries (all of those with that id, so the first and
    # the last are those of all): joining and grouping every scope took 107 MiB above the host
    # rows and 0.52 s on a 530 MB trace, these 46 MiB and 0.17 s
    carried = launches["external_id"].implode()
    scopes, unlinked = pl.collect_all(
        [
            h.filter(
                pl.col("cls").is_in(["op", "annotation"])
                & linked
                & pl.col("external_id").is_in(carried)
            ).select(row, "external_id", kept=~pl.col("name").is_in(list(FILTERED_NAMES))),
            # the runtime calls PyTorch keys by their correlation id
            h.filter(runtime & ~linked & pl.col("correlation").is_in(carried)).select(
                pl.col("correlation").alias("_id"), row.alias("_m")
            ),
        ]
    )
    by_ext = (
        launches.join(
            scopes.filter(pl.col("external_id").is_first_distinct()).select(
                "external_id", pl.col("_i").alias("_j")
            ),
            on="external_id",
        )
        .sort("_i")
        .select("_i", "_j")
    )
    keyed = pl.concat(
        [
            scopes.filter("kept").select(
                pl.col("external_id").alias("_id"), pl.col("_i").alias("_m")
            ),
            unlinked,
        ]
    )
    moves = launches.join(
        keyed.group_by("_id").agg(pl.col("_m").max()), left_on="external_id", right_on="_id"
    ).select("_i", "_m")
    return by_ext, moves, lost


def _threads(host: pl.DataFrame, moves: pl.DataFrame) -> tuple[pl.Series, np.ndarray]:
    """The ``thread`` ("pid/tid") each host event nests on, and an integer code per thread.

    PyTorch moves linked runtime calls onto their op's thread (``moves``, :func:`_launches`).
    Computed per distinct (pid, tid) pair and gathered, so no per-row text is built.
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
        distinct, pl.int_range(len(distinct), dtype=pl.Int32, eager=True)
    ).to_numpy(writable=True)
    pairs = host.filter(first).select("pid", "tid")
    code[moves["_i"].to_numpy()] = code[moves["_m"].to_numpy()]
    names = pairs.select(
        pl.concat_str(
            [pl.col("pid").fill_null("None"), pl.lit("/"), pl.col("tid").fill_null("None")]
        ).cast(pl.Categorical())
    ).to_series()
    return names.gather(code).alias("thread"), code


def _nested_ops(
    host: pl.DataFrame,
    thread: pl.Series,
    tcode: np.ndarray,
    by_ext: pl.DataFrame,
    lost_link: bool,
    pool: Executor,
) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """``OPS`` rows (without ``step``), the op->runtime links, and the partial-overlap count.

    Where the layout lost the link (``lost_link``, :func:`_launches`), a runtime call belongs to
    the innermost op or annotation enclosing it on its thread: the scope whose External id was
    innermost on the thread when the call was made. Elsewhere a runtime call without a scope's
    External id was linked to none by PyTorch either.
    """
    n = host.height
    ids = host["event_id"].to_numpy().astype(np.int64, copy=False)
    starts = host["ts_ns"].to_numpy().astype(np.int64, copy=False)
    durs = host["dur_ns"].to_numpy().astype(np.int64, copy=False)
    ends = starts + durs
    keep = _kept(host)
    order = _walk_order(tcode, starts, ends)
    parent, depth, overlaps = _unsort(
        order, *nest_kept(tcode[order], starts[order], ends[order], keep[order], pool)
    )
    del order
    has_parent = parent >= 0
    self_ns = durs.copy()
    np.subtract.at(self_ns, parent[has_parent], durs[has_parent])
    del durs
    cls = host["cls"]
    loose = np.flatnonzero((cls == "runtime").to_numpy()) if lost_link else np.zeros(0, np.int64)
    scope = cls.is_in(["op", "annotation"]).to_numpy()
    if len(loose) and (overlaps or not keep.all()):
        # the nearest scope up the tree need not be the innermost one around the call: a
        # partial overlap pops scopes, and filtered scopes parent nothing; walk the scopes
        # (those PyTorch filters too: one may be innermost) and the calls alone
        encl = _enclosing(loose, tcode, starts, ends, scope, (cls == "runtime").to_numpy(), pool)
    else:  # no partial overlap: an event's ancestors are all the events around it
        del starts, ends
        encl = climb(parent, parent[loose], ~scope)
    del keep, scope
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


def _kept(host: pl.DataFrame) -> np.ndarray:
    """Which host events PyTorch keeps (``_filter_name`` drops the others before nesting)."""
    return (~host["name"].is_in(list(FILTERED_NAMES)).fill_null(False)).to_numpy()


def _walk_order(tcode: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Positions sorted by (thread, start, -end), ties in file order, as PyTorch walks them.

    Polars sorts on both cores; numpy's lexsort on one, 2x slower."""
    keys = pl.DataFrame({"t": tcode, "s": starts, "e": ends})
    rows = keys.select(
        pl.arg_sort_by(["t", "s", "e"], descending=[False, False, True], maintain_order=True)
    ).to_series()
    return rows.to_numpy().astype(positions(len(rows)))


def _unsort(
    order: np.ndarray, p_sorted: np.ndarray, d_sorted: np.ndarray, overlaps: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """Parent rows (-1 at the top) and depths of the rows ``order`` lists, from the same of
    their sorted positions."""
    parent = np.full(len(order), -1, dtype=order.dtype)
    parent[order] = np.where(p_sorted >= 0, order[np.maximum(p_sorted, 0)], -1)
    depth = np.zeros(len(order), dtype=np.int32)
    depth[order] = d_sorted
    return parent, depth, overlaps


def _enclosing(
    loose: np.ndarray,
    tcode: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    scope: np.ndarray,
    runtime: np.ndarray,
    pool: Executor,
) -> np.ndarray:
    """The innermost scope (``scope`` rows) around each ``loose`` runtime call on its thread:
    PyTorch's walk over the scopes and runtime calls alone, so that other CPU work (a Python
    function) that partially overlaps a scope does not pop it. -1 where none."""
    rows = np.flatnonzero(scope | runtime)
    order = rows[_walk_order(tcode[rows], starts[rows], ends[rows])]
    p_sorted, _, _ = nest_halves(tcode[order], starts[order], ends[order], pool)
    parent = np.full(len(tcode), -1, dtype=np.int64)
    parent[order] = np.where(p_sorted >= 0, order[np.maximum(p_sorted, 0)], -1)
    return climb(parent, parent[loose], ~scope)


def _runtime_device(flows: pl.DataFrame, host: pl.DataFrame, device: pl.DataFrame) -> pl.DataFrame:
    """The runtime->device links (``LINKS``); they need no nesting.

    Few activities are left to the flows (3,642 of 287,718 on a 530 MB trace): their flow ends
    are found first, and only the flow starts and runtime calls that can meet them are joined.
    Joining every flow start with every runtime call took 133 MiB above the rows there (live
    memory) and 0.45 s, this 68 MiB and 0.18 s.
    """
    runtime = host.lazy().filter(pl.col("cls") == "runtime")
    dev = device.select("event_id", "correlation", "pid", "tid", "ts_ns")
    by_corr = (
        runtime.filter(pl.col("correlation").is_not_null())
        .select(pl.col("event_id").alias("src_id"), "correlation")
        .filter(pl.col("correlation").is_first_distinct())
        .join(
            dev.lazy()
            .filter(pl.col("correlation").is_not_null())
            .select(pl.col("event_id").alias("dst_id"), "correlation"),
            on="correlation",
            maintain_order="left",
        )
        .select("src_id", "dst_id", kind=pl.lit("runtime->device"), method=pl.lit("correlation"))
        .collect()
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
        ends = ends.join(dev_pos, on=["pid", "tid", "ts_ns"], maintain_order="left").select(
            "flow_id", "dst_id"
        )
        # every start of those flows (the first that meets a call is taken), and the calls at
        # their times
        starts = starts.filter(pl.col("flow_id").is_in(ends["flow_id"].implode()))
        rt_pos = (
            runtime.filter(pl.col("ts_ns").is_in(starts["ts_ns"].implode()))
            .select(pl.col("event_id").alias("src_id"), "pid", "tid", "ts_ns")
            .collect()
        )
        by_flow = (
            starts.join(rt_pos, on=["pid", "tid", "ts_ns"], maintain_order="left")
            .select("flow_id", "src_id")
            .filter(pl.col("flow_id").is_first_distinct())
            .join(ends, on="flow_id", maintain_order="left")
            .select("src_id", "dst_id", kind=pl.lit("runtime->device"), method=pl.lit("flow"))
        )
    return conform(pl.concat([by_corr, by_flow]), LINKS)


def _links(
    rt_dev: pl.DataFrame,
    lost_link: bool,
    ops: pl.DataFrame,
    device: pl.DataFrame,
    op_rt: pl.DataFrame,
) -> pl.DataFrame:
    """Every link (``LINKS``): op->runtime, runtime->device, and op->device.

    A device activity belongs to the scope (op or annotation) whose External id it carries: the
    scope PyTorch appends it to. Where the layout lost that id (``lost_link``), it belongs to the
    scope of its runtime call instead (found by enclosure); a GPU user annotation, which has no
    runtime call, keeps its External id (the CPU annotation it spans).
    """
    by_ext = device.select("event_id", "external_id", "cat")
    via_runtime = pl.DataFrame(schema=LINKS)
    if lost_link:
        via_runtime = rt_dev.join(
            op_rt.select(
                pl.col("src_id").alias("op_id"), pl.col("dst_id").alias("src_id"), "method"
            ),
            on="src_id",
            maintain_order="left",
        ).select(
            pl.col("op_id").alias("src_id"),
            "dst_id",
            kind=pl.lit("op->device"),
            method="method_right",
        )
        by_ext = by_ext.filter(pl.col("cat") == "gpu_user_annotation")
    direct = pl.DataFrame(schema=LINKS)
    by_ext = by_ext.filter(pl.col("external_id").is_not_null())
    if by_ext.height:
        scopes = (
            ops.lazy()
            .filter(pl.col("cls").is_in(["op", "annotation"]))
            .select(pl.col("event_id").alias("src_id"), "external_id")
            .filter(pl.col("external_id").is_first_distinct())
            .collect()
        )
        direct = by_ext.join(scopes, on="external_id", maintain_order="left").select(
            "src_id",
            pl.col("event_id").alias("dst_id"),
            kind=pl.lit("op->device"),
            method=pl.lit("external_id"),
        )
    return pl.concat([op_rt, rt_dev, conform(via_runtime, LINKS), conform(direct, LINKS)])

"""The steps of a trace: its iterations, by one of three rules (``RULES.md`` §8).

=========================  ======================================================================
rule (``step_rule``)       the steps are
=========================  ======================================================================
``ProfilerStep``           the ``ProfilerStep#N`` annotations that ``prof.step()`` writes under a
                           profiler schedule (numbered as the profiler numbered them)
``annotation:<name>``      without them, the instances of the user annotation ``<name>`` that
                           repeats at the top of the thread that dispatches the ops: the
                           iterations a user marked with ``record_function`` (numbered 1, 2, ...
                           in time order); ``--step-annotation NAME`` picks one by hand, in any
                           trace
``window``                 otherwise one step, the whole profiled window: from the first host or
                           device event to the end of the last
=========================  ======================================================================

*The dispatch thread* is the thread (``thread``, as nested) with the most framework ops.
*At the top* means that no framework op and no annotation that repeats encloses the annotation:
an annotation that occurs once on the thread (``record_function("train")`` around the loop) is
looked through, so the iterations inside it are found. PyTorch's own annotations
(:data:`PYTORCH_ANNOTATIONS`: ``Optimizer.step#…``, ``enumerate(DataLoader)#…``, ``nccl:…`` …)
repeat every iteration but mark a part of one, never an iteration, and are never picked by the
automatic rule. Of the annotations that repeat at the top, the one whose instances hold the most
of the thread's framework ops is the step (ties: more instances, then the earlier first
instance, then the name); one that holds no op is none.

By hand, the steps are the outermost instances of the named annotation (an instance inside
another of the same name is part of it) on the thread that holds the most of them. As for
``ProfilerStep#N``, an event belongs to the step whose interval holds its start, and a device
activity to the step of the op that launched it (else of its own start).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl

from nprof_report.errors import InputError
from nprof_report.parse.nesting import give_back_freed, rows_of
from nprof_report.parse.schema import DEVICE, OPS, STEPS, TraceFrames, conform
from nprof_report.textout import format_time_us

PROFILER_STEP = "ProfilerStep"
WINDOW = "window"
ANNOTATION = "annotation:"
WINDOW_NAME = "profiled window"
PYTORCH_ANNOTATIONS = (
    "ProfilerStep#",
    "Optimizer.",
    "enumerate(DataLoader)",
    "DataLoader",
    "nccl:",
    "gloo:",
    "mpi:",
    "c10d::",
    "## ",
    "Torch-Compiled Region",
    "TorchDynamo",
    "CompiledFunction",
    "autograd::",
    "DistributedDataParallel.",
    "torch.distributed",
    "cudaGraph",
)
"""Prefixes of the annotations PyTorch itself records (optimizers, data loaders, collectives,
compiled regions): never a step by the automatic rule."""
_NOTE_MARK = "(step rule: "


def describe(rule: str) -> str:
    """The rule in words, for the caveats and the glossary."""
    if rule == PROFILER_STEP:
        return "the ProfilerStep#N annotations of the profiler's schedule"
    if rule.startswith(ANNOTATION):
        return f"the instances of the user annotation {rule[len(ANNOTATION) :]!r}"
    return "the whole profiled window, as one step"


def with_steps(frames: TraceFrames, annotation: str | None = None) -> TraceFrames:
    """``frames`` with the steps of the rule that applies (module docstring), or of the user
    annotation ``annotation`` when given; the ``step`` of every op and device activity set
    again, and a note saying which rule found them where it was not ``ProfilerStep#N``.

    An ``annotation`` the trace does not hold is an :class:`~nprof_report.errors.InputError`
    naming the annotations that repeat in it.
    """
    profiler = frames.steps if frames.step_rule == PROFILER_STEP else frames.steps.clear()
    name = frames.meta.path.name
    notes = [n for n in frames.notes if _NOTE_MARK not in n]
    ops = frames.ops
    if annotation is not None:
        steps = _annotation_steps(ops, annotation, by_hand=True)
        if steps is None:
            raise InputError(
                frames.meta.path,
                f"holds no user annotation named {annotation!r} (--step-annotation)",
                _hint(ops),
            )
        rule = ANNOTATION + annotation
        notes.append(
            f"{name}: the steps are the {steps.height} instance{'s' * (steps.height != 1)} of "
            f"the user annotation {annotation!r}, picked by --step-annotation {_NOTE_MARK}{rule})"
        )
    elif not profiler.is_empty():
        steps, rule = profiler, PROFILER_STEP
    else:
        found = auto_annotation(ops)
        steps = None if found is None else _annotation_steps(ops, found, by_hand=False)
        if steps is not None and found is not None:
            rule = ANNOTATION + found
            notes.append(
                f"{name}: no ProfilerStep#N annotations; the steps are the {steps.height} "
                f"instances of the user annotation {found!r}, which repeats at the top of the "
                f"thread that dispatches the ops {_NOTE_MARK}{rule})"
            )
        else:
            steps, rule = _window(ops, frames.device), WINDOW
            if not steps.is_empty():
                notes.append(
                    f"{name}: no ProfilerStep#N annotations and no user annotation that repeats "
                    "at the top of the thread that dispatches the ops: the whole profiled window "
                    f"({format_time_us(steps['dur_ns'][0] / 1e3)}) is one step, so step times "
                    "have no spread; --step-annotation NAME makes the instances of a user "
                    f"annotation the steps {_NOTE_MARK}{rule})"
                )
    ops, device = assign(frames.ops, frames.device, frames.links, steps)
    return replace(frames, ops=ops, device=device, steps=steps, notes=notes, step_rule=rule)


def assign(
    ops: pl.DataFrame, device: pl.DataFrame, links: pl.DataFrame, steps: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``OPS`` and ``DEVICE`` with ``step`` set: the step whose ``[start, end)`` holds an op's
    start; a device activity's is its launching op's, else the one holding its start."""
    ops = ops.with_columns(step=assign_step(ops, steps, "start_ns"))
    give_back_freed()  # the arrays of every op that assign_step made and freed
    device = (
        device.drop("step", strict=False)
        .with_columns(
            _op_step=_launching_op_step(ops, device, links),
            _time_step=assign_step(device, steps, "start_ns"),
        )
        .with_columns(step=pl.coalesce("_op_step", "_time_step"))
        .sort("event_id")
    )
    return conform(ops, OPS), conform(device, DEVICE)


def _launching_op_step(ops: pl.DataFrame, device: pl.DataFrame, links: pl.DataFrame) -> pl.Series:
    """The ``step`` of each device activity's op (its first ``op->device`` link), by row of
    ``device``; null without one. The op's row is looked up by event id rather than joined: a
    join builds a hash table of every op (60 MiB on a 530 MB trace)."""
    link = links.filter(pl.col("kind") == "op->device").select("dst_id", "src_id")
    link = link.filter(pl.col("dst_id").is_first_distinct())
    dev_row = rows_of(
        device["event_id"].to_numpy(), link["dst_id"].fill_null(-1).to_numpy().astype(np.int64)
    )
    op_row = rows_of(
        ops["event_id"].to_numpy(), link["src_id"].fill_null(-1).to_numpy().astype(np.int64)
    )
    found = (dev_row >= 0) & (op_row >= 0)
    out = pl.repeat(None, device.height, dtype=pl.Int32, eager=True).alias("_op_step")
    if not found.any():
        return out
    return out.scatter(dev_row[found], ops["step"].gather(pl.Series(op_row[found])))


def assign_step(df: pl.DataFrame, steps: pl.DataFrame, time_col: str) -> pl.Series:
    """Step whose [start, end) interval holds ``time_col`` (null outside every step).

    ``steps`` is in start order; of steps starting at the same time, the last one is taken.
    On arrays: one value per row is all that is made (no Series of picked steps' ends).
    """
    if steps.is_empty() or df.is_empty():
        return pl.Series("step", [None] * len(df), dtype=pl.Int32)
    times = df[time_col]
    t = times.fill_null(0).to_numpy()
    last = np.searchsorted(steps["start_ns"].to_numpy(), t, side="right") - 1
    inside = (last >= 0) & times.is_not_null().to_numpy()
    np.maximum(last, 0, out=last)
    # a step without an end holds nothing (as the comparison with null did)
    ends = steps["end_ns"].fill_null(np.iinfo(np.int64).min).to_numpy()
    inside &= t < ends[last]
    picked = steps["step"].gather(pl.Series(last.astype(np.uint32)))
    return picked.zip_with(pl.Series(inside), pl.Series([None], dtype=pl.Int32)).alias("step")


def dispatch_thread(ops: pl.DataFrame) -> str | None:
    """The thread with the most framework ops (ties: the first by name); None without ops."""
    counts = (
        ops.filter(pl.col("cls") == "op")
        .group_by(pl.col("thread").cast(pl.String))
        .len()
        .sort(["len", "thread"], descending=[True, False])
    )
    return None if counts.is_empty() else str(counts["thread"][0])


def _parents(ops: pl.DataFrame) -> np.ndarray:
    """The row of each row's parent (-1 at the top); ``ops`` is not empty."""
    ids = ops["event_id"].to_numpy()
    order = np.argsort(ids, kind="stable")
    by_id = ids[order]
    parent_ids = ops["parent_id"].fill_null(-1).to_numpy()
    pos = np.minimum(np.searchsorted(by_id, parent_ids), len(ids) - 1)
    found = (parent_ids >= 0) & (by_id[pos] == parent_ids)
    parents: np.ndarray = np.where(found, order[pos], -1)
    return parents


def auto_annotation(ops: pl.DataFrame) -> str | None:
    """The user annotation whose instances are the iterations, by the automatic rule (module
    docstring), or None."""
    thread = dispatch_thread(ops)
    if thread is None:
        return None
    cls = ops["cls"].cast(pl.String).to_numpy()
    names = ops["name"].cast(pl.String).to_numpy()
    on_thread = (ops["thread"].cast(pl.String) == thread).to_numpy()
    annotations = np.flatnonzero(on_thread & (cls == "annotation"))
    if not len(annotations):
        return None
    count: dict[str, int] = {}
    for k in annotations:
        count[names[k]] = count.get(names[k], 0) + 1
    parent = _parents(ops)
    candidates: dict[str, list[int]] = {}
    for k in annotations:
        name = names[k]
        if count[name] < 2 or name.startswith(PYTORCH_ANNOTATIONS):
            continue
        up = parent[k]
        while up >= 0 and (
            cls[up] == "python" or (cls[up] == "annotation" and count.get(names[up], 0) == 1)
        ):
            up = parent[up]
        if up < 0:
            candidates.setdefault(name, []).append(int(k))
    best: tuple[int, int, int, str] | None = None
    op_starts = np.sort(
        ops.filter((pl.col("cls") == "op") & (pl.col("thread").cast(pl.String) == thread))[
            "start_ns"
        ].to_numpy()
    )
    starts = ops["start_ns"].to_numpy()
    ends = ops["end_ns"].to_numpy()
    for name, rows in candidates.items():
        if len(rows) < 2:
            continue
        held = sum(
            int(np.searchsorted(op_starts, ends[k]) - np.searchsorted(op_starts, starts[k]))
            for k in rows
        )
        first = int(min(starts[k] for k in rows))
        key = (-held, -len(rows), first, name)
        if held > 0 and (best is None or key < best):
            best = key
    return None if best is None else best[3]


def _annotation_steps(ops: pl.DataFrame, name: str, *, by_hand: bool) -> pl.DataFrame | None:
    """``STEPS`` of the outermost instances of the annotation ``name`` on the thread holding the
    most of them (the dispatch thread when it holds as many); None when there is none."""
    rows = ops.with_row_index("_row").filter(
        (pl.col("cls") == "annotation") & (pl.col("name").cast(pl.String) == name)
    )
    if rows.is_empty():
        return None
    main = dispatch_thread(ops)
    per_thread = (
        rows.group_by(pl.col("thread").cast(pl.String))
        .len()
        .with_columns(main=pl.col("thread") == pl.lit(main))
        .sort(["len", "main", "thread"], descending=[True, True, False])
    )
    thread = per_thread["thread"][0]
    rows = rows.filter(pl.col("thread").cast(pl.String) == thread).sort(
        ["start_ns", "end_ns"], descending=[False, True]
    )
    # outermost: not inside an earlier instance (they nest on one thread, or follow each other)
    keep, reach = [], None
    for start, end in zip(rows["start_ns"].to_list(), rows["end_ns"].to_list()):
        inside = reach is not None and start < reach and end <= reach
        keep.append(not inside)
        if not inside:
            reach = end
    rows = rows.filter(pl.Series(keep))
    return conform(
        rows.select(
            step=pl.int_range(1, rows.height + 1, dtype=pl.Int32),
            name=pl.col("name").cast(pl.String),
            start_ns="start_ns",
            end_ns="end_ns",
            dur_ns=pl.col("end_ns") - pl.col("start_ns"),
        ),
        STEPS,
    )


def _window(ops: pl.DataFrame, device: pl.DataFrame) -> pl.DataFrame:
    """``STEPS`` of one step from the first host or device event to the end of the last (none
    without events)."""
    starts = [f["start_ns"].min() for f in (ops, device) if f.height]
    ends = [f["end_ns"].max() for f in (ops, device) if f.height]
    if not starts:
        return pl.DataFrame(schema=STEPS)
    start, end = min(starts), max(ends)  # type: ignore[type-var]
    return pl.DataFrame(
        {"step": [1], "name": [WINDOW_NAME], "start_ns": [start], "end_ns": [end]},
        schema={n: STEPS[n] for n in ("step", "name", "start_ns", "end_ns")},
    ).with_columns(dur_ns=pl.col("end_ns") - pl.col("start_ns"))


def _hint(ops: pl.DataFrame, most: int = 5) -> str:
    """The annotations that repeat in ``ops``, most frequent first."""
    names = (
        ops.filter(pl.col("cls") == "annotation")
        .group_by(pl.col("name").cast(pl.String))
        .len()
        .filter(pl.col("len") >= 2)
        .sort(["len", "name"], descending=[True, False])
        .head(most)
    )
    if names.is_empty():
        return "the trace holds no user annotation that repeats"
    listed = ", ".join(f"{n!r} ({c}×)" for n, c in names.iter_rows())
    return f"annotations that repeat in it: {listed}"

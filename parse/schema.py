"""Declared schemas of the frames that parse hands to report.

Short, repeated text (phase, category, name, pid, tid, thread, class) is ``Categorical``: a
500 MB trace holds millions of events but a few hundred distinct names, and a String column
would store every name again (Polars' categories are global, so frames join and compare on
them directly; use ``.cat.starts_with`` or cast to ``pl.String`` for string functions).

All times are Int64 nanoseconds on the wall clock (Unix epoch): Kineto's relative ``ts`` is shifted
by ``baseTimeNanoseconds`` and the 2023 layout's absolute microseconds are scaled, so frames from
traces of either convention, and Neuron Explorer's epoch-ns tables, share one clock.

``EVENTS`` -- one row per trace event, any phase, in file order:

=============  =======  =======================================================================
column         dtype    meaning
=============  =======  =======================================================================
event_id       Int64    index of the event in ``traceEvents`` (stable key for every other frame)
ph             Cat      phase (``X``, ``i``, ``M``, ``s``, ``f``, ...)
cat            Cat      category; null on ``M`` rows and global instants
name           Cat      event name
pid, tid       Cat      Kineto mixes ints and labels (``"Spans"``), so both are kept as text
ts_ns          Int64    start, epoch ns
dur_ns         Int64    duration in ns; null when the event has none
flow_id        String   ``id`` of flow events (``s``/``f``), else null
bp             String   flow binding point (``e`` on ``f`` ends)
external_id    Int64    ``args["External id"]``
correlation    Int64    ``args["correlation"]``
args           String   the event's ``args`` as JSON text (null when absent)
=============  =======  =======================================================================

``OPS`` -- the CPU-typed, synchronous events that key_averages nests (framework ops, annotations,
runtime/driver calls), with their nesting:

``event_id, cls, cat, name, pid, tid, thread, start_ns, end_ns, dur_ns, external_id,
correlation, parent_id, depth, self_ns, step``. ``cls`` is ``op``, ``annotation`` or ``runtime``;
``thread`` is the nesting group (a runtime call linked to an op is moved onto the op's thread, as
PyTorch does); ``parent_id`` is null at the top; ``step`` is the step (``STEPS``) whose interval
holds the event's start (null outside steps).

``DEVICE`` -- device activities (kernels, copies, syncs): ``event_id, cat, name, pid, tid,
start_ns, end_ns, dur_ns, external_id, correlation, step``.

``LINKS`` -- one edge per link: ``src_id, dst_id, kind, method``. ``kind`` is ``op->runtime``,
``runtime->device`` or ``op->device``; ``method`` says how the link was made: ``external_id``,
``correlation``, ``flow`` or ``enclosing`` (time containment on the launching thread).

``STEPS`` -- ``step, name, start_ns, end_ns, dur_ns``, one row per step: a ``ProfilerStep#N``
annotation, else an instance of the user annotation that marks the iterations, else the whole
profiled window (``TraceFrames.step_rule`` says which, :mod:`.steps`).

``WORK_ROWS`` selects the events that ops, device activities, steps and links are made of
(complete ``X`` events and the two ends of ``ac2g`` flows); a loader asked for the work rows
only keeps these and drops the rest (instants, counters, metadata, memory events) as it reads,
in ``WORK_EVENTS`` columns (``EVENTS`` without ``bp`` and ``args``, which nothing derived reads).

The frames travel together: :class:`Trace` (a reader's events), :class:`TraceFrames` (what
parse derives from one trace), both with the trace's :class:`TraceMeta`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

EVENTS = pl.Schema(
    {
        "event_id": pl.Int64(),
        "ph": pl.Categorical(),
        "cat": pl.Categorical(),
        "name": pl.Categorical(),
        "pid": pl.Categorical(),
        "tid": pl.Categorical(),
        "ts_ns": pl.Int64(),
        "dur_ns": pl.Int64(),
        "flow_id": pl.String(),
        "bp": pl.String(),
        "external_id": pl.Int64(),
        "correlation": pl.Int64(),
        "args": pl.String(),
    }
)

WORK_ROWS = (pl.col("ph") == "X") | ((pl.col("cat") == "ac2g") & pl.col("ph").is_in(["s", "f"]))

WORK_EVENTS = pl.Schema({n: t for n, t in EVENTS.items() if n not in ("bp", "args")})

OPS = pl.Schema(
    {
        "event_id": pl.Int64(),
        "cls": pl.Categorical(),
        "cat": pl.Categorical(),
        "name": pl.Categorical(),
        "pid": pl.Categorical(),
        "tid": pl.Categorical(),
        "thread": pl.Categorical(),
        "start_ns": pl.Int64(),
        "end_ns": pl.Int64(),
        "dur_ns": pl.Int64(),
        "external_id": pl.Int64(),
        "correlation": pl.Int64(),
        "parent_id": pl.Int64(),
        "depth": pl.Int32(),
        "self_ns": pl.Int64(),
        "step": pl.Int32(),
    }
)

DEVICE = pl.Schema(
    {
        "event_id": pl.Int64(),
        "cat": pl.Categorical(),
        "name": pl.Categorical(),
        "pid": pl.Categorical(),
        "tid": pl.Categorical(),
        "start_ns": pl.Int64(),
        "end_ns": pl.Int64(),
        "dur_ns": pl.Int64(),
        "external_id": pl.Int64(),
        "correlation": pl.Int64(),
        "step": pl.Int32(),
    }
)

LINKS = pl.Schema(
    {
        "src_id": pl.Int64(),
        "dst_id": pl.Int64(),
        "kind": pl.String(),
        "method": pl.String(),
    }
)

STEPS = pl.Schema(
    {
        "step": pl.Int32(),
        "name": pl.String(),
        "start_ns": pl.Int64(),
        "end_ns": pl.Int64(),
        "dur_ns": pl.Int64(),
    }
)


def conform(df: pl.DataFrame, schema: pl.Schema) -> pl.DataFrame:
    """Select the schema's columns in order and cast them; missing columns become nulls."""
    return df.select(
        [
            (pl.col(n) if n in df.columns else pl.lit(None)).cast(t).alias(n)
            for n, t in schema.items()
        ]
    )


@dataclass(frozen=True)
class TraceMeta:
    """Top-level facts about one trace file."""

    path: Path
    base_time_ns: int | None
    timestamp_convention: str  # "relative" (baseTimeNanoseconds) or "absolute-us"
    schema_version: int | None
    host_name: str | None
    device_properties: list[dict[str, Any]]
    distributed_info: dict[str, Any] | None
    record_shapes: bool
    profile_memory: bool


@dataclass(frozen=True)
class Trace:
    """A loaded trace: its metadata, its events as an ``EVENTS`` frame, and recovery notes."""

    meta: TraceMeta
    events: pl.DataFrame
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TraceFrames:
    """Every frame parse derives from one trace (schemas above).

    ``events`` is None when the trace was loaded for the derived frames only
    (``load_frames(..., work_only=True)``): millions of rows nobody reads are not kept.
    ``step_rule`` is the rule that found the steps (:mod:`.steps`): ``ProfilerStep``,
    ``annotation:<name>`` or ``window``.
    """

    meta: TraceMeta
    events: pl.DataFrame | None
    ops: pl.DataFrame
    device: pl.DataFrame
    links: pl.DataFrame
    steps: pl.DataFrame
    notes: list[str] = field(default_factory=list)
    step_rule: str = "ProfilerStep"
    # counts derive found, as JSON values (the cache keeps them): ``partial_overlaps`` (events
    # not nested because they partially overlap another on their thread) and
    # ``privateuse1_driver`` (``meaning``, ``rows``, ``evidence``: :mod:`.privateuse1`'s decision)
    facts: dict[str, Any] = field(default_factory=dict)

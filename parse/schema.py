"""Declared schemas of the frames that parse hands to report.

All times are Int64 nanoseconds on the wall clock (Unix epoch): Kineto's relative ``ts`` is shifted
by ``baseTimeNanoseconds`` and the 2023 layout's absolute microseconds are scaled, so frames from
traces of either convention, and Neuron Explorer's epoch-ns tables, share one clock.

``EVENTS`` -- one row per trace event, any phase, in file order:

=============  =======  =======================================================================
column         dtype    meaning
=============  =======  =======================================================================
event_id       Int64    index of the event in ``traceEvents`` (stable key for every other frame)
ph             String   phase (``X``, ``i``, ``M``, ``s``, ``f``, ...)
cat            String   category; null on ``M`` rows and global instants
name           String   event name
pid, tid       String   Kineto mixes ints and labels (``"Spans"``), so both are kept as text
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
PyTorch does); ``parent_id`` is null at the top; ``step`` is the ``ProfilerStep#N`` whose interval
holds the event's start (null outside steps).

``DEVICE`` -- device activities (kernels, copies, syncs): ``event_id, cat, name, pid, tid,
start_ns, end_ns, dur_ns, external_id, correlation, step``.

``LINKS`` -- one edge per link: ``src_id, dst_id, kind, method``. ``kind`` is ``op->runtime``,
``runtime->device`` or ``op->device``; ``method`` says how the link was made: ``external_id``,
``correlation``, ``flow`` or ``enclosing`` (time containment on the launching thread).

``STEPS`` -- ``step, name, start_ns, end_ns, dur_ns``, one row per ``ProfilerStep#N`` annotation.
"""

from __future__ import annotations

import polars as pl

EVENTS = pl.Schema(
    {
        "event_id": pl.Int64,
        "ph": pl.String,
        "cat": pl.String,
        "name": pl.String,
        "pid": pl.String,
        "tid": pl.String,
        "ts_ns": pl.Int64,
        "dur_ns": pl.Int64,
        "flow_id": pl.String,
        "bp": pl.String,
        "external_id": pl.Int64,
        "correlation": pl.Int64,
        "args": pl.String,
    }
)

OPS = pl.Schema(
    {
        "event_id": pl.Int64,
        "cls": pl.String,
        "cat": pl.String,
        "name": pl.String,
        "pid": pl.String,
        "tid": pl.String,
        "thread": pl.String,
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,
        "dur_ns": pl.Int64,
        "external_id": pl.Int64,
        "correlation": pl.Int64,
        "parent_id": pl.Int64,
        "depth": pl.Int32,
        "self_ns": pl.Int64,
        "step": pl.Int32,
    }
)

DEVICE = pl.Schema(
    {
        "event_id": pl.Int64,
        "cat": pl.String,
        "name": pl.String,
        "pid": pl.String,
        "tid": pl.String,
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,
        "dur_ns": pl.Int64,
        "external_id": pl.Int64,
        "correlation": pl.Int64,
        "step": pl.Int32,
    }
)

LINKS = pl.Schema(
    {
        "src_id": pl.Int64,
        "dst_id": pl.Int64,
        "kind": pl.String,
        "method": pl.String,
    }
)

STEPS = pl.Schema(
    {
        "step": pl.Int32,
        "name": pl.String,
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,
        "dur_ns": pl.Int64,
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

"""The reference loader: a Kineto ``trace.json`` (plain, ``.gz``, or the bare Chrome JSON Array
Format) decoded whole, then read event by event.

The other routes (:mod:`.stream`, :mod:`.split`) give what this one gives, and hand it any file
that is not a clean trace, so errors and recoveries are worded here. The loader checks the input and fails with :class:`~nprof_report.errors.InputError` (one line naming
the file) when it cannot be used. Damage that can be recovered -- a ``traceEvents`` array cut short,
events with missing or mistyped fields -- is recovered and described in ``Trace.notes``, which the
report lists among its caveats.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from nprof_report.errors import InputError
from nprof_report.parse.read.rows import (
    ESCAPED_NAME,
    EventRows,
    as_int,
    clean_text,
    counter_notes,
    label_text,
    orjson_int,
)
from nprof_report.parse.read.source import open_trace
from nprof_report.parse.schema import EVENTS, Trace, TraceMeta

# Relative Kineto timestamps stay below the 3-month window (about 7.9e12 us); absolute epoch
# microseconds of the 2023 layout are about 1.7e15 (formats.md 1.2).
_RELATIVE_TS_LIMIT_US = 1e14


def read_bytes(path: Path) -> bytes:
    """Read a file, decompressing gzip by its magic number (:func:`~.source.open_trace`)."""
    with open_trace(path) as trace:
        data = trace.read_all()
    if not data.strip():
        raise InputError(path, "is empty")
    return data


def _decode_document(path: Path, data: bytes) -> tuple[Any, list[str]]:
    """Decode JSON; on failure try to recover the complete events of a truncated trace."""
    try:
        return orjson.loads(data), []
    except orjson.JSONDecodeError as exc:
        if b"\x00" in data[:4096]:
            raise InputError(path, "is a binary file, not a JSON trace") from exc
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as uexc:
            raise InputError(
                path, f"is not UTF-8 text (byte {uexc.start})", "re-export the trace as UTF-8"
            ) from uexc
        message = str(exc).lower()
        if "recursion" in message or "depth limit" in message:
            raise InputError(path, "JSON is nested too deeply to be a trace") from exc
        lenient = _decode_lenient(data)
        if lenient is not None:
            return lenient, [
                f"{path.name}: non-standard JSON numbers (NaN, Infinity or out of range) were "
                "read as missing values"
            ]
        recovered = _recover_truncated(data)
        if recovered is None:
            raise InputError(path, f"is not valid JSON ({exc})") from exc
        events, used = recovered
        lost = len(data) - used
        note = (
            f"{path.name}: traceEvents array is cut short; read {len(events)} complete events, "
            f"lost the last {lost} bytes ({100 * lost / len(data):.1f}% of the file)"
        )
        return {"traceEvents": events}, [note]


def _decode_lenient(data: bytes) -> Any:
    """The stdlib parser accepts NaN, Infinity and huge numbers, which orjson refuses."""
    try:
        return json.loads(data, parse_int=orjson_int)
    except (json.JSONDecodeError, RecursionError, UnicodeDecodeError):
        return None


def _recover_truncated(data: bytes) -> tuple[list[Any], int] | None:
    """Decode the complete objects of a ``traceEvents`` array that was cut short."""
    text = data.decode("utf-8")
    key = text.find('"traceEvents"')
    start = text.find("[", key) if key >= 0 else (0 if text.lstrip().startswith("[") else -1)
    if start < 0:
        return None
    decoder = json.JSONDecoder(parse_int=orjson_int)
    pos, events = start + 1, []
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        try:
            obj, end = decoder.raw_decode(text, pos)
        except (json.JSONDecodeError, RecursionError):
            break
        events.append(obj)
        pos = end
    if not events:
        return None
    return events, len(text[:pos].encode("utf-8"))


def read_trace(path: Path) -> Trace:
    """Load one Kineto trace file into an ``EVENTS`` frame (see :mod:`.schema`)."""
    path = Path(path)
    data = read_bytes(path)
    doc, notes = _decode_document(path, data)
    if isinstance(doc, list):  # Chrome JSON Array Format: the events alone
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise InputError(
            path,
            'is JSON but not a trace (no "traceEvents" list)',
            "pass a torch.profiler trace.json",
        )
    rows = EventRows()
    for index, ev in enumerate(doc["traceEvents"]):
        rows.add(index, ev)
    notes += counter_notes(path, rows.bad, rows.negative)
    return assemble(path, doc, pl.DataFrame(rows.cols, schema=EVENTS), notes)


def assemble(
    path: Path,
    doc: dict[str, Any],
    events: pl.DataFrame,
    notes: list[str],
    escaped: int | None = None,
) -> Trace:
    """Metadata and the epoch clock from the document's top-level keys (shared by both loaders).

    ``events`` carries raw ``ts_ns`` (the file's microseconds x 1000); the base is added here.
    ``escaped`` is the number of names with control characters when ``events`` is not every
    event of the file (counted by the loader before it dropped rows).
    """
    if escaped is None:
        escaped = int(events["name"].cast(pl.String).str.contains(ESCAPED_NAME).sum())
    meta = describe(path, doc, notes, escaped, latest_complete(events))
    if meta.base_time_ns is not None:
        events = events.with_columns(pl.col("ts_ns") + meta.base_time_ns)
    return Trace(meta=meta, events=events, notes=notes)


def latest_complete(events: pl.DataFrame) -> int | None:
    """The largest raw ``ts_ns`` of a complete (``X``) event, for :func:`describe`."""
    latest: int | None = events.select(pl.col("ts_ns").filter(pl.col("ph") == "X").max()).item()
    return latest


def describe(
    path: Path, doc: dict[str, Any], notes: list[str], escaped: int, latest_x: int | None
) -> TraceMeta:
    """Metadata from the document's top-level keys; its notes are appended to ``notes``.

    ``escaped``: names with control characters; ``latest_x``: the largest raw ``ts_ns`` of a
    complete (``X``) event, which tells a relative clock when there is no base time. The caller
    adds ``base_time_ns`` to the raw times.
    """
    if escaped:
        notes.append(
            f"{path.name}: {escaped} event names held control characters, shown as \\xNN escapes"
        )
    if isinstance(doc.get("nprof_constructed"), str):
        notes.append(
            f"{path.name}: CONSTRUCTED trace, not a capture: {clean_text(doc['nprof_constructed'])}"
        )
    base = as_int(doc.get("baseTimeNanoseconds"))
    convention = "relative"
    if base is None:
        convention = "absolute-us"
        if latest_x is not None and latest_x < _RELATIVE_TS_LIMIT_US * 1000:
            convention = "relative-no-base"
            notes.append(
                f"{path.name}: timestamps look relative but the trace has no baseTimeNanoseconds; "
                "absolute times are unknown"
            )
    devprops = doc.get("deviceProperties")
    dist = doc.get("distributedInfo")
    return TraceMeta(
        path=path,
        base_time_ns=base,
        timestamp_convention=convention,
        schema_version=as_int(doc.get("schemaVersion")),
        host_name=label_text(doc.get("host_name")),
        device_properties=[d for d in devprops if isinstance(d, dict)]
        if isinstance(devprops, list)
        else [],
        distributed_info=dist if isinstance(dist, dict) else None,
        record_shapes=bool(doc.get("record_shapes")),
        profile_memory=bool(doc.get("profile_memory")),
    )

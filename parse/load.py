"""Read a Kineto ``trace.json`` (plain, ``.gz``, or the bare Chrome JSON Array Format) into frames.

The loader checks the input and fails with :class:`~nprof_report.errors.InputError` (one line naming
the file) when it cannot be used. Damage that can be recovered -- a ``traceEvents`` array cut short,
events with missing or mistyped fields -- is recovered and described in ``Trace.notes``, which the
report lists among its caveats.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from nprof_report.errors import InputError
from nprof_report.parse.schema import EVENTS

# Relative Kineto timestamps stay below the 3-month window (about 7.9e12 us); absolute epoch
# microseconds of the 2023 layout are about 1.7e15 (formats.md 1.2).
_RELATIVE_TS_LIMIT_US = 1e14
_MAX_INT64 = 2**63 - 1
# a name that clean_text escaped
ESCAPED_NAME = r"\\x[0-9a-f]{2}"


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


def read_bytes(path: Path) -> bytes:
    """Read a file, decompressing gzip by its magic number; a cut-short gzip is an InputError."""
    try:
        data = path.read_bytes()
    except IsADirectoryError as exc:
        raise InputError(path, "is a folder, expected a trace file") from exc
    except FileNotFoundError as exc:
        raise InputError(path, "does not exist") from exc
    except OSError as exc:
        raise InputError(path, f"cannot be read ({exc.strerror})") from exc
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, zlib.error) as exc:
            raise InputError(
                path, "gzip data is cut short or corrupt", "copy the file again"
            ) from exc
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


def orjson_int(text: str) -> int | float:
    """Parse an integer as orjson does: beyond the 64-bit range it becomes a float.

    The stdlib parsers used for recovery take this hook, so that every loader reads the same
    numbers whichever parser a file's damage sends it through.
    """
    value = int(text)
    return value if -(2**63) <= value < 2**64 else float(text)


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


def as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if -_MAX_INT64 <= value <= _MAX_INT64 else None
    if isinstance(value, float) and math.isfinite(value) and abs(value) < 9.2e18:
        return int(value)
    if isinstance(value, str):
        try:
            return as_int(int(value, 0))
        except ValueError:
            return None
    return None


def as_us(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        v = float(value)
        return v if math.isfinite(v) and abs(v) < 9.2e15 else None
    if isinstance(value, str):  # some PrivateUse1 exporters write string timestamps
        try:
            return as_us(float(value))
        except ValueError:
            return None
    return None


# Below this many µs, ``round(us * 1000)`` is exact for the three decimals Kineto writes (the
# product stays under 2**53); above it the product is rounded to a multiple of up to 128 ns
EXACT_PRODUCT_US = 2.0**43


def us_to_ns(us: float) -> int:
    """Integer nanoseconds of a time in µs, as the file wrote it.

    Exact for whole µs below 2**53 (the 16-digit epoch times of the 2021-2023 layouts, which
    ``round(us * 1000)`` moved by up to 128 ns) and for three decimals below 2**43 µs (the
    relative times of the current layout): the whole µs are scaled as an integer, only the
    fraction in floating point.
    """
    if -EXACT_PRODUCT_US < us < EXACT_PRODUCT_US:
        return round(us * 1000)
    whole = math.floor(us)
    return int(whole) * 1000 + round((us - whole) * 1000)


def label_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(int(value)) if float(value).is_integer() else str(value)
    return str(value)


def clean_text(text: Any) -> str | None:
    """Names may carry control characters; keep them printable."""
    if text is None:
        return None
    s = text if isinstance(text, str) else str(text)
    if any(ord(c) < 32 or ord(c) == 127 for c in s):
        s = "".join(c if ord(c) >= 32 and ord(c) != 127 else f"\\x{ord(c):02x}" for c in s)
    return s


def _args_text(args: dict[str, Any]) -> str:
    try:
        return orjson.dumps(args).decode()
    except TypeError:  # integers beyond 64 bits, read by the lenient parser
        return json.dumps(args, separators=(",", ":"), ensure_ascii=False, default=str)


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
    raw = doc["traceEvents"]
    cols: dict[str, list[Any]] = {name: [] for name in EVENTS.names()}
    bad = 0
    negative = 0
    for index, ev in enumerate(raw):
        if not isinstance(ev, dict):
            bad += 1
            continue
        ts = as_us(ev.get("ts", 0 if ev.get("ph") == "M" else None))
        if ts is None:
            bad += 1
            continue
        dur = as_us(ev.get("dur")) if "dur" in ev else None
        if dur is not None and dur < 0:
            negative += 1
            dur = 0.0
        args = ev.get("args")
        args = args if isinstance(args, dict) else None
        cols["event_id"].append(index)
        cols["ph"].append(label_text(ev.get("ph")))
        cols["cat"].append(clean_text(ev.get("cat")))
        cols["name"].append(clean_text(ev.get("name")) or "")
        cols["pid"].append(label_text(ev.get("pid")))
        cols["tid"].append(label_text(ev.get("tid")))
        cols["ts_ns"].append(us_to_ns(ts))
        cols["dur_ns"].append(None if dur is None else us_to_ns(dur))
        cols["flow_id"].append(label_text(ev.get("id")))
        cols["bp"].append(label_text(ev.get("bp")))
        ext = args.get("External id", args.get("external id")) if args else None
        cols["external_id"].append(as_int(ext))
        cols["correlation"].append(as_int(args.get("correlation")) if args else None)
        cols["args"].append(_args_text(args) if args else None)
    if bad:
        notes.append(f"{path.name}: skipped {bad} events with a missing or mistyped ts")
    if negative:
        notes.append(f"{path.name}: {negative} events had a negative duration, read as 0")
    return assemble(path, doc, pl.DataFrame(cols, schema=EVENTS), notes)


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

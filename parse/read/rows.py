"""The per-event row rules, written once: how one trace event becomes one ``EVENTS`` row.

Every route reads the fields by these rules: the reference loader (:mod:`.reference`) and the
streaming loader's per-event path (:mod:`.columns`, for pieces its typed decoders refuse) through
:class:`EventRows`; the typed decoders (:mod:`.columns`, :mod:`.polars_json`) apply them
vectorised and refuse any value they could read differently. ``ts`` missing (``M`` rows: 0) or
unusable skips the event; a negative ``dur`` reads as 0; ids (``pid``, ``tid``, flow ``id``) are
kept as text, ``External id`` / ``correlation`` as integers within 64 bits, names with control
characters escaped.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import orjson

from nprof_report.parse.schema import EVENTS

_MAX_INT64 = 2**63 - 1
# a name that clean_text escaped
ESCAPED_NAME = r"\\x[0-9a-f]{2}"


def orjson_int(text: str) -> int | float:
    """Parse an integer as orjson does: beyond the 64-bit range it becomes a float.

    The stdlib parsers used for recovery take this hook, so that every loader reads the same
    numbers whichever parser a file's damage sends it through.
    """
    value = int(text)
    return value if -(2**63) <= value < 2**64 else float(text)


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


def args_text(args: dict[str, Any]) -> str:
    """``args`` as compact JSON text, as orjson writes it."""
    try:
        return orjson.dumps(args).decode()
    except TypeError:  # integers beyond 64 bits, read by the lenient parser
        return json.dumps(args, separators=(",", ":"), ensure_ascii=False, default=str)


class EventRows:
    """``EVENTS`` columns (labels as text) built one event at a time, and the counters behind
    :func:`counter_notes`. ``keep_args=False`` stores no ``args`` text (work rows)."""

    def __init__(self, *, keep_args: bool = True) -> None:
        self.cols: dict[str, list[Any]] = {name: [] for name in EVENTS.names()}
        self.keep_args = keep_args
        self.bad = 0  # skipped: not an object, or no usable ts
        self.negative = 0  # negative durations, read as 0

    def add(self, index: int, ev: Any) -> None:
        """Add event number ``index`` of ``traceEvents`` (or count it as skipped)."""
        if not isinstance(ev, dict):
            self.bad += 1
            return
        ts = as_us(ev.get("ts", 0 if ev.get("ph") == "M" else None))
        if ts is None:
            self.bad += 1
            return
        dur = as_us(ev.get("dur")) if "dur" in ev else None
        if dur is not None and dur < 0:
            self.negative += 1
            dur = 0.0
        args = ev.get("args")
        args = args if isinstance(args, dict) else None
        cols = self.cols
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
        cols["args"].append(args_text(args) if args and self.keep_args else None)


def counter_notes(path: Path, bad: int, negative: int) -> list[str]:
    """The notes on skipped events and negative durations."""
    notes = []
    if bad:
        notes.append(f"{path.name}: skipped {bad} events with a missing or mistyped ts")
    if negative:
        notes.append(f"{path.name}: {negative} events had a negative duration, read as 0")
    return notes

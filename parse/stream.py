"""Chunked, bounded-memory loader for large Kineto ``trace.json`` files.

:func:`read_trace_stream` returns the same :class:`~nprof_report.parse.load.Trace` as
:func:`~nprof_report.parse.load.read_trace` -- the same ``EVENTS`` frame (columns, dtypes, values,
row order), the same metadata and the same recovery notes -- but never holds the whole document or
its Python objects in memory. It reads the file (plain, gzip by magic number, single-line or
pretty-printed, object or bare Chrome JSON Array Format) in windows of ``chunk_bytes``:

1. A small tokenizer finds the top-level ``"traceEvents"`` array. Every other top-level key, before
   or after the array, is kept as text and decoded at the end as a *skeleton* document (the array
   replaced by ``[]``), so metadata follows exactly the rules of ``read_trace``.
2. Each window is cut after the last ``}`` ``,`` ``{`` boundary (any whitespace between). A cut
   that falls inside a string always yields invalid JSON, so decoding the piece validates the cut;
   on failure the previous boundary is tried, and when none works the window grows (an event
   larger than the window).
3. A piece is compacted with ``msgspec.json.format(indent=-1)`` and decoded into typed
   ``msgspec`` structs with ``args`` kept as ``msgspec.Raw``; ``External id`` / ``correlation``
   come from one batched typed decode of the piece's raw ``args``. Columns are built with Polars
   per piece and concatenated without rechunking.

Field rules are those of ``read_trace`` (``as_int``, ``as_us``, ``label_text``, ``clean_text``, missing
``ts`` skipped, ``M`` rows default to ``ts`` 0, negative durations read as 0). Pieces with unusual
types (a boolean ``pid``, a float flow ``id``, a string ``External id`` ...) fail the typed decode
and are read by a per-event Python path that applies ``read_trace``'s own helpers.

``args`` text: ``read_trace`` stores ``orjson.dumps(args)``. Here the raw ``args`` JSON is compacted
(whitespace outside strings removed), which is byte-identical to ``orjson.dumps`` for keys,
strings without escapes, integers, ``true``/``false``/``null``. The rows whose text may differ --
a backslash escape, a float or exponent, ``-0``, an integer of 19+ digits -- are found with one
vectorised regex and re-encoded with ``orjson.loads``/``orjson.dumps``, so the column is
byte-identical. Known, deliberate differences (documented, not worth a per-row cost): an ``args``
object with duplicate keys keeps them all here (orjson keeps the last), and JSON nested deeper
than orjson's limit of 1024 levels is accepted here.

Damage: a ``traceEvents`` array cut short (or garbage after its last complete event) keeps the
complete events and adds the same note as ``read_trace``; the top-level keys are then dropped, as
``read_trace`` does. Anything else that is not a clean trace (not JSON, binary, not UTF-8, no
``traceEvents`` list, gzip damage ...) is handed to ``read_trace`` itself, which raises the
``InputError`` -- so errors are word-for-word identical, at the cost of the reference loader's
memory on such (broken) files only.
"""

from __future__ import annotations

import codecs
import gzip
import json
import math
import mmap
import re
import zlib
from operator import attrgetter
from pathlib import Path
from typing import IO, Annotated, Any

import msgspec
import orjson
import polars as pl

from nprof_report.errors import InputError
from nprof_report.parse.load import (
    ESCAPED_NAME,
    EXACT_PRODUCT_US,
    Trace,
    as_int,
    as_us,
    assemble,
    clean_text,
    label_text,
    orjson_int,
    read_trace,
    us_to_ns,
)
from nprof_report.parse.polars_json import BOUNDARY, CONTROL, clean_column, decode_piece
from nprof_report.parse.schema import EVENTS, WORK_EVENTS, WORK_ROWS

__all__ = ["read_trace_stream"]

_NAN = math.nan
_NULL_RAW = msgspec.Raw(b"null")
_I64 = Annotated[int, msgspec.Meta(ge=-(2**63 - 1), le=2**63 - 1)]
_US_LIMIT = 9.2e15


class _EvBase(msgspec.Struct, gc=False):
    """One event, typed as real traces write it; anything else fails and takes the slow path."""

    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    pid: _I64 | str | None = None
    tid: _I64 | str | None = None
    ts: float | str | None = _NAN  # NaN (impossible in JSON) marks a missing key
    dur: float | str | None = _NAN
    id: _I64 | str | None = None
    bp: str | None = None


class _Ev(_EvBase, gc=False):
    args: msgspec.Raw = _NULL_RAW


class _Ids(msgspec.Struct, gc=False):
    ext: _I64 | None = msgspec.field(name="External id", default=None)
    correlation: _I64 | None = None


class _IdsLower(msgspec.Struct, gc=False):
    """Both spellings, to apply ``args.get("External id", args.get("external id"))`` exactly."""

    ext: Any = msgspec.field(name="External id", default=msgspec.UNSET)
    ext_lower: Any = msgspec.field(name="external id", default=msgspec.UNSET)
    correlation: Any = None


class _EvIds(_EvBase, gc=False):
    """An event whose args are read for the ids only (``work_only``)."""

    args: _Ids | None = msgspec.field(default_factory=_Ids)


class _EvIdsLower(_EvBase, gc=False):
    args: _IdsLower | None = None


_NO_IDS = _Ids()
_GET_EXT = attrgetter("ext")
_GET_CORR = attrgetter("correlation")
_EV_DEC = msgspec.json.Decoder(list[_Ev])
_EV_IDS_DEC = msgspec.json.Decoder(list[_EvIds])
_EV_IDS_LOWER_DEC = msgspec.json.Decoder(list[_EvIdsLower])
_IDS_DEC = msgspec.json.Decoder(list[_Ids | None])
_IDS_LOWER_DEC = msgspec.json.Decoder(list[_IdsLower | None])
_EV_FIELDS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "bp", "args")
_GET = {f: attrgetter(f) for f in _EV_FIELDS}

# top-level tokens: complete strings, a lone quote (string not finished yet), structure
_TOK = re.compile(rb'"(?:[^"\\]|\\.)*"|["{}\[\]:]', re.S)
_WS = b" \t\r\n"
# args text that orjson.dumps may write differently from the compacted input
_REENCODE = r"\\|[:,\[]-?[0-9]+[.eE]|[:,\[]-0[,\]}]|[0-9]{19}"
_MAX_CUT_TRIES = 4
# EVENTS with its Categorical columns as text: a piece's frame before it is stored
_TEXT_EVENTS = pl.Schema({n: pl.String if t == pl.Categorical() else t for n, t in EVENTS.items()})
_TAIL_WINDOW = 1 << 16
_RECOVER_LIMIT = 64 << 20  # a damaged element bigger than this ends the recovery


class _Fallback(Exception):
    """The file is not a clean trace: let ``read_trace`` decide (and word the error)."""


class _Source:
    """Decompressed bytes of the file, read in pieces; OS and gzip errors as ``read_bytes``.

    ``span`` = (start, end, tail) reads the bytes ``[start, end)`` of a plain file (``end`` None:
    to its end), followed by ``tail`` -- a part of the events array read as an array of its own
    (:mod:`.split`). ``stream``: read this (decompressed) stream instead of the file, which then
    only names it.
    """

    def __init__(
        self,
        path: Path,
        span: tuple[int, int | None, bytes] | None = None,
        stream: IO[bytes] | None = None,
    ) -> None:
        self.path = path
        self.left: int | None = None  # bytes of the span still to read
        self.tail = b""
        try:
            raw: IO[bytes] = path.open("rb") if stream is None else stream
        except IsADirectoryError as exc:
            raise InputError(path, "is a folder, expected a trace file") from exc
        except FileNotFoundError as exc:
            raise InputError(path, "does not exist") from exc
        except OSError as exc:
            raise InputError(path, f"cannot be read ({exc.strerror})") from exc
        self._raw = raw
        self._fh: IO[bytes] | gzip.GzipFile = raw
        if stream is None:
            gz = self._read_raw(2) == b"\x1f\x8b"
            raw.seek(0)
            if gz:
                self._fh = gzip.GzipFile(fileobj=raw, mode="rb")
        if span is not None:
            start, end, self.tail = span
            raw.seek(start)
            self.left = None if end is None else end - start
        self.eof = False
        self.total = 0
        self.head = b""  # first 4 KiB, for read_trace's binary-file check

    def _read_raw(self, n: int) -> bytes:
        try:
            return self._raw.read(n)
        except OSError as exc:
            raise InputError(self.path, f"cannot be read ({exc.strerror})") from exc

    def read(self, n: int) -> bytes:
        if self.eof:
            return b""
        if self.left is not None:
            n = min(n, self.left)
        try:
            data = self._fh.read(n) if n else b""
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise InputError(
                self.path, "gzip data is cut short or corrupt", "copy the file again"
            ) from exc
        except OSError as exc:
            if self._fh is not self._raw:
                raise InputError(
                    self.path, "gzip data is cut short or corrupt", "copy the file again"
                ) from exc
            raise InputError(self.path, f"cannot be read ({exc.strerror})") from exc
        if self.left is not None:
            self.left -= len(data)
        if not data:
            data, self.tail = self.tail, b""
            self.eof = not data
        if len(self.head) < 4096:
            self.head += data[: 4096 - len(self.head)]
        self.total += len(data)
        return data

    def close(self) -> None:
        self._fh.close()
        self._raw.close()


class _Columns:
    """Per-piece frames and the running counters of ``read_trace``'s loop.

    ``work_only``: keep only the rows the derived frames are made of (``schema.WORK_ROWS``) and
    no ``args``.
    """

    def __init__(self, work_only: bool) -> None:
        self.work_only = work_only
        self.schema = WORK_EVENTS if work_only else EVENTS
        self.frames: list[pl.DataFrame] = []
        self.index = 0  # event_id of the next event (position in traceEvents)
        self.bad = 0
        self.negative = 0
        self.escaped = 0  # names with control characters, counted before rows are dropped

    def add_piece(self, body: bytes) -> None:
        """Decode ``body`` (elements of the events array, without its brackets) and append
        their frame.

        Raises ``msgspec.DecodeError`` (and changes nothing) when ``body`` is not valid JSON.
        """
        df = decode_piece(body) if self.work_only else None  # work rows need no bp, args
        if df is None:
            df = self._piece(b"[" + body + b"]")
        if df is not None and df.height:
            # a decoded name holds a backslash (or a control character, which clean_text
            # escapes with one) only where the text has a backslash escape or a raw DEL
            self._finish(df, escapes=b"\\" in body or b"\x7f" in body)

    # -- fast path: columns of a piece, ts/dur still in us (NaN marks a missing key) ----------
    def _piece(self, text: bytes) -> pl.DataFrame | None:
        """Typed msgspec decode of a piece (None: the piece went through the slow path)."""
        raws: list[msgspec.Raw] = []
        evs: list[Any]
        if not self.work_only:
            text = msgspec.json.format(text, indent=-1)
            try:
                evs = _EV_DEC.decode(text)
            except msgspec.ValidationError:
                self._add_slow(_loads(text))
                return None
            raws = list(map(_GET["args"], evs))
            ids = _decode_ids(raws)
        else:
            # the ids are decoded with the events; the rest of args is skipped unread
            lower = b'"external id"' in text
            try:
                evs = (_EV_IDS_LOWER_DEC if lower else _EV_IDS_DEC).decode(text)
            except msgspec.ValidationError:
                _check_utf8(text)  # the order of checks of the separate args decode
                self._add_slow(_loads(text))
                return None
            _check_utf8(text)  # read_trace rejects bad UTF-8 anywhere, args included
            ids = _id_columns(list(map(_GET["args"], evs)), lower)
        n = len(evs)
        if not n:
            return None
        if ids is None:  # an args value that is not an object, or odd id types
            self._add_slow(_loads(text))
            return None
        ext, corr = ids
        get = _GET
        # a control character in a decoded string comes from an escape, or is a raw DEL
        clean = _clean_col if b"\\" in text or b"\x7f" in text else _same
        return pl.DataFrame(
            [
                pl.Series("ph", list(map(get["ph"], evs)), dtype=pl.String),
                clean(pl.Series("cat", list(map(get["cat"], evs)), dtype=pl.String)),
                clean(pl.Series("name", list(map(get["name"], evs)), dtype=pl.String)),
                _labels("pid", list(map(get["pid"], evs))),
                _labels("tid", list(map(get["tid"], evs))),
                _floats("ts", list(map(get["ts"], evs))),
                _floats("dur", list(map(get["dur"], evs))),
                _labels("flow_id", list(map(get["id"], evs)), distinct=True),
                pl.Series("bp", list(map(get["bp"], evs)), dtype=pl.String)
                if b'"bp"' in text or b"\\u" in text  # a key may be written with escapes
                else pl.repeat(None, n, dtype=pl.String, eager=True).alias("bp"),
                ext,
                corr,
                _args_text(raws)
                if not self.work_only
                else pl.repeat(None, n, dtype=pl.String, eager=True).alias("args"),
            ]
        )

    def _finish(self, df: pl.DataFrame, *, escapes: bool) -> None:
        """read_trace's per-event rules, vectorised, on a piece's columns; store the kept rows.

        One plan, two results (``collect_all`` computes the shared part once): the counters over
        every event, and the kept rows in the stored schema.
        """
        n = df.height
        ts, dur = pl.col("ts"), pl.col("dur")
        # read_trace: ts = as_us(ev.get("ts", 0 if ph == "M" else None)); missing ts -> skipped
        ts_us = (
            pl.when(ts.is_nan() & (pl.col("ph") == "M"))
            .then(0.0)
            .when(ts.is_nan() | (ts.abs() >= _US_LIMIT))
            .then(None)
            .otherwise(ts)
        )
        dur_us = pl.when(dur.is_nan() | (dur.abs() >= _US_LIMIT)).then(None).otherwise(dur)
        events = (
            df.lazy()
            .with_columns(
                pl.int_range(self.index, self.index + n, dtype=pl.Int64).alias("event_id"),
                ts_us.alias("ts"),
                dur_us.alias("dur"),
                pl.col("name").fill_null(""),
            )
            .filter(ts.is_not_null())
        )
        self.index += n
        kept = events.filter(WORK_ROWS) if self.work_only else events
        wide = [bool((df[c].abs() >= EXACT_PRODUCT_US).any()) for c in ("ts", "dur")]
        times = {
            "ts_ns": _ns(ts, wide[0]),
            "dur_ns": _ns(pl.when(dur < 0).then(0.0).otherwise(dur), wide[1]),
        }
        counts, rows = pl.collect_all(
            [
                events.select(
                    pl.len().alias("events"),
                    (dur < 0).sum().alias("negative"),
                    (
                        pl.col("name").cast(pl.String).str.contains(ESCAPED_NAME).sum()
                        if escapes
                        else pl.lit(0, pl.UInt32)
                    ).alias("escaped"),
                ),
                kept.select(times.get(c, pl.col(c)).alias(c) for c in self.schema.names()).cast(
                    self.schema
                ),
            ]
        )
        events_kept, negative, escaped = counts.row(0)
        self.bad += n - events_kept
        self.negative += negative
        self.escaped += escaped
        self.frames.append(rows)

    def _keep(self, df: pl.DataFrame) -> None:
        """Count escaped names on the text, drop what is not kept, and store (slow path)."""
        self.escaped += int(df["name"].str.contains(ESCAPED_NAME).sum())
        if self.work_only:
            df = df.filter(WORK_ROWS)
        self.frames.append(df.select(self.schema.names()).cast(self.schema))

    # -- slow path: read_trace's loop on decoded Python objects --------------------------------
    def _add_slow(self, events: list[Any]) -> None:
        cols: dict[str, list[Any]] = {name: [] for name in EVENTS.names()}
        for offset, ev in enumerate(events):
            index = self.index + offset
            if not isinstance(ev, dict):
                self.bad += 1
                continue
            ts = as_us(ev.get("ts", 0 if ev.get("ph") == "M" else None))
            if ts is None:
                self.bad += 1
                continue
            dur = as_us(ev.get("dur")) if "dur" in ev else None
            if dur is not None and dur < 0:
                self.negative += 1
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
            if not self.work_only:
                cols["args"].append(orjson.dumps(args).decode() if args else None)
            else:
                cols["args"].append(None)
        self.index += len(events)
        self._keep(pl.DataFrame(cols, schema=_TEXT_EVENTS))

    def frame(self) -> pl.DataFrame:
        if not self.frames:
            return pl.DataFrame(schema=self.schema)
        return pl.concat(self.frames, how="vertical", rechunk=False)


def _ns(expr: pl.Expr, wide: bool) -> pl.Expr:
    """:func:`~.load.us_to_ns` as Int64 (``round`` half to even, as Python's); ``wide``: some
    value is outside ``±EXACT_PRODUCT_US``, so the whole µs are scaled as integers (the split
    costs twice the time: it is taken only for the pieces that need it)."""
    if not wide:
        return (expr * 1000).round(0, mode="half_to_even").cast(pl.Int64)
    whole = expr.floor()
    frac = ((expr - whole) * 1000).round(0, mode="half_to_even").cast(pl.Int64)
    return whole.cast(pl.Int64) * 1000 + frac


def _loads(text: bytes) -> list[Any]:
    """orjson's view of a piece; a failure reads as a piece that does not decode."""
    try:
        out = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise msgspec.DecodeError(str(exc)) from exc
    if not isinstance(out, list):
        raise msgspec.DecodeError("not an array")
    return out


def _check_utf8(text: bytes) -> None:
    try:
        text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Fallback from exc


def _floats(name: str, values: list[Any]) -> pl.Series:
    """``ts``/``dur`` values as Float64: NaN for a missing key, null when unusable (``as_us``)."""
    try:
        return pl.Series(name, values, dtype=pl.Float64)
    except (TypeError, OverflowError):
        pass
    out = [v if isinstance(v, float) else as_us(v) for v in values]
    return pl.Series(name, out, dtype=pl.Float64)


class _LabelCache(dict[Any, Any]):
    """``label_text`` of an int (int64 range) or str; pid/tid/id take few distinct values."""

    def __missing__(self, key: Any) -> Any:
        value = str(key) if key.__class__ is int else key
        self[key] = value
        return value


_LABELS = _LabelCache()


def _labels(name: str, values: list[Any], distinct: bool = False) -> pl.Series:
    """pid/tid/id values (int in int64 range, str, None) as ``label_text`` text.

    ``distinct``: mostly distinct values (flow ids), where a cache does not pay; they are
    usually all ints (or None), which Polars writes as ``str()`` does.
    """
    if distinct:
        try:
            return pl.Series(name, values, dtype=pl.Int64).cast(pl.String)
        except TypeError:  # a str among them
            pass
    if len(_LABELS) > 100_000:
        _LABELS.clear()
    return pl.Series(name, list(map(_LABELS.__getitem__, values)), dtype=pl.String)


def _same(s: pl.Series) -> pl.Series:
    return s


def _clean_col(s: pl.Series) -> pl.Series:
    """:func:`~nprof_report.parse.polars_json.clean_column` when a distinct value needs it."""
    if not s.unique().str.contains(CONTROL).any():  # few distinct values: look at those
        return s
    return clean_column(s)


def _decode_ids(raws: list[msgspec.Raw]) -> tuple[pl.Series, pl.Series] | None:
    """External id and correlation of each event's raw args (None: take the slow path)."""
    joined = b"[" + b",".join(raws) + b"]"
    lower = b'"external id"' in joined
    try:
        ids = (_IDS_LOWER_DEC if lower else _IDS_DEC).decode(joined)
    except msgspec.ValidationError:
        return None
    except msgspec.DecodeError as exc:
        raise _Fallback from exc
    return _id_columns(ids, lower)


def _id_columns(ids: list[Any], lower: bool) -> tuple[pl.Series, pl.Series]:
    """External id and correlation columns from decoded ``_Ids`` / ``_IdsLower`` (or None)."""
    if lower:
        ext_v = [
            None
            if r is None
            else as_int(
                r.ext
                if r.ext is not msgspec.UNSET
                else (None if r.ext_lower is msgspec.UNSET else r.ext_lower)
            )
            for r in ids
        ]
        corr_v = [None if r is None else as_int(r.correlation) for r in ids]
    else:
        if None in ids:
            ids = [_NO_IDS if r is None else r for r in ids]
        ext_v = list(map(_GET_EXT, ids))
        corr_v = list(map(_GET_CORR, ids))
    return (
        pl.Series("external_id", ext_v, dtype=pl.Int64),
        pl.Series("correlation", corr_v, dtype=pl.Int64),
    )


def _args_text(raws: list[msgspec.Raw]) -> pl.Series:
    """Compact raw args as orjson.dumps text; null unless a non-empty object."""
    # a compacted JSON value never holds a raw newline, so it separates the values safely
    blob = pl.Series([b"\n".join(raws)], dtype=pl.Binary)
    try:
        text = blob.cast(pl.String)
    except pl.exceptions.ComputeError as exc:  # invalid UTF-8: read_trace's error
        raise _Fallback from exc
    del blob
    s = text.str.split("\n").explode().rename("args")
    del text
    s = pl.select(pl.when(s.str.starts_with("{") & (s != "{}")).then(s).otherwise(None)).to_series()
    redo = s.str.contains(_REENCODE).fill_null(False)
    if redo.any():
        idx = redo.arg_true()
        try:
            fixed = [orjson.dumps(orjson.loads(v)).decode() for v in s.gather(idx).to_list()]
        except orjson.JSONDecodeError as exc:
            raise _Fallback from exc
        s = s.scatter(idx, fixed)
    return s


# -- reading the document ------------------------------------------------------------------------
def _skip_ws(buf: bytes, pos: int) -> int:
    n = len(buf)
    while pos < n and buf[pos] in _WS:
        pos += 1
    return pos


class _Scan:
    """Exact, incremental token scan of the array body (used when the quick cut fails)."""

    def __init__(self) -> None:
        self.pos = 0
        self.depth = 0
        self.last_sep: int | None = None  # a depth-0 comma: the end of a whole element
        self.close: int | None = None  # the "]" that closes the array

    def run(self, buf: bytes) -> None:
        for m in _TOK.finditer(buf, self.pos):
            tok = m.group()
            c = tok[0]
            if c == 0x22:  # '"'
                if len(tok) == 1:  # a string not finished in this buffer
                    self.pos = m.start()
                    return
                continue
            if c in (0x7B, 0x5B):  # { [
                self.depth += 1
            elif c in (0x7D, 0x5D):  # } ]
                self.depth -= 1
                if self.depth < 0:
                    if c == 0x5D:
                        self.close = m.start()
                    else:
                        self.depth = 0  # stray "}": leave it to the decoder to reject
                    self.pos = m.end()
                    return
            elif c == 0x2C and self.depth == 0:  # ,
                self.last_sep = m.start()
        self.pos = len(buf)


class _Reader:
    def __init__(
        self,
        path: Path,
        chunk_bytes: int,
        cols: _Columns,
        span: tuple[int, int | None, bytes] | None = None,
        stream: IO[bytes] | None = None,
    ) -> None:
        self.path = path
        self.src = _Source(path, span, stream)
        self.chunk = max(64, chunk_bytes)
        self.cols = cols
        self.buf = b""
        self.offset = 0  # absolute offset of buf[0] in the decompressed stream
        self.lead_ws = False
        self.notes: list[str] = []

    def more(self) -> bool:
        data = self.src.read(self.chunk)
        if data:
            self.buf += data
        return bool(data)

    def drop(self, k: int) -> None:
        self.buf = self.buf[k:]
        self.offset += k

    # -- top level ---------------------------------------------------------------------------
    def find_array(self) -> tuple[bytes | None, bool]:
        """Consume up to just after the events' ``[``; return (text before it, array format)."""
        while True:
            pos = _skip_ws(self.buf, 0)
            if pos < len(self.buf):
                break
            if not self.more():
                raise _Fallback  # empty file: read_trace words it
        self.lead_ws = pos > 0
        first = self.buf[pos : pos + 1]
        if first == b"[":
            self.drop(pos + 1)
            return None, True
        if first != b"{":
            raise _Fallback
        depth = 0
        last_str: bytes | None = None
        scan = pos
        while True:
            m = _TOK.search(self.buf, scan)
            if m is None or m.group() == b'"':
                if not self.more():
                    raise _Fallback
                continue
            tok = m.group()
            scan = m.end()
            if tok[0:1] == b'"':
                last_str = tok if depth == 1 else None
            elif tok in (b"{", b"["):
                depth += 1
            elif tok in (b"}", b"]"):
                depth -= 1
                if depth == 0:
                    raise _Fallback  # the object closed without a traceEvents array
            elif tok == b":" and depth == 1 and last_str == b'"traceEvents"':
                while True:
                    vpos = _skip_ws(self.buf, scan)
                    if vpos < len(self.buf):
                        break
                    if not self.more():
                        raise _Fallback
                if self.buf[vpos : vpos + 1] != b"[":
                    raise _Fallback  # not a list: read_trace's "not a trace"
                prefix = self.buf[:vpos]
                if prefix.count(b'"traceEvents"') != 1:
                    raise _Fallback  # ambiguous for read_trace's truncation recovery
                self.drop(vpos + 1)
                return prefix, False

    # -- the array -----------------------------------------------------------------------------
    def events(self) -> int | None:
        """Decode the array's elements; return the offset in ``buf`` of its ``]`` (None: damaged,
        and the recovery has run)."""
        scan: _Scan | None = None
        while True:
            while len(self.buf) < self.chunk and self.more():
                pass
            if scan is None and self._quick_cut():
                continue
            scan = scan or _Scan()
            scan.run(self.buf)
            if scan.close is not None:
                body = self.buf[: scan.close]
                if body.strip(_WS):
                    try:
                        self.cols.add_piece(body)
                    except msgspec.DecodeError:
                        self._recover()
                        return None
                return scan.close
            if scan.last_sep is not None and scan.last_sep > 0:
                try:
                    self.cols.add_piece(self.buf[: scan.last_sep])
                except msgspec.DecodeError:
                    self._recover()
                    return None
                self.drop(scan.last_sep + 1)
                scan = None
                continue
            if not self.more():  # cut short inside the last element
                self._recover()
                return None

    def _quick_cut(self) -> bool:
        """Decode up to the last ``}`` ``,`` ``{`` boundary that works (a few tries)."""
        buf = self.buf
        window = _TAIL_WINDOW
        tried = 0
        while True:
            lo = max(0, len(buf) - window)
            matches = list(BOUNDARY.finditer(buf, lo))
            if matches or lo == 0:
                break
            window *= 8
        for m in reversed(matches):
            try:
                self.cols.add_piece(buf[: m.start() + 1])
            except msgspec.DecodeError:
                tried += 1
                if tried >= _MAX_CUT_TRIES:
                    return False
                continue
            self.drop(m.end() - 1)
            return True
        return False

    # -- damage ----------------------------------------------------------------------------------
    def _recover(self) -> None:
        """read_trace's recovery (stdlib ``raw_decode`` of one element after another) from the
        start of ``buf``, streamed; then count and check the rest of the file."""
        if b"\x00" in self.src.head:
            raise _Fallback
        if self.prefix_is_array and self.lead_ws:
            raise _Fallback  # read_trace's recovery does not find the array then
        udec = codecs.getincrementaldecoder("utf-8")()

        def feed(data: bytes, final: bool = False) -> str:
            try:
                return str(udec.decode(data, final))
            except UnicodeDecodeError as exc:
                raise _Fallback from exc

        text = feed(self.buf, self.src.eof)
        base = self.offset
        self.buf = b""
        decoder = json.JSONDecoder(parse_int=orjson_int)
        pos = 0
        batch: list[Any] = []
        while True:
            while pos < len(text) and text[pos] in " \t\r\n,":
                pos += 1
            if pos > self.chunk:  # forget what has been decoded
                base += len(text[:pos].encode("utf-8"))
                text, pos = text[pos:], 0
            try:
                obj, end = decoder.raw_decode(text, pos)
                complete = end < len(text) or self.src.eof
            except (json.JSONDecodeError, RecursionError):
                obj, complete = None, False
                if self.src.eof or len(text) - pos > _RECOVER_LIMIT:
                    break
            if not complete:  # maybe only cut by the buffer: read on and try again
                data = self.src.read(self.chunk)
                text += feed(data, not data)
                continue
            batch.append(obj)
            pos = end
            if len(batch) >= 20000:
                self.cols._add_slow(batch)
                batch = []
        if batch:
            self.cols._add_slow(batch)
        used = base + len(text[:pos].encode("utf-8"))
        while True:
            data = self.src.read(self.chunk)
            feed(data, not data)
            if not data:
                break
        if not self.cols.index:
            raise _Fallback  # nothing recovered: read_trace's "not valid JSON"
        self.note_cut(used)

    def note_cut(self, used: int) -> None:
        total = self.src.total
        lost = total - used
        self.notes.append(
            f"{self.path.name}: traceEvents array is cut short; read {self.cols.index} complete "
            f"events, lost the last {lost} bytes ({100 * lost / total:.1f}% of the file)"
        )

    prefix_is_array = False

    def finish(self, prefix: bytes | None, close: int) -> dict[str, Any]:
        """Decode the document around the array (``close`` indexes its ``]`` in ``buf``)."""
        while self.more():
            pass
        rest = self.buf[close + 1 :]
        skeleton = b"[]" + rest if prefix is None else prefix + b"[]" + rest
        try:
            doc = orjson.loads(skeleton)
        except orjson.JSONDecodeError as exc:
            # read_trace: the whole-document decode fails -> its checks, then all the events
            if "recursion" in str(exc).lower() or b"\x00" in self.src.head:
                raise _Fallback from exc
            _check_utf8(skeleton)
            if not self.cols.index:
                raise _Fallback from exc  # nothing to recover: read_trace's "not valid JSON"
            self.note_cut(self.offset + close)
            return {}
        if prefix is None:
            return {}
        if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
            raise _Fallback
        return doc


def read_trace_stream(path: Path, *, work_only: bool = False, chunk_bytes: int = 8 << 20) -> Trace:
    """Load a Kineto trace like :func:`read_trace`, decoding it in bounded memory.

    ``work_only=True`` keeps only the rows that ops, device activities, steps and links are made
    of (``schema.WORK_ROWS``, with their ``event_id``), in ``WORK_EVENTS`` columns; notes and metadata
    still describe the whole file. That is what every analysis but the Neuron link needs, in a
    fraction of the memory and time. ``chunk_bytes`` is the read window; a single event larger
    than it grows the window.
    """
    path = Path(path)
    try:
        trace = _read(path, work_only, chunk_bytes)
        if any("cut short" in n for n in trace.notes) and _has_nonstandard_numbers(path):
            raise _Fallback  # the reference loader reads NaN/Infinity instead of stopping there
        return trace
    except RecursionError as exc:
        raise InputError(path, "JSON is nested too deeply to be a trace") from exc
    except _Fallback:
        trace = read_trace(path)
        if not work_only:
            return trace
        events = trace.events.filter(WORK_ROWS).select(WORK_EVENTS.names())
        return Trace(trace.meta, events, trace.notes)


_NONSTANDARD = re.compile(rb"(?<![A-Za-z\"])(?:NaN|-?Infinity)(?![A-Za-z\"])|\d[eE][+-]?\d{3,}")


def _has_nonstandard_numbers(path: Path) -> bool:
    """NaN, Infinity or an out-of-range exponent anywhere in the (uncompressed) file."""
    with path.open("rb") as fh:
        head = fh.read(2)
        fh.seek(0)
        if head == b"\x1f\x8b":
            return bool(_NONSTANDARD.search(gzip.decompress(fh.read())))
        if path.stat().st_size == 0:
            return False
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as view:
            return _NONSTANDARD.search(view) is not None


def _read(path: Path, work_only: bool, chunk_bytes: int) -> Trace:
    cols = _Columns(work_only)
    rd = _Reader(path, chunk_bytes, cols)
    try:
        prefix, array_format = rd.find_array()
        rd.prefix_is_array = array_format
        close = rd.events()
        doc = {} if close is None else rd.finish(prefix, close)
    finally:
        rd.src.close()
    notes = rd.notes + counter_notes(path, cols.bad, cols.negative)
    return assemble(path, doc, cols.frame(), notes, cols.escaped)


def counter_notes(path: Path, bad: int, negative: int) -> list[str]:
    """read_trace's notes on skipped events and negative durations."""
    notes = []
    if bad:
        notes.append(f"{path.name}: skipped {bad} events with a missing or mistyped ts")
    if negative:
        notes.append(f"{path.name}: {negative} events had a negative duration, read as 0")
    return notes

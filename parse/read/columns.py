"""Columns of pieces of the ``traceEvents`` array: typed decodes first, the per-event rules last.

:class:`Columns` takes the text of whole elements of the array (a *piece*, cut by :mod:`.stream`)
and keeps their ``EVENTS`` rows (``WORK_EVENTS`` with ``work_only``), event ids counting on from
piece to piece:

1. With ``work_only``, Polars' JSON readers first (:mod:`.polars_json`), where they read exactly.
2. Else, or when they refuse, the piece is compacted with ``msgspec.json.format(indent=-1)`` and
   decoded into typed ``msgspec`` structs with ``args`` kept as ``msgspec.Raw``; ``External id`` /
   ``correlation`` come from one batched typed decode of the piece's raw ``args``. Columns are
   built with Polars per piece and concatenated without rechunking.
3. Pieces with unusual types (a boolean ``pid``, a float flow ``id``, a string ``External id``
   ...) fail the typed decode and are read event by event by :class:`~.rows.EventRows`.

The per-event rules (:mod:`.rows`) are applied to the typed columns vectorised
(:meth:`Columns._finish`).

``args`` text: the reference loader stores ``orjson.dumps(args)``. Here the raw ``args`` JSON is
compacted (whitespace outside strings removed), which is byte-identical to ``orjson.dumps`` for
keys, strings without escapes, integers, ``true``/``false``/``null``. The rows whose text may
differ -- a backslash escape, a float or exponent, ``-0``, an integer of 19+ digits -- are found
with one vectorised regex and re-encoded with ``orjson.loads``/``orjson.dumps``, so the column is
byte-identical. Known, deliberate differences (documented, not worth a per-row cost): an ``args``
object with duplicate keys keeps them all here (orjson keeps the last), and JSON nested deeper
than orjson's limit of 1024 levels is accepted here.

A piece that is not valid JSON raises ``msgspec.DecodeError`` (the reader then cuts elsewhere or
recovers); anything the reference loader must word (bad UTF-8 ...) raises :class:`Fallback`.
"""

from __future__ import annotations

import codecs
import math
from dataclasses import dataclass
from operator import attrgetter
from typing import Annotated, Any

import msgspec
import orjson
import polars as pl

from nprof_report.parse.read.polars_json import (
    CONTROL,
    clean_column,
    decode_piece,
    has_huge_element,
)
from nprof_report.parse.read.rows import ESCAPED_NAME, EXACT_PRODUCT_US, EventRows, as_int, as_us
from nprof_report.parse.schema import EVENTS, WORK_EVENTS, WORK_ROWS

__all__ = ["Columns", "Fallback", "Piece"]

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
# args text that orjson.dumps may write differently from the compacted input
_REENCODE = r"\\|[:,\[]-?[0-9]+[.eE]|[:,\[]-0[,\]}]|[0-9]{19}"
# EVENTS with its Categorical columns as text: a piece's frame before it is stored
_TEXT_EVENTS = pl.Schema({n: pl.String if t == pl.Categorical() else t for n, t in EVENTS.items()})


@dataclass
class Piece:
    """The text of a piece of the events array (``bracketed``: in ``[`` ``]``, as a piece too
    long for Polars' readers is made), given to :meth:`Columns.add_piece`, which lets it go once
    decoded (the holder's only reference)."""

    text: bytes | None
    bracketed: bool = False


class Fallback(Exception):
    """The file is not a clean trace: let the reference loader decide (and word the error)."""


class Columns:
    """Per-piece frames and the running counters of the per-event rules (:mod:`.rows`).

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

    def add_piece(self, piece: Piece) -> None:
        """Decode ``piece.text`` (elements of the events array) and append their frame. The text is let go (``piece.text`` None) once it is decoded, so a
        piece of any size is not held twice while its columns are made.

        Raises ``msgspec.DecodeError`` (and changes nothing: ``piece.text`` is kept) when the
        text is not valid JSON.
        """
        assert piece.text is not None
        df = None
        # work rows need no bp, args: Polars' readers, unless an element is too long for them
        if self.work_only and not piece.bracketed and not has_huge_element(piece.text):
            df = decode_piece(piece.text)
        # a decoded name holds a backslash (or a control character, which clean_text escapes
        # with one) only where the text has a backslash escape or a raw DEL
        escapes = b"\\" in piece.text or b"\x7f" in piece.text
        if df is None:
            df = self._piece(piece)
        if df is not None and df.height:
            self._finish(df, escapes=escapes)

    # -- fast path: columns of a piece, ts/dur still in us (NaN marks a missing key) ----------
    def _piece(self, piece: Piece) -> pl.DataFrame | None:
        """Typed msgspec decode of a piece (None: the piece went through the slow path)."""
        assert piece.text is not None
        if not piece.bracketed:
            piece.text = b"[" + piece.text + b"]"  # the holder's only copy, in brackets
        try:
            return self._decoded(piece)
        except msgspec.DecodeError:
            if piece.text is not None and not piece.bracketed:  # given back as it came
                piece.text = piece.text[1:-1]
            raise

    def _decoded(self, piece: Piece) -> pl.DataFrame | None:
        """:meth:`_piece` of ``piece.text`` (in brackets), let go once decoded."""
        text = piece.text
        assert text is not None
        raws: list[msgspec.Raw] = []
        evs: list[Any]
        if not self.work_only:
            text = msgspec.json.format(text, indent=-1)
            try:
                evs = _EV_DEC.decode(text)
            except msgspec.ValidationError:
                self.add_events(_loads(text))
                return None
            raws = list(map(_GET["args"], evs))
            ids = _decode_ids(raws)
        else:
            # the ids are decoded with the events; the rest of args is skipped unread
            lower = b'"external id"' in text
            try:
                evs = (_EV_IDS_LOWER_DEC if lower else _EV_IDS_DEC).decode(text)
            except msgspec.ValidationError:
                check_utf8(text)  # the order of checks of the separate args decode
                self.add_events(_loads(text))
                return None
            check_utf8(text)  # read_trace rejects bad UTF-8 anywhere, args included
            ids = _id_columns(list(map(_GET["args"], evs)), lower)
        n = len(evs)
        if not n:
            return None
        if ids is None:  # an args value that is not an object, or odd id types
            self.add_events(_loads(text))
            return None
        ext, corr = ids
        get = _GET
        # a control character in a decoded string comes from an escape, or is a raw DEL
        clean = _clean_col if b"\\" in text or b"\x7f" in text else _same
        bp = b'"bp"' in text or b"\\u" in text  # a key may be written with escapes
        del text
        piece.text = None  # decoded: the columns are made without it
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
                if bp
                else pl.repeat(None, n, dtype=pl.String, eager=True).alias("bp"),
                ext,
                corr,
                _args_text(raws)
                if not self.work_only
                else pl.repeat(None, n, dtype=pl.String, eager=True).alias("args"),
            ]
        )

    def _finish(self, df: pl.DataFrame, *, escapes: bool) -> None:
        """The per-event rules (:mod:`.rows`), vectorised, on a piece's columns; store the kept rows.

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

    # -- slow path: the per-event rules on decoded Python objects -------------------------------
    def add_events(self, events: list[Any]) -> None:
        """Add decoded events (a piece the typed decode refused, or recovered ones) one by one."""
        rows = EventRows(keep_args=not self.work_only)
        for offset, ev in enumerate(events):
            rows.add(self.index + offset, ev)
        self.bad += rows.bad
        self.negative += rows.negative
        self.index += len(events)
        self._keep(pl.DataFrame(rows.cols, schema=_TEXT_EVENTS))

    def frame(self) -> pl.DataFrame:
        if not self.frames:
            return pl.DataFrame(schema=self.schema)
        return pl.concat(self.frames, how="vertical", rechunk=False)


def _ns(expr: pl.Expr, wide: bool) -> pl.Expr:
    """:func:`~.rows.us_to_ns` as Int64 (``round`` half to even, as Python's); ``wide``: some
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


def check_utf8(text: bytes) -> None:
    """:class:`Fallback` unless ``text`` is UTF-8 (the reference loader words the error).

    Decoded a megabyte at a time (ASCII: not at all), so no copy of a large piece is made."""
    if text.isascii():
        return
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        with memoryview(text) as view:
            for at in range(0, len(text), 1 << 20):
                decoder.decode(view[at : at + (1 << 20)])
            decoder.decode(b"", True)
    except UnicodeDecodeError as exc:
        raise Fallback from exc


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
    """:func:`~nprof_report.parse.read.polars_json.clean_column` when a distinct value needs it."""
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
        raise Fallback from exc
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
        raise Fallback from exc
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
            raise Fallback from exc
        s = s.scatter(idx, fixed)
    return s

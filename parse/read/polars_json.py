"""Decode a piece of the ``traceEvents`` array with Polars' JSON readers, where that is exact.

The streaming loader's typed ``msgspec`` decode makes a Python object of every field of every
event and then builds columns from them; three quarters of its time goes to those objects.
Polars' readers build the columns in Rust. Two routes, the first preferred:

- **array**: ``pl.read_json`` on the piece cut into sub-pieces of about 256 KB, each read as an
  array of its own. On 8 MB pieces of a 530 MB trace this took 25-35 % fewer instructions than
  the line route, and about half the time on indented text (no newline rewriting). A cut that
  falls inside a string leaves text that does not parse, which sends the piece to the line
  route.
- **lines**: Polars' NDJSON reader, after the piece is made NDJSON by turning its newlines into
  tabs -- whitespace between tokens, while inside a string a raw tab is as invalid as the raw
  newline was -- and the comma of each element separator (``}`` ``,`` ``{``) into a newline; a
  separator found inside a string leaves a line that does not parse.

Both are strict JSON (a control character in a string, bad UTF-8, NaN, a trailing comma, an
element that is not an object all fail), so a piece they accept is valid JSON. Both are lenient
where ``read_trace`` is not, so :func:`decode_piece` returns None -- the caller then takes the
exact path -- for any piece that could read differently:

- ``\\uD8xx``-``\\uDFxx`` escapes (a lone surrogate becomes NUL instead of an error);
- a text field (ph, cat, name, pid, tid, id) whose value was not a string or an integer the
  way Python prints it (a boolean, a float, a container, an integer at the 64-bit edge):
  values that could be such renderings are looked up in their own line;
- ``External id`` / ``correlation`` at the Int64 minimum, which ``as_int`` refuses;
- the lower-case ``external id`` (read only when ``External id`` is absent);
- a ``"ts": null`` on a metadata event (``null`` and a missing key differ there).

The array route reads numbers more leniently still (``true`` as 1, a float id truncated), so
a piece goes from it to the line route when a value could be such a reading: ``ts`` or an id
equal to 0 or 1, an id beyond ``as_int``'s range; ``dur`` is read there as text and parsed as
Python's ``float`` would (a value it cannot parse, or NaN or infinity, sends the piece on too).
Strings, integers within 64 bits, ``null`` and missing keys read as ``read_trace`` reads them.
Duplicate keys are the one documented difference: the readers keep the first, orjson the last.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterator

import orjson
import polars as pl

from nprof_report.parse.read.rows import clean_text

__all__ = [
    "BOUNDARY",
    "CONTROL",
    "clean_column",
    "decode_piece",
    "has_huge_element",
    "read_sub_pieces",
]

# the separator between two elements of the events array (any whitespace)
BOUNDARY = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
_IDS = pl.Struct({"External id": pl.Int64, "correlation": pl.Int64, "external id": pl.Int64})
_SCHEMA = pl.Schema(
    {
        "ph": pl.String(),
        "cat": pl.String(),
        "name": pl.String(),
        "pid": pl.String(),
        "tid": pl.String(),
        "ts": pl.Float64(),
        "dur": pl.Float64(),
        "id": pl.String(),
        "args": _IDS,
    }
)
# the array route reads ``dur`` as text: its numeric reading takes ``true`` for 1, and ``dur`` is
# 0 or 1 in many traces (whole microseconds); ``ts`` and the ids are rarely, so those stay numbers
_ARRAY = pl.Schema({**_SCHEMA, "dur": pl.String()})
# a sub-piece's parsed document stays in a core's L2 cache (512 KB here): 128-512 KB sub-pieces
# read an 8 MB piece in the same time, 1 MB ones took 1.3x as long, the whole piece at once 2x
_PART = 256 << 10
# a piece with an element longer than this goes to the exact path (:func:`has_huge_element`)
_HUGE = 4 << 20
# as_int refuses a float id this large, which the array route would read as an integer
_ID_LIMIT = 9.2e18
_TEXT_FIELDS = ("ph", "cat", "name", "pid", "tid", "id")
# the text fields stored as Categorical (schema.EVENTS)
_LABELS = ("ph", "cat", "name", "pid", "tid")
_I64_MIN = -(2**63)
# what the reader may have written for a non-string value: booleans, null, containers, floats
# (it prints 1e-05 as 0.00001 and -0.0 as -0), integers at the 64-bit edge
_RENDERED = r"^(?:true|false|null|-0|-?0\.0000|[\[{]|-?[0-9]{19}|-?[0-9]+(?:\.[0-9]+)?[eE])"
_NOT_STRING = {f: re.compile(rb'"%s"[ \t\r]*:[ \t\r]*[^" \t\r]' % f.encode()) for f in _TEXT_FIELDS}
# a control character, which clean_text escapes
CONTROL = r"[\x00-\x1f\x7f]"
_SURROGATE = re.compile(rb"\\u[dD]")
_TS_NULL = re.compile(rb'"ts"[ \t\r\n]*:[ \t\r\n]*null')
_NAN = math.nan


def decode_piece(body: bytes) -> pl.DataFrame | None:
    """Columns ``ph, cat, name, pid, tid, ts, dur, flow_id, external_id, correlation`` of the
    events in ``body`` (elements of a JSON array, without its brackets), ``ts``/``dur`` NaN where
    the key is missing and the labels (ph, cat, name, pid, tid) Categorical; None when the exact
    path must decode the piece (which also tells an invalid piece from a lenient read).
    """
    # a one-byte search (about 16 GB/s here) before the regex (3 GB/s): a two-byte `in` search
    # for the escape itself ran at only 1 GB/s
    if b"\\" in body and _SURROGATE.search(body):
        return None
    if not body.strip(b" \t\r\n"):
        return None
    df = _read_array(body)
    if df is not None:
        checked = _checked(df, body, by_line=False)
        if not isinstance(checked, _Lines):
            return checked
    read = _read_lines(body)
    if read is None:
        return None
    checked = _checked(*read, by_line=True)
    assert not isinstance(checked, _Lines)  # by_line: the lines were looked at
    return checked


def has_huge_element(body: bytes) -> bool:
    """Whether an element of ``body`` may be longer than :data:`_HUGE` (no separator for that
    long). Polars' readers hold every value of an element as a node of a parsed document, args
    they are not asked for too: 1.2 GB for one event of 40 MB of ``Input Dims``, where the typed
    ``msgspec`` decode skips them in place."""
    if len(body) <= _HUGE:
        return False
    half = _HUGE // 2  # a separator in every half-length stretch: no element is that long
    return any(
        BOUNDARY.search(body, at, at + half + 64) is None for at in range(0, len(body) - half, half)
    )


class _Lines:
    """:func:`_checked`'s answer when only a line-by-line look can settle a doubt."""


_LINES = _Lines()


def read_sub_pieces(body: bytes) -> Iterator[pl.DataFrame]:
    """Polars' JSON reader on ``body`` cut at element boundaries into sub-pieces of about
    :data:`_PART` bytes, each read as an array of its own (raises ``PolarsError`` at the first
    that does not parse): the reading alone, before any check."""
    start, n = 0, len(body)
    while start < n:
        cut = BOUNDARY.search(body, start + _PART) if start + _PART < n else None
        end = cut.start() + 1 if cut else n
        yield pl.read_json(io.BytesIO(b"[" + body[start:end] + b"]"), schema=_ARRAY)
        start = cut.end() - 1 if cut else n


def _read_array(body: bytes) -> pl.DataFrame | None:
    """The array route: the piece read in sub-pieces; None where it may have read leniently."""
    try:
        frames = list(read_sub_pieces(body))
    except pl.exceptions.PolarsError:
        return None
    df = pl.concat(frames)
    dur = pl.col("dur").cast(pl.Float64, strict=False)
    ids = (pl.col("args").struct.field(f) for f in ("External id", "correlation"))
    doubt = df.select(
        pl.any_horizontal(
            pl.col("ts").is_in([0.0, 1.0]).any(),
            (pl.col("dur").is_not_null() & (dur.is_null() | ~dur.is_finite())).any(),
            *((i.is_in([0, 1]) | (i.abs() >= _ID_LIMIT)).any() for i in ids),
        )
    ).item()
    return None if doubt else df.with_columns(dur)


def _read_lines(body: bytes) -> tuple[pl.DataFrame, bytes] | None:
    """The line route: the frame and the NDJSON text it was read from (None: not NDJSON)."""
    body = body.replace(b"\n", b"\t")
    first = BOUNDARY.search(body)
    # the separator's comma becomes the newline: a replacement of the same length is done in
    # one pass (CPython counts the matches first otherwise), 9 instead of 15-18 ms per 8 MB
    # of multi-line text; the whitespace left around it is JSON's own
    lines = body.replace(first.group(), first.group().replace(b",", b"\n")) if first else body
    try:
        return pl.read_ndjson(io.BytesIO(lines), schema=_SCHEMA), lines
    except pl.exceptions.PolarsError:
        lines = BOUNDARY.sub(b"}\n{", body)  # separators written in more than one way
        try:
            return pl.read_ndjson(io.BytesIO(lines), schema=_SCHEMA), lines
        except pl.exceptions.PolarsError:
            return None


def _checked(df: pl.DataFrame, text: bytes, *, by_line: bool) -> pl.DataFrame | _Lines | None:
    """The columns of a read piece once nothing could differ from ``read_trace``; None: the exact
    path decides; :data:`_LINES`: the line route must look (``text`` is not one event a line)."""
    # the labels hashed once: the checks below look at their distinct values only
    df = df.with_columns(pl.col(c).cast(pl.Categorical()) for c in _LABELS)
    args = pl.col("args").struct
    flags = df.select(  # every check in one pass
        pl.any_horizontal(
            args.field("External id").eq(_I64_MIN).any(),
            args.field("correlation").eq(_I64_MIN).any(),
            args.field("external id").is_not_null().any(),
        ).alias("odd_ids"),
        (pl.col("ph").eq("M") & pl.col("ts").is_null()).any().alias("null_meta_ts"),
        *(
            _distinct(c).str.contains(_RENDERED).fill_null(False).any().alias(c)
            for c in _TEXT_FIELDS
        ),
        *(
            _distinct(c).str.contains(CONTROL).fill_null(False).any().alias(f"ctl_{c}")
            for c in ("cat", "name")
        ),
    ).row(0, named=True)
    if flags["odd_ids"] or (flags["null_meta_ts"] and _TS_NULL.search(text)):
        return None
    coerced = _coerced(df, text, [c for c in _TEXT_FIELDS if flags[c]], by_line)
    if coerced is not False:
        return _LINES if coerced is None else None
    return df.select(
        "ph",
        _cleaned(df["cat"]) if flags["ctl_cat"] else "cat",
        _cleaned(df["name"]) if flags["ctl_name"] else "name",
        "pid",
        "tid",
        pl.col("ts").fill_null(_NAN),
        pl.col("dur").fill_null(_NAN),
        pl.col("id").alias("flow_id"),
        args.field("External id").alias("external_id"),
        args.field("correlation"),
    )


def _distinct(column: str) -> pl.Expr:
    """The distinct values of a column as text (cheap on a Categorical: codes are compared)."""
    return pl.col(column).unique().cast(pl.String)


def _cleaned(s: pl.Series) -> pl.Series:
    """:func:`clean_column` of a Categorical column, Categorical again."""
    return clean_column(s.cast(pl.String)).cast(pl.Categorical())


def clean_column(s: pl.Series) -> pl.Series:
    """``clean_text`` on a String column: control characters as ``\\xNN`` (rare: in Python)."""
    bad = s.str.contains(CONTROL)
    if not bad.any():
        return s
    return pl.Series(
        s.name,
        [clean_text(v) if b else v for v, b in zip(s.to_list(), bad.to_list(), strict=True)],
        dtype=pl.String,
    )


def _coerced(df: pl.DataFrame, text: bytes, looks: list[str], by_line: bool) -> bool | None:
    """Whether a text field may hold the reader's rendering of a non-string value (None: only
    ``text``'s lines can tell, and ``by_line`` says it is not one event a line).

    ``looks``: the fields with a distinct value that looks like a rendering. Of those values,
    only the ones that are JSON (``true``, ``-0``, ``[1]``; not ``[memory]``) are suspects; a
    field with suspects is fine when every occurrence of its key is followed by a string (two
    counts), else the suspects' own lines are searched for the key followed by anything but a
    string.
    """
    split: list[bytes] | None = None
    for field in looks:
        suspects = [v for v in df[field].unique().drop_nulls().to_list() if _is_json(v)]
        if not suspects:
            continue
        key = b'"%s"' % field.encode()
        if text.count(key) == text.count(key + b':"') + text.count(key + b': "'):
            continue
        if not by_line:
            return None
        split = split or text.split(b"\n")
        rows = df.select(pl.arg_where(pl.col(field).is_in(suspects))).to_series().to_list()
        if any(_NOT_STRING[field].search(split[row]) for row in rows):
            return True
    return False


def _is_json(text: str) -> bool:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True

"""The summary's long lists of records, kept as columns until someone reads them.

A trace of 100,000 distinct op names gives 300,000 ``top_ops`` and ``key_averages`` records and
100,000 ``diff_profile`` op series. Made into Python dicts at once they took 280 MB and 128 MB,
and the report shows 25 of them. A :class:`Records` holds the columns (a Polars frame, NumPy
tables) and is a read-only sequence of records: each read makes the records it needs, a chunk
at a time, and :func:`json_pieces` writes a document holding such sequences a chunk at a time,
byte for byte what ``orjson.dumps`` writes for the same document with lists.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from abc import abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, overload

import numpy as np
import orjson
import polars as pl

T = TypeVar("T")

CHUNK = 4096
"""Records made at a time, when a whole sequence is read or written."""

_JSON = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS

TEXT_CHARS = 65_536
"""The longest text a key holds (:func:`cut_text`): the op names ``diff`` and ``check`` align in
``summary.json``'s ``op_series`` table, and every text of its tables; a longer one (a name, or a
chain's list of kernel names) is cut. The public traces' longest is 18,817 characters (the
kernels of a chain of the 2022 DDP trace; their longest name has 5,123)."""
DOCUMENT_TEXT_CHARS = 4_096
"""The longest text the ``summary.json`` document holds: with the rows it shows (25 top ops, 25
key_averages rows, 5 chains, 400 timeline labels of :data:`LABEL_CHARS`), the document stays
under 1 MB whatever the names (400 distinct names of 70,000 characters made 10 MB at
:data:`TEXT_CHARS`). A text cut here and in a table starts alike and names the same length and
sha256."""
LABEL_CHARS = 256
"""The longest label of a chart bar kept (the timeline's): the chart shows a few dozen."""


class Records(Sequence[T]):
    """``n`` records, made a chunk at a time by :meth:`make` (the subclass's)."""

    def __init__(self, n: int) -> None:
        self._n = n

    @abstractmethod
    def make(self, start: int, stop: int) -> list[T]:
        """Records ``start`` to ``stop`` (``0 <= start <= stop <= len``)."""

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> list[T]: ...
    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._n)
            if step != 1:
                return self.make(0, self._n)[index]
            return self.make(start, max(start, stop))
        i = index + self._n if index < 0 else index
        if not 0 <= i < self._n:
            raise IndexError(index)
        return self.make(i, i + 1)[0]

    def __iter__(self) -> Iterator[T]:
        for start in range(0, self._n, CHUNK):
            yield from self.make(start, min(start + CHUNK, self._n))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self._n:,} records>"


class FrameRecords(Records[Any]):
    """The rows of a frame as records, floats to three decimals (as ``round(x, 3)`` gives them)."""

    def __init__(self, frame: pl.DataFrame) -> None:
        super().__init__(frame.height)
        self._frame = frame.with_columns(
            round_as_python(c, 3) for c in frame.get_columns() if c.dtype.is_float()
        )

    @property
    def frame(self) -> pl.DataFrame:
        """The records' columns, floats rounded as the records hold them."""
        return self._frame

    def texts_cut(self, limit: int) -> FrameRecords:
        """These records with every text longer than ``limit`` characters cut (:func:`cut_text`),
        found and cut in the columns: no record of a long text is made."""
        frame = self._frame
        texts = [n for n, t in frame.schema.items() if t in (pl.String, pl.Categorical)]
        cut = {n: cut_column(frame[n], limit) for n in texts}
        cut = {n: c for n, c in cut.items() if c is not None}
        if not cut:
            return self
        out = FrameRecords.__new__(FrameRecords)
        Records.__init__(out, frame.height)
        out._frame = frame.with_columns(cut.values())
        return out

    def make(self, start: int, stop: int) -> list[Any]:
        part = self._frame.slice(start, stop - start)
        names = part.columns
        # a column at a time: 0.45 s less than row dicts for 200,000 rows
        return [dict(zip(names, row)) for row in zip(*(c.to_list() for c in part.get_columns()))]


class Rows(Records[dict[str, Any]]):
    """The rows of a frame as records, values as they are (a ``diff_profile``'s op series in
    a document written whole: tests, a summary of version 1)."""

    def __init__(self, frame: pl.DataFrame) -> None:
        super().__init__(frame.height)
        self._frame = frame

    def make(self, start: int, stop: int) -> list[dict[str, Any]]:
        return self._frame.slice(start, stop - start).to_dicts()


class Tagged(Records[dict[str, Any]]):
    """The records of several sequences one after the other, each record with ``key`` set to
    its sequence's tag first (every rank's key_averages rows, each with its rank)."""

    def __init__(self, key: str, parts: list[tuple[Any, Sequence[Mapping[str, Any]]]]) -> None:
        super().__init__(sum(len(p) for _, p in parts))
        self._key = key
        self._parts = parts

    def make(self, start: int, stop: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        offset = 0
        for tag, part in self._parts:
            lo, hi = max(start - offset, 0), min(stop - offset, len(part))
            if lo < hi:
                out += ({self._key: tag, **r} for r in part[lo:hi])
            offset += len(part)
        return out


def round_as_python(column: pl.Series, ndigits: int) -> pl.Series:
    """Each value as Python's ``round(v, ndigits)`` gives it, for a whole column at once.

    Python rounds the exact binary value to ``ndigits`` decimals (half to even) and returns the
    double nearest that decimal. With ``y = v * 10**ndigits`` (rounded to a double) and
    ``n = rint(y)``: wherever ``y`` is farther from a half than its own rounding error, ``n`` is
    that decimal's digits, and ``n / 10**ndigits`` (two exact integers, one correctly rounded
    division) is the same nearest double. The other values (near a half, huge, NaN, null) go
    through ``round`` itself; a test holds the two together on random and tie values.
    (Polars' and NumPy's own rounding scale and round the scaled double, which differs near
    halves: 1.0005 is 1.000499... and rounds to 1.0, their way to 1.001.)
    """
    x = column.cast(pl.Float64).to_numpy()
    scale = 10.0**ndigits
    with np.errstate(invalid="ignore", over="ignore"):
        y = x * scale
        n = np.rint(y)
        margin = 1e-9 + np.abs(y) * 1e-15  # > the error of y = x * scale, as long as |y| < 2**52
        sure = (np.abs(y) < 2.0**52) & (np.abs(y - n) < 0.5 - margin)
    out: list[float | None] = (n / scale).tolist()
    unsure = np.flatnonzero(~sure)
    if len(unsure):
        for i, v in zip(unsure.tolist(), column.gather(unsure).to_list()):
            out[i] = None if v is None else round(v, ndigits)
    return pl.Series(column.name, out, dtype=pl.Float64)


def cut_text(text: str, limit: int = TEXT_CHARS) -> str:
    """``text``, or where it is longer than ``limit`` characters, its start, ``…`` and the whole
    text's length and sha256 (of its UTF-8), ``limit`` characters in all:
    ``aten::huge_xxx… [52,428,811 characters, sha256 9f2c…]``. Two different texts stay
    different; the same text is cut the same way everywhere."""
    if len(text) <= limit:
        return text
    was = _was_cut(text[-_TAIL_MAX:])
    if was is not None:  # cut before (a table's text, cut at a larger limit): as its whole was
        return _cut(was[0], text.__getitem__, was[1], limit)
    return _cut(len(text), text.__getitem__, _sha256(text), limit)


_CUT_TAIL = re.compile(r"… \[([\d,]+) characters, sha256 ([0-9a-f]{64})\]\Z")
_TAIL_MAX = 120


def _was_cut(end: str) -> tuple[int, str] | None:
    """The whole text's length and sha256 where ``end`` (a text's last characters) is the tail
    :func:`cut_text` writes, so a text cut once is cut again as its whole would be."""
    m = _CUT_TAIL.search(end)
    return None if m is None else (int(m[1].replace(",", "")), m[2])


def _cut(length: int, head: Callable[[slice], str], digest: str, limit: int) -> str:
    """:func:`cut_text` of a text of ``length`` characters whose start ``head`` gives."""
    tail = f"… [{length:,} characters, sha256 {digest}]"
    return head(slice(0, max(0, limit - len(tail)))) + tail


def cut_column(column: pl.Series, limit: int = TEXT_CHARS) -> pl.Series | None:
    """A text column (String or Categorical) as String with every value longer than ``limit``
    characters cut (:func:`cut_text`); None when none is. Each distinct long value is cut once,
    read a piece at a time (:func:`_cut_value`), and the column is made text without them."""
    categorical = column.dtype == pl.Categorical
    long = (column.cat.len_chars() if categorical else column.str.len_chars()) > limit
    if not long.any():
        return None
    rows = long.arg_true()
    values = column.gather(rows)
    # equal values, equal ids (a Categorical's by its codes: no text compared)
    ids = (values.to_physical() if categorical else values).rank("dense").to_list()
    cut: dict[int, str] = {}
    for row, value_id in zip(rows.to_list(), ids):
        if value_id not in cut:
            cut[value_id] = _cut_value(column.gather([row]), limit)
    texts = pl.Series(column.name, [None] * len(column), dtype=pl.String).scatter(
        rows, [cut[i] for i in ids]
    )
    short = pl.select(pl.when(long).then(None).otherwise(pl.lit(column))).to_series()
    return texts.zip_with(long, short.cast(pl.String)).alias(column.name)


def _cut_value(one: pl.Series, limit: int) -> str:
    """:func:`cut_text` of the one value of ``one`` (String or Categorical), read a piece at a
    time: a long name is never made a Python string whole (at most 64 pieces, each scanned from
    the start for its characters: linear in the name)."""
    # as String: a Categorical's text functions go through all the categories of the trace
    # (13 ms a call with 800 names of 70,000 characters: 30 s of a build, issue 32)
    text = one.cast(pl.String).str
    length = int(text.len_chars().item())

    def head(part: slice) -> str:
        return str(text.slice(0, part.stop).item())

    was = _was_cut(str(text.slice(max(0, length - _TAIL_MAX)).item()))
    if was is not None:
        return _cut(was[0], head, was[1], limit)
    step = max(1 << 20, -(-length // 64))
    digest = hashlib.sha256()
    for at in range(0, length, step):
        digest.update(text.slice(at, step).item().encode("utf-8"))
    return _cut(length, head, digest.hexdigest(), limit)


def _sha256(text: str) -> str:
    """The sha256 of ``text``'s UTF-8, encoded a megabyte at a time (no copy of a long text)."""
    digest = hashlib.sha256()
    for at in range(0, len(text), 1 << 20):
        digest.update(text[at : at + (1 << 20)].encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def _cut_texts(obj: Any, limit: int) -> Any:
    """``obj`` with every string longer than ``limit`` cut (:func:`cut_text`), dict keys too
    (a :class:`Records` is left as it is: :func:`_list_pieces` cuts its records)."""
    if isinstance(obj, str):
        return cut_text(obj, limit)
    if isinstance(obj, dict):
        return {cut_text(k, limit): _cut_texts(v, limit) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_cut_texts(v, limit) for v in obj]
    return obj


def _has_long_text(obj: Any, limit: int) -> bool:
    """Whether ``obj`` holds a string longer than ``limit`` (a :class:`Records` is not looked
    into)."""
    if isinstance(obj, str):
        return len(obj) > limit
    if isinstance(obj, dict):
        return any(len(k) > limit or _has_long_text(v, limit) for k, v in obj.items())
    if isinstance(obj, list | tuple):
        return any(_has_long_text(v, limit) for v in obj)
    return False


def _longest_string(text: bytes) -> int:
    """The most bytes between the quotes of one string of the JSON ``text`` (orjson's: quotes
    only delimit strings or are escaped)."""
    data = np.frombuffer(text, np.uint8)
    quotes = np.flatnonzero(data == 0x22)
    slashed = quotes[(quotes > 0) & (data[np.maximum(quotes - 1, 0)] == 0x5C)]
    if len(slashed):  # a quote after an odd run of backslashes is a character of its string
        escaped = []
        for q in slashed.tolist():
            at = q - 1
            while at >= 0 and text[at] == 0x5C:
                at -= 1
            if (q - 1 - at) % 2:
                escaped.append(q)
        quotes = np.setdiff1d(quotes, escaped)
    if len(quotes) < 2:
        return 0
    return int((quotes[1::2] - quotes[0 : len(quotes) - 1 : 2]).max()) - 1


def json_pieces(doc: object, *, text_limit: int | None = None) -> Iterator[bytes]:
    """``doc`` as indented JSON with sorted keys and a final newline, in pieces: the bytes of
    ``orjson.dumps(doc, option=OPT_INDENT_2 | OPT_SORT_KEYS | OPT_APPEND_NEWLINE)`` with every
    :class:`Records` written as the list of its records, a chunk of records at a time (a frame
    as the list of its rows).

    ``text_limit``: every string longer than this many characters is cut (:func:`cut_text`):
    a frame's records in its columns, other records where their JSON holds a string that long."""
    nonce = secrets.token_hex(8)
    found: list[Records[Any]] = []

    def placeholder(obj: object) -> str:
        if isinstance(obj, pl.DataFrame):
            obj = Rows(obj)
        if not isinstance(obj, Records):
            raise TypeError(f"Type is not JSON serializable: {type(obj).__name__}")
        found.append(obj)
        return f"\x00nprof-records:{nonce}:{len(found) - 1}"

    def dump(obj: object) -> bytes:
        found.clear()
        return orjson.dumps(obj, default=placeholder, option=_JSON | orjson.OPT_APPEND_NEWLINE)

    if text_limit is not None and _has_long_text(doc, text_limit):
        doc = _cut_texts(doc, text_limit)
    text = dump(doc)
    if not found:
        yield text
        return
    # each placeholder is a JSON string on a line of its own ("key": "..." or a list item)
    mark = re.compile(rb'"\\u0000nprof-records:' + nonce.encode() + rb':(\d+)"')
    done = 0
    for m in mark.finditer(text):
        yield text[done : m.start()]
        indent = line = text.rfind(b"\n", 0, m.start()) + 1
        while text[indent] == 0x20:
            indent += 1
        yield from _list_pieces(found[int(m[1])], indent - line, text_limit)
        done = m.end()
    yield text[done:]


def _list_pieces(records: Records[Any], indent: int, text_limit: int | None) -> Iterator[bytes]:
    """``records`` as orjson indents a list whose line starts ``indent`` spaces in; strings
    longer than ``text_limit`` cut."""
    if not len(records):
        yield b"[]"
        return
    limit = text_limit
    if isinstance(records, FrameRecords) and limit is not None:
        records, limit = records.texts_cut(limit), None  # cut in its columns
    pad = b" " * indent
    yield b"[\n"
    for start in range(0, len(records), CHUNK):
        # orjson's own list of the chunk, its items moved from 2 spaces in to indent + 2
        chunk = records.make(start, min(start + CHUNK, len(records)))
        body = orjson.dumps(chunk, option=_JSON)
        if limit is not None and _longest_string(body) > limit:  # bytes: at least the characters
            body = orjson.dumps(_cut_texts(chunk, limit), option=_JSON)
        del chunk
        if start:
            yield b",\n"
        yield pad + body[2:-2].replace(b"\n", b"\n" + pad)
    yield b"\n" + pad + b"]"

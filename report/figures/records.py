"""The summary's long lists of records, kept as columns until someone reads them.

A trace of 100,000 distinct op names gives 300,000 ``top_ops`` and ``key_averages`` records and
100,000 ``diff_profile`` op series. Made into Python dicts at once they took 280 MB and 128 MB,
and the report shows 25 of them. A :class:`Records` holds the columns (a Polars frame, NumPy
tables) and is a read-only sequence of records: each read makes the records it needs, a chunk
at a time, and :func:`json_pieces` writes a document holding such sequences a chunk at a time,
byte for byte what ``orjson.dumps`` writes for the same document with lists.
"""

from __future__ import annotations

import re
import secrets
from abc import abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar, overload

import numpy as np
import orjson
import polars as pl

T = TypeVar("T")

CHUNK = 4096
"""Records made at a time, when a whole sequence is read or written."""

_JSON = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS


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

    def make(self, start: int, stop: int) -> list[Any]:
        part = self._frame.slice(start, stop - start)
        names = part.columns
        # a column at a time: 0.45 s less than row dicts for 200,000 rows
        return [dict(zip(names, row)) for row in zip(*(c.to_list() for c in part.get_columns()))]


class Listed(Records[T]):
    """A list, as a :class:`Records`: :func:`json_pieces` writes it a chunk at a time instead of
    as one piece of text (a diff's 100,000 aligned ops are 440 MB of JSON)."""

    def __init__(self, items: list[T]) -> None:
        super().__init__(len(items))
        self._items = items

    def make(self, start: int, stop: int) -> list[T]:
        return self._items[start:stop]


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


def json_pieces(doc: object) -> Iterator[bytes]:
    """``doc`` as indented JSON with sorted keys and a final newline, in pieces: the bytes of
    ``orjson.dumps(doc, option=OPT_INDENT_2 | OPT_SORT_KEYS | OPT_APPEND_NEWLINE)`` with every
    :class:`Records` written as the list of its records, a chunk of records at a time."""
    nonce = secrets.token_hex(8)
    found: list[Records[Any]] = []

    def placeholder(obj: object) -> str:
        if not isinstance(obj, Records):
            raise TypeError(f"Type is not JSON serializable: {type(obj).__name__}")
        found.append(obj)
        return f"\x00nprof-records:{nonce}:{len(found) - 1}"

    text = orjson.dumps(doc, default=placeholder, option=_JSON | orjson.OPT_APPEND_NEWLINE)
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
        yield from _list_pieces(found[int(m[1])], indent - line)
        done = m.end()
    yield text[done:]


def _list_pieces(records: Records[Any], indent: int) -> Iterator[bytes]:
    """``records`` as orjson indents a list whose line starts ``indent`` spaces in."""
    if not len(records):
        yield b"[]"
        return
    pad = b" " * indent
    yield b"[\n"
    for start in range(0, len(records), CHUNK):
        # orjson's own list of the chunk, its items moved from 2 spaces in to indent + 2
        body = orjson.dumps(records.make(start, min(start + CHUNK, len(records))), option=_JSON)
        if start:
            yield b",\n"
        yield pad + body[2:-2].replace(b"\n", b"\n" + pad)
    yield b"\n" + pad + b"]"

"""report/records.py: long record lists kept as columns, read and written a chunk at a time.

The reference for the written bytes is orjson itself: ``json_pieces`` of a document holding
:class:`Records` must give exactly ``orjson.dumps`` of the same document with plain lists.
"""

from __future__ import annotations

from typing import Any

import orjson
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nprof_report.report.figures import records
from nprof_report.report.figures.records import FrameRecords, Records, json_pieces

OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE


class ListRecords(Records[Any]):
    """Records served from a list, each read counted."""

    def __init__(self, items: list[Any]) -> None:
        super().__init__(len(items))
        self.items = items
        self.made = 0

    def make(self, start: int, stop: int) -> list[Any]:
        self.made += stop - start
        return self.items[start:stop]


def _plain(doc: Any) -> Any:
    """``doc`` with every Records as the list of its records."""
    if isinstance(doc, Records):
        return [_plain(r) for r in doc]
    if isinstance(doc, dict):
        return {k: _plain(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_plain(v) for v in doc]
    return doc


scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8)
scalars |= st.floats(allow_nan=False, allow_infinity=False)
items = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)
docs = st.recursive(
    items,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=5), inner, max_size=3)
        | st.lists(items, max_size=9).map(ListRecords)
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(docs)
def test_written_bytes_are_orjsons(doc: Any) -> None:
    expected = orjson.dumps(_plain(doc), option=OPTIONS)
    assert b"".join(json_pieces(doc)) == expected


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 7])
def test_chunk_boundaries(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    monkeypatch.setattr(records, "CHUNK", 3)
    rows = [{"name": f"op{i}", "us": [i / 7, None], "nested": {"k": [i]}} for i in range(n)]
    doc = {"a": {"deep": [ListRecords(rows), ListRecords([])]}, "z": ListRecords(rows)}
    pieces = list(json_pieces(doc))
    assert b"".join(pieces) == orjson.dumps(_plain(doc), option=OPTIONS)
    if n > 3:  # written a chunk at a time, not as one piece
        assert len(pieces) > 2 + 2 * 2


def test_a_record_holding_the_marker_text_is_written_as_text() -> None:
    """The placeholder carries a random nonce; data that looks like a placeholder stays data."""
    doc = {"a": "\x00nprof-records:0000000000000000:0", "b": ListRecords([1, 2])}
    assert b"".join(json_pieces(doc)) == orjson.dumps(_plain(doc), option=OPTIONS)


def test_other_unknown_types_still_refused() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        b"".join(json_pieces({"a": object()}))


def test_a_sequence_that_reads_only_what_is_asked() -> None:
    r = ListRecords(list(range(10)))
    assert (len(r), r[0], r[-1], r[2:5], r[8:20], r[5:2], r[::3]) == (
        10, 0, 9, [2, 3, 4], [8, 9], [], [0, 3, 6, 9],
    )  # fmt: skip
    r.made = 0
    assert r[3:5] == [3, 4] and r.made == 2
    with pytest.raises(IndexError):
        r[10]
    assert r == list(range(10)) and r != list(range(9)) and next(reversed(r)) == 9
    assert 7 in r and r.index(7) == 7


def test_frame_records_are_the_rows_rounded_as_python_rounds() -> None:
    frame = pl.DataFrame(
        {
            "name": ["a", "b", None],
            "calls": [1, 2, 3],
            "us": [1.0005, 0.1235, None],  # just below ...5 as doubles: round() gives 1.0, 0.123
        }
    )
    assert list(FrameRecords(frame)) == [
        {"name": "a", "calls": 1, "us": 1.0},
        {"name": "b", "calls": 2, "us": 0.123},
        {"name": None, "calls": 3, "us": None},
    ]


def _same(a: list[float | None], b: list[float | None]) -> bool:
    """Equal value by value, NaN and the sign of zero included."""
    return [repr(v) for v in a] == [repr(v) for v in b]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.none() | st.floats(), max_size=40),
    st.lists(st.integers(-(10**12), 10**12), max_size=40),
    st.sampled_from([0, 1, 3, 6]),
)
def test_rounding_a_column_is_pythons_round(
    values: list[float | None], ticks: list[int], ndigits: int
) -> None:
    # random doubles, and decimal half-ticks (k + 1/2) / 10**ndigits, the values nearest a tie
    values = values + [(k + 0.5) / 10**ndigits for k in ticks]
    column = pl.Series("x", values, dtype=pl.Float64)
    assert _same(
        records.round_as_python(column, ndigits).to_list(),
        [None if v is None else round(v, ndigits) for v in values],
    )


def test_rounding_differs_from_polars_own_where_python_is_the_reference() -> None:
    """1.0005 is 1.000499999... as a double: Python rounds it down; scaling first rounds up."""
    column = pl.Series("x", [1.0005, 0.1235, 2.0005])
    assert records.round_as_python(column, 3).to_list() == [1.0, 0.123, 2.001]
    assert column.round(3).to_list() != [1.0, 0.123, 2.001]


@pytest.mark.parametrize("lengths", [[3, 0, 4], [0, 0], [5], [1, 1, 1]])
def test_tagged_records_are_the_parts_one_after_the_other(
    monkeypatch: pytest.MonkeyPatch, lengths: list[int]
) -> None:
    monkeypatch.setattr(records, "CHUNK", 2)
    parts = [(f"r{k}", ListRecords([{"n": i} for i in range(n)])) for k, n in enumerate(lengths)]
    expected = [{"rank": tag, **r} for tag, p in parts for r in p.items]
    tagged = records.Tagged("rank", [(tag, p) for tag, p in parts])
    assert list(tagged) == expected and len(tagged) == len(expected)
    assert [tagged[i] for i in range(len(expected))] == expected
    assert tagged[1:5] == expected[1:5]

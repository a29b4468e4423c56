"""decode_piece: Polars' NDJSON reading of a piece, refused wherever it could differ from read_trace."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nprof_report.parse.ndjson import decode_piece


def piece(*events: Any, indent: int | None = None, ascii: bool = False) -> bytes:
    """The elements of a JSON array of ``events``, without its brackets."""
    return json.dumps(list(events), indent=indent, ensure_ascii=ascii).encode().strip()[1:-1]


X = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 8, "ts": 1.5, "dur": 2}


@pytest.mark.parametrize("indent", [None, 2])
def test_reads_strings_integers_nulls_and_missing_keys(indent: int | None) -> None:
    events = [
        {**X, "args": {"External id": 3, "correlation": 9, "Input Dims": [[1, 2]]}},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "pid": "Spans", "tid": 8, "ts": 3, "id": 11},
        {"ph": "X", "name": "[memory]", "ts": 4, "args": None},
        {"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "python"}},
    ]
    df = decode_piece(piece(*events, indent=indent))
    assert df is not None
    assert df.columns == [
        "ph",
        "cat",
        "name",
        "pid",
        "tid",
        "ts",
        "dur",
        "flow_id",
        "external_id",
        "correlation",
    ]
    rows = df.rows()
    assert rows[0] == ("X", "cpu_op", "aten::mm", "7", "8", 1.5, 2.0, None, 3, 9)
    assert rows[1][3] == "Spans" and rows[1][7] == "11"
    assert rows[2][1] is None and rows[2][2] == "[memory]"
    ts, dur = rows[3][5], rows[3][6]
    assert ts != ts and dur != dur  # NaN: the keys are missing


@pytest.mark.parametrize(
    "odd",
    [
        {"pid": True},
        {"pid": 1.5e-5},
        {"pid": -0.0},
        {"tid": [1, "a"]},
        {"name": {"a": 1}},
        {"id": 2**63},
        {"ts": "12"},
        {"args": {"External id": -(2**63)}},
        {"args": {"external id": 4}},
        {"args": {"External id": "5"}},
        {"args": [1]},
        {"name": "\ud83d\ude00"},
    ],
)
def test_refuses_what_it_could_read_differently(odd: dict[str, Any]) -> None:
    assert decode_piece(piece(X, {**X, **odd}, ascii=True)) is None


def test_refuses_invalid_json_and_null_metadata_ts() -> None:
    ok = decode_piece(b'{"ph": "X", "name": "a"}, {"ph": "X", "name": "b},{"}')
    assert ok is not None and ok["name"].to_list() == ["a", "b},{"]
    # the separator of the layout inside a string splits it: the exact path decides
    assert decode_piece(b'{"ph": "X", "name": "a"}, {"ph": "X", "name": "b}, {"}') is None
    assert decode_piece(b'{"ph": "X", "name": "a\tb"}') is None  # a raw control character
    assert decode_piece(b'{"ph": "X", "name": "a\nb"}') is None
    assert decode_piece(b'{"ph": "X"},') is None
    assert decode_piece(b'{"ph": "X"} {"ph": "X"}') is None
    assert decode_piece(b'{"ph": "M", "ts": null}') is None
    assert decode_piece(b'{"ph": "M"}') is not None


def test_text_that_only_looks_rendered_is_read() -> None:
    """Strings like "true", "[memory]" or "1e5" are strings: the line check lets them through."""
    events = [{**X, "name": n} for n in ("true", "[memory]", "{x}", "1e5", "-0")]
    df = decode_piece(piece(*events))
    assert df is not None
    assert df["name"].to_list() == ["true", "[memory]", "{x}", "1e5", "-0"]
    mixed = piece({**X, "name": "true"}, {"ph": "i", "cat": "name", "name": "[memory]", "ts": 1})
    assert decode_piece(mixed) is not None  # "name" as a value sends it to the line check

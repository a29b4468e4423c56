"""decode_piece: Polars' reading of a piece, refused wherever it could differ from read_trace."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nprof_report.parse.read import polars_json
from nprof_report.parse.read.polars_json import decode_piece


def piece(*events: Any, indent: int | None = None, ascii: bool = False) -> bytes:
    """The elements of a JSON array of ``events``, without its brackets."""
    return json.dumps(list(events), indent=indent, ensure_ascii=ascii).encode().strip()[1:-1]


@pytest.fixture(params=["array", "lines"])
def route(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test that takes it runs twice: as decode_piece runs, and with the array route off."""
    if request.param == "lines":
        monkeypatch.setattr(polars_json, "_read_array", lambda body: None)
    return str(request.param)


X = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 8, "ts": 1.5, "dur": 2}


@pytest.mark.parametrize("indent", [None, 2])
def test_reads_strings_integers_nulls_and_missing_keys(indent: int | None, route: str) -> None:
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
def test_refuses_what_it_could_read_differently(odd: dict[str, Any], route: str) -> None:
    assert decode_piece(piece(X, {**X, **odd}, ascii=True)) is None


def test_refuses_invalid_json_and_null_metadata_ts() -> None:
    for name in ("b},{", "b}, {"):  # a separator inside a string: the array route reads it
        ok = decode_piece(b'{"ph": "X", "name": "a"}, {"ph": "X", "name": "%s"}' % name.encode())
        assert ok is not None and ok["name"].to_list() == ["a", name]
    assert decode_piece(b'{"ph": "X", "name": "a\tb"}') is None  # a raw control character
    assert decode_piece(b'{"ph": "X", "name": "a\nb"}') is None
    assert decode_piece(b'{"ph": "X"},') is None
    assert decode_piece(b'{"ph": "X"} {"ph": "X"}') is None
    assert decode_piece(b'{"ph": "M", "ts": null}') is None
    assert decode_piece(b'{"ph": "M"}') is not None


def test_text_that_only_looks_rendered_is_read(route: str) -> None:
    """Strings like "true", "[memory]" or "1e5" are strings: the line check lets them through."""
    events = [{**X, "name": n} for n in ("true", "[memory]", "{x}", "1e5", "-0")]
    df = decode_piece(piece(*events))
    assert df is not None
    assert df["name"].to_list() == ["true", "[memory]", "{x}", "1e5", "-0"]
    mixed = piece({**X, "name": "true"}, {"ph": "i", "cat": "name", "name": "[memory]", "ts": 1})
    assert decode_piece(mixed) is not None  # "name" as a value sends it to the line check


def _cut_inside(name: str, layout: str) -> bytes:
    """A piece longer than one sub-piece of the array route, whose first cut falls
    inside the name of its second-to-last event, ``"x" * k + name``; ``layout`` separates."""
    part = polars_json._PART
    filler = layout.join(json.dumps({**X, "name": f"op{i}"}) for i in range(part // 90)) + layout
    head = json.dumps({**X, "name": ""})
    head = head[: head.index('"name": "') + len('"name": "')]
    pad = part - len(filler) - len(head) + 1  # the name's "}" lies past the sub-piece's end
    assert pad > 0
    special = json.dumps({**X, "name": "x" * pad + name})
    return (filler + special + layout + json.dumps(X)).encode()


def test_a_cut_inside_a_string_sends_the_piece_to_the_line_route(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read_lines = polars_json._read_lines
    calls: list[int] = []

    def spy(body: bytes) -> Any:
        calls.append(len(body))
        return read_lines(body)

    monkeypatch.setattr(polars_json, "_read_lines", spy)
    df = decode_piece(_cut_inside("},{c", ", "))  # the lines keep "}, {" apart from "},{"
    assert df is not None and df.height == polars_json._PART // 90 + 2
    assert df["name"][-2].endswith("x},{c") and df["name"][-1] == "aten::mm"
    assert len(calls) == 1  # the array route could not read it
    # the layout's own separator inside the string: neither route can tell, the exact path does
    assert decode_piece(_cut_inside("}, {c", ", ")) is None


@pytest.mark.parametrize(
    "odd",
    [
        {"ts": True},
        {"ts": False},
        {"dur": True},
        {"dur": "x"},
        {"dur": "nan"},
        {"dur": "1_0"},
        {"args": {"External id": True}},
        {"args": {"correlation": False}},
        {"args": {"External id": 9.21e18}},
    ],
)
def test_numbers_read_leniently_by_the_array_route_are_refused(odd: dict[str, Any]) -> None:
    """``pl.read_json`` takes ``true`` for 1 and truncates floats; read_trace does not."""
    assert decode_piece(piece(X, {**X, **odd})) is None


def test_numbers_the_array_route_reads_as_read_trace_does() -> None:
    events = [
        {**X, "dur": "2.5", "args": {"External id": 7.9, "correlation": -3}},
        {**X, "ts": 12, "dur": 1e-05},
        {**X, "dur": None},
        {**X, "dur": 0, "args": {"External id": 2**63, "correlation": 2**64}},
    ]
    df = decode_piece(piece(*events))
    assert df is not None
    assert df["dur"].to_list()[:2] == [2.5, 1e-05]  # a string as float(), a float exactly
    assert [d != d for d in df["dur"].to_list()[2:3]] == [True]  # null: as a missing key
    assert df["dur"][3] == 0.0 and df["ts"][1] == 12.0
    assert df["external_id"].to_list() == [7, None, None, None]  # as_int: 7.9 -> 7; too large
    assert df["correlation"].to_list() == [-3, None, None, None]

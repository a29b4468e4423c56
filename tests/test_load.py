"""Loading trace files: both timestamp conventions, gzip, the array format, recovery and errors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest

from nprof_report.errors import InputError
from nprof_report.parse.read.reference import read_trace
from nprof_report.parse.schema import EVENTS
from tests.conftest import PUBLIC_TRACES


@pytest.mark.parametrize("key", sorted(PUBLIC_TRACES))
def test_public_traces_load_with_declared_schema(key: str) -> None:
    trace = read_trace(PUBLIC_TRACES[key])
    assert trace.events.schema == EVENTS
    raw = json.loads(PUBLIC_TRACES[key].read_text())["traceEvents"]
    assert trace.events.height == len(raw)
    assert trace.notes == []


def test_relative_timestamps_become_epoch_ns() -> None:
    # formats.md 1.2: base 1719853884000000000 + first ts 1212075525586.016 us -> 2024-07-15.
    trace = read_trace(PUBLIC_TRACES["cpu"])
    assert trace.meta.timestamp_convention == "relative"
    first = json.loads(PUBLIC_TRACES["cpu"].read_text())["traceEvents"][0]
    expected = 1719853884000000000 + round(first["ts"] * 1000)
    assert trace.events["ts_ns"][0] == expected


def test_absolute_microseconds_layout_is_recognised() -> None:
    trace = read_trace(PUBLIC_TRACES["cuda2023"])
    assert trace.meta.timestamp_convention == "absolute-us"
    assert trace.meta.base_time_ns is None
    ts = trace.events.filter(pl.col("ph") == "X")["ts_ns"]
    assert ts.min() > 1_600_000_000 * 10**9  # after 2020 as epoch ns


def test_gzip_and_array_format_read_the_same_events(tmp_path: Path) -> None:
    src = PUBLIC_TRACES["rocm"]
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    arr = tmp_path / "a.json"
    arr.write_text(json.dumps(json.loads(src.read_text())["traceEvents"]))
    plain = read_trace(src).events
    assert read_trace(gz).events.equals(read_trace(src).events)
    # the array format has no baseTimeNanoseconds, so only the raw offsets can be compared
    assert read_trace(arr).events.drop("ts_ns").equals(plain.drop("ts_ns"))


def test_truncated_trace_keeps_complete_events(tmp_path: Path) -> None:
    text = PUBLIC_TRACES["rocm"].read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) // 2])
    trace = read_trace(cut)
    full = read_trace(PUBLIC_TRACES["rocm"])
    assert 0 < trace.events.height < full.events.height
    assert any("cut short" in n for n in trace.notes)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is empty"),
        (b"\x00\x01\x02binary", "binary"),
        (b'{"hello": 1}', "not a trace"),
        (b"[" * 100000, "nested too deeply"),
        (b'{"traceEvents": [\xff\xfe]}', "not UTF-8"),
        (gzip.compress(b'{"traceEvents": []}' * 100)[:20], "gzip"),
    ],
)
def test_bad_inputs_raise_one_line_input_error(
    tmp_path: Path, content: bytes, message: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    with pytest.raises(InputError) as info:
        read_trace(bad)
    assert message in str(info.value)
    assert str(bad) in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_fields_and_negative_durations_are_recovered(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "ok", "pid": 1, "tid": 1, "ts": 10.0, "dur": 5.0},
        {"ph": "X", "cat": "cpu_op", "name": "no ts", "pid": 1, "tid": 1, "dur": 5.0},
        {"ph": "X", "cat": "cpu_op", "name": "neg\x07", "pid": 1, "tid": 1, "ts": 20.0, "dur": -3},
        "not an event",
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events, "baseTimeNanoseconds": 0}))
    trace = read_trace(path)
    assert trace.events["name"].to_list() == ["ok", "neg\\x07"]
    assert trace.events["dur_ns"].to_list() == [5000, 0]
    assert any("skipped 2" in n for n in trace.notes)
    assert any("negative duration" in n for n in trace.notes)

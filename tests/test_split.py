"""read_trace_split: a trace decoded by several processes equals the sequential work-only read."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from polars.testing import assert_frame_equal

from nprof_report.errors import InputError
from nprof_report.parse import split
from nprof_report.parse.split import read_trace_split
from nprof_report.parse.stream import read_trace_stream

_REPO = Path(__file__).resolve().parents[1]
PUBLIC = sorted((_REPO / "fixtures" / "public").glob("*.json"))


def assert_same(path: Path, **kw: Any) -> None:
    want = read_trace_stream(path, work_only=True)
    got = read_trace_split(path, min_bytes=0, **kw)
    assert_frame_equal(got.events, want.events)
    assert got.meta == want.meta
    assert got.notes == want.notes


def no_sequential(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the sequential fallback fail, so a passing test proves the split path ran."""

    def refuse(*args: Any, **kw: Any) -> None:
        raise AssertionError("fell back to the sequential loader")

    monkeypatch.setattr(split, "read_trace_stream", refuse)


def _events(n: int, name: str = "aten::mul") -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"ph": "M", "name": "process_name", "pid": 1, "args": {}}]
    for i in range(n):
        out.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": name if i % 3 else "\x01ctl",
                "pid": 1,
                "tid": 1 + i % 2,
                "ts": 10 * i,
                "dur": 5 if i % 7 else -1,
                "args": {"External id": i},
            }
        )
        out.append({"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 10 * i + 1})
    return out


@pytest.mark.parametrize("path", PUBLIC, ids=[p.name for p in PUBLIC])
@pytest.mark.parametrize("workers", [2, 3])
def test_public_fixtures(path: Path, workers: int, monkeypatch: pytest.MonkeyPatch) -> None:
    want = read_trace_stream(path, work_only=True)
    no_sequential(monkeypatch)
    got = read_trace_split(path, workers=workers, min_bytes=0, chunk_bytes=4096)
    assert_frame_equal(got.events, want.events)
    assert got.meta == want.meta
    assert got.notes == want.notes


@pytest.mark.parametrize("indent", [None, 2])
def test_counters_and_ids_across_parts(
    tmp_path: Path, indent: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.json"
    doc = {"traceEvents": _events(400), "baseTimeNanoseconds": 10**18, "schemaVersion": 1}
    path.write_text(json.dumps(doc, indent=indent))
    want = read_trace_stream(path, work_only=True)
    assert any("negative duration" in n for n in want.notes)
    assert any("control characters" in n for n in want.notes)
    no_sequential(monkeypatch)
    got = read_trace_split(path, workers=3, min_bytes=0, chunk_bytes=512)
    assert_frame_equal(got.events, want.events)
    assert got.notes == want.notes
    assert got.events["event_id"].is_sorted()


def counting(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Record the calls of the sequential fallback."""
    calls: list[Path] = []
    real = split.read_trace_stream

    def counted(p: Path, **kw: Any) -> Any:
        calls.append(p)
        return real(p, **kw)

    monkeypatch.setattr(split, "read_trace_stream", counted)
    return calls


def test_cut_inside_a_string_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Names made of ``},{`` put the cut inside a string: the sequential read gives the result."""
    path = tmp_path / "t.json"
    events = _events(50, name='x"},{"' * 40000)
    path.write_text(json.dumps({"traceEvents": events}))
    want = read_trace_stream(path, work_only=True)
    calls = counting(monkeypatch)
    got = read_trace_split(path, workers=2, min_bytes=0)
    assert calls == [path]
    assert_frame_equal(got.events, want.events)
    assert got.notes == want.notes


def test_damaged_last_part_and_errors(tmp_path: Path) -> None:
    text = json.dumps({"traceEvents": _events(300)})
    cut = tmp_path / "cut.json"
    cut.write_text(text[: int(len(text) * 0.8)])
    assert_same(cut, workers=2)
    assert any("cut short" in n for n in read_trace_split(cut, min_bytes=0).notes)
    bad = tmp_path / "bad.json"
    bad.write_bytes(text.encode()[: len(text) // 2] + b"\xff" + text.encode()[len(text) // 2 :])
    with pytest.raises(InputError) as exc:
        read_trace_split(bad, workers=2, min_bytes=0)
    with pytest.raises(InputError) as want:
        read_trace_stream(bad, work_only=True)
    assert str(exc.value) == str(want.value)
    assert str(bad) in str(exc.value)


@pytest.mark.parametrize("indent", [None, 1])
def test_gzip_is_decompressed_then_split(
    tmp_path: Path, indent: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.json.gz"
    text = json.dumps({"traceEvents": _events(200), "schemaVersion": 1}, indent=indent)
    path.write_bytes(gzip.compress(text.encode()))
    want = read_trace_stream(path, work_only=True)
    no_sequential(monkeypatch)
    got = read_trace_split(path, workers=2, min_bytes=0, chunk_bytes=1024)
    assert_frame_equal(got.events, want.events)
    assert got.meta == want.meta  # the trace's own path, not the temporary copy's
    assert got.notes == want.notes


def test_damaged_gzip_and_small_files_read_sequentially(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": _events(20)}).encode())[:-30])
    calls = counting(monkeypatch)
    with pytest.raises(InputError) as exc:
        read_trace_split(path, workers=2, min_bytes=0)
    assert "gzip data is cut short" in str(exc.value)
    read_trace_split(PUBLIC[0], workers=2)  # below the default size threshold
    read_trace_split(PUBLIC[0], workers=1, min_bytes=0)
    assert calls == [path, PUBLIC[0], PUBLIC[0]]


def test_array_format_and_keys_after_the_array(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last worker reads up to the array's own ``]``; what follows it is decoded by the parent."""
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(_events(300)) + "\n")
    keyed = tmp_path / "keyed.json"
    doc = {"schemaVersion": 1, "traceEvents": _events(300), "baseTimeNanoseconds": 10**18}
    keyed.write_text(json.dumps(doc))
    want = {p: read_trace_stream(p, work_only=True) for p in (bare, keyed)}
    no_sequential(monkeypatch)
    for path in (bare, keyed):
        got = read_trace_split(path, workers=3, min_bytes=0, chunk_bytes=1024)
        assert_frame_equal(got.events, want[path].events)
        assert got.meta == want[path].meta
        assert got.notes == want[path].notes
    assert want[keyed].meta.base_time_ns == 10**18


def test_garbage_after_the_array_reads_as_the_sequential_loader_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": _events(300)}) + ' trailing "garbage')
    want = read_trace_stream(path, work_only=True)
    calls = counting(monkeypatch)
    got = read_trace_split(path, workers=2, min_bytes=0, chunk_bytes=1024)
    assert calls == [
        path
    ]  # the parent found the tail not clean and let the sequential read word it
    assert_frame_equal(got.events, want.events)
    assert got.notes == want.notes

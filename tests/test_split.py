"""read_work_parts: a trace decoded by several processes equals the sequential work-only read."""

from __future__ import annotations

import gzip
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from nprof_report.errors import InputError
from nprof_report.parse.parts import TraceRows, batches, parts_of
from nprof_report.parse.read import split, workerpool
from nprof_report.parse.read.reference import read_trace
from nprof_report.parse.read.split import read_work_parts
from nprof_report.parse.read.stream import read_trace_stream
from nprof_report.parse.schema import WORK_EVENTS, WORK_ROWS
from tests.test_stream import trace_event

_REPO = Path(__file__).resolve().parents[1]
PUBLIC = sorted((_REPO / "fixtures" / "public").glob("*.json"))


def sequential(path: Path) -> TraceRows:
    """What the split must equal: the sequential work-only read, taken apart in-process."""
    trace = read_trace_stream(path, work_only=True)
    return TraceRows(trace.meta, trace.notes, parts_of(batches(trace.events), path.name), None)


def assert_equal(got: TraceRows, want: TraceRows) -> None:
    assert got.meta == want.meta
    assert got.notes == want.notes
    for name in ("host", "device", "steps", "flows"):
        assert_frame_equal(getattr(got.parts, name), getattr(want.parts, name))
    assert got.parts.notes == want.parts.notes


def assert_same(path: Path, **kw: Any) -> None:
    assert_equal(read_work_parts(path, min_bytes=0, **kw), sequential(path))


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
        if i % 50 == 0:  # a step, a kernel launched through a flow, an unknown category
            step = {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i // 50}"}
            out.append({**step, "pid": 1, "tid": 1, "ts": 10 * i, "dur": 500})
            flow = {"cat": "ac2g", "name": "ac2g", "id": i, "ts": 10 * i + 2}
            out.append({**flow, "ph": "s", "pid": 1, "tid": 1})
            out.append({**flow, "ph": "f", "pid": 0, "tid": 7, "bp": "e"})
            kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7}
            out.append({**kernel, "ts": 10 * i + 2, "dur": 3, "args": {"correlation": i}})
            out.append({"ph": "X", "cat": "odd_cat", "name": "o", "pid": 1, "tid": 3, "ts": i})
    return out


@pytest.mark.parametrize("path", PUBLIC, ids=[p.name for p in PUBLIC])
@pytest.mark.parametrize("workers", [2, 3])
def test_public_fixtures(path: Path, workers: int, monkeypatch: pytest.MonkeyPatch) -> None:
    want = sequential(path)
    no_sequential(monkeypatch)
    assert_equal(read_work_parts(path, workers=workers, min_bytes=0, chunk_bytes=4096), want)


@pytest.mark.parametrize("indent", [None, 2])
def test_counters_ids_and_times_across_parts(
    tmp_path: Path, indent: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.json"
    doc = {"traceEvents": _events(400), "baseTimeNanoseconds": 10**18, "schemaVersion": 1}
    path.write_text(json.dumps(doc, indent=indent))
    want = sequential(path)
    assert any("negative duration" in n for n in want.notes)
    assert any("control characters" in n for n in want.notes)
    assert any("unknown categories" in n for n in want.parts.notes)
    assert want.parts.steps.height > 1 and want.parts.flows.height and want.parts.device.height
    no_sequential(monkeypatch)
    got = read_work_parts(path, workers=3, min_bytes=0, chunk_bytes=512)
    assert_equal(got, want)
    assert got.parts.host["event_id"].is_sorted()
    assert got.parts.host["ts_ns"].min() >= 10**18  # the base time is added in every part


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
    want = sequential(path)
    calls = counting(monkeypatch)
    got = read_work_parts(path, workers=2, min_bytes=0)
    assert calls == [path]
    assert_equal(got, want)


def test_damaged_last_part_and_errors(tmp_path: Path) -> None:
    text = json.dumps({"traceEvents": _events(300)})
    cut = tmp_path / "cut.json"
    cut.write_text(text[: int(len(text) * 0.8)])
    assert_same(cut, workers=2)
    assert any("cut short" in n for n in read_work_parts(cut, min_bytes=0).notes)
    bad = tmp_path / "bad.json"
    bad.write_bytes(text.encode()[: len(text) // 2] + b"\xff" + text.encode()[len(text) // 2 :])
    with pytest.raises(InputError) as exc:
        read_work_parts(bad, workers=2, min_bytes=0)
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
    want = sequential(path)
    no_sequential(monkeypatch)
    got = read_work_parts(path, workers=2, min_bytes=0, chunk_bytes=1024)
    assert_equal(got, want)
    assert got.meta.path == path  # the trace's own path, not the temporary copy's


def test_damaged_gzip_and_small_files_read_sequentially(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": _events(20)}).encode())[:-30])
    calls = counting(monkeypatch)
    with pytest.raises(InputError) as exc:
        read_work_parts(path, workers=2, min_bytes=0)
    assert "gzip data is cut short" in str(exc.value)
    read_work_parts(PUBLIC[0], workers=2)  # below the default size threshold
    read_work_parts(PUBLIC[0], workers=1, min_bytes=0)
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
    want = {p: sequential(p) for p in (bare, keyed)}
    no_sequential(monkeypatch)
    for path in (bare, keyed):
        assert_equal(read_work_parts(path, workers=3, min_bytes=0, chunk_bytes=1024), want[path])
    assert want[keyed].meta.base_time_ns == 10**18


def test_garbage_after_the_array_reads_as_the_sequential_loader_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": _events(300)}) + ' trailing "garbage')
    want = sequential(path)
    calls = counting(monkeypatch)
    got = read_work_parts(path, workers=2, min_bytes=0, chunk_bytes=1024)
    # the parent found the tail not clean and let the sequential read word it
    assert calls == [path]
    assert_equal(got, want)


@pytest.mark.parametrize("gz", [False, True])
def test_elements_longer_than_the_search_window(
    tmp_path: Path, gz: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cut that lands in an element longer than the boundary search reads on to the next one
    (and a gzip stream's buffer grows for it) instead of giving up on splitting."""
    events = _events(300)
    for i in range(5, len(events), 40):
        events[i]["args"] = {"External id": i, "Input Dims": [[7] * 200] * 3}  # about 2 KB
    text = json.dumps({"traceEvents": events, "schemaVersion": 1}).encode()
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(text) if gz else text)
    want = sequential(path)
    no_sequential(monkeypatch)
    monkeypatch.setattr(split, "_SEARCH", 16)
    monkeypatch.setattr(split, "_GUNZIP_READ", 256)
    monkeypatch.setattr(split, "_BLOCK_MAX", 4096)
    assert_equal(read_work_parts(path, workers=2, min_bytes=0, chunk_bytes=1024), want)


@pytest.mark.parametrize("gz", [False, True])
def test_a_run_of_whitespace_longer_than_the_buffer(
    tmp_path: Path, gz: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain file's blocks hold the run, which the workers skip; a gzip stream's buffer does
    not grow for it past ``_GROW_LIMIT``: the sequential loader reads it in constant memory."""
    text = json.dumps({"traceEvents": _events(300), "schemaVersion": 1})
    at = text.index("}, {", len(text) // 2) + 3
    data = (text[:at] + " " * 300_000 + text[at:]).encode()
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(data) if gz else data)
    want = sequential(path)
    monkeypatch.setattr(split, "_SEARCH", 1024)
    monkeypatch.setattr(split, "_GUNZIP_READ", 4096)
    monkeypatch.setattr(split, "_BLOCK_MAX", 16384)
    monkeypatch.setattr(split, "_GROW_LIMIT", 65536)
    calls = counting(monkeypatch)
    assert_equal(read_work_parts(path, workers=2, min_bytes=0, chunk_bytes=4096), want)
    assert calls == ([path] if gz else [])


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("code", ["import sys; sys.exit(1)", "import sys; sys.stdout.write('{}')"])
def test_a_failing_worker_sends_the_file_to_the_sequential_loader(
    tmp_path: Path, gz: bool, code: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that dies before it reads its block (the parent's write to it breaks) or answers
    nonsense: the file is read sequentially, with the same result."""
    text = json.dumps({"traceEvents": _events(3000)}).encode()
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(text) if gz else text)
    want = sequential(path)
    calls = counting(monkeypatch)
    monkeypatch.setattr(workerpool, "_WORKER", [sys.executable, "-c", code])
    assert_equal(read_work_parts(path, workers=2, min_bytes=0, chunk_bytes=1 << 16), want)
    assert calls == [path]


def test_blocks_shrink_towards_the_end_and_cover_the_array(tmp_path: Path) -> None:
    """Blocks follow each other without a gap, cut at element boundaries, and get smaller."""
    path = tmp_path / "t.json"
    text = json.dumps({"traceEvents": _events(3000)}).encode()
    path.write_bytes(text)
    start = text.index(b"[") + 1
    with path.open("rb") as fh:
        blocks = list(split._file_blocks(fh, start, len(text), 2, 1024))
    assert blocks[0].start == start and blocks[-1].end is None
    for a, b in itertools.pairwise(blocks):
        assert a.end is not None and text[a.end - 1 : a.end] == b"}"
        assert text[b.start : b.start + 1] == b"{"
        assert not text[a.end : b.start].strip(b" ,")
    sizes = [b.end - b.start for b in blocks[:-1] if b.end is not None]
    assert sizes[0] > 4 * sizes[-1] and len(blocks) > 8


def test_prestarted_workers_are_taken_by_the_split_or_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ops/build start the workers for a large trace file before importing Polars; the split
    takes them, and workers started for another count, or never used, are stopped."""
    monkeypatch.setattr(workerpool, "_started", [])
    monkeypatch.setenv(workerpool.DECODE_WORKERS_ENV, "2")
    big = tmp_path / "big.json"
    with big.open("wb") as fh:
        fh.truncate(workerpool.MIN_SPLIT_BYTES)  # sparse: only its size is looked at
    small = tmp_path / "small.json"
    small.write_text("{}")
    workerpool.prestart([small, tmp_path, tmp_path / "missing.json"])
    assert workerpool._started == []
    workerpool.prestart([tmp_path, big])
    started = list(workerpool._started)
    assert len(started) == 2
    assert workerpool.spawn(2) == started and workerpool._started == []
    for proc in started:  # a worker sent no block exits cleanly when its stdin closes
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
        proc.stdout.close()
    workerpool.prestart([big])
    other = list(workerpool._started)
    fresh = workerpool.spawn(3)  # started for 2: stopped, three new ones instead
    assert all(p.poll() is not None for p in other) and not set(fresh) & set(other)
    for proc in fresh:
        proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
    workerpool.prestart([big])
    unused = list(workerpool._started)
    workerpool._release()  # what runs at exit
    assert all(p.poll() is not None for p in unused) and workerpool._started == []


def test_a_worker_reads_its_blocks_into_one_buffer() -> None:
    """Blocks sent on stdin land in the buffer the worker keeps (a new one only to grow), and
    read back as files, whole or in pieces."""
    import io

    stdin = io.BytesIO(b"abcdefgh" + b"0123456789ab" + b"xy")
    buf, view = split._receive(stdin, bytearray(), 8)
    assert view is not None and bytes(view) == b"abcdefgh"
    sent = split._Sent(view)
    assert sent.read(3) == b"abc" and sent.read() == b"defgh" and sent.read(4) == b""
    assert sent.seek(2) == 2 and sent.read(2) == b"cd"
    grown, view = split._receive(stdin, buf, 12)  # larger than the buffer: a new one
    assert view is not None and bytes(view) == b"0123456789ab" and grown is not buf
    same, view = split._receive(stdin, grown, 2)
    assert same is grown and view is not None and bytes(view) == b"xy"
    assert split._receive(stdin, same, 5)[1] is None  # stdin ended mid-block


def reference(path: Path) -> TraceRows:
    """The reference loader's work rows, taken apart: what every route must give."""
    trace = read_trace(path)
    work = trace.events.filter(WORK_ROWS).select(WORK_EVENTS.names())
    return TraceRows(trace.meta, trace.notes, parts_of(batches(work), path.name), None)


@pytest.mark.slow
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    events=st.lists(trace_event, max_size=40),
    layout=st.sampled_from(["compact", "indent", "array", "gz"]),
    chunk=st.sampled_from([64, 300]),
    cut=st.one_of(st.none(), st.none(), st.none(), st.floats(0.3, 1.0)),  # mostly clean: split
)
def test_random_traces_match_the_reference_loader(
    tmp_path: Path, events: list[Any], layout: str, chunk: int, cut: float | None
) -> None:
    """The split route against the reference loader directly (not only through the stream):
    blocks of a few events each, so most traces are cut into several."""
    doc: dict[str, Any] = {"baseTimeNanoseconds": 1735632360000000000, "traceEvents": events}
    text = json.dumps(
        events if layout == "array" else doc, indent=2 if layout == "indent" else None
    ).encode()
    if cut is not None:
        text = text[: int(len(text) * cut)]
    path = tmp_path / ("t.json.gz" if layout == "gz" else "t.json")
    path.write_bytes(gzip.compress(text) if layout == "gz" else text)
    try:
        want = reference(path)
    except InputError as exc:
        error = str(exc)
    else:
        assert_equal(read_work_parts(path, workers=2, min_bytes=0, chunk_bytes=chunk), want)
        return
    with pytest.raises(InputError) as got:
        read_work_parts(path, workers=2, min_bytes=0, chunk_bytes=chunk)
    assert str(got.value) == error

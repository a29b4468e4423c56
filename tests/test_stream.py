"""read_trace_stream returns exactly what read_trace returns (frame, metadata, notes, errors)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from nprof_report.errors import InputError
from nprof_report.parse.read.reference import read_trace
from nprof_report.parse.read.stream import read_trace_stream
from nprof_report.parse.schema import WORK_EVENTS, WORK_ROWS

_REPO = Path(__file__).resolve().parents[1]
NAMES = [
    "kineto-cpu-only-gloo-rank34.pt.trace.json",
    "kineto-cuda-simple-add-benchmark.json",
    "kineto-cuda-triton-compiled-example.json",
    "kineto-rocm-mi250-minitoy-train.json",
]


def fixture(name: str) -> Path:
    local = _REPO / "fixtures" / "public" / name
    return local if local.is_file() else Path("/work/shared/fixtures-public") / name


def assert_same(path: Path, **kw: Any) -> None:
    ref = read_trace(path)
    got = read_trace_stream(path, **kw)
    assert_frame_equal(got.events, ref.events)
    assert got.meta == ref.meta
    assert got.notes == ref.notes


def assert_same_outcome(path: Path, **kw: Any) -> None:
    """The same Trace, or the same InputError."""
    try:
        read_trace(path)
    except InputError:
        assert_same_error(path, **kw)
    else:
        assert_same(path, **kw)


def assert_same_error(path: Path, **kw: Any) -> None:
    with pytest.raises(InputError) as ref:
        read_trace(path)
    with pytest.raises(InputError) as got:
        read_trace_stream(path, **kw)
    assert str(got.value) == str(ref.value)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("chunk", [8 << 20, 4096, 64])
def test_public_fixtures(name: str, chunk: int) -> None:
    assert_same(fixture(name), chunk_bytes=chunk)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("layout", ["gz", "pretty", "compact", "array", "array-pretty"])
def test_layouts(tmp_path: Path, name: str, layout: str) -> None:
    doc = json.loads(fixture(name).read_bytes())
    if layout == "gz":
        path = tmp_path / "t.json.gz"
        path.write_bytes(gzip.compress(fixture(name).read_bytes()))
    else:
        value = doc["traceEvents"] if layout.startswith("array") else doc
        indent = 2 if layout.endswith("pretty") else None
        seps = (",", ":") if layout == "compact" else None
        path = tmp_path / "t.json"
        path.write_text(json.dumps(value, indent=indent, separators=seps))
    assert_same(path, chunk_bytes=2048)


def assert_same_work(path: Path, **kw: Any) -> None:
    """work_only keeps read_trace's WORK_ROWS, with their event ids, and the same notes."""
    ref = read_trace(path)
    got = read_trace_stream(path, work_only=True, **kw)
    want = ref.events.filter(WORK_ROWS).select(WORK_EVENTS.names())
    assert_frame_equal(got.events, want)
    assert got.meta == ref.meta
    assert got.notes == ref.notes


@pytest.mark.parametrize("name", NAMES)
def test_work_only(name: str) -> None:
    path = fixture(name)
    assert_same_work(path, chunk_bytes=4096)
    kept = read_trace_stream(path, work_only=True).events
    assert set(kept["ph"].unique().to_list()) <= {"X", "s", "f"}


def test_meta_after_events(tmp_path: Path) -> None:
    doc = json.loads(fixture(NAMES[0]).read_bytes())
    reordered = {
        "traceEvents": doc.pop("traceEvents"),
        **doc,
        "host_name": "h",
        "profile_memory": 1,
    }
    path = tmp_path / "t.json"
    path.write_text(json.dumps(reordered))
    assert_same(path, chunk_bytes=512)


@pytest.mark.parametrize("cut", [0.999, 0.9, 0.5, 0.1])
@pytest.mark.parametrize("chunk", [8 << 20, 300])
def test_truncated(tmp_path: Path, cut: float, chunk: int) -> None:
    data = fixture(NAMES[3]).read_bytes()
    path = tmp_path / "t.json"
    path.write_bytes(data[: int(len(data) * cut)])
    assert_same(path, chunk_bytes=chunk)
    assert "cut short" in read_trace_stream(path, chunk_bytes=chunk).notes[0]


@pytest.mark.parametrize("text", ['{"schemaVersion": 1, "traceEvents": []', '{"traceEvents": [] x'])
def test_empty_array_then_damage(tmp_path: Path, text: str) -> None:
    path = tmp_path / "t.json"
    path.write_text(text)
    assert_same_outcome(path, chunk_bytes=64)


def test_garbage_after_array(tmp_path: Path) -> None:
    data = fixture(NAMES[2]).read_bytes()
    path = tmp_path / "t.json"
    path.write_bytes(data.rstrip()[:-1] + b', "x": }')
    assert_same(path, chunk_bytes=1024)


@pytest.mark.parametrize("bad", [b"},,{", b"}, NaN, {", b'},{"ts": 1e400},{', b"}, x {"])
def test_damage_inside_array(tmp_path: Path, bad: bytes) -> None:
    data = fixture(NAMES[3]).read_bytes()
    mid = data.index(b"},", len(data) // 2)
    path = tmp_path / "t.json"
    path.write_bytes(data[:mid] + bad + data[data.index(b"{", mid) + 1 :])
    for chunk in (8 << 20, 700):
        assert_same_outcome(path, chunk_bytes=chunk)


def test_big_event_grows_window(tmp_path: Path) -> None:
    events = [
        {
            "ph": "X",
            "name": "a",
            "pid": 1,
            "tid": 1,
            "ts": 1.5,
            "dur": 2,
            "args": {"k": "v" * 5000},
        },
        {
            "ph": "X",
            "name": "b",
            "pid": 1,
            "tid": 1,
            "ts": 2.5,
            "dur": 1,
            "args": {"l": [{"a": 1}, {"b": "},{"}] * 300},
        },
        {"ph": "i", "name": "c", "pid": "Spans", "tid": "x", "ts": 3},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events, "baseTimeNanoseconds": 10**18}))
    assert_same(path, chunk_bytes=64)


@pytest.mark.parametrize("where", ["between", "inside", "after", "cut"])
def test_whitespace_of_any_length_is_skipped(tmp_path: Path, where: str) -> None:
    """A run of whitespace between two events, inside one, or after the array: the same trace,
    and the window does not grow (only one space of each all-whitespace window is kept)."""
    from nprof_report.parse.read import stream

    text = fixture(NAMES[3]).read_text()
    run = " " * (3 << 20)
    separator = re.compile(r"\},\s*\{").search(text, len(text) // 2)
    assert separator is not None
    at = {
        "between": separator.start() + 2,
        "inside": text.index('"ph":', len(text) // 2) + 5,
        "after": text.rindex("]") + 1,
        "cut": separator.start() + 2,
    }[where]
    data = (text[:at] + run + text[at:]).encode()
    if where == "cut":  # cut short inside the run: the note counts the bytes of it too
        data = data[: at + len(run) // 2]
    path = tmp_path / "t.json"
    path.write_bytes(data)
    longest = 0
    more = stream.Reader.more

    def watched(self: stream.Reader) -> bool:
        nonlocal longest
        got = more(self)
        longest = max(longest, len(self.buf))
        return got

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stream.Reader, "more", watched)
        assert_same(path, chunk_bytes=64 << 10)
    assert longest < 4 * (64 << 10) + len(text)


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"   \n",
        b"\x00\x01binary",
        b'{"a": 1}',
        b"[1, 2",
        b"not json",
        b'{"traceEvents": 5}',
        b"\xff\xfe{}",
        b'{"traceEvents": [{"name": "\xff", "ts": 1}]}',
    ],
)
def test_errors_match(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(content)
    assert_same_outcome(path, chunk_bytes=64)


def test_missing_and_folder(tmp_path: Path) -> None:
    assert_same_error(tmp_path / "nope.json")
    assert_same_error(tmp_path)


def test_bad_gzip(tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(fixture(NAMES[0]).read_bytes())[:-40])
    assert_same_error(path)


# -- random traces ---------------------------------------------------------------------------
_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=8)
_num = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.sampled_from([0.0005, 0.0015, -0.0, 1.0, 1e-7, 1694039968955744]),
)
_scalar = st.one_of(st.none(), st.booleans(), _num, _text)
_json = st.recursive(
    _scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_text, inner, max_size=3)),
    max_leaves=6,
)
_args = st.one_of(
    _json,
    st.fixed_dictionaries(
        {},
        optional={
            "External id": st.one_of(_num, _text, st.none(), st.booleans()),
            "external id": st.one_of(st.integers(-5, 5), st.text(max_size=3)),
            "correlation": st.one_of(_num, st.sampled_from(["0x1f", " 7", "1_0"])),
            "x": _json,
        },
    ),
)
trace_event = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "ph": st.one_of(st.sampled_from(["X", "M", "i", "s", "f"]), _scalar),
            "cat": st.one_of(_text, _scalar),
            "name": st.one_of(_text, _scalar, st.just("a\x01b\x7f")),
            "pid": st.one_of(st.integers(-3, 10**6), _text, _scalar),
            "tid": st.one_of(st.integers(-3, 10**6), _text),
            "ts": st.one_of(_num, st.sampled_from(["12.5", "x", " 3", "1e400"]), _scalar),
            "dur": st.one_of(_num, st.just(-3.0), _scalar),
            "id": st.one_of(st.integers(0, 10**9), _text, _num),
            "bp": st.just("e"),
            "args": _args,
        },
    ),
    _scalar,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    events=st.lists(trace_event, max_size=12),
    layout=st.sampled_from(["compact", "spaced", "indent", "array", "gz", "wide"]),
    chunk=st.sampled_from([64, 200, 4096]),
    base=st.one_of(st.none(), st.just(1735632360000000000)),
    cut=st.one_of(st.none(), st.floats(0.3, 1.0)),
)
def test_random_traces(
    tmp_path: Path,
    events: list[Any],
    layout: str,
    chunk: int,
    base: int | None,
    cut: float | None,
) -> None:
    doc: dict[str, Any] = {"schemaVersion": 1, "traceEvents": events}
    if base is not None:
        doc["baseTimeNanoseconds"] = base
    if layout == "compact":
        text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    elif layout == "spaced":
        text = json.dumps(doc)
    elif layout == "indent":
        text = json.dumps(doc, indent=2, ensure_ascii=False)
    elif layout == "wide":  # runs of whitespace longer than the window, between every token
        text = json.dumps(doc, indent=1, ensure_ascii=False).replace("\n", "\n" + " \t" * 2500)
    else:
        text = json.dumps(events if layout == "array" else doc)
    path = tmp_path / ("t.json.gz" if layout == "gz" else "t.json")
    data = text.encode("utf-8")
    if cut is not None:  # a file cut short (possibly inside a multi-byte character)
        data = data[: int(len(data) * cut)]
    path.write_bytes(gzip.compress(data) if layout == "gz" else data)
    assert_same_outcome(path, chunk_bytes=chunk)
    try:
        read_trace(path)
    except InputError:
        with pytest.raises(InputError):
            read_trace_stream(path, work_only=True, chunk_bytes=chunk)
    else:
        assert_same_work(path, chunk_bytes=chunk)


def _token_walk(buf: bytes) -> tuple[int | None, int | None, bool]:
    """The last depth-0 comma, the closing ``]`` and whether the end is inside a string, one
    byte at a time."""
    depth, inside, escaped, last, close = 0, False, False, None, None
    for i, c in enumerate(buf.decode("latin-1")):
        if inside:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                inside = False
        elif c == '"':
            inside = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth < 0:
                if c == "]":
                    close = i
                    break
                depth = 0
        elif c == "," and depth == 0:
            last = i
    return last, close, inside


@settings(max_examples=300, deadline=None)
@given(
    names=st.lists(st.text(alphabet='ab"\\],[{}', max_size=12), max_size=6),
    slashes=st.integers(0, 3),
    tail=st.booleans(),
    cut=st.floats(0, 1),
    block=st.integers(1, 9),
    small=st.sampled_from([0, 4, 1 << 16]),
)
def test_the_token_scan_is_exact_in_any_blocks(
    names: list[str], slashes: int, tail: bool, cut: float, block: int, small: int
) -> None:
    """The vectorised scan (in blocks of any size, resumed anywhere, a string cut anywhere) and
    the token-by-token one for short scans find the byte walk's separator, close and strings."""
    from nprof_report.parse.read import stream

    events = [{"name": n, "a": [[1, 2], {"x": "\\" * slashes}]} for n in names]
    buf = (json.dumps(events)[1:] + (' , {"tail": 1}' if tail else "")).encode()
    at = int(len(buf) * cut)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stream, "_SCAN_BLOCK", block)
        mp.setattr(stream, "_SCAN_SMALL", small)
        scan = stream._Scan()
        scan.run(buf[:at])
        scan.run(buf)
        quotes = stream._Scan(stop_at_close=False)
        quotes.run(buf[:at])
    assert (scan.last_sep, scan.close) == _token_walk(buf)[:2]
    _, close, inside = _token_walk(buf[:at])
    if close is None:
        assert quotes.in_string == inside

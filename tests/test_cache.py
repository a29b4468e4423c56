"""The Parquet cache of parsed frames (parse/cache.py): exact round trip, invalidation, location,
atomic writes and the bound on the user cache."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import fields
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

from nprof_report.bundle import Implementation, sha256_file
from nprof_report.cli import cli
from nprof_report.parse import cache
from nprof_report.parse.frames import load_frames
from nprof_report.parse.inputs import Source
from nprof_report.parse.read.source import TraceFile
from nprof_report.parse.schema import TraceFrames
from nprof_report.parse.sources import load_source
from tests.conftest import PUBLIC_TRACES


class ParseCounter:
    """Counts parses: wraps ``load_frames`` where the cache and ``load_source`` call it;
    ``fail=True`` makes any parse an error."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, fail: bool = False) -> None:
        self.calls = 0
        self.fail = fail
        for module in ("cache", "sources"):
            monkeypatch.setattr(f"nprof_report.parse.{module}.load_frames", self)

    def __call__(self, path: Path, *, work_only: bool = False) -> TraceFrames:
        self.calls += 1
        if self.fail:
            raise AssertionError("the trace was parsed, not read from the cache")
        return load_frames(path, work_only=work_only)


def _loose(trace: Path) -> Source:
    return Source(trace.stem, trace, trace.parent)


def _copy(key: str, folder: Path, name: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(PUBLIC_TRACES[key], folder / (name or PUBLIC_TRACES[key].name)))


def assert_same_frames(got: TraceFrames, want: TraceFrames) -> None:
    """Every field equal: frames with the same columns, dtypes, values and row order."""
    for f in fields(TraceFrames):
        a, b = getattr(got, f.name), getattr(want, f.name)
        if isinstance(b, pl.DataFrame):
            assert a.schema == b.schema, f.name
            assert a.equals(b), f.name
        else:
            assert a == b, f.name


def _entries(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


@pytest.mark.parametrize("work_only", [True, False])
@pytest.mark.parametrize("key", sorted(PUBLIC_TRACES))
def test_round_trip_is_exact_and_the_second_load_does_not_parse(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch, key: str, work_only: bool
) -> None:
    source = _loose(PUBLIC_TRACES[key])
    first = cache.cached_frames(source, work_only=work_only)  # parsed, then written
    assert_same_frames(
        first,
        load_frames(PUBLIC_TRACES[key], work_only=work_only),
    )
    assert len(_entries(cache_dir)) == 1
    ParseCounter(monkeypatch, fail=True)
    second = cache.cached_frames(source, work_only=work_only)
    assert_same_frames(second, first)
    assert second.meta.path == PUBLIC_TRACES[key]


def test_changed_trace_is_parsed_again_and_replaces_the_entry(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = _copy("rocm", tmp_path / "t")
    source = _loose(trace)
    cache.cached_frames(source, work_only=True)
    (entry,) = _entries(cache_dir)
    doc = json.loads(trace.read_text())
    doc["traceEvents"] = doc["traceEvents"][: len(doc["traceEvents"]) // 2]
    trace.write_text(json.dumps(doc))
    counter = ParseCounter(monkeypatch)
    got = cache.cached_frames(source, work_only=True)
    assert counter.calls == 1
    assert_same_frames(got, load_frames(trace, work_only=True))
    assert _entries(cache_dir) == [entry]
    recorded = json.loads((entry / cache.ENTRY_FILE).read_text())["key"]["sha256"]
    assert recorded == sha256_file(trace)
    cache.cached_frames(source, work_only=True)
    assert counter.calls == 1  # the new entry served this one


@pytest.mark.parametrize(
    "damage",
    [
        lambda e: (e / "frame-ops.parquet").write_bytes(b"PAR1 not parquet at all PAR1"),
        lambda e: (e / "frame-ops.parquet").write_bytes(
            (e / "frame-ops.parquet").read_bytes()[:-99]
        ),
        lambda e: (e / "frame-links.parquet").unlink(),
        lambda e: (e / "entry.json").write_text('{"key": {"sha256"'),
        lambda e: (e / "frame-steps.parquet").write_bytes(
            (e / "frame-device.parquet").read_bytes()
        ),
    ],
    ids=["garbage", "truncated", "missing", "bad-json", "swapped"],
)
def test_damaged_entry_is_parsed_again_without_error(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch, damage: Any
) -> None:
    source = _loose(PUBLIC_TRACES["cuda2023"])
    cache.cached_frames(source, work_only=True)
    (entry,) = _entries(cache_dir)
    damage(entry)
    want = load_frames(PUBLIC_TRACES["cuda2023"], work_only=True)
    counter = ParseCounter(monkeypatch)
    got = cache.cached_frames(source, work_only=True)
    assert counter.calls == 1
    assert_same_frames(got, want)
    cache.cached_frames(source, work_only=True)
    assert counter.calls == 1  # rewritten


def test_full_entry_serves_work_only_but_not_the_reverse(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = PUBLIC_TRACES["triton"]
    full, work = load_frames(trace), load_frames(trace, work_only=True)
    assert full.events is not None and work.events is None  # work-only keeps no events
    cache.cached_frames(_loose(trace), work_only=False)
    counter = ParseCounter(monkeypatch, fail=True)
    assert_same_frames(
        cache.cached_frames(_loose(trace), work_only=True),
        work,
    )
    assert counter.calls == 0

    monkeypatch.setenv(cache.ENV_DIR, str(cache_dir / "second"))  # start again, work-only first
    counter.fail = False
    cache.cached_frames(_loose(trace), work_only=True)
    assert counter.calls == 1
    assert_same_frames(
        cache.cached_frames(_loose(trace), work_only=False),
        full,
    )
    assert counter.calls == 2  # a work-only entry does not serve a full request
    (entry,) = _entries(cache_dir / "second")
    assert json.loads((entry / cache.ENTRY_FILE).read_text())["key"]["work_only"] is False


def test_no_cache_env_flag_and_parameter(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = PUBLIC_TRACES["rocm"]
    counter = ParseCounter(monkeypatch)
    load_source(_loose(trace), use_cache=False)
    monkeypatch.setenv(cache.ENV_OFF, "1")
    load_source(_loose(trace))
    load_source(_loose(trace))
    assert counter.calls == 3
    assert not cache_dir.exists()

    result = CliRunner().invoke(cli, ["ops", str(trace), "--no-cache"])
    assert result.exit_code == 0 and "aten::addmm" in result.output
    monkeypatch.delenv(cache.ENV_OFF)
    result = CliRunner().invoke(cli, ["ops", str(trace), "--no-cache"])
    assert result.exit_code == 0
    assert counter.calls == 5
    assert not cache_dir.exists()
    result = CliRunner().invoke(cli, ["ops", str(trace)])
    assert result.exit_code == 0
    assert len(_entries(cache_dir)) == 1


def test_bundle_traces_are_cached_in_the_bundle_and_loose_traces_in_the_user_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(cache.ENV_DIR, raising=False)
    monkeypatch.delenv(cache.ENV_OFF, raising=False)
    xdg = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    run = tmp_path / "run"
    trace = _copy("rocm", run / "naive", "trace.json")
    impl = Implementation("naive", "", "ok", bundle="naive", trace="naive/trace.json")
    load_source(Source("naive", trace, run / "naive", impl))
    assert len(_entries(run / "naive" / cache.BUNDLE_DIR)) == 1
    assert not xdg.exists()

    loose = _copy("triton", tmp_path / "mine")
    load_source(_loose(loose))
    assert sorted(p.name for p in loose.parent.iterdir()) == [loose.name]  # nothing beside it
    assert len(_entries(xdg / "nprof-report" / "frames")) == 1

    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    load_source(_loose(loose))
    assert len(_entries(tmp_path / "home" / ".cache" / "nprof-report" / "frames")) == 1

    # a moved run keeps its cache; the frames name the trace where it is now
    moved = tmp_path / "moved"
    shutil.copytree(run, moved)
    ParseCounter(monkeypatch, fail=True)
    loaded = load_source(Source("naive", moved / "naive" / "trace.json", moved / "naive", impl))
    assert loaded.frames.meta.path == moved / "naive" / "trace.json"


def test_failed_write_leaves_no_entry_that_is_used(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _loose(PUBLIC_TRACES["rocm"])
    real = pl.DataFrame.write_parquet
    writes = 0

    def failing(self: pl.DataFrame, *args: Any, **kwargs: Any) -> None:
        nonlocal writes
        writes += 1
        if writes == 3:
            raise OSError("No space left on device")
        real(self, *args, **kwargs)

    monkeypatch.setattr(pl.DataFrame, "write_parquet", failing)
    got = cache.cached_frames(source, work_only=True)
    assert_same_frames(got, load_frames(PUBLIC_TRACES["rocm"], work_only=True))
    assert writes == 3
    assert list(cache_dir.iterdir()) == []  # neither an entry nor the staging folder
    assert not cache.is_cached(source, work_only=True)


def test_staging_folder_of_a_killed_write_is_never_read(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _loose(PUBLIC_TRACES["rocm"])
    cache.cached_frames(source, work_only=True)
    (entry,) = _entries(cache_dir)
    entry.rename(cache_dir / f".tmp-{entry.name}-x1y2")  # complete files, never renamed in
    counter = ParseCounter(monkeypatch)
    assert not cache.is_cached(source, work_only=True)
    cache.cached_frames(source, work_only=True)
    assert counter.calls == 1


def test_trace_is_hashed_once_per_process(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hashed = []

    def counting(file: TraceFile) -> str:
        hashed.append(file.path)
        return real(file)

    real = cache.sha256_of
    monkeypatch.setattr("nprof_report.parse.cache.sha256_of", counting)
    trace = _copy("cpu", cache_dir.parent / "h")
    for _ in range(3):
        cache.cached_frames(_loose(trace), work_only=True)
    assert hashed == [trace]


def test_a_trace_without_entry_is_hashed_while_it_is_parsed(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing to serve: the parse starts at once and the hash (for the entry) runs beside it."""
    parsing = threading.Event()
    overlapped: list[bool] = []

    def hashing(file: TraceFile) -> str:
        overlapped.append(parsing.wait(timeout=20))  # never set if the hash came first
        return real(file)

    def parse(path: Path, *, work_only: bool = False) -> TraceFrames:
        parsing.set()
        return load_frames(path, work_only=work_only)

    real = cache.sha256_of
    monkeypatch.setattr("nprof_report.parse.cache.sha256_of", hashing)
    monkeypatch.setattr("nprof_report.parse.cache.load_frames", parse)
    trace = _copy("cuda2023", tmp_path / "t")
    got = cache.cached_frames(_loose(trace), work_only=True)
    assert overlapped == [True]
    assert_same_frames(got, load_frames(trace, work_only=True))
    (entry,) = _entries(cache_dir)
    recorded = json.loads((entry / cache.ENTRY_FILE).read_text())["key"]["sha256"]
    assert recorded == sha256_file(trace)
    ParseCounter(monkeypatch, fail=True)
    assert_same_frames(cache.cached_frames(_loose(trace), work_only=True), got)


def _fake_entry(root: Path, name: str, size: int, used: float) -> Path:
    entry = root / name
    entry.mkdir(parents=True)
    (entry / "events.parquet").write_bytes(b"x" * size)
    (entry / cache.ENTRY_FILE).write_text("{}")
    os.utime(entry / cache.ENTRY_FILE, (used, used))
    return entry


def test_eviction_keeps_the_most_recently_used_within_both_bounds(tmp_path: Path) -> None:
    root = tmp_path / "frames"
    for i, size in enumerate([100, 100, 100, 100, 100]):
        _fake_entry(root, f"e{i}", size, used=1000.0 + i)
    new = _fake_entry(root, "new", 100, used=500.0)  # just written: kept whatever its mtime
    cache.evict(root, keep=new, max_entries=3, max_bytes=10_000)
    assert [p.name for p in _entries(root)] == ["e3", "e4", "new"]
    cache.evict(root, keep=new, max_entries=10, max_bytes=250)
    assert [p.name for p in _entries(root)] == ["e4", "new"]
    cache.evict(root, keep=new, max_entries=10, max_bytes=10)
    assert [p.name for p in _entries(root)] == ["new"]


def test_user_cache_is_bounded_end_to_end(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "MAX_ENTRIES", 2)
    order = ("cpu", "rocm", "triton")
    for key in order:
        cache.cached_frames(_loose(PUBLIC_TRACES[key]), work_only=True)
    assert len(_entries(cache_dir)) == 2
    cached = [cache.is_cached(_loose(PUBLIC_TRACES[k]), work_only=True) for k in order]
    assert cached == [False, True, True]


def _only_entry(cache_dir: Path) -> Path:
    (entry,) = _entries(cache_dir)
    return entry


def test_every_flipped_byte_of_a_frame_file_is_a_miss(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A byte flipped anywhere in a cached frame file: parsed again, never wrong numbers."""
    trace = PUBLIC_TRACES["cpu"]
    want = cache.cached_frames(_loose(trace), work_only=True)
    frame_file = _only_entry(cache_dir) / "frame-ops.parquet"
    pristine = frame_file.read_bytes()
    counter = ParseCounter(monkeypatch)
    offsets = range(0, len(pristine), max(1, len(pristine) // 40))
    for offset in offsets:
        damaged = bytearray(pristine)
        damaged[offset] ^= 0x01
        frame_file.write_bytes(bytes(damaged))
        assert_same_frames(cache.cached_frames(_loose(trace), work_only=True), want)
        frame_file.write_bytes(pristine)  # the re-parse rewrote the entry; damage it afresh
    assert counter.calls == len(offsets)


def test_frame_files_copied_from_another_entry_are_a_miss(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Frame files of another trace with the same rows and dtypes (every duration doubled)."""
    a = _copy("cpu", tmp_path / "a")
    doc = json.loads(a.read_text())
    for event in doc["traceEvents"]:
        if isinstance(event.get("dur"), (int, float)):
            event["dur"] *= 2
    b = tmp_path / "b" / a.name
    b.parent.mkdir()
    b.write_text(json.dumps(doc))
    want = cache.cached_frames(_loose(a), work_only=True)
    cache.cached_frames(_loose(b), work_only=True)
    entry_a, entry_b = (cache.location(_loose(t))[0] for t in (a, b))  # type: ignore[index]
    for name in ("frame-ops.parquet", "frame-steps.parquet", "frame-device.parquet"):
        shutil.copy(entry_b / name, entry_a / name)
    counter = ParseCounter(monkeypatch)
    assert_same_frames(cache.cached_frames(_loose(a), work_only=True), want)
    assert counter.calls == 1


def test_a_fifo_in_the_cache_is_a_miss_not_a_hang(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = PUBLIC_TRACES["cpu"]
    want = cache.cached_frames(_loose(trace), work_only=True)
    entry = _only_entry(cache_dir)
    for name in (cache.ENTRY_FILE, "frame-ops.parquet"):
        shutil.rmtree(entry)
        cache.cached_frames(_loose(trace), work_only=True)
        (entry / name).unlink()
        os.mkfifo(entry / name)
        result: list[TraceFrames] = []
        worker = threading.Thread(
            target=lambda out=result: out.append(
                cache.cached_frames(_loose(trace), work_only=True)
            ),
            daemon=True,
        )
        worker.start()
        worker.join(timeout=30)
        assert not worker.is_alive(), f"a FIFO as {name} blocked the cache"
        assert_same_frames(result[0], want)


def test_a_path_that_is_not_utf8_is_cached(tmp_path: Path, cache_dir: Path) -> None:
    folder = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9"))
    trace = _copy("cpu", folder)
    first = cache.cached_frames(_loose(trace), work_only=True)
    assert len(_entries(cache_dir)) == 1
    assert_same_frames(cache.cached_frames(_loose(trace), work_only=True), first)


def test_staging_of_a_dead_process_is_removed_at_once(tmp_path: Path, cache_dir: Path) -> None:
    trace = _copy("cpu", tmp_path)
    cache.cached_frames(_loose(trace), work_only=True)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    slot = _only_entry(cache_dir).name
    dead_dir = cache_dir / f".tmp-{slot}-p{int(dead.stdout)}-abc123"
    live_dir = cache_dir / f".tmp-{slot}-p{os.getppid()}-abc123"
    for d in (dead_dir, live_dir):
        d.mkdir()
        (d / "frame-ops.parquet").write_bytes(b"partial")
    other = _copy("rocm", tmp_path)
    cache.cached_frames(_loose(other), work_only=True)  # a write sweeps the folder
    assert not dead_dir.exists()
    assert live_dir.exists()

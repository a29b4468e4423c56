"""Per-rank traces parsed in worker processes (parse/parallel.py): the memory bound, the same output
as one after another, and errors that come out exactly as they would sequentially."""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nprof_report.cli import cli
from nprof_report.errors import InputError
from nprof_report.parse import cache, parallel
from nprof_report.parse.inputs import resolve
from tests.conftest import PUBLIC_TRACES, ROOT

BROKEN = ROOT / "fixtures" / "broken"
EXE = Path(sys.executable).with_name("nprof-report")


def _ranks(folder: Path, broken: str | None = None) -> Path:
    """rank0/1/2.pt.trace.json, copies of one public trace; rank1 replaced by ``broken``."""
    folder.mkdir(parents=True)
    for rank in range(3):
        src = BROKEN / broken if broken and rank == 1 else PUBLIC_TRACES["cuda2023"]
        shutil.copy(src, folder / f"rank{rank}.pt.trace.json")
    return folder


def _no_parse_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any parse in this (the parent) process fails: only spawned workers may parse."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("parsed in the parent, not in a worker")

    for module in ("cache", "sources"):
        monkeypatch.setattr(f"nprof_report.parse.{module}.load_frames", refuse)


def test_pick_starts_largest_first_within_memory_and_slots() -> None:
    pending = [(0, 30), (1, 60), (2, 20), (3, 50)]
    assert parallel.pick(pending, free_bytes=100, free_slots=4) == [(1, 60), (0, 30)]
    assert parallel.pick(pending, free_bytes=100, free_slots=1) == [(1, 60)]
    assert parallel.pick(pending, free_bytes=55, free_slots=4) == [(3, 50)]
    assert parallel.pick(pending, free_bytes=10, free_slots=4) == []


def test_pool_size_is_what_fits_together() -> None:
    assert parallel.pool_size([40, 10, 30, 20], jobs=8, memory_limit=65) == 3
    assert parallel.pool_size([40, 10, 30, 20], jobs=2, memory_limit=1000) == 2
    assert parallel.pool_size([40, 50], jobs=8, memory_limit=60) == 1


@pytest.mark.parametrize("seed", range(20))
def test_schedule_never_exceeds_the_memory_limit_or_jobs(seed: int) -> None:
    rng = random.Random(seed)
    limit, jobs = 1000, rng.randint(2, 6)
    tasks = [(i, rng.randint(50, limit)) for i in range(rng.randint(2, 30))]
    pending, peak_sum, peak_count = list(tasks), 0, 0
    running: list[parallel.Task] = []
    finished: list[parallel.Task] = []
    workers = parallel.pool_size([p for _, p in tasks], jobs, limit)
    while pending or running:
        free = limit - sum(p for _, p in running)
        for task in parallel.pick(pending, free, workers - len(running)):
            pending.remove(task)
            running.append(task)
        assert running, "nothing could start: the schedule would hang"
        peak_sum = max(peak_sum, sum(p for _, p in running))
        peak_count = max(peak_count, len(running))
        finished.append(running.pop(rng.randrange(len(running))))  # any one finishes
    assert sorted(finished) == sorted(tasks)
    assert peak_sum <= limit
    assert peak_count <= min(jobs, workers)


def test_estimated_peak_reads_the_gzip_trailer(tmp_path: Path) -> None:
    plain = PUBLIC_TRACES["cuda2023"]
    packed = tmp_path / "t.json.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    size = plain.stat().st_size
    assert packed.stat().st_size < size / 5
    assert parallel.uncompressed_size(plain) == size
    assert parallel.uncompressed_size(packed) == size
    assert parallel.estimated_peak(size) == 100 * 2**20 + int(3.5 * size)


def test_memory_available_is_within_physical_memory() -> None:
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert 0 < parallel.memory_available() <= total


def test_rank_folder_gives_the_same_ops_with_one_and_two_jobs(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _ranks(tmp_path / "ranks")
    runner = CliRunner()
    one = runner.invoke(cli, ["ops", str(folder), "--format", "json", "--jobs", "1", "--no-cache"])
    assert one.exit_code == 0, one.output
    assert not cache_dir.exists()
    rows = json.loads(one.stdout)
    assert {r["source"] for r in rows} == {f"rank{r}.pt.trace.json" for r in range(3)}

    _no_parse_here(monkeypatch)
    two = runner.invoke(cli, ["ops", str(folder), "--format", "json", "--jobs", "2"])
    assert two.exit_code == 0, two.output
    assert two.output == one.output
    assert len(list(cache_dir.iterdir())) == 3  # one entry per rank, written by the workers


def test_memory_limit_sets_the_number_of_workers(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = resolve(_ranks(tmp_path / "ranks")).sources
    peak = parallel.estimated_peak(PUBLIC_TRACES["cuda2023"].stat().st_size)
    started = []
    real = parallel._executor

    def recording(workers: int, *, fresh: bool) -> ProcessPoolExecutor:
        started.append((workers, fresh))
        return real(workers, fresh=fresh)

    monkeypatch.setattr(parallel, "_executor", recording)

    # room for one parse at a time: no workers, nothing parsed ahead
    assert parallel.prepare_sources(sources, jobs=8, memory_limit=peak * 3 // 2) == {}
    assert started == []
    assert not cache_dir.exists()

    # room for two at a time: a pool of two workers parses all three
    _no_parse_here(monkeypatch)
    assert parallel.prepare_sources(sources, jobs=8, memory_limit=peak * 5 // 2) == {}
    assert started == [(2, True)]  # together they would not fit: a fresh process per trace
    assert all(cache.is_cached(s, work_only=True) for s in sources)


def test_default_jobs_leave_small_traces_to_the_parent(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = resolve(_ranks(tmp_path / "ranks")).sources
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    runs: list[tuple[list[parallel.Task], int]] = []

    def record(
        sources: Any,
        requests: Any,
        tasks: list[parallel.Task],
        workers: int,
        limit: int,
        keep_going: bool,
    ) -> dict[int, BaseException]:
        runs.append((tasks, workers))
        return {}

    monkeypatch.setattr(parallel, "_run", record)
    parallel.prepare_sources(sources)
    parallel.prepare_sources(sources, jobs=1)
    assert runs == []
    monkeypatch.setattr(parallel, "AUTO_MIN_BYTES", 0)  # past the threshold: the default runs
    parallel.prepare_sources(sources)
    assert [([i for i, _ in tasks], workers) for tasks, workers in runs] == [([0, 1, 2], 3)]


def test_broken_rank_raises_the_sequential_error_from_a_worker(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _ranks(tmp_path / "ranks", broken="garbage.json")
    sequential = CliRunner().invoke(cli, ["ops", str(folder), "--jobs", "1", "--no-cache"])
    assert isinstance(sequential.exception, InputError)
    _no_parse_here(monkeypatch)
    shutil.rmtree(cache_dir, ignore_errors=True)
    parallel_run = CliRunner().invoke(cli, ["ops", str(folder), "--jobs", "2"])
    assert isinstance(parallel_run.exception, InputError)
    assert str(parallel_run.exception) == str(sequential.exception)
    assert parallel_run.exception.path == folder / "rank1.pt.trace.json"


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_broken_rank_exits_2_with_one_line_naming_it(
    cache_dir: Path, tmp_path: Path, jobs: str
) -> None:
    expected = json.loads((BROKEN / "cases.json").read_text())["garbage.json"]["expect"]
    folder = _ranks(tmp_path / "ranks", broken="garbage.json")
    proc = subprocess.run(
        [str(EXE), "ops", str(folder), "--jobs", jobs],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert str(folder / "rank1.pt.trace.json") in lines[0] and expected in lines[0]

"""Parse several traces (one per rank, say) in worker processes, within a memory bound.

Workers parse into the frame cache (:mod:`.cache`) and return nothing but errors; the parent then
loads every source in order with :func:`~.sources.load_source`, which reads the cached Parquet. So
parallelism needs the cache: with the cache off, or fewer than two uncached traces, nothing runs in
workers and the traces are parsed one after another, as before. With ``jobs`` left to its default,
workers are used only when the uncached traces hold :data:`AUTO_MIN_BYTES` (256 MiB) together:
starting one costs about as much as parsing 50 MB.

Memory bound. The peak RSS of one parse is estimated as ``WORKER_RSS + PEAK_FACTOR × S``, where
``S`` is the trace's uncompressed size: the file size for plain JSON; for gzip, the ISIZE trailer
(the uncompressed size mod 4 GiB, of the last gzip member), taken as at least ``GZIP_RATIO`` × the
compressed size once the file is large enough for ISIZE to have wrapped. Traces are started largest
first whenever a worker is free and the summed estimates of the parses running at once stay under
``memory_limit`` (default 75 % of MemAvailable) with at most ``jobs`` at once (default: CPU count).
A trace whose estimate alone exceeds the bound is not given to a worker: the parent parses it
later, alone. Workers are spawned ("spawn": polars is not fork-safe); unless all the traces fit in
the bound together, each parse gets a fresh process (Python 3.11+), so the memory a parse leaves
behind is returned to the system before the next one starts. Each worker lets the split decoder of
a large trace (:mod:`.split`) use its share of the CPUs, not all of them.

Errors come exactly as sequentially: a parse that fails in a worker is raised by
:func:`load_sources` at that source's turn, after the sources before it were loaded; traces after
a failed one are not started.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nprof_report.errors import InputError, NprofError
from nprof_report.parse import cache
from nprof_report.parse.inputs import Source
from nprof_report.parse.read import DECODE_WORKERS_ENV, open_trace
from nprof_report.parse.sources import LoadedSource, load_source, needs_all_events
from nprof_report.quiet import in_worker

if TYPE_CHECKING:
    from rich.progress import Progress

PEAK_FACTOR = 3.5
GZIP_RATIO = 10
WORKER_RSS = 100 << 20  # a fresh interpreter with polars and the parser imported
MEMORY_SHARE = 0.75
AUTO_MIN_BYTES = 256 << 20

Task = tuple[int, int]  # (index of the source, estimated peak bytes)


@dataclass(frozen=True)
class _Failed:
    """An InputError on its way back from a worker. It cannot travel itself: pickle rebuilds an
    exception from its ``args`` (the message), but ``InputError.__init__`` takes path, problem and
    hint."""

    kind: type[InputError]
    path: str
    problem: str
    hint: str | None

    def error(self) -> InputError:
        return self.kind(self.path, self.problem, self.hint)


def uncompressed_size(trace: Path) -> int:
    """The trace's size once decompressed (see the module docstring for gzip)."""
    with open_trace(trace) as file:
        size, gz, isize = file.size, file.gzip, file.stated_size()
    if not gz or size < 18:
        return size
    if size * GZIP_RATIO < 1 << 32:  # ISIZE cannot have wrapped at the usual ratio
        return max(isize, size)
    return max(isize, GZIP_RATIO * size)


def estimated_peak(size: int) -> int:
    """Estimated peak RSS, in bytes, of a worker parsing a trace of ``size`` uncompressed bytes."""
    return WORKER_RSS + int(PEAK_FACTOR * size)


def memory_available() -> int:
    """MemAvailable from /proc/meminfo, else the free physical pages."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def pick(pending: Sequence[Task], free_bytes: int, free_slots: int) -> list[Task]:
    """The tasks to start now: largest first, each only if it fits in what is still free."""
    started: list[Task] = []
    for task in sorted(pending, key=lambda t: (-t[1], t[0])):
        if len(started) == free_slots:
            break
        if task[1] <= free_bytes:
            started.append(task)
            free_bytes -= task[1]
    return started


def pool_size(peaks: Sequence[int], jobs: int, memory_limit: int) -> int:
    """How many workers can ever run at once: the smallest estimates that fit together."""
    count = total = 0
    for peak in sorted(peaks):
        total += peak
        if total > memory_limit or count == jobs:
            break
        count += 1
    return count


def prepare_sources(
    sources: Sequence[Source],
    *,
    jobs: int | None = None,
    memory_limit: int | None = None,
    keep_going: bool = False,
) -> dict[int, BaseException]:
    """Parse the uncached traces of ``sources`` into the cache in worker processes.

    Returns the errors by index of source. Does nothing when fewer than two workers would run, or
    with ``jobs=None`` below :data:`AUTO_MIN_BYTES` (module docstring). ``keep_going``: a failed
    trace does not stop the traces after it (the caller skips the failed one).
    """
    workers = jobs or os.cpu_count() or 1
    limit = memory_limit if memory_limit is not None else int(MEMORY_SHARE * memory_available())
    if workers < 2 or not cache.enabled():
        return {}
    requests: dict[int, bool] = {}
    tasks: list[Task] = []
    total = 0
    for i, source in enumerate(sources):
        request = _request(source)
        if request is None:
            continue
        requests[i], size = request
        total += size
        peak = estimated_peak(size)
        if peak <= limit:  # a larger one is parsed later by the parent, alone
            tasks.append((i, peak))
    workers = pool_size([p for _, p in tasks], workers, limit)
    if len(tasks) < 2 or workers < 2 or (jobs is None and total < AUTO_MIN_BYTES):
        return {}
    return _run(sources, requests, tasks, workers, limit, keep_going)


def _request(source: Source) -> tuple[bool, int] | None:
    """(work_only, uncompressed size) of a source to parse ahead; None when it is cached, or when
    something is wrong with it: the parent then meets the error at the source's turn."""
    if source.trace is None:
        return None
    try:
        work_only = not needs_all_events(source)
        if cache.is_cached(source, work_only=work_only):
            return None
        return work_only, uncompressed_size(source.trace)
    except (OSError, NprofError):
        return None


def _run(
    sources: Sequence[Source],
    requests: dict[int, bool],
    tasks: list[Task],
    workers: int,
    limit: int,
    keep_going: bool,
) -> dict[int, BaseException]:
    failures: dict[int, BaseException] = {}
    pending = list(tasks)
    cpus_per_worker = max(1, (os.cpu_count() or 1) // workers)
    running: dict[Future[_Failed | None], Task] = {}
    progress: AbstractContextManager[Progress | None] = nullcontext()
    if sys.stderr.isatty():
        # imported only here: rich's progress module took 75 ms to import, on the way of every
        # parse (``ops`` on one trace shows no progress)
        from rich.console import Console
        from rich.progress import Progress

        progress = Progress(console=Console(stderr=True), transient=True)
    with (
        progress as bar,
        _executor(workers, fresh=sum(p for _, p in tasks) > limit) as pool,
    ):
        shown = bar.add_task(f"parsing {len(tasks)} traces", total=len(tasks)) if bar else None
        while pending or running:
            used = sum(peak for _, peak in running.values())
            for task in pick(pending, limit - used, workers - len(running)):
                pending.remove(task)
                i = task[0]
                future = pool.submit(
                    _parse, sources[i], requests[i], dict(cache.DIGESTS), cpus_per_worker
                )
                running[future] = task
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                i, _ = running.pop(future)
                if bar and shown is not None:
                    bar.advance(shown)
                try:
                    failure = future.result()
                except BrokenProcessPool:  # a worker was killed (out of memory?)
                    print(
                        "nprof-report: a parse worker died; the parent parses what is left",
                        file=sys.stderr,
                    )
                    return failures
                except Exception as exc:  # the exception, unpickled, with the worker traceback
                    failures[i] = exc
                else:
                    if failure is not None:
                        failures[i] = failure.error()
                if i in failures and not keep_going:  # later ones are never reached sequentially
                    pending = [t for t in pending if t[0] < i]
    return failures


def _executor(workers: int, *, fresh: bool) -> ProcessPoolExecutor:
    """Spawned workers (polars is not fork-safe). ``fresh``: one trace per process where Python
    allows, so memory a parse leaves behind goes back to the system before the next one starts."""
    context = multiprocessing.get_context("spawn")
    if fresh and sys.version_info >= (3, 11):
        return ProcessPoolExecutor(workers, mp_context=context, max_tasks_per_child=1)
    return ProcessPoolExecutor(workers, mp_context=context)


def _parse(
    source: Source, work_only: bool, digests: dict[tuple[str, int, int, int, int], str], cpus: int
) -> _Failed | None:
    """Worker: parse into the cache, with the parent's digests (no trace is hashed twice) and its
    share of the CPUs for the split decoder of large traces (:mod:`.split`), unless the user set
    that share."""
    cache.DIGESTS.update(digests)
    os.environ.setdefault(DECODE_WORKERS_ENV, str(cpus))
    try:
        with in_worker():  # the libraries' warnings as the command's notes
            cache.cached_frames(source, work_only=work_only)
    except InputError as exc:
        return _Failed(type(exc), str(exc.path), exc.problem, exc.hint)
    return None


def load_sources(
    sources: Sequence[Source],
    *,
    jobs: int | None = None,
    memory_limit: int | None = None,
    use_cache: bool = True,
    step_annotation: str | None = None,
) -> Iterator[LoadedSource]:
    """:func:`~.sources.load_source` of each source in order, the traces parsed in parallel first.

    ``jobs=1`` or ``use_cache=False`` parse one after another in this process.
    """
    failures = prepare_sources(sources, jobs=jobs, memory_limit=memory_limit) if use_cache else {}
    for i, source in enumerate(sources):
        if i in failures:
            raise failures[i]
        yield load_source(source, use_cache=use_cache, step_annotation=step_annotation)

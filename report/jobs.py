"""Per-source jobs and the engine that runs them: the local pool (default) or Ray (``--ray``).

A *job* turns one source and its loaded frames into the aggregates a command needs:
:func:`report_job` (the analysis and the rank figures ``build`` and ``ops --by-rank`` use) or
:func:`ops_job` (the key_averages table). The same job runs on either engine, so both give the
same report:

* local: the traces are parsed in worker processes into the frame cache
  (:mod:`nprof_report.parse.parallel`), then each job runs here on the cached frames, in order;
* Ray: each job runs in a Ray task, next to the parse, and only its result comes back
  (:mod:`nprof_report.parse.engine_ray`, imported only then).

A source that cannot be parsed stops the command with its :class:`~nprof_report.errors.InputError`
(one line naming the file, exit 2) or, with ``keep_going``, is skipped and named in the caveats.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import polars as pl

from nprof_report.errors import InputError
from nprof_report.parse import LoadedSource, Source, key_averages, load_source, prepare_sources

if TYPE_CHECKING:
    from nprof_report.report.analyses import ImplementationAnalysis
    from nprof_report.report.ranks import RankFigures

T = TypeVar("T")


@dataclass(frozen=True)
class Engine:
    """Where jobs run and what to do with a failed source.

    ``ray``: None for the local pool, else the Ray address (``local``, ``auto``, ``host:port``,
    ``ray://…``). ``jobs``: the local pool's workers, or the CPUs of a ``local`` Ray instance.
    """

    jobs: int | None = None
    use_cache: bool = True
    ray: str | None = None
    keep_going: bool = False


@dataclass(frozen=True)
class SourceResult:
    """What ``build`` needs of one source."""

    analysis: ImplementationAnalysis
    rank: RankFigures


def report_job(source: Source, loaded: LoadedSource) -> SourceResult:
    """The analysis and the rank figures of one source."""
    # imported here, off the import path of a plain ``ops``
    from nprof_report.report.analyses import analyse
    from nprof_report.report.ranks import rank_figures

    analysis = analyse(loaded)
    return SourceResult(analysis, rank_figures(loaded, analysis))


def ops_job(source: Source, loaded: LoadedSource) -> tuple[pl.DataFrame, list[str]]:
    """The key_averages table of one source, and what its parse noted."""
    return (
        key_averages(loaded.frames, loaded.neuron_device_ns),
        [*loaded.frames.notes, *loaded.notes],
    )


def run_jobs(
    sources: Sequence[Source], job: Callable[[Source, LoadedSource], T], engine: Engine
) -> tuple[list[tuple[Source, T]], list[str]]:
    """``job`` of every source, in order, with the sources skipped (``keep_going``) left out;
    and the caveats: each skipped source, and the engine's notes."""
    notes: list[str] = []
    if engine.ray is not None:
        from nprof_report.parse import run_on_ray  # imports Ray: only with --ray

        outcomes, notes = run_on_ray(
            job,
            sources,
            address=engine.ray,
            use_cache=engine.use_cache,
            cpus=engine.jobs,
            keep_going=engine.keep_going,
        )
        results: Iterator[T | InputError] = iter(outcomes)
    else:
        results = _local(sources, job, engine)
    done: list[tuple[Source, T]] = []
    failed: list[InputError] = []
    for source, result in zip(sources, results):
        if isinstance(result, InputError):
            if not engine.keep_going:
                raise result
            failed.append(result)
        else:
            done.append((source, result))
    if failed and not done:
        raise failed[0]
    return done, notes + [f"skipped (--keep-going): {exc}" for exc in failed]


def _local(
    sources: Sequence[Source], job: Callable[[Source, LoadedSource], T], engine: Engine
) -> Iterator[T | InputError]:
    """The local pool: parse ahead in workers, then each job here, in order."""
    failures = (
        prepare_sources(sources, jobs=engine.jobs, keep_going=engine.keep_going)
        if engine.use_cache
        else {}
    )
    for i, source in enumerate(sources):
        try:
            if i in failures:
                raise failures[i]
            loaded = load_source(source, use_cache=engine.use_cache)
        except InputError as exc:
            yield exc
            continue
        yield job(source, loaded)

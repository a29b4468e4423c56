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
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import polars as pl

from nprof_report.errors import InputError
from nprof_report.parse import (
    Inputs,
    LoadedSource,
    Source,
    convert_tree,
    key_averages,
    load_source,
    neuron_root,
    prepare_sources,
    resolve,
)

if TYPE_CHECKING:
    from nprof_report.bundle import Manifest
    from nprof_report.report.figures import ImplementationAnalysis, RankFigures

T = TypeVar("T")


@dataclass(frozen=True)
class Engine:
    """Where jobs run and what to do with a failed source.

    ``ray``: None for the local pool, else the Ray address (``local``, ``auto``, ``host:port``,
    ``ray://…``). ``jobs``: the local pool's workers, or the CPUs of a ``local`` Ray instance.
    ``step_annotation``: the user annotation whose instances are the steps
    (``--step-annotation``), instead of the rule that applies (``parse/steps.py``).
    """

    jobs: int | None = None
    use_cache: bool = True
    ray: str | None = None
    keep_going: bool = False
    step_annotation: str | None = None


@dataclass(frozen=True)
class SourceResult:
    """What ``build`` needs of one source."""

    analysis: ImplementationAnalysis
    rank: RankFigures


def report_job(source: Source, loaded: LoadedSource) -> SourceResult:
    """The analysis and the rank figures of one source."""
    # imported here, off the import path of a plain ``ops``
    from nprof_report.report.figures import analyse, rank_figures

    analysis = analyse(loaded)
    return SourceResult(analysis, rank_figures(loaded, analysis))


def ops_job(source: Source, loaded: LoadedSource) -> tuple[pl.DataFrame, list[str]]:
    """The key_averages table of one source, and what its parse noted."""
    return (
        key_averages(loaded.frames, loaded.neuron_device_ns),
        [*loaded.frames.notes, *loaded.notes],
    )


@dataclass(frozen=True)
class Analysed:
    """The inputs ``paths`` resolved to, and the analysis and rank figures of each source."""

    resolved: list[Inputs]
    analyses: list[ImplementationAnalysis]
    ranks: list[RankFigures]
    manifest: Manifest | None
    caveats: list[str]


def analyse_inputs(paths: list[Path], engine: Engine, *, what: str = "report on") -> Analysed:
    """Resolve ``paths``, convert Neuron traces where needed, and run each source's job.

    ``what`` completes the error for inputs without a trace ("holds no trace.json to ...").
    """
    resolved: list[Inputs] = [resolve(p) for p in paths]
    sources = [s for r in resolved for s in r.sources if s.trace is not None]
    if not sources:
        raise InputError(paths[0], f"holds no trace.json to {what}")
    labels = [s.label for s in sources]
    # the same implementation from several runs (within one run, a sweep's sizes tell them apart)
    if len(resolved) > 1 and len(set(labels)) != len(labels):
        sources = [
            type(s)(
                f"{r.run_dir.name if r.run_dir else s.folder.name}/{s.label}",
                s.trace,
                s.folder,
                s.implementation,
            )
            for r in resolved
            for s in r.sources
            if s.trace is not None
        ]
    manifests = [r.manifest for r in resolved if r.manifest is not None]
    manifest = manifests[0] if len(resolved) == 1 and manifests else None
    caveats = [n for r in resolved for n in r.notes]
    caveats += convert_neuron_traces(sources)
    results, skipped = run_jobs(sources, report_job, engine)
    return Analysed(
        resolved,
        [r.analysis for _, r in results],
        [r.rank for _, r in results],
        manifest,
        caveats + skipped,
    )


def convert_neuron_traces(sources: list[Source]) -> list[str]:
    """Convert raw Neuron traces with neuron-explorer where still needed; say what is missing.

    The tables are written inside the bundle, so a copied bundle builds without Neuron tools.
    """
    messages = []
    for root in dict.fromkeys(r for r in map(neuron_root, sources) if r is not None):
        messages += [
            c.message for c in convert_tree(root) if c.status in ("tool-missing", "failed")
        ]
    return messages


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
            step_annotation=engine.step_annotation,
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
            loaded = load_source(
                source, use_cache=engine.use_cache, step_annotation=engine.step_annotation
            )
        except InputError as exc:
            yield exc
            continue
        yield job(source, loaded)

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
from dataclasses import dataclass, field, replace
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
    from nprof_report.report.figures import ImplementationAnalysis, RankFigures, RunGroup

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
    rank: RankFigures | None  # None where the command shows no cross-rank figures


def report_job(source: Source, loaded: LoadedSource) -> SourceResult:
    """The analysis and the rank figures of one source."""
    # imported here, off the import path of a plain ``ops``
    from nprof_report.report.figures import analyse, rank_figures

    analysis = analyse(loaded)
    return SourceResult(analysis, rank_figures(loaded, analysis))


def side_job(source: Source, loaded: LoadedSource) -> SourceResult:
    """What one side of ``diff`` or ``check`` needs of one source: the analysis without the
    figures only the report shows, and no rank figures (their collective spans were the peak of
    ``diff`` of 100,000 op paths, for figures it never read)."""
    from nprof_report.report.figures import analyse

    return SourceResult(analyse(loaded, figures=False), None)


def ops_job(source: Source, loaded: LoadedSource) -> tuple[pl.DataFrame, list[str]]:
    """The key_averages table of one source, and what its parse noted."""
    return (
        key_averages(loaded.frames, loaded.neuron_device_ns),
        [*loaded.frames.notes, *loaded.notes],
    )


@dataclass(frozen=True)
class Analysed:
    """The inputs ``paths`` resolved to, and the analysis and rank figures of each source;
    ``runs``: the runs they make up, with how their sources are labelled."""

    resolved: list[Inputs]
    analyses: list[ImplementationAnalysis]
    ranks: list[RankFigures]
    manifest: Manifest | None
    caveats: list[str]
    runs: list[RunGroup] = field(default_factory=list)


def analyse_inputs(
    paths: list[Path],
    engine: Engine,
    *,
    what: str = "report on",
    allow_mixed: bool = False,
    sized: bool = False,
    job: Callable[[Source, LoadedSource], SourceResult] = report_job,
) -> Analysed:
    """Resolve ``paths``, convert Neuron traces where needed, and run each source's job.

    ``what`` completes the error for inputs without a trace ("holds no trace.json to ...").
    Runs of different studies stop here, before any trace is read, unless ``allow_mixed``.
    ``sized``: name a run's sources with their size where it holds several (``diff``); with
    several runs they always are. ``job``: what is done with each source (:func:`side_job`
    for a side of ``diff``).
    """
    resolved: list[Inputs] = [resolve(p) for p in paths]
    if not any(s.trace is not None for r in resolved for s in r.sources):
        raise InputError(paths[0], f"holds no trace.json to {what}")
    runs = group_runs(paths, resolved, sized=sized)
    if not allow_mixed:
        refuse_mixed(runs)
    sources = [s for g, group_sources in runs for s in group_sources]
    manifests = [r.manifest for r in resolved if r.manifest is not None]
    manifest = manifests[0] if len(resolved) == 1 and manifests else None
    caveats = [n for r in resolved for n in r.notes]
    caveats += convert_neuron_traces(sources)
    results, skipped = run_jobs(sources, job, engine)
    return Analysed(
        resolved,
        [r.analysis for _, r in results],
        [r.rank for _, r in results if r.rank is not None],
        manifest,
        caveats + skipped,
        [g for g, _ in runs],
    )


def group_runs(
    paths: list[Path], resolved: list[Inputs], *, sized: bool = False
) -> list[tuple[RunGroup, list[Source]]]:
    """The runs the inputs make up, each with its sources labelled as the report names them.

    Inputs of one run folder (the folder, or bundles of it) are one run; the inputs without a
    manifest (trace files, Neuron trees) are one more, given where the first of them was. With
    one run, labels are as the sources name themselves (a run's implementation names; bundles'
    and traces' folders where those repeat), with the size where ``sized`` and the run holds
    several; with several, :func:`~nprof_report.report.figures.run_label`'s.
    """
    from nprof_report.report.figures import Member, RunGroup, run_label

    order: dict[str, list[tuple[Path, Inputs]]] = {}
    for path, r in zip(paths, resolved):
        key = str(r.run_dir.resolve()) if r.run_dir is not None else ""
        order.setdefault(key, []).append((Path(path), r))
    groups = []
    for key, given in order.items():
        seen: set[Path] = set()
        sources = []
        for _, r in given:
            for s in r.sources:
                if s.trace is not None and s.trace not in seen:
                    seen.add(s.trace)
                    sources.append(s)
        first = given[0][1]
        if key:
            assert first.run_dir is not None
            name = first.run_dir.name
            whole = len(given) == 1 and given[0][0].resolve() in (
                first.run_dir.resolve(),
                (first.run_dir / "manifest.json").resolve(),
            )
        else:
            name = given[0][0].name if len(given) == 1 else "traces"
            whole = False
            sources = _unique_loose(sources, [r for _, r in given])
        manifest = next((r.manifest for _, r in given if r.manifest is not None), None)
        groups.append((name, str(given[0][0]), manifest, whole, sources))

    several = len(groups) > 1
    # the sizes a label needs: where a run holds several, or the runs of one study differ
    size_sets = [
        {tuple(s.implementation.size) for s in srcs if s.implementation and s.implementation.size}
        for *_, srcs in groups
    ]
    studies = [
        str(m.workload.get("name") or "").casefold() if m else "" for _, _, m, _, _ in groups
    ]
    with_size = []
    for study, sizes in zip(studies, size_sets):
        same = [z for st, z in zip(studies, size_sets) if st == study and z]
        holds = any(len(z) > 1 for z in same)
        differ = len({frozenset(z) for z in same}) > 1
        # one run: a sweep's sizes are its sections' (report/figures/sweep.py) unless ``sized``
        with_size.append((holds or differ) if several else (sized and len(sizes) > 1))
    if several:
        backends = [m.backend if m else None for _, _, m, _, _ in groups]
        by_backend = None not in backends and len(set(backends)) == len(backends)
        prefixes = _unique([b if by_backend and b else n for (n, *_), b in zip(groups, backends)])
    else:
        prefixes = [""]
    out = []
    for (name, where, manifest, whole, sources), prefix, sizing in zip(groups, prefixes, with_size):
        labelled = []
        members = []
        for s in sources:
            size = (
                tuple(s.implementation.size) if s.implementation and s.implementation.size else None
            )
            label = run_label(prefix, s.label, size, sizing)
            labelled.append(replace(s, label=label))
            members.append(Member(label, s.label, size))
        group = RunGroup(name, where, manifest, tuple(members), prefix, sizing, whole)
        out.append((group, labelled))
    return out


def _unique(names: list[str]) -> list[str]:
    """``names`` with a repeated one numbered (``run``, ``run-2``)."""
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n}-{seen[n]}")
    return out


def _unique_loose(sources: list[Source], given: list[Inputs]) -> list[Source]:
    """Loose traces from several inputs whose labels repeat, named by their folder too."""
    labels = [s.label for s in sources]
    if len(given) < 2 or len(set(labels)) == len(labels):
        return sources
    return [replace(s, label=f"{s.folder.name}/{s.label}") for s in sources]


def refuse_mixed(runs: list[tuple[RunGroup, list[Source]]]) -> None:
    """Stop when the runs are of different studies: one line naming both studies and runs."""
    studies: dict[str, RunGroup] = {}
    for g, _ in runs:
        if g.study_key is not None:
            studies.setdefault(g.study_key, g)
    if len(studies) < 2:
        return
    first, second = list(studies.values())[:2]
    a, b = first.study, second.study
    raise InputError(
        second.path,
        f"is a run of the {b} study and {first.path} a run of the {a} study: runs of different "
        "studies are not compared",
        "build them one at a time, or pass --allow-mixed for a section per study",
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

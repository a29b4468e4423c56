"""``nprof-report diff`` and ``check``: two sides in, the comparison's files and verdicts out.

Files go through :func:`~nprof_report.report.publish.publish`, like ``build``'s: each replaced
atomically once all are complete, nothing else in the folder touched. A diff keeps its own record
of written files (``.nprof-diff.json``), so a diff written where ``build`` wrote a report leaves
that report alone.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from nprof_report.report.diff.check import DEFAULT_MAX_COUNT_INCREASE, check
from nprof_report.report.diff.compare import diff_document
from nprof_report.report.diff.inputs import Side, load_side
from nprof_report.report.diff.optable import matching_any
from nprof_report.report.publish import publish
from nprof_report.runtime import give_back_memory

DEFAULT_OUT = Path("nprof-diff")


def compare(
    base: Path,
    new: Path,
    *,
    jobs: int | None = None,
    use_cache: bool = True,
    step_annotation: str | None = None,
) -> dict[str, Any]:
    """The ``diff.json`` document of BASE against NEW."""
    load = _loader(jobs=jobs, use_cache=use_cache, step_annotation=step_annotation)
    return diff_document(load(base), load(new))


def _loader(**options: Any) -> Callable[[Path], Side]:
    """:func:`load_side` with ``options``, each path read once: a path given twice (a trace
    compared with itself, a baseline named twice) is the same side, as analysing it again
    would give it (and a second analysis held beside the first's)."""
    sides: dict[Path, Side] = {}

    def load(path: Path) -> Side:
        key = Path(path).resolve()
        if key not in sides:
            sides[key] = load_side(path, **options)
            give_back_memory()  # what the analysis freed, before the next side's
        return sides[key]

    return load


def diff_report(
    base: Path,
    new: Path,
    *,
    out: Path | None = None,
    jobs: int | None = None,
    use_cache: bool = True,
    step_annotation: str | None = None,
) -> list[Path]:
    """Write diff.html, diff.pdf, diff.json and tables/diff_*.csv; return their paths."""
    doc = compare(base, new, jobs=jobs, use_cache=use_cache, step_annotation=step_annotation)
    return _publish(out or DEFAULT_OUT, doc)


def _further(doc: dict[str, Any], ops: list[str]) -> dict[str, Any]:
    """A further baseline's document as :func:`~.check.check` reads it: each pair's op table
    cut to the rows of the ``ops`` named (it reads no other row there; held whole, each took
    50 MB for 100,000 op paths)."""
    pairs = [{**p, "table": matching_any(p["table"], ops)} for p in doc["pairs"]]
    return {**doc, "pairs": pairs}


def _publish(out: Path, doc: dict[str, Any]) -> list[Path]:
    # imported once the sides are analysed: Matplotlib, Jinja and the pages' code (40 MB) are
    # then not held through the analysis, the peak of diff on 100,000 op paths
    from nprof_report.report.diff.render import diff_files

    # what the comparison freed (its NumPy tables, which glibc's heap keeps) before the pages
    # and tables are made on top of the document
    give_back_memory()
    return publish(out, diff_files(doc), kind="diff")


class Gate(NamedTuple):
    """What ``check`` found: one line per failure that decides the exit code (none: it passed),
    notes on the rest (the structure, time that was advice or could not decide, and why), and
    the files written."""

    failures: list[str]
    notes: list[str]
    written: list[Path]


def check_regression(
    new: Path,
    baselines: list[Path],
    *,
    max_regression_pct: float,
    metrics: list[str] | None,
    ops: list[str],
    max_count_increase: float = DEFAULT_MAX_COUNT_INCREASE,
    strict_time: bool = False,
    out: Path | None = None,
    jobs: int | None = None,
    use_cache: bool = True,
    step_annotation: str | None = None,
) -> Gate:
    """Judge NEW against the baselines (:func:`~.check.check`; ``metrics`` None: the default
    ones) and write the diff against the first baseline, with every verdict, to ``out``."""
    load = _loader(jobs=jobs, use_cache=use_cache, step_annotation=step_annotation)
    new_side = load(new)
    # of the further baselines only the medians are read (diff_check): no bootstrap for them
    docs = [diff_document(load(baselines[0]), new_side)]
    docs += [
        _further(diff_document(load(b), new_side, intervals=False), ops) for b in baselines[1:]
    ]
    failures = check(
        docs,
        max_regression_pct=max_regression_pct,
        metrics=metrics,
        ops=ops,
        max_count_increase=max_count_increase,
        strict_time=strict_time,
    )
    written = _publish(out, docs[0]) if out is not None else []
    return Gate(failures, docs[0]["check"]["notes"], written)

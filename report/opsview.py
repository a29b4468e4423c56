"""``nprof-report ops``: key_averages-style tables for every source in a path."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

import orjson
import polars as pl

from nprof_report.errors import InputError
from nprof_report.parse import key_averages, load_sources, resolve
from nprof_report.report.safetext import FORMULA_START
from nprof_report.textout import format_table

JSON_COLUMNS = [
    "name",
    "device_type",
    "is_user_annotation",  # part of PyTorch's grouping key: an annotation and an op may share a name
    "calls",
    "self_cpu_us",
    "cpu_total_us",
    "self_device_us",
    "device_total_us",
]

# Notes every ops table states under itself: what the trace's privateuse1_driver rows were read
# as, and the system trace's cross-check of them (parse/privateuse1.py, parse/neuron/crosscheck.py).
STATED = "privateuse1_driver rows"


@dataclass
class OpsTables:
    """(label, key_averages table) for every source, and the caveats their parse noted."""

    tables: list[tuple[str, pl.DataFrame]]
    notes: list[str]


def ops_tables(path: Path, *, jobs: int | None = None, use_cache: bool = True) -> OpsTables:
    """The key_averages table of every source under ``path``; ``jobs`` and ``use_cache`` as in
    :func:`~nprof_report.parse.load_sources`. The notes are those the report lists among its
    caveats (unknown categories, unlinked device activities, how ``privateuse1_driver`` rows
    were read ...)."""
    resolved = resolve(path)
    sources = resolved.sources
    loading = load_sources(sources, jobs=jobs, use_cache=use_cache)
    # a sweep holds each implementation at several sizes: name them by bundle, 64x4096/naive
    by_bundle = len({s.label for s in sources}) < len(sources)
    out = OpsTables([], list(resolved.notes))
    for source in sources:
        if source.trace is None:
            raise InputError(
                source.folder,
                "holds a Neuron profile but no trace.json, so there are no framework ops",
                "capture with ProfilerActivity.CPU + PrivateUse1 and NeuronProfiler.export_trace",
            )
        loaded = next(loading)
        label, impl = source.label, source.implementation
        if by_bundle and impl is not None and impl.bundle:
            label = impl.bundle
        out.tables.append((label, key_averages(loaded.frames, loaded.neuron_device_ns)))
        out.notes += [*loaded.frames.notes, *loaded.notes]
    return out


def render_ops(
    path: Path,
    *,
    fmt: str,
    limit: int | None = None,
    jobs: int | None = None,
    use_cache: bool = True,
) -> tuple[str, list[str]]:
    """Render as ``table``, ``json`` (one array; a ``source`` key when several) or ``csv``; with
    the caveats of :func:`ops_tables` that the text does not state (a table states how
    ``privateuse1_driver`` rows were read below itself; json and csv leave every note to the
    caller, which prints them on standard error)."""
    found = ops_tables(path, jobs=jobs, use_cache=use_cache)
    tables = found.tables
    several = len(tables) > 1
    if fmt == "table":
        text = "\n\n".join(
            format_table(t, title=label if several else None, limit=limit) for label, t in tables
        )
        stated = [n for n in found.notes if STATED in n]
        rest = [n for n in found.notes if STATED not in n]
        return "\n".join([text, *(f"Note: {s}" for s in stated)]), rest
    frames = [
        t.select(JSON_COLUMNS).with_columns(pl.lit(label).alias("source"))
        if several
        else t.select(JSON_COLUMNS)
        for label, t in tables
    ]
    combined = pl.concat(frames) if frames else pl.DataFrame()
    if fmt == "json":
        return orjson.dumps(combined.to_dicts(), option=orjson.OPT_INDENT_2).decode(), found.notes
    buf = io.StringIO()
    csv_safe(combined).write_csv(buf, quote_style="non_numeric")
    return buf.getvalue().rstrip("\n"), found.notes


def csv_safe(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with each text cell a spreadsheet would read as a formula quoted as text
    (:mod:`~nprof_report.report.safetext`)."""
    starts = "^[" + re.escape("".join(FORMULA_START)) + "]"
    text = [name for name, dtype in frame.schema.items() if dtype in (pl.String, pl.Categorical)]
    return frame.with_columns(
        pl.when(pl.col(name).cast(pl.String).str.contains(starts))
        .then(pl.lit("'") + pl.col(name).cast(pl.String))
        .otherwise(pl.col(name).cast(pl.String))
        .alias(name)
        for name in text
    )

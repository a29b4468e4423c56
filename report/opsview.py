"""``nprof-report ops``: key_averages-style tables for every source in a path."""

from __future__ import annotations

import io
import re
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
    "calls",
    "self_cpu_us",
    "cpu_total_us",
    "self_device_us",
    "device_total_us",
]


# Notes every ops output carries: what the trace's privateuse1_driver rows were read as, and the
# system trace's cross-check of them (parse/privateuse1.py, parse/neuron/crosscheck.py).
STATED = "privateuse1_driver rows"


def ops_tables(
    path: Path,
    *,
    jobs: int | None = None,
    use_cache: bool = True,
    statements: list[str] | None = None,
) -> list[tuple[str, pl.DataFrame]]:
    """(label, key_averages table) for every source under ``path``; ``jobs`` and ``use_cache`` as
    in :func:`~nprof_report.parse.load_sources`. ``statements`` receives the notes that
    say how the source's ``privateuse1_driver`` rows were read."""
    sources = resolve(path).sources
    loading = load_sources(sources, jobs=jobs, use_cache=use_cache)
    # a sweep holds each implementation at several sizes: name them by bundle, 64x4096/naive
    by_bundle = len({s.label for s in sources}) < len(sources)
    out = []
    for source in sources:
        if source.trace is None:
            raise InputError(
                source.folder,
                "holds a Neuron profile but no trace.json, so there are no framework ops",
                "capture with ProfilerActivity.CPU + PrivateUse1 and NeuronProfiler.export_trace",
            )
        loaded = next(loading)
        if statements is not None:
            statements += [n for n in (*loaded.frames.notes, *loaded.notes) if STATED in n]
        label, impl = source.label, source.implementation
        if by_bundle and impl is not None and impl.bundle:
            label = impl.bundle
        out.append((label, key_averages(loaded.frames, loaded.neuron_device_ns)))
    return out


def render_ops(
    path: Path,
    *,
    fmt: str,
    limit: int | None = None,
    jobs: int | None = None,
    use_cache: bool = True,
    statements: list[str] | None = None,
) -> str:
    """Render as ``table``, ``json`` (one array; a ``source`` key when several) or ``csv``.

    A table ends with the statements of how ``privateuse1_driver`` rows were read; for json and
    csv they go to ``statements`` (the CLI prints them on standard error)."""
    said: list[str] = []
    tables = ops_tables(path, jobs=jobs, use_cache=use_cache, statements=said)
    several = len(tables) > 1
    if statements is not None:
        statements += said
    if fmt == "table":
        text = "\n\n".join(
            format_table(t, title=label if several else None, limit=limit) for label, t in tables
        )
        return "\n".join([text, *(f"Note: {s}" for s in said)])
    frames = [
        t.select(JSON_COLUMNS).with_columns(pl.lit(label).alias("source"))
        if several
        else t.select(JSON_COLUMNS)
        for label, t in tables
    ]
    combined = pl.concat(frames) if frames else pl.DataFrame()
    if fmt == "json":
        return orjson.dumps(combined.to_dicts(), option=orjson.OPT_INDENT_2).decode()
    buf = io.StringIO()
    csv_safe(combined).write_csv(buf, quote_style="non_numeric")
    return buf.getvalue().rstrip("\n")


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

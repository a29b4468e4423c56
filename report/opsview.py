"""``nprof-report ops``: key_averages-style tables for every source in a path."""

from __future__ import annotations

import io
import re
from pathlib import Path

import orjson
import polars as pl

from nprof_report.errors import InputError
from nprof_report.parse.inputs import resolve
from nprof_report.parse.keyavg import key_averages
from nprof_report.parse.parallel import load_sources
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


def ops_tables(
    path: Path, *, jobs: int | None = None, use_cache: bool = True
) -> list[tuple[str, pl.DataFrame]]:
    """(label, key_averages table) for every source under ``path``; ``jobs`` and ``use_cache`` as
    in :func:`~nprof_report.parse.parallel.load_sources`."""
    sources = resolve(path).sources
    loading = load_sources(sources, jobs=jobs, use_cache=use_cache)
    out = []
    for source in sources:
        if source.trace is None:
            raise InputError(
                source.folder,
                "holds a Neuron profile but no trace.json, so there are no framework ops",
                "capture with ProfilerActivity.CPU + PrivateUse1 and NeuronProfiler.export_trace",
            )
        loaded = next(loading)
        out.append((source.label, key_averages(loaded.frames, loaded.neuron_device_ns)))
    return out


def render_ops(
    path: Path,
    *,
    fmt: str,
    limit: int | None = None,
    jobs: int | None = None,
    use_cache: bool = True,
) -> str:
    """Render as ``table``, ``json`` (one array; a ``source`` key when several) or ``csv``."""
    tables = ops_tables(path, jobs=jobs, use_cache=use_cache)
    several = len(tables) > 1
    if fmt == "table":
        return "\n\n".join(
            format_table(t, title=label if several else None, limit=limit) for label, t in tables
        )
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

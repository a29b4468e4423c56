"""``nprof-report ops``: key_averages-style tables for every source in a path."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import orjson
import polars as pl

from nprof_report.errors import InputError
from nprof_report.parse.inputs import resolve
from nprof_report.parse.keyavg import key_averages
from nprof_report.parse.parallel import load_sources
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


@dataclass
class OpsTables:
    """(label, key_averages table) for every source, and the caveats their parse noted."""

    tables: list[tuple[str, pl.DataFrame]]
    notes: list[str]


def ops_tables(path: Path, *, jobs: int | None = None, use_cache: bool = True) -> OpsTables:
    """The key_averages table of every source under ``path``; ``jobs`` and ``use_cache`` as in
    :func:`~nprof_report.parse.parallel.load_sources`. The notes are those the report lists
    among its caveats (unknown categories, unlinked device activities ...)."""
    resolved = resolve(path)
    sources = resolved.sources
    loading = load_sources(sources, jobs=jobs, use_cache=use_cache)
    out = OpsTables([], list(resolved.notes))
    for source in sources:
        if source.trace is None:
            raise InputError(
                source.folder,
                "holds a Neuron profile but no trace.json, so there are no framework ops",
                "capture with ProfilerActivity.CPU + PrivateUse1 and NeuronProfiler.export_trace",
            )
        loaded = next(loading)
        out.tables.append((source.label, key_averages(loaded.frames, loaded.neuron_device_ns)))
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
    the caveats of :func:`ops_tables`."""
    found = ops_tables(path, jobs=jobs, use_cache=use_cache)
    tables = found.tables
    several = len(tables) > 1
    if fmt == "table":
        text = "\n\n".join(
            format_table(t, title=label if several else None, limit=limit) for label, t in tables
        )
        return text, found.notes
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
    combined.write_csv(buf)
    return buf.getvalue().rstrip("\n"), found.notes

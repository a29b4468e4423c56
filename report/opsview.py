"""``nprof-report ops``: key_averages-style tables for every source in a path."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import polars as pl

from nprof_report.errors import InputError
from nprof_report.parse import key_averages, load_sources, resolve
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
    in :func:`~nprof_report.parse.load_sources`."""
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
    combined.write_csv(buf)
    return buf.getvalue().rstrip("\n")

"""``nprof-report ops``: key_averages-style tables for every source in a path; ``--by-rank``: one
row per rank of a multi-rank job (the ``ranks`` record of :mod:`.ranks`)."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from nprof_report.errors import InputError
from nprof_report.parse.inputs import resolve
from nprof_report.report.jobs import Engine, ops_job, report_job, run_jobs
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


RANK_COLUMNS = [
    "rank",
    "steps",
    "step_median_us",
    "step_iqr_us",
    "step_min_us",
    "step_max_us",
    "dispatch_median_us",
    "device_median_us",
    "device_busy_pct",
    "compute_median_us",
    "comm_median_us",
    "comm_pct",
]


def _sources(path: Path) -> list[Any]:
    sources = resolve(path).sources
    for source in sources:
        if source.trace is None:
            raise InputError(
                source.folder,
                "holds a Neuron profile but no trace.json, so there are no framework ops",
                "capture with ProfilerActivity.CPU + PrivateUse1 and NeuronProfiler.export_trace",
            )
    return sources


def _skipped(notes: list[str]) -> None:
    for note in notes:
        print(f"nprof-report: {note}", file=sys.stderr)


def ops_tables(path: Path, *, engine: Engine | None = None) -> list[tuple[str, pl.DataFrame]]:
    """(label, key_averages table) for every source under ``path``, run by ``engine`` (default:
    the local pool with the cache)."""
    results, notes = run_jobs(_sources(path), ops_job, engine or Engine())
    _skipped(notes)
    return [(source.label, table) for source, table in results]


def ranks_record(path: Path, *, engine: Engine | None = None) -> dict[str, Any]:
    """The ``ranks`` record of the sources under ``path``; an InputError unless they are several
    ranks of one job."""
    from nprof_report.report.ranks import cross_rank  # only --by-rank needs it

    results, notes = run_jobs(_sources(path), report_job, engine or Engine())
    _skipped(notes)
    record = cross_rank([r.rank for _, r in results])
    if record is None:
        raise InputError(
            path,
            "does not hold several ranks of one job",
            "ranks come from distributedInfo.rank or a file name with rank<N>, distinct per trace",
        )
    return record


def render_ranks(path: Path, *, fmt: str, engine: Engine | None = None) -> str:
    """``ops --by-rank``: one row per rank (``table`` and ``csv``; communication per collective
    as ``comm_<kind>_us`` columns), or the whole ``ranks`` record (``json``)."""
    record = ranks_record(path, engine=engine)
    if fmt == "json":
        return orjson.dumps(record, option=orjson.OPT_INDENT_2).decode()
    kinds = record["comm_kinds"]
    table = pl.DataFrame(
        [
            {
                **{c: r[c] for c in RANK_COLUMNS},
                **{f"comm_{k}_us": r["comm_by_kind_us"].get(k) for k in kinds},
            }
            for r in record["ranks"]
        ]
    )
    if fmt == "table":
        lines = [s["evidence"] for s in record["stragglers"]] or ["no straggler rank"]
        lines += [f"waited for: {w['evidence']}" for w in record["waited_for"]]
        with pl.Config(
            tbl_rows=-1,
            tbl_cols=-1,
            tbl_width_chars=1000,
            tbl_formatting="ASCII_MARKDOWN",
            tbl_hide_dataframe_shape=True,
            tbl_hide_column_data_types=True,
        ):
            return f"{table}\n\n" + "\n".join(lines)
    buf = io.StringIO()
    table.write_csv(buf)
    return buf.getvalue().rstrip("\n")


def render_ops(
    path: Path,
    *,
    fmt: str,
    limit: int | None = None,
    engine: Engine | None = None,
    by_rank: bool = False,
) -> str:
    """Render as ``table``, ``json`` (one array; a ``source`` key when several) or ``csv``."""
    if by_rank:
        return render_ranks(path, fmt=fmt, engine=engine)
    tables = ops_tables(path, engine=engine)
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

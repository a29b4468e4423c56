"""``nprof-report ops``: key_averages-style tables for every source in a path; ``--by-rank``: one
row per rank of a multi-rank job (the ``ranks`` record of :mod:`.ranks`)."""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from nprof_report.errors import InputError
from nprof_report.parse import Inputs, Source, resolve
from nprof_report.report.figures import RanksRecord
from nprof_report.report.jobs import Engine, ops_job, report_job, run_jobs
from nprof_report.report.view import FORMULA_START
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

# Notes every ops table states under itself: what the trace's privateuse1_driver rows were read
# as, and the system trace's cross-check of them (parse/privateuse1.py, parse/neuron/crosscheck.py).
STATED = "privateuse1_driver rows"


@dataclass
class OpsTables:
    """(label, key_averages table) for every source, and the caveats their parse noted."""

    tables: list[tuple[str, pl.DataFrame]]
    notes: list[str]


def _resolved(path: Path) -> Inputs:
    resolved = resolve(path)
    for source in resolved.sources:
        if source.trace is None:
            raise InputError(
                source.folder,
                "holds a Neuron profile but no trace.json, so there are no framework ops",
                "capture with ProfilerActivity.CPU + PrivateUse1 and NeuronProfiler.export_trace",
            )
    return resolved


def _label(source: Source, by_bundle: bool) -> str:
    """A sweep holds each implementation at several sizes: name them by bundle, 64x4096/naive."""
    impl = source.implementation
    return impl.bundle if by_bundle and impl is not None and impl.bundle else source.label


def ops_tables(path: Path, *, engine: Engine | None = None) -> OpsTables:
    """The key_averages table of every source under ``path``, run by ``engine`` (default: the
    local pool with the cache). The notes are those the report lists among its caveats (unknown
    categories, unlinked device activities, how ``privateuse1_driver`` rows were read, sources
    skipped with ``keep_going`` ...)."""
    resolved = _resolved(path)
    sources = resolved.sources
    results, skipped = run_jobs(sources, ops_job, engine or Engine())
    by_bundle = len({s.label for s in sources}) < len(sources)
    out = OpsTables([], [*resolved.notes, *skipped])
    for source, (table, notes) in results:
        out.tables.append((_label(source, by_bundle), table))
        out.notes += notes
    return out


def ranks_record(path: Path, *, engine: Engine | None = None) -> tuple[RanksRecord, list[str]]:
    """The ``ranks`` record of the sources under ``path`` and the sources skipped; an InputError
    unless they are several ranks of one job."""
    from nprof_report.report.figures import cross_rank  # only --by-rank needs it

    results, skipped = run_jobs(_resolved(path).sources, report_job, engine or Engine())
    record = cross_rank([r.rank for _, r in results if r.rank is not None])
    if record is None:
        raise InputError(
            path,
            "does not hold several ranks of one job",
            "ranks come from distributedInfo.rank or a file name with rank<N>, distinct per trace",
        )
    return record, skipped


def render_ranks(path: Path, *, fmt: str, engine: Engine | None = None) -> tuple[str, list[str]]:
    """``ops --by-rank``: one row per rank (``table`` and ``csv``; communication per collective
    as ``comm_<kind>_us`` columns), or the whole ``ranks`` record (``json``); with the notes."""
    record, notes = ranks_record(path, engine=engine)
    if fmt == "json":
        return orjson.dumps(record, option=orjson.OPT_INDENT_2).decode(), notes
    kinds = record["comm_kinds"]
    rows: Sequence[Mapping[str, Any]] = record["ranks"]  # read by the column names above
    table = pl.DataFrame(
        [
            {
                **{c: r[c] for c in RANK_COLUMNS},
                **{f"comm_{k}_us": r["comm_by_kind_us"].get(k) for k in kinds},
            }
            for r in rows
        ]
    )
    if fmt == "table":
        lines = [f"steps by the rule {', '.join(record['step_rules'])} (parse/steps.py)"]
        lines += [s["evidence"] for s in record["stragglers"]] or ["no straggler rank"]
        lines += [f"waited for: {w['evidence']}" for w in record["waited_for"]]
        with pl.Config(
            tbl_rows=-1,
            tbl_cols=-1,
            tbl_width_chars=1000,
            tbl_formatting="ASCII_MARKDOWN",
            tbl_hide_dataframe_shape=True,
            tbl_hide_column_data_types=True,
        ):
            return f"{table}\n\n" + "\n".join(lines), notes
    buf = io.StringIO()
    table.write_csv(buf)
    return buf.getvalue().rstrip("\n"), notes


def render_ops(
    path: Path,
    *,
    fmt: str,
    limit: int | None = None,
    engine: Engine | None = None,
    by_rank: bool = False,
) -> tuple[str | bytes, list[str]]:
    """Render as ``table``, ``json`` (one array; a ``source`` key when several) or ``csv``; with
    the caveats of :func:`ops_tables` that the text does not state (a table states how
    ``privateuse1_driver`` rows were read below itself; json and csv leave every note to the
    caller, which prints them on standard error).

    json and csv are UTF-8 bytes, written as they are: a name of any length is made into text
    once (no str copy, no encoding of it again)."""
    if by_rank:
        return render_ranks(path, fmt=fmt, engine=engine)
    found = ops_tables(path, engine=engine)
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
    del frames
    tables.clear()  # the concatenated frame holds the only copy of the rows now
    if fmt == "json":
        rows = combined.to_dicts()
        del combined
        return orjson.dumps(rows, option=orjson.OPT_INDENT_2), found.notes
    buf = io.BytesIO()
    csv_safe(combined).write_csv(buf, quote_style="non_numeric")
    del combined
    with buf.getbuffer() as view:
        end = len(view) - (len(view) > 0 and view[-1] == ord("\n"))
        return bytes(view[:end]), found.notes


def csv_safe(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with each text cell a spreadsheet would read as a formula quoted as text
    (:mod:`~nprof_report.report.view.safetext`)."""
    starts = "^[" + re.escape("".join(FORMULA_START)) + "]"
    text = [name for name, dtype in frame.schema.items() if dtype in (pl.String, pl.Categorical)]
    return frame.with_columns(
        pl.when(pl.col(name).cast(pl.String).str.contains(starts))
        .then(pl.lit("'") + pl.col(name).cast(pl.String))
        .otherwise(pl.col(name).cast(pl.String))
        .alias(name)
        for name in text
    )

"""Every op of a pair in one table: aligned ops with their differences, added and removed ones
with their medians, as columns.

BASE's and NEW's op series (frames of ``OP_SERIES_SCHEMA``, one row per op path) are aligned by
(context, name) with a join; each timed series becomes a paths x steps array, and its medians and
intervals are computed for every path at once (:func:`~.stats.row_differences`). A page or
``diff.json`` shows a few dozen of these rows: only those are made Python records
(:func:`aligned_record`, :func:`only_record`), with exactly the values and types the per-op code
gave them; the whole table goes to ``data/diff_ops.parquet``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import polars as pl

from nprof_report.report.diff.stats import Rows, row_differences
from nprof_report.report.figures import (
    COUNT_SERIES,
    ONE_STEP,
    OP_SERIES,
    DiffProfile,
    round_as_python,
)

MOVED_MIN_SHARE_PCT = 1.0
SERIES = (*OP_SERIES[1:], "launch_us")
"""The timed series of an op path, each compared with an interval."""
COUNTS = ("calls", *COUNT_SERIES)
"""The counted series of an op path, compared by their medians."""
FIELDS = (
    "base_us",
    "new_us",
    "delta_us",
    "delta_pct",
    "low_us",
    "high_us",
    "low_pct",
    "high_pct",
    "half_width_pct",
    "exceeds_noise",
)
"""The fields of a difference record (``compare.difference_record``), a column each."""
CHUNK = 4096
"""Rows made records at a time, where every row is read (the CSV tables)."""

TABLE_SCHEMA = pl.Schema(
    {
        "status": pl.String,  # aligned, added or removed
        "name": pl.String,
        "context": pl.List(pl.String),
        "kind": pl.String,
        "order": pl.Int64,
        "kernels_base": pl.List(pl.String),
        "kernels_new": pl.List(pl.String),
        "kernels_changed": pl.Boolean,
        **{f"{c}_{k}": pl.Float64 for c in COUNTS for k in ("base", "new", "delta")},
        **{
            f"{s}_{f}": pl.Boolean if f == "exceeds_noise" else pl.Float64
            for s in SERIES
            for f in FIELDS
        },
        "impact_metric": pl.String,
        "impact_us": pl.Float64,
        "moved": pl.Boolean,
        "share_of_step_delta_pct": pl.Float64,
    }
)
"""A pair's op table: one row per op. Aligned ops: per count the medians per step and their
difference, per timed series the difference record's fields, the impact and whether it moved.
Added (removed) ops: only the ``_new`` (``_base``) medians and kernels, the impact."""


def _matrix(column: pl.Series, width: int) -> np.ndarray:
    """A List column of ``width`` values a row as a rows x width array (null: NaN; a null list,
    a series an older document lacks: a row of NaN)."""
    out = np.full((len(column), width), np.nan)
    present = column.is_not_null().to_numpy()
    if width and present.any():
        values = column.filter(present).explode().cast(pl.Float64).to_numpy()
        out[present] = values.reshape(-1, width)
    return out


def _round(values: np.ndarray | pl.Series, ndigits: int) -> pl.Series:
    """``round(v, ndigits)`` of each value as Python gives it; NaN and null: null."""
    series = values if isinstance(values, pl.Series) else pl.Series(values)
    return round_as_python(series.cast(pl.Float64).fill_nan(None), ndigits)


def _pct_of(x: np.ndarray, base: np.ndarray) -> np.ndarray:
    """``100 * x / base`` where both are there and ``base`` is not 0; else NaN."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.isnan(base) | (base == 0), np.nan, 100 * x / base)


def _difference_columns(name: str, d: Rows) -> list[pl.Series]:
    """The difference record of every row, a column per field (``{name}_{field}``; all null
    where the record is None: a side without values)."""
    delta = d.new - d.base
    low_pct = _round(_pct_of(d.low, d.base), 2)
    high_pct = _round(_pct_of(d.high, d.base), 2)
    with np.errstate(invalid="ignore"):
        exceeds = np.where(np.isnan(d.low), np.nan, (d.low > 0) | (d.high < 0))
    columns = {
        "base_us": _round(d.base, 3),
        "new_us": _round(d.new, 3),
        "delta_us": _round(delta, 3),
        "delta_pct": _round(_pct_of(delta, d.base), 2),
        "low_us": _round(d.low, 3),
        "high_us": _round(d.high, 3),
        "low_pct": low_pct,
        "high_pct": high_pct,
        "half_width_pct": _round((high_pct - low_pct) / 2, 2),
        "exceeds_noise": pl.Series(exceeds).fill_nan(None).cast(pl.Boolean),
    }
    return [v.alias(f"{name}_{k}") for k, v in columns.items()]


def _medians(column: pl.Series, width: int) -> np.ndarray:
    """The median of each row's values (NaN where none)."""
    values = _matrix(column, width)
    return row_differences(values, values, intervals=False).base


def op_table(
    base: DiffProfile, new: DiffProfile, base_step_us: float, *, intervals: bool = True
) -> pl.DataFrame:
    """The pair's op table (:data:`TABLE_SCHEMA`): the aligned ops (moved first, then by the
    size of their impact), then the added and the removed ones (by impact); ``intervals``
    false: the medians alone (a further baseline of ``check``)."""
    b_ops, n_ops = base["ops"], new["ops"]
    sb, sn = len(base["steps"]), len(new["steps"])
    keys = (
        b_ops.select("context", "name")
        .with_row_index("b_row")
        .join(
            n_ops.select("context", "name").with_row_index("n_row"),
            on=["context", "name"],
            how="full",
            coalesce=True,
        )
    )
    both = keys.filter(pl.col("b_row").is_not_null() & pl.col("n_row").is_not_null())
    # each series gathered from its side's column alone (copying both sides' aligned rows
    # whole held two more op series frames, 70 MB for 100,000 paths)
    b_rows, n_rows = both["b_row"].to_numpy(), both["n_row"].to_numpy()
    columns: list[pl.Series] = []
    for s in SERIES:
        found = row_differences(
            _matrix(b_ops[s], sb)[b_rows], _matrix(n_ops[s], sn)[n_rows], intervals=intervals
        )
        columns += _difference_columns(s, found)
    for c in COUNTS:
        bm, nm = _medians(b_ops[c], sb)[b_rows], _medians(n_ops[c], sn)[n_rows]
        columns += [
            pl.Series(f"{c}_base", bm).fill_nan(None),
            pl.Series(f"{c}_new", nm).fill_nan(None),
            pl.Series(f"{c}_delta", nm - bm).fill_nan(None),
        ]
    aligned = pl.DataFrame(
        [
            pl.repeat("aligned", len(b_rows), dtype=pl.String, eager=True).alias("status"),
            *(b_ops[k].gather(b_rows) for k in ("name", "context", "kind")),
            n_ops["order"].gather(n_rows),
            b_ops["kernels"].gather(b_rows).alias("kernels_base"),
            n_ops["kernels"].gather(n_rows).alias("kernels_new"),
            *columns,
        ]
    )
    host = pl.col("host_self_us_delta_us").fill_null(0.0)
    dev = pl.col("device_self_us_delta_us").fill_null(0.0)
    on_device = dev.abs() > host.abs()
    noisy = (
        pl.when(on_device)
        .then(pl.col("device_self_us_exceeds_noise"))
        .otherwise(pl.col("host_self_us_exceeds_noise"))
    )
    impact = pl.when(on_device).then(dev).otherwise(host)
    floor = base_step_us * MOVED_MIN_SHARE_PCT / 100
    aligned = aligned.with_columns(
        kernels_changed=pl.col("kernels_base") != pl.col("kernels_new"),
        impact_metric=pl.when(on_device)
        .then(pl.lit("device_self_us"))
        .otherwise(pl.lit("host_self_us")),
        impact_us=impact,
        moved=noisy.fill_null(False) & (impact.abs() >= floor),
    )
    order = _order(aligned, pl.col("moved"), pl.col("impact_us").abs(), descending=True)
    columns = aligned.get_columns()
    del aligned  # its columns, gathered one at a time, are let go one at a time
    aligned = _gathered(columns, order)
    added = _only(n_ops[keys.filter(pl.col("b_row").is_null())["n_row"].to_numpy()], sn, +1)
    removed = _only(b_ops[keys.filter(pl.col("n_row").is_null())["b_row"].to_numpy()], sb, -1)
    return pl.concat(
        [_schema(aligned), _schema(added), _schema(removed)], how="vertical"
    ).with_columns(share_of_step_delta_pct=pl.lit(None, dtype=pl.Float64))


def _schema(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with the table's columns, in order; those it lacks null."""
    return frame.select(
        (pl.col(c) if c in frame.columns else pl.lit(None)).cast(t).alias(c)
        for c, t in TABLE_SCHEMA.items()
    )


def _only(ops: pl.DataFrame, steps: int, sign: int) -> pl.DataFrame:
    """Ops of one side only (``sign`` +1: NEW's, added; -1: BASE's, removed): the medians of
    their series on their side (the timed ones, and ``calls``, to three decimals), by impact:
    the larger of host self and device self, signed."""
    side = "new" if sign > 0 else "base"
    medians = {s: _medians(ops[s], steps) for s in (*COUNTS, *SERIES)}
    columns = [_round(medians[s], 3).alias(f"{s}_{side}_us") for s in SERIES]
    columns.append(_round(medians["calls"], 3).alias(f"calls_{side}"))
    columns += [pl.Series(f"{c}_{side}", medians[c]).fill_nan(None) for c in COUNT_SERIES]
    frame = pl.DataFrame(
        [
            pl.repeat(
                "added" if sign > 0 else "removed", ops.height, dtype=pl.String, eager=True
            ).alias("status"),
            ops["name"],
            ops["context"],
            ops["kind"],
            ops["order"],
            ops["kernels"].alias(f"kernels_{side}"),
            *columns,
        ]
    )
    # as the per-op code did: the rounded medians, 0 where there is none
    host = pl.col(f"host_self_us_{side}_us").fill_null(0.0)
    dev = pl.col(f"device_self_us_{side}_us").fill_null(0.0)
    frame = frame.with_columns(
        impact_metric=pl.when(dev > host)
        .then(pl.lit("device_self_us"))
        .otherwise(pl.lit("host_self_us")),
        impact_us=sign * pl.max_horizontal(host, dev),
    )
    order = _order(frame, pl.col("impact_us").abs(), descending=True)
    columns = frame.get_columns()
    del frame
    return _gathered(columns, order)


def _order(frame: pl.DataFrame, *first: pl.Expr, descending: bool) -> pl.Series:
    """The row order of ``frame`` sorted by ``first`` (``descending`` or not), then by
    (context, name), which no two rows of a side share (so no ties are left)."""
    keys = [*first, pl.col("context"), pl.col("name")]
    flags = [descending] * len(first) + [False, False]
    return frame.select(pl.arg_sort_by(keys, descending=flags)).to_series()


def _gathered(columns: list[pl.Series], order: pl.Series) -> pl.DataFrame:
    """``columns`` in the row ``order``, as a frame, each column gathered in place of its old
    one (the caller holds no frame of them): a frame's sort gathers all its columns before any old one is let go (the table twice
    at once, +50 MB at the peak of diff for 100,000 paths)."""
    for i, column in enumerate(columns):
        columns[i] = column.gather(order)
    return pl.DataFrame(columns)


def with_shares(table: pl.DataFrame, step_delta: float | None) -> pl.DataFrame:
    """``table`` with each op's share of the step-time difference, in percent to one decimal
    (null without a step-time difference)."""
    if not step_delta:
        return table
    share = (100 * table["impact_us"] / step_delta).alias("share_of_step_delta_pct")
    return table.with_columns(_round(share, 1))


def count_value(x: float | None, steps: int) -> float | int | None:
    """A median of counts as ``statistics.median`` gave it: an int for an odd number of steps
    (the middle count itself), else a float."""
    if x is None:
        return None
    return int(x) if steps % 2 else x


def aligned_record(row: dict[str, Any], sb: int, sn: int) -> dict[str, Any]:
    """An aligned op's row of the table as ``diff.json``'s ``ops[]`` keeps it."""
    one_step = min(sb, sn) == 1
    series: dict[str, Any] = {}
    for s in SERIES:
        if row[f"{s}_base_us"] is None or row[f"{s}_new_us"] is None:
            series[s] = None
            continue
        rec = {f: row[f"{s}_{f}"] for f in FIELDS}
        series[s] = {"spread": ONE_STEP, **rec} if one_step and rec["low_us"] is None else rec
    for c in COUNTS:
        b, n = count_value(row[f"{c}_base"], sb), count_value(row[f"{c}_new"], sn)
        series[c] = None if b is None or n is None else {"base": b, "new": n, "delta": n - b}
    return {
        "name": row["name"],
        "context": row["context"],
        "kind": row["kind"],
        **series,
        "impact_metric": row["impact_metric"],
        "impact_us": row["impact_us"],
        "moved": row["moved"],
        "kernels_base": row["kernels_base"],
        "kernels_new": row["kernels_new"],
        "kernels_changed": row["kernels_changed"],
        "order": row["order"],
        "share_of_step_delta_pct": row["share_of_step_delta_pct"],
    }


def only_record(row: dict[str, Any], steps: int) -> dict[str, Any]:
    """An added or removed op's row as ``diff.json``'s ``added[]`` / ``removed[]`` keep it."""
    side = "new" if row["status"] == "added" else "base"
    return {
        "name": row["name"],
        "context": row["context"],
        "kind": row["kind"],
        "calls": row[f"calls_{side}"],
        **{s: row[f"{s}_{side}_us"] for s in SERIES},
        **{c: count_value(row[f"{c}_{side}"], steps) for c in COUNT_SERIES},
        "impact_metric": row["impact_metric"],
        "impact_us": row["impact_us"],
        "kernels": row[f"kernels_{side}"],
        "order": row["order"],
        "share_of_step_delta_pct": row["share_of_step_delta_pct"],
    }


def record(row: dict[str, Any], sb: int, sn: int) -> dict[str, Any]:
    """The row as ``diff.json`` keeps it (:func:`aligned_record` or :func:`only_record`)."""
    if row["status"] == "aligned":
        return aligned_record(row, sb, sn)
    return only_record(row, sn if row["status"] == "added" else sb)


def records(table: pl.DataFrame, sb: int, sn: int) -> Iterator[dict[str, Any]]:
    """Every row of ``table`` as a record, made a chunk at a time."""
    for start in range(0, table.height, CHUNK):
        for row in table.slice(start, CHUNK).iter_rows(named=True):
            yield record(row, sb, sn)


def rows_of(table: pl.DataFrame, status: str) -> pl.DataFrame:
    """The rows of ``status``, a slice of ``table`` (no copy): :func:`op_table` puts the aligned
    ops first, then the added, then the removed (a filter copied every column of them, +50 MB
    at the peak of diff for 100,000 paths)."""
    where = np.flatnonzero((table["status"] == status).to_numpy())
    return table.slice(int(where[0]), len(where)) if len(where) else table.clear()


def shown(table: pl.DataFrame, status: str, limit: int) -> pl.DataFrame:
    """The rows of ``status`` a page shows: the first ``limit`` (and, of the aligned ops, the
    first ``limit`` whose kernels changed)."""
    rows = rows_of(table, status)
    if status != "aligned":
        return rows.head(limit)
    keep = np.arange(rows.height) < limit
    keep[np.flatnonzero(rows["kernels_changed"].fill_null(False).to_numpy())[:limit]] = True
    return rows.filter(pl.Series(keep))


def _is_op(wanted: str) -> pl.Expr:
    """Whether a row is the op ``wanted``: its name (in every context) or its whole path,
    ``scope > aten::linear > aten::mm``."""
    path = pl.concat_list("context", pl.col("name")).list.join(" > ")
    return (pl.col("name") == wanted) | (path == wanted)


def matching(table: pl.DataFrame, wanted: str) -> pl.DataFrame:
    """The rows of the op ``wanted`` (:func:`_is_op`)."""
    return table.filter(_is_op(wanted))


def matching_any(table: pl.DataFrame, wanted: list[str]) -> pl.DataFrame:
    """The rows of any op of ``wanted`` (:func:`_is_op`), in the table's order."""
    return table.filter(pl.any_horizontal(_is_op(w) for w in wanted)) if wanted else table.clear()


def top_op(table: pl.DataFrame, step_delta: float, sb: int, sn: int) -> dict[str, Any] | None:
    """The op whose impact moves the step the most in the direction it moved: of the moved
    aligned ops, then the added, then the removed ones, the first of the largest; None if
    none."""
    same_way = table.filter(
        (pl.col("moved") | (pl.col("status") != "aligned"))
        & (pl.col("impact_us") != 0)
        & ((pl.col("impact_us") > 0) == (step_delta > 0))
    )
    if same_way.is_empty():
        return None
    first = int(np.argmax(same_way["impact_us"].abs().to_numpy()))
    return record(same_way.row(first, named=True), sb, sn)

"""``summary.json`` as written and read: the document, its bulk in Parquet (:mod:`.bulk`).

Version 2 of ``nprof-summary`` moves every list that grows with the trace out of the document:

==========================  ================================================================
table                       the lists it holds (per implementation record unless said)
==========================  ================================================================
``steps``                   ``steps`` (the per-step rows)
``step_parts``              ``diff_profile.steps``, ``.step_us`` and ``.parts_us`` (a column
                            per part)
``op_series``               ``diff_profile.ops``: per op path, one value per step of each series
``key_averages``            ``key_averages`` (the document keeps the first rows, ``shown``)
``top_ops``                 ``top_ops`` (the document keeps the rows the report shows)
``dispatch_samples``        ``dispatch_samples_us``
``gap_durations``           ``gaps.durations_us``
``neuron_steps``            ``neuron[].steps`` (key ``neuron``: the index in ``neuron``)
``rank_steps``              ``ranks.steps``
``rank_step_times``         ``ranks.step_time_us``: a row per rank, its steps' times as a list
==========================  ================================================================

The implementation records are those of ``implementations`` and, in a sweep, of
``sweep.smallest_detail.implementations`` (``scope``). Version-1 documents hold every list
inline; :func:`read_summary` reads both and gives the document as it was in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import orjson
import polars as pl

from nprof_report.errors import InputError
from nprof_report.report.figures.bulk import INDEX, SCOPE, Collector, Tables, is_reference
from nprof_report.report.figures.records import FrameRecords
from nprof_report.report.figures.summary_types import Summary

SHOWN_ROWS = 25
"""Rows of a long table the report shows (``view.tables.MAX_ROWS``), kept in the document."""
SCOPES = ("implementations", "sweep.smallest_detail.implementations")
_STEPS = "steps"


def top_ops_rank(row: Mapping[str, Any]) -> float:
    """What the report ranks framework ops by: their dispatch time per step."""
    return float((row.get("calls_per_step") or 0) * (row.get("dispatch_median_us") or 0))


def _shown_top_ops(rows: Any) -> list[Any]:
    """The :data:`SHOWN_ROWS` rows with the most dispatch time per step, in table order (ties:
    the earlier row), as the report picks them."""
    frame = rows.frame if isinstance(rows, FrameRecords) else pl.DataFrame(list(rows))
    if frame.height <= SHOWN_ROWS:
        return list(rows)
    rank = frame.select(
        k=(pl.col("calls_per_step").fill_null(0) * pl.col("dispatch_median_us").fill_null(0))
    ).with_row_index("i")
    keep = rank.sort("k", descending=True, maintain_order=True).head(SHOWN_ROWS)["i"].sort()
    return [rows[i] for i in keep.to_list()]


def _records(summary: dict[str, Any], scope: str) -> list[dict[str, Any]]:
    node: Any = summary
    for part in scope.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, list) else []


def store_summary(summary: Summary) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The version-2 document of ``summary`` and its Parquet files by relative path; the
    in-memory ``summary`` is not changed."""
    doc = cast(dict[str, Any], dict(summary))
    tables = Collector()
    for scope in SCOPES:
        records = _records(doc, scope)
        if not records:
            continue
        moved = [_store_record(tables, scope, i, r) for i, r in enumerate(records)]
        _put(doc, scope, moved)
    ranks = doc.get("ranks")
    if ranks:
        ranks = dict(ranks)
        ranks["steps"] = tables.move(
            "rank_steps", "ranks.steps", pl.DataFrame({"step": ranks["steps"]}), {SCOPE: "ranks"}
        )
        ranks["step_time_us"] = tables.move(
            "rank_step_times",
            "ranks.step_time_us",
            pl.DataFrame(
                {"step_time_us": ranks["step_time_us"]},
                schema={"step_time_us": pl.List(pl.Float64)},
            ),
            {SCOPE: "ranks"},
        )
        doc["ranks"] = ranks
    files, entries = tables.files()
    doc["tables"] = entries
    return doc, files


def _put(doc: dict[str, Any], scope: str, records: list[dict[str, Any]]) -> None:
    """Replace the records at ``scope`` in ``doc``, copying the dicts on the way down."""
    parts = scope.split(".")
    node = doc
    for part in parts[:-1]:
        node[part] = dict(node[part])
        node = node[part]
    node[parts[-1]] = records


def _store_record(
    tables: Collector, scope: str, index: int, impl: dict[str, Any]
) -> dict[str, Any]:
    keys: dict[str, str | int] = {SCOPE: scope, INDEX: index}
    out = dict(impl)
    where = f"{scope}[].{{}}"
    out["steps"] = tables.move(_STEPS, where.format("steps"), impl["steps"], keys)
    out["top_ops"] = tables.move(
        "top_ops", where.format("top_ops"), impl["top_ops"], keys, _shown_top_ops(impl["top_ops"])
    )
    key_averages = impl["key_averages"]
    out["key_averages"] = tables.move(
        "key_averages",
        where.format("key_averages"),
        key_averages,
        keys,
        list(key_averages[:SHOWN_ROWS]),
    )
    out["dispatch_samples_us"] = tables.move(
        "dispatch_samples",
        where.format("dispatch_samples_us"),
        pl.DataFrame(
            {"dispatch_us": impl["dispatch_samples_us"]}, schema={"dispatch_us": pl.Float64}
        ),
        keys,
    )
    gaps = dict(impl["gaps"])
    gaps["durations_us"] = tables.move(
        "gap_durations",
        where.format("gaps.durations_us"),
        pl.DataFrame({"dur_us": gaps["durations_us"]}, schema={"dur_us": pl.Float64}),
        keys,
    )
    out["gaps"] = gaps
    neuron = []
    for k, record in enumerate(impl.get("neuron") or []):
        record = dict(record)
        record["steps"] = tables.move(
            "neuron_steps", where.format("neuron[].steps"), record["steps"], {**keys, "neuron": k}
        )
        neuron.append(record)
    out["neuron"] = neuron
    profile = impl.get("diff_profile")
    if profile is not None:
        profile = dict(profile)
        parts = pl.DataFrame(
            {"step": profile["steps"], "step_us": profile["step_us"], **profile["parts_us"]},
            schema={
                "step": pl.Int64,
                "step_us": pl.Float64,
                **{p: pl.Float64 for p in profile["parts_us"]},
            },
        )
        ref = tables.move(
            "step_parts", where.format("diff_profile.steps, .step_us, .parts_us"), parts, keys
        )
        profile.update(steps=ref, step_us=ref, parts_us=ref)
        profile["ops"] = tables.move(
            "op_series", where.format("diff_profile.ops"), profile["ops"], keys
        )
        out["diff_profile"] = profile
    return out


def restore_summary(doc: dict[str, Any], path: Path) -> Summary:
    """A version-2 document read from ``path`` with its lists back from its tables (a
    version-1 document as it is)."""
    if doc.get("format_version") == 1:
        return cast(Summary, doc)
    tables = Tables(path, doc.get("tables") or [])
    for scope in SCOPES:
        records = _records(doc, scope)
        for i, impl in enumerate(records):
            _restore_record(tables, {SCOPE: scope, INDEX: i}, impl)
    ranks = doc.get("ranks")
    if ranks and is_reference(ranks.get("steps")):
        keys = {SCOPE: "ranks"}
        ranks["steps"] = _list(tables, ranks["steps"], keys, "step")
        times = tables.rows("rank_step_times", keys, ranks["step_time_us"]["rows"])
        ranks["step_time_us"] = times["step_time_us"].to_list()
    doc.pop("tables", None)
    return cast(Summary, doc)


def _list(tables: Tables, ref: dict[str, Any], keys: dict[str, Any], column: str) -> list[Any]:
    values: list[Any] = tables.rows(ref["table"], keys, ref["rows"])[column].to_list()
    return values


def _dicts(tables: Tables, ref: dict[str, Any], keys: dict[str, Any]) -> list[dict[str, Any]]:
    return tables.rows(ref["table"], keys, ref["rows"]).to_dicts()


def _restore_record(tables: Tables, keys: dict[str, Any], impl: dict[str, Any]) -> None:
    fields: dict[str, Callable[[dict[str, Any]], Any]] = {
        "steps": lambda ref: _dicts(tables, ref, keys),
        "top_ops": lambda ref: _dicts(tables, ref, keys),
        "key_averages": lambda ref: _dicts(tables, ref, keys),
        "dispatch_samples_us": lambda ref: _list(tables, ref, keys, "dispatch_us"),
    }
    for key, read in fields.items():
        if is_reference(impl.get(key)):
            impl[key] = read(impl[key])
    gaps = impl.get("gaps") or {}
    if is_reference(gaps.get("durations_us")):
        gaps["durations_us"] = _list(tables, gaps["durations_us"], keys, "dur_us")
    for k, record in enumerate(impl.get("neuron") or []):
        if is_reference(record.get("steps")):
            record["steps"] = _dicts(tables, record["steps"], {**keys, "neuron": k})
    profile = impl.get("diff_profile")
    if profile and is_reference(profile.get("steps")):
        parts = tables.rows("step_parts", keys, profile["steps"]["rows"])
        profile["steps"] = parts["step"].to_list()
        profile["step_us"] = parts["step_us"].to_list()
        profile["parts_us"] = {p: parts[p].to_list() for p in parts.columns[2:]}
        profile["ops"] = tables.rows("op_series", keys, profile["ops"]["rows"])


def read_summary(path: Path) -> Summary:
    """The ``summary.json`` at ``path`` (version 1 or 2) as it was in memory; a damaged table
    is an :class:`~nprof_report.errors.InputError` naming its file."""
    try:
        doc = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise InputError(path, f"is not a readable summary.json ({exc})") from exc
    return restore_summary(doc, path)

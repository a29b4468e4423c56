"""``diff.json`` version 2: the document in JSON, its bulk in Parquet tables beside it.

A diff of two traces of 100,000 op paths wrote a 440 MB ``diff.json`` of version 1: every
aligned op's differences and both sides' op series, inline. Version 2 keeps what a reader looks
at in the JSON (the verdicts, counts, metrics, waterfall, the op rows the pages show, the check)
and moves what grows with the traces to ``data/*.parquet``, as ``summary.json`` does
(:mod:`~nprof_report.report.figures.bulk`: the tables listed in ``tables[]`` with rows and
sha256, a reference ``{"table": NAME, "rows": N}`` where a list was, each row keyed by ``scope``
and ``implementation``, the record's index there), in ``data/diff_<table>.parquet``:

* ``ops``: every op of each pair (aligned, added, removed) with its differences or medians
  (:data:`~.optable.TABLE_SCHEMA`); scope ``pairs``, referred to by the pair's ``table``;
* ``op_series``, ``steps``, ``step_parts``: each side's implementations' ``diff_profile.ops``,
  per-step rows (``steps``), and ``diff_profile``'s ``steps``, ``step_us`` and ``parts_us`` (a
  column per part), as in ``summary.json``; scope ``sides.base.implementations`` or
  ``sides.new.implementations``. A trace of 7,284 steps put 10 MB of per-step rows in the JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from nprof_report.report.figures import Collector, Tables

MAX_PATHS_KEPT = 1000
"""A pair's changed op paths that ``diff.json`` keeps (``structure.paths``; ``paths_changed``
counts them all, and the ``ops`` table holds every op's counts)."""
NEW_SIDE = "sides.new.implementations"


def _keys(scope: str, index: int) -> dict[str, str | int]:
    return {"scope": scope, "implementation": index}


def step_parts(profile: Mapping[str, Any]) -> pl.DataFrame:
    """A ``diff_profile``'s per-step lists as a frame: ``step``, ``step_us``, one column per
    part of ``parts_us``."""
    return pl.DataFrame(
        {
            "step": pl.Series(profile["steps"], dtype=pl.Int64),
            "step_us": pl.Series(profile["step_us"], dtype=pl.Float64),
            **{p: pl.Series(v, dtype=pl.Float64) for p, v in profile["parts_us"].items()},
        }
    )


def split(doc: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The ``diff.json`` document of the in-memory ``doc`` (its pairs' op tables and its sides'
    per-step lists replaced by references, ``tables[]`` listing them, the changed paths cut to
    :data:`MAX_PATHS_KEPT`) and the Parquet files, by path relative to ``diff.json``."""
    tables = Collector()
    pairs = []
    for i, pair in enumerate(doc["pairs"]):
        structure = pair["structure"]
        cut = {**structure, "paths": structure["paths"][:MAX_PATHS_KEPT]}
        table = tables.move("ops", "pairs[].table", pair["table"], _keys("pairs", i))
        pairs.append({**pair, "structure": cut, "table": table})
    sides = {}
    for side_name, side in doc["sides"].items():
        scope = f"sides.{side_name}.implementations"
        kept: list[dict[str, Any]] = []
        for i, impl in enumerate(side["implementations"]):
            keys = _keys(scope, i)
            profile = impl["diff_profile"]
            where = f"{scope}[].diff_profile"
            parts = tables.move(
                "step_parts", f"{where}.steps, .step_us, .parts_us", step_parts(profile), keys
            )
            ops = tables.move("op_series", f"{where}.ops", profile["ops"], keys)
            kept.append(
                {
                    **impl,
                    "steps": tables.move("steps", f"{scope}[].steps", impl["steps"], keys),
                    "diff_profile": {
                        **profile,
                        "steps": parts,
                        "step_us": parts,
                        "parts_us": parts,
                        "ops": ops,
                    },
                }
            )
        sides[side_name] = {**side, "implementations": kept}
    # data/diff_*.parquet: a diff written beside a report leaves the summary's tables alone
    files, listing = tables.files(prefix="diff_")
    return {**doc, "pairs": pairs, "sides": sides, "tables": listing}, files


def restore_new_side(path: Path, doc: Mapping[str, Any], impls: list[dict[str, Any]]) -> None:
    """Put the per-step rows, lists and op series of a version 2 ``diff.json``'s NEW side
    (``impls``, read from ``path``) back from its tables; a table that is missing, changed or
    short of rows is an :class:`~nprof_report.errors.InputError` naming its file."""
    tables = Tables(path, doc.get("tables") or [])
    for i, impl in enumerate(impls):
        keys = _keys(NEW_SIDE, i)
        impl["steps"] = tables.rows("steps", keys, impl["steps"]["rows"]).to_dicts()
        profile = dict(impl["diff_profile"])
        parts = tables.rows("step_parts", keys, profile["steps"]["rows"])
        profile["steps"] = parts["step"].to_list()
        profile["step_us"] = parts["step_us"].to_list()
        profile["parts_us"] = {p: parts[p].to_list() for p in parts.columns[2:]}
        profile["ops"] = tables.rows("op_series", keys, profile["ops"]["rows"])
        impl["diff_profile"] = profile

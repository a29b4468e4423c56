"""``diff.json`` version 2: the document in JSON, its bulk in Parquet tables beside it.

A diff of two traces of 100,000 op paths wrote a 440 MB ``diff.json`` of version 1: every
aligned op's differences and both sides' op series, inline. Version 2 keeps what a reader looks
at in the JSON (the verdicts, counts, metrics, waterfall, the op rows the pages show, the check)
and moves the rest to Parquet files under ``data/``:

* ``data/diff_ops.parquet``: every op of every pair (aligned, added, removed) with its
  differences or medians (:data:`~.optable.TABLE_SCHEMA`), ``implementation`` the pair's label;
* ``data/base_op_series.parquet``, ``data/new_op_series.parquet``: each side's op series
  (``OP_SERIES_SCHEMA``), ``implementation`` the implementation's label;
* ``data/base_steps.parquet``, ``data/new_steps.parquet``: each side's per-step rows (an
  implementation's ``steps``); ``data/base_step_parts.parquet``, ``data/new_step_parts.parquet``:
  its ``diff_profile``'s per-step lists (``step``, ``step_us``, a column per part). A trace of
  7,284 steps put 10 MB of them in version 1's JSON.

Where a value moved, the document holds a reference, ``{"table": NAME, "rows": N}``: a pair's
``table``; a side implementation's ``steps``, and its ``diff_profile``'s ``ops``, and ``steps``,
``step_us`` and ``parts_us`` (all three the same table). ``tables[]`` lists each file: name,
path (relative to ``diff.json``), rows, bytes, sha256 and columns. Reading a table back checks
its sha256 and its rows: a missing or damaged file is bad input (exit 2), named.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from nprof_report.errors import InputError

INDEX = "implementation"
"""The index column of every table: the pair's or implementation's label."""
FOLDER = "data"
MAX_PATHS_KEPT = 1000
"""A pair's changed op paths that ``diff.json`` keeps (``structure.paths``; ``paths_changed``
counts them all, and ``data/diff_ops.parquet`` holds every op's counts)."""


def reference(name: str, rows: int) -> dict[str, Any]:
    """What the document holds where a table's rows were."""
    return {"table": name, "rows": rows}


def is_reference(value: object) -> bool:
    """Whether ``value`` is a :func:`reference`."""
    return isinstance(value, Mapping) and set(value) == {"table", "rows"}


def _indexed(parts: list[tuple[str, pl.DataFrame]]) -> pl.DataFrame:
    """The frames one after the other, each row with its label in :data:`INDEX` first."""
    return pl.concat(
        [f.select(pl.lit(label, dtype=pl.String).alias(INDEX), pl.all()) for label, f in parts],
        how="diagonal_relaxed",
    )


STEP = "step"
STEP_US = "step_us"


def step_parts(profile: Mapping[str, Any]) -> pl.DataFrame:
    """A ``diff_profile``'s per-step lists as a frame: ``step``, ``step_us``, one column per
    part of ``parts_us``."""
    return pl.DataFrame(
        {
            STEP: pl.Series(profile["steps"], dtype=pl.Int64),
            STEP_US: pl.Series(profile["step_us"], dtype=pl.Float64),
            **{p: pl.Series(v, dtype=pl.Float64) for p, v in profile["parts_us"].items()},
        }
    )


def profile_steps(frame: pl.DataFrame) -> dict[str, Any]:
    """:func:`step_parts` back: ``steps``, ``step_us`` and ``parts_us`` as lists."""
    return {
        "steps": frame[STEP].to_list(),
        "step_us": frame[STEP_US].to_list(),
        "parts_us": {c: frame[c].to_list() for c in frame.columns if c not in (STEP, STEP_US)},
    }


def parquet(name: str, parts: list[tuple[str, pl.DataFrame]]) -> tuple[dict[str, Any], bytes]:
    """The listing entry and the bytes of table ``name`` made of ``parts`` (label, frame)."""
    frame = _indexed(parts)
    buffer = io.BytesIO()
    frame.write_parquet(buffer, statistics=False)
    data = buffer.getvalue()
    entry = {
        "name": name,
        "path": f"{FOLDER}/{name}.parquet",
        "rows": frame.height,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "columns": frame.columns,
    }
    return entry, data


class Tables:
    """The tables a stored ``diff.json`` (``doc``, read from ``path``) lists, each read once, when
    first asked for, and checked."""

    def __init__(self, path: Path, doc: Mapping[str, Any]) -> None:
        self._path = path
        listed = doc.get("tables")
        if not isinstance(listed, list):
            raise InputError(path, "lists no tables (tables[]), which a version 2 document has")
        self._listed = {t.get("name"): t for t in listed if isinstance(t, Mapping)}
        self._read: dict[str, pl.DataFrame] = {}

    def rows(self, ref: Mapping[str, Any], label: str) -> pl.DataFrame:
        """The rows of ``label`` in the table ``ref`` names, without the index column."""
        frame = self._table(str(ref["table"]))
        rows = frame.filter(pl.col(INDEX) == label).drop(INDEX)
        if rows.height != ref["rows"]:
            raise InputError(
                self._path,
                f"table {ref['table']!r} holds {rows.height} rows of {label!r}, the document "
                f"says {ref['rows']}",
            )
        return rows

    def _table(self, name: str) -> pl.DataFrame:
        if name in self._read:
            return self._read[name]
        entry = self._listed.get(name)
        if entry is None:
            raise InputError(self._path, f"refers to a table {name!r} that tables[] does not list")
        where = self._path.parent / str(entry["path"])
        try:
            data = where.read_bytes()
        except OSError as exc:
            raise InputError(
                where, f"cannot be read ({exc.strerror or exc}): {self._path.name} needs it"
            ) from exc
        if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
            raise InputError(
                where, f"is damaged: its sha256 is not the one {self._path.name} lists"
            )
        try:
            frame = pl.read_parquet(io.BytesIO(data))
        except Exception as exc:  # Polars raises several kinds on a bad file
            raise InputError(where, f"is not a readable Parquet table ({exc})") from exc
        if INDEX not in frame.columns:
            raise InputError(where, f"has no {INDEX!r} column")
        self._read[name] = frame
        return frame


def split(doc: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The ``diff.json`` document of the in-memory ``doc`` (its pairs' op tables and its sides'
    op series replaced by references, ``tables[]`` listing them, the changed paths cut to
    :data:`MAX_PATHS_KEPT`) and the Parquet files, by path relative to ``diff.json``."""
    files: dict[str, bytes] = {}
    listing: list[dict[str, Any]] = []

    def add(name: str, parts: list[tuple[str, pl.DataFrame]]) -> None:
        entry, data = parquet(name, parts)
        listing.append(entry)
        files[entry["path"]] = data

    pairs = []
    for pair in doc["pairs"]:
        structure = pair["structure"]
        cut = {**structure, "paths": structure["paths"][:MAX_PATHS_KEPT]}
        pairs.append(
            {**pair, "structure": cut, "table": reference("diff_ops", pair["table"].height)}
        )
    add("diff_ops", [(p["label"], p["table"]) for p in doc["pairs"]])
    sides = {}
    for key, side in doc["sides"].items():
        impls = side["implementations"]
        names = {t: f"{key}_{t}" for t in ("steps", "step_parts", "op_series")}
        add(names["steps"], [(i["label"], pl.DataFrame(i["steps"])) for i in impls])
        add(names["step_parts"], [(i["label"], step_parts(i["diff_profile"])) for i in impls])
        add(names["op_series"], [(i["label"], i["diff_profile"]["ops"]) for i in impls])
        kept: list[dict[str, Any]] = []
        for i in impls:
            profile = i["diff_profile"]
            parts = reference(names["step_parts"], len(profile["steps"]))
            kept.append(
                {
                    **i,
                    "steps": reference(names["steps"], len(i["steps"])),
                    "diff_profile": {
                        **profile,
                        "steps": parts,
                        "step_us": parts,
                        "parts_us": parts,
                        "ops": reference(names["op_series"], profile["ops"].height),
                    },
                }
            )
        sides[key] = {**side, "implementations": kept}
    return {**doc, "pairs": pairs, "sides": sides, "tables": listing}, files

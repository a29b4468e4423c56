"""Bulk tables beside a JSON document: the document in ``summary.json``, the rows in Parquet.

What grows with the trace (a row per step, per op path, per dispatch, per device gap, per rank
and step) is not kept in the document: each such list is a table in ``data/<table>.parquet``
beside it, and the document holds a *reference* where the list was::

    {"table": "steps", "rows": 7284}
    {"table": "key_averages", "rows": 100000, "shown": [... the rows the report shows ...]}

``rows`` counts the table's rows that belong to that place. Every table's rows say which record
they belong to: ``scope`` (where the records sit in the document, e.g. ``implementations`` or
``sweep.smallest_detail.implementations``) and ``implementation`` (the record's index there);
``neuron`` and ``rank`` where a record holds several lists of one kind. The document lists the
tables in ``tables[]``: ``name``, ``path``, ``rows``, ``bytes``, ``sha256``, ``columns`` and
``holds`` (where in the document its rows belong). :func:`.stored.restore_summary` puts the lists back, so a
reader sees the document as it was in memory; a table that is missing, changed (its sha256), or
short of rows is an :class:`~nprof_report.errors.InputError` naming its file.

Texts in the tables are cut as the document's are (:data:`.records.TEXT_CHARS`), so a name is
the same key wherever it is read.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from nprof_report.errors import InputError
from nprof_report.report.figures.records import Records, cut_column

DATA_DIR = "data"
SCOPE = "scope"
INDEX = "implementation"


@dataclass
class Table:
    """One bulk table being collected: frames of its parts, each with its keys."""

    name: str
    holds: str  # where its rows belong, in words of the document's paths
    parts: list[pl.DataFrame]

    def frame(self) -> pl.DataFrame:
        return pl.concat(self.parts, how="diagonal_relaxed") if self.parts else pl.DataFrame()


def as_frame(value: Sequence[Any] | pl.DataFrame) -> pl.DataFrame:
    """A list of records (dicts), a :class:`~.records.Records` or a frame, as a frame."""
    if isinstance(value, pl.DataFrame):
        return value
    frame = getattr(value, "frame", None)  # records kept as columns (FrameRecords, OpSeries)
    if isinstance(frame, pl.DataFrame):
        return frame
    rows = list(value) if isinstance(value, Records) else value
    return pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()


def reference(name: str, rows: int, shown: list[Any] | None = None) -> dict[str, Any]:
    """What the document holds where a list went to table ``name``."""
    ref: dict[str, Any] = {"table": name, "rows": rows}
    if shown is not None:
        ref["shown"] = shown
    return ref


def is_reference(value: object) -> bool:
    return isinstance(value, dict) and isinstance(value.get("table"), str) and "rows" in value


class Collector:
    """The tables of one document as its lists are moved out (:meth:`move`)."""

    def __init__(self) -> None:
        self.tables: dict[str, Table] = {}

    def move(
        self,
        name: str,
        holds: str,
        value: Sequence[Any] | pl.DataFrame,
        keys: Mapping[str, str | int],
        shown: list[Any] | None = None,
    ) -> dict[str, Any]:
        """Add ``value``'s rows to table ``name`` with the columns ``keys``; its reference."""
        frame = as_frame(value)
        key_columns = [
            pl.lit(v, pl.String if isinstance(v, str) else pl.Int64).alias(k)
            for k, v in keys.items()
        ]
        keyed = frame.select(*key_columns, *frame.columns) if frame.width else None
        table = self.tables.setdefault(name, Table(name, holds, []))
        if keyed is not None:
            table.parts.append(keyed)
        return reference(name, frame.height, shown)

    def files(self, prefix: str = "") -> tuple[dict[str, bytes], list[dict[str, Any]]]:
        """Each table's Parquet file (``data/<prefix><name>.parquet``) and its entry for the
        document's ``tables[]``."""
        files: dict[str, bytes] = {}
        entries: list[dict[str, Any]] = []
        for name in sorted(self.tables):
            table = self.tables[name]
            frame = _texts_cut(table.frame())
            buf = io.BytesIO()
            frame.write_parquet(buf, compression="zstd", statistics=False)
            data = buf.getvalue()
            path = f"{DATA_DIR}/{prefix}{name}.parquet"
            files[path] = data
            entries.append(
                {
                    "name": name,
                    "path": path,
                    "rows": frame.height,
                    "bytes": len(data),
                    "sha256": hashlib.sha256(data).hexdigest(),
                    "columns": frame.columns,
                    "holds": table.holds,
                }
            )
        return files, entries


def _texts_cut(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with every text, also in a list column, cut as the document's are."""
    cut: list[pl.Series] = []
    for column in frame.get_columns():
        if column.dtype in (pl.String, pl.Categorical):
            done = cut_column(column)
            if done is not None:
                cut.append(done)
        elif column.dtype == pl.List(pl.String):
            done = cut_column(column.explode())
            if done is not None:
                cut.append(_regroup(done, column))
    return frame.with_columns(cut) if cut else frame


def _regroup(flat: pl.Series, like: pl.Series) -> pl.Series:
    """``flat`` (``like`` exploded: a null for each empty or null list) back into lists shaped
    as ``like``."""
    values = flat.to_list()
    out: list[list[str] | None] = []
    at = 0
    for n, original in zip(like.list.len().fill_null(0).to_list(), like.to_list()):
        if original is None:
            out.append(None)
            at += 1
        elif n == 0:
            out.append([])
            at += 1
        else:
            out.append(values[at : at + n])
            at += n
    return pl.Series(like.name, out, dtype=pl.List(pl.String))


class Tables:
    """The tables a document lists, read on first use and checked (module docstring)."""

    def __init__(self, doc_path: Path, entries: Iterable[Mapping[str, Any]]) -> None:
        self._doc_path = doc_path
        self._entries = {e["name"]: e for e in entries}
        self._frames: dict[str, dict[tuple[Any, ...], pl.DataFrame]] = {}  # parts by keys

    def _read(self, name: str) -> pl.DataFrame:
        entry = self._entries.get(name)
        if entry is None:
            raise InputError(self._doc_path, f"refers to a table {name!r} it does not list")
        path = self._doc_path.parent / entry["path"]
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise InputError(
                path,
                f"cannot be read ({exc.strerror or exc}): {self._doc_path.name} keeps its "
                f"{name} rows there",
            ) from exc
        if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
            raise InputError(
                path, f"is not the file {self._doc_path.name} lists (its sha256 differs)"
            )
        try:
            frame = pl.read_parquet(io.BytesIO(data))
        except (pl.exceptions.PolarsError, OSError, ValueError) as exc:
            raise InputError(path, f"is not a readable Parquet file ({exc})") from exc
        if frame.height != entry.get("rows"):
            raise InputError(
                path, f"holds {frame.height} rows; {self._doc_path.name} lists {entry.get('rows')}"
            )
        return frame

    def rows(self, name: str, keys: Mapping[str, str | int], expected: int) -> pl.DataFrame:
        """The rows of table ``name`` with the values ``keys`` (the key columns dropped)."""
        key_names = list(keys)
        groups = self._frames.get(name)
        if groups is None:
            frame = self._read(name)
            keyed = set(key_names) <= set(frame.columns)
            groups = (
                frame.partition_by(key_names, as_dict=True, maintain_order=True)
                if keyed and frame.height
                else {}
            )
            # an empty part keeps the table's columns
            groups[()] = frame.clear().drop(key_names, strict=False)
            self._frames[name] = groups
        part = groups.get(tuple(keys.values()))
        part = groups[()] if part is None else part.drop(key_names)
        if part.height != expected:
            raise InputError(
                self._doc_path.parent / self._entries[name]["path"],
                f"holds {part.height} {name} rows for {dict(keys)}; "
                f"{self._doc_path.name} says {expected}",
            )
        return part

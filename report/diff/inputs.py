"""One side of a diff: captures to analyse, or a stored ``summary.json`` / ``diff.json``.

Whatever the input, a side ends up as ``summary.json``'s implementation records (label, trace,
headline, per-step rows, ``diff_profile``), so a baseline kept in a repository compares exactly
like the traces it was built from. A stored ``diff.json`` stands for its NEW side: the state
that was last checked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import orjson
import polars as pl

from nprof_report.errors import InputError
from nprof_report.report.diff.tables import restore_new_side
from nprof_report.report.figures import (
    OP_SERIES_SCHEMA,
    SUMMARY_FORMAT,
    SUMMARY_VERSION,
    RunRecord,
    SideImplementation,
    build_summary,
    op_series_frame,
    restore_summary,
)
from nprof_report.report.jobs import Engine, analyse_inputs, side_job

DIFF_FORMAT = "nprof-diff"
DIFF_VERSION = 2
SIDE_FIELDS = tuple(SideImplementation.__annotations__)
"""The implementation fields a side keeps (enough to serve again as a baseline)."""
# summary.json and diff.json are written with sorted keys: "format" follows "caveats",
# "check", "comparisons" and "findings", all short
_SNIFF_BYTES = 1 << 20
_FORMAT_KEY = re.compile(rb'"format":\s*"nprof-(?:summary|diff)"')


@dataclass(frozen=True)
class Side:
    """What one side of a diff holds."""

    path: Path
    kind: str  # "capture", "summary.json" or "diff.json"
    implementations: list[SideImplementation]
    run: RunRecord | None = None
    caveats: list[str] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        """The side as ``diff.json`` keeps it."""
        return {
            "path": str(self.path),
            "kind": self.kind,
            "run": self.run,
            "implementations": self.implementations,
        }


def _stored_document(path: Path) -> dict[str, Any] | None:
    """The summary or diff document in ``path``, or None when it is something else (a trace).

    Only a file whose first MiB names one of the two formats is parsed here: a trace is left to
    the streaming reader, which never holds it whole.
    """
    if not path.is_file() or path.suffix != ".json":
        return None
    try:
        with path.open("rb") as fh:
            head = fh.read(_SNIFF_BYTES)
        if not _FORMAT_KEY.search(head):
            return None
        doc = orjson.loads(path.read_bytes())
    except (orjson.JSONDecodeError, OSError):
        return None  # the trace reader gives the error a trace deserves
    if isinstance(doc, dict) and doc.get("format") in (SUMMARY_FORMAT, DIFF_FORMAT):
        return doc
    return None


def _keep(impl: Mapping[str, Any]) -> SideImplementation:
    """The fields of ``impl`` that a side keeps; a stored document's are checked no further than
    :func:`_from_document` does (format, version, ``diff_profile``)."""
    return cast(SideImplementation, {k: impl.get(k) for k in SIDE_FIELDS})


def _from_document(path: Path, doc: dict[str, Any]) -> Side:
    fmt = doc["format"]
    # version 1 of both held their lists inline; version 2 keeps them in Parquet beside them
    versions = range(1, (SUMMARY_VERSION if fmt == SUMMARY_FORMAT else DIFF_VERSION) + 1)
    version = doc.get("format_version")
    if version not in versions:
        raise InputError(
            path,
            f"is {fmt} version {version}; this nprof-report reads version "
            + " and ".join(map(str, versions)),
        )
    try:
        if fmt == SUMMARY_FORMAT:
            doc = cast(dict[str, Any], restore_summary(doc, path))
            impls, run, kind = doc["implementations"], doc.get("run"), "summary.json"
        else:
            new = doc["sides"]["new"]
            impls, run, kind = new["implementations"], new.get("run"), "diff.json"
            if version == 2:
                restore_new_side(path, doc, impls)
        kept = [_keep(i) for i in impls]
    except (KeyError, TypeError, AttributeError) as exc:
        raise InputError(path, f"is not a complete {fmt} document (missing {exc})") from exc
    if not kept:
        raise InputError(path, "holds no implementation to compare")
    for impl in kept:
        profile = impl["diff_profile"]
        if not isinstance(profile, dict) or not {"steps", "step_us", "parts_us", "ops"} <= set(
            profile
        ):
            raise InputError(
                path,
                f"implementation {impl['label']!r} has no diff_profile",
                "it was written by an older nprof-report: build it again from its traces",
            )
        impl["diff_profile"] = {**profile, "ops": _op_series(path, impl)}
    return Side(path, kind, kept, run, [])


def _op_series(path: Path, impl: SideImplementation) -> pl.DataFrame:
    """An implementation's op series as a frame: as a version 2 document's table gave it back,
    or from the records a version 1 document holds; one value per step in each (else bad
    input)."""
    profile = impl["diff_profile"]
    ops: Any = profile["ops"]
    try:
        frame = ops if isinstance(ops, pl.DataFrame) else op_series_frame(ops)
        frame = frame.select(OP_SERIES_SCHEMA.names()).cast(OP_SERIES_SCHEMA)
    except (pl.exceptions.PolarsError, TypeError, KeyError, AttributeError) as exc:
        raise InputError(
            path, f"implementation {impl['label']!r}: its op series cannot be read ({exc})"
        ) from exc
    steps = len(profile["steps"])
    for name, dtype in OP_SERIES_SCHEMA.items():
        if isinstance(dtype, pl.List) and name not in ("context", "kernels"):
            lengths = frame[name].list.len().drop_nulls()
            if len(lengths) and not (lengths == steps).all():
                raise InputError(
                    path,
                    f"implementation {impl['label']!r}: op series {name} does not hold one "
                    f"value per step ({steps})",
                )
    return frame


def load_side(
    path: Path,
    *,
    jobs: int | None = None,
    use_cache: bool = True,
    step_annotation: str | None = None,
) -> Side:
    """Analyse ``path`` (anything ``build`` accepts) or read the stored document it is
    (``step_annotation`` applies to traces only: a stored document keeps its steps)."""
    path = Path(path)
    doc = _stored_document(path)
    if doc is not None:
        return _from_document(path, doc)
    # build_summary, not the sweep-aware summarise: a sweep's sources keep one record each
    # (labelled ``naive @ 64×4096``), so each size is compared with its own
    engine = Engine(jobs=jobs, use_cache=use_cache, step_annotation=step_annotation)
    a = analyse_inputs([path], engine, what="compare", sized=True, job=side_job)
    summary = build_summary(a.analyses, a.manifest, a.caveats)
    return Side(
        path,
        "capture",
        [_keep(i) for i in summary["implementations"]],
        summary["run"],
        summary["caveats"],
    )

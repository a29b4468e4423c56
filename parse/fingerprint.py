"""A capture's structure with nothing of its content: what a user can attach to a bug report.

A capture holds the user's model: op and kernel names, source files and paths, host names,
annotation names, shapes and values. The fingerprint keeps only what says how the file is built:
the top-level keys and their JSON types, per category the event count, the phases (``ph``) and
every ``args`` key with the types of its values, the metadata events' keys, ``schemaVersion``;
for Neuron Explorer's output every table with its columns, their types and null counts and its
row count, the schema version, how each column was read, Explorer's own ``SchemaFields``
descriptions, the raw files present (by kind) and the ``NeuronConfig`` arguments by name. No
name and no value from the trace reaches it: only keys, types, counts and version strings of the
form ``1.2.3``. ``fixtures/neuron/make_neuron_fixtures.py --from-fingerprint`` builds a
CONSTRUCTED tree with the same structure.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from nprof_report.parse.inputs import resolve
from nprof_report.parse.inspection import (
    Inspection,
    inspect_frames,
    inspection_of,
    neuron_part,
    type_name,
)
from nprof_report.parse.neuron.files import NeuronSession, find_sessions
from nprof_report.parse.neuron.load import read_parquet, read_schema_fields
from nprof_report.parse.sources import neuron_root

FINGERPRINT_VERSION = "1.0"
# Kineto's own metadata event names (``ph: "M"``); any other name is counted, not named
KINETO_METADATA = frozenset(
    {"process_name", "process_labels", "process_sort_index", "thread_name", "thread_sort_index"}
)
# a version value is kept only when it looks like one: digits, dots, a short suffix
_VERSION = re.compile(r"^\d+(\.\d+){0,3}([.+-][0-9A-Za-z]{1,12})?$")


def version_value(value: Any) -> Any:
    """``value`` when it is a version number or a string like ``12.0.1``, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str) and _VERSION.match(value.strip()):
        return value.strip()
    return None


def fingerprint_path(path: Path) -> dict[str, Any]:
    """The fingerprint of anything ``build`` accepts (module docstring)."""
    return inspect_and_fingerprint(path)[1]


def inspect_and_fingerprint(path: Path) -> tuple[Inspection, dict[str, Any]]:
    """``inspect_path(path)`` and the fingerprint, each trace read once for both."""
    inputs = resolve(path)
    shown_sources = []
    sources = []
    for source in inputs.sources:
        shown, frames = inspect_frames(source)
        shown_sources.append(shown)
        trace = None
        if frames is not None:
            trace = {**_inspected(shown), **trace_fingerprint(frames.events)}
        by_path = {n["session"]: n for n in shown["neuron"]}
        root = neuron_root(source)
        sessions = find_sessions(root) if root is not None else []
        sources.append(
            {
                "trace": trace,
                "neuron": [
                    session_fingerprint(s, by_path[str(s.path)])
                    for s in sessions
                    if str(s.path) in by_path
                ],
            }
        )
    m = inputs.manifest
    run = None
    if m is not None:  # the tool and SDK versions a run recorded (torch, torch-neuronx, ...)
        run = {
            "backend": m.backend,
            "tool_version": version_value(m.tool_version),
            "versions": {k: version_value(v) for k, v in sorted(m.versions.items())},
        }
    fingerprint = {"nprof_fingerprint": FINGERPRINT_VERSION, "run": run, "sources": sources}
    return inspection_of(path, inputs, shown_sources), fingerprint


def _inspected(shown: dict[str, Any]) -> dict[str, Any]:
    """The counts and rules of ``inspect`` that name nothing."""
    t = shown["trace"]
    f = t["file"]
    return {
        "file": {
            "gzip": f["gzip"],
            "top_level": f["top_level"],
            "valid_json": f["valid_json"],
            "size_bytes": f["size_bytes"],
            "top_level_keys": f["top_level_keys"],
            "versions": {k: version_value(v) for k, v in f["versions"].items()},
            "timestamp_convention": f["timestamp_convention"],
        },
        # the rule without the annotation's name: no name of the trace reaches the fingerprint
        "steps": {"count": t["steps"]["count"], "rule": t["steps"]["rule"].partition(":")[0]},
        "device_activities": {
            k: t["device_activities"][k] for k in ("total", "linked", "unlinked", "linked_by")
        },
        "partial_overlaps": t["partial_overlaps"],
        "distributed_keys": sorted(k for k, v in t["distributed"].items() if v is not None),
        "device_properties": len(t["device_properties"]),
        "privateuse1_driver": {k: t["privateuse1_driver"][k] for k in ("meaning", "rows")},
    }


def _arg_types(args: list[str | None]) -> dict[str, list[str]]:
    types: dict[str, set[str]] = {}
    for text in args:
        if text is None:
            continue
        try:
            doc = orjson.loads(text)
        except orjson.JSONDecodeError:
            continue
        if isinstance(doc, dict):
            for key, value in doc.items():
                types.setdefault(key, set()).add(type_name(value))
    return {k: sorted(v) for k, v in sorted(types.items())}


def trace_fingerprint(events: pl.DataFrame | None) -> dict[str, Any]:
    """Per category: count, phases and ``args`` keys with their value types; the metadata events
    by Kineto's names (others counted)."""
    if events is None or events.height == 0:
        return {"categories": {}, "metadata": {}}
    ev = events.select(
        pl.col("ph").cast(pl.String),
        pl.col("cat").cast(pl.String).fill_null("(none)"),
        pl.col("name").cast(pl.String),
        "args",
    )
    categories: dict[str, Any] = {}
    regular = ev.filter(pl.col("ph") != "M")
    for (cat,), part in sorted(regular.group_by("cat"), key=lambda g: str(g[0][0])):
        phases = Counter(part["ph"].to_list())
        categories[str(cat)] = {
            "count": part.height,
            "complete": phases.get("X", 0),
            "ph": {str(k): n for k, n in sorted(phases.items())},
            "args": _arg_types(part["args"].to_list()),
        }
    metadata: dict[str, Any] = {}
    meta = ev.filter(pl.col("ph") == "M")
    for (name,), part in sorted(meta.group_by("name"), key=lambda g: str(g[0][0])):
        key = str(name) if name in KINETO_METADATA else "(other)"
        entry = metadata.setdefault(key, {"count": 0, "args": {}})
        entry["count"] += part.height
        for k, v in _arg_types(part["args"].to_list()).items():
            entry["args"][k] = sorted({*entry["args"].get(k, []), *v})
    return {"categories": categories, "metadata": metadata}


def dtype_name(dtype: Any) -> str:
    """A Parquet column's type (a Polars data type) in the words ``--from-fingerprint`` builds
    from."""
    if isinstance(dtype, pl.List):
        return f"list[{dtype_name(dtype.inner)}]"
    if isinstance(dtype, pl.Datetime):
        return "datetime"
    if dtype.is_integer():
        return "int"
    if dtype.is_float():
        return "float"
    if dtype == pl.Boolean:
        return "bool"
    if dtype in (pl.String, pl.Categorical):
        return "str"
    return "other"


def _table(paths: tuple[Path, ...]) -> dict[str, Any]:
    df = read_parquet(paths)
    return {
        "rows": df.height,
        "files": len(paths),
        "columns": {
            name: {"type": dtype_name(dt), "nulls": df[name].null_count()}
            for name, dt in df.schema.items()
        },
    }


def session_fingerprint(
    session: NeuronSession, shown: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One Neuron session: its Explorer folders and tables, schema, raw files by kind."""
    part = shown if shown is not None else neuron_part(session, None, [], [])
    dirs = (*session.system_profile_dirs, *session.device_profile_dirs)
    folders = [
        {
            "kind": "system" if d in session.system_profile_dirs else "device",
            "tables": {t: _table(paths) for t, paths in d.tables},
        }
        for d in dirs
    ]
    versions: dict[str, set[str]] = {}
    for d in dirs:  # tool and schema versions, from the metadata tables' *version* columns
        for table, paths in d.tables:
            if "Metadata" not in table:
                continue
            df = read_parquet(paths)
            for col in (c for c in df.columns if "version" in c.lower()):
                kept = (version_value(v) for v in df[col].drop_nulls().to_list())
                versions.setdefault(col, set()).update(str(v) for v in kept if v is not None)
    described = read_schema_fields(dirs)
    return {
        "explorer_schema_version": version_value(part["explorer_schema_version"]),
        "versions": {k: sorted(v) for k, v in sorted(versions.items())},
        "layout": {
            "trace_json": session.trace_json is not None,
            "timestamp_folder": bool(re.match(r"^\d{8}_\d{6}", session.path.name)),
            "raw_files": part["raw_files"],
            "session_ntff": sum(1 for n in session.ntffs if n.is_session),
            "legacy_json": len(session.system_profile_json) + len(session.device_profile_json),
        },
        "folders": folders,
        "read": {
            table: entry["read_renamed"]
            for table, entry in part["tables"].items()
            if entry.get("read_renamed")
        },
        "schema_fields": {t: dict(sorted(f.items())) for t, f in sorted(described.items())},
        "schema_dump": part["schema_dump"] is not None,
        "neuron_config": {
            "passed": part["neuron_config"]["passed"],
            "dropped": [str(d).split(":", 1)[0] for d in part["neuron_config"]["dropped"]],
        },
    }

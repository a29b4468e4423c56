"""Load Neuron Explorer outputs into Polars frames with declared schemas (formats.md §3).

Binary captures (``ntrace.pb``, ``*.ntff``) have no public schema and are never read here (§3,
§7.4): only what ``neuron-explorer view`` converted them to is loaded.

``SYSTEM_EVENTS`` -- one row per system-trace event, any source:

====================  ============  ==============================================================
column                dtype         meaning
====================  ============  ==============================================================
event_id              Int64         Explorer ``id``; the row index when the export has none
name                  String        event name, ``" [trace.json]"`` suffix removed (§3.2)
name_raw              String        name as written
source                String        ``framework``, ``neuron_rt`` or ``neuron_hw``
start_ns, end_ns      Int64         Unix-epoch ns (hardware rows already shifted to the host clock)
dur_ns                Int64         ns
instance_id           String
process_id            Int64
thread_id             Int64
nc_idx                Int64         logical core (``lnc_idx`` in legacy JSON)
pcore_idx             Int64         physical core (``device_core_idx`` when absent)
worker_gid            Int64
flow_ids              List(String)  the ``flow_id`` list (string-encoded integers)
framework_stream_id   String
model_id              String        ``model_id`` attribute (NEFF hash, §2.6)
exec_id               Int64
model_name            String
nrt_sequence_id       String        string, so it joins directly with ``flow_ids``
extra_json            String        the remaining attributes as JSON text
====================  ============  ==============================================================

Attributes may sit in dedicated columns or in ``extra_attributes_json`` (§7.6); every attribute
column above is filled from whichever is present.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from nprof_report.errors import InputError
from nprof_report.parse.neuron.columns import (
    KNOWN_SCHEMA_MAJORS,
    SCHEMA_COMMAND,
    SCHEMA_FIELDS_TABLE,
    TABLES,
    resolve,
    schema_fields_of,
)
from nprof_report.parse.neuron.files import ProfileDir

DEFAULT_MAX_EVENTS_PER_NC = 1_000_000  # ring-buffer default (§2.3, §2.7)
DROPPED_RE = re.compile(r"dropp|ring buffer", re.IGNORECASE)

HW_EVENT_NAMES = frozenset(
    {
        "nc_exec_running",
        "cc_running",
        "cc_exec_barrier",
        "numerical_err",
        "nrt_model_switch",
        "nc_model_switch",
        "timestamp_sync_point",
        "hw_notify",
    }
)  # §5.1

SYSTEM_EVENTS = pl.Schema(
    {
        "event_id": pl.Int64(),
        "name": pl.String(),
        "name_raw": pl.String(),
        "source": pl.String(),
        "start_ns": pl.Int64(),
        "end_ns": pl.Int64(),
        "dur_ns": pl.Int64(),
        "instance_id": pl.String(),
        "process_id": pl.Int64(),
        "thread_id": pl.Int64(),
        "nc_idx": pl.Int64(),
        "pcore_idx": pl.Int64(),
        "worker_gid": pl.Int64(),
        "flow_ids": pl.List(pl.String),
        "framework_stream_id": pl.String(),
        "model_id": pl.String(),
        "exec_id": pl.Int64(),
        "model_name": pl.String(),
        "nrt_sequence_id": pl.String(),
        "extra_json": pl.String(),
    }
)

_TIME_SCALE = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_SUFFIX = re.compile(r"\s\[[^\]]+\]$")
# Attribute columns taken from extra_attributes_json when not dedicated columns: col -> keys.
_FROM_EXTRA: dict[str, tuple[str, ...]] = {
    "model_id": ("model_id",),
    "exec_id": ("exec_id",),
    "model_name": ("model_name",),
    "nrt_sequence_id": ("nrt_sequence_id",),
    "pcore_idx": ("pcore_idx", "device_core_idx"),
    "nc_idx": ("nc_idx", "lnc_idx"),
    "worker_gid": ("worker_gid",),
    "framework_stream_id": ("framework_stream_id",),
}


def conform(df: pl.DataFrame, schema: pl.Schema) -> pl.DataFrame:
    """Select ``schema``'s columns in order, cast non-strictly; missing columns become nulls."""
    return df.select(
        [
            (pl.col(n) if n in df.columns else pl.lit(None)).cast(t, strict=False).alias(n)
            for n, t in schema.items()
        ]
    )


def read_parquet(paths: Sequence[Path]) -> pl.DataFrame:
    """Read and stack Parquet tables; a corrupt one raises InputError naming it."""
    frames = []
    for p in paths:
        try:
            frames.append(pl.read_parquet(p))
        except Exception as exc:  # polars raises several types for a corrupt file
            raise InputError(p, f"is not a readable Parquet table ({type(exc).__name__})") from exc
    if not frames:
        return pl.DataFrame()
    return pl.concat(frames, how="diagonal_relaxed")


def read_json(path: Path, *, exact: bool = False) -> Any:
    """Parse JSON; ``exact`` keeps non-integer numbers as Decimal (µs timestamps of ~1.8e15
    carry ns digits that float64 cannot hold)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot be read ({exc.strerror or exc})") from exc
    try:
        if exact:
            return json.loads(data, parse_float=Decimal)
        return orjson.loads(data)
    except (orjson.JSONDecodeError, ValueError) as exc:
        raise InputError(path, f"is not valid JSON ({exc})") from exc


# ----------------------------------------------------------------------------- system events


def _normalise_system(df: pl.DataFrame, path: Path) -> pl.DataFrame:
    """Map a raw SystemProfileEvents-like frame onto ``SYSTEM_EVENTS``."""
    if df.height == 0:
        return pl.DataFrame(schema=SYSTEM_EVENTS)
    ren = {
        "id": "event_id",
        "start_ts": "start_ns",
        "end_ts": "end_ns",
        "duration_ns": "dur_ns",
        "trace_event_source": "source",
        "flow_id": "flow_ids",
        "extra_attributes_json": "extra_json",
    }
    df = df.rename({k: v for k, v in ren.items() if k in df.columns})
    for need in ("name", "start_ns"):
        if need not in df.columns:
            raise InputError(path, f"has no '{need}' column; not a SystemProfileEvents table")
    if "event_id" not in df.columns:
        df = df.with_row_index("event_id")
    if "extra_json" not in df.columns:
        df = df.with_columns(pl.lit(None, pl.String).alias("extra_json"))
    if "flow_ids" in df.columns:
        dt = df.schema["flow_ids"]
        if isinstance(dt, pl.List):
            df = df.with_columns(pl.col("flow_ids").cast(pl.List(pl.String)))
        else:  # a scalar id: wrap it
            df = df.with_columns(
                pl.when(pl.col("flow_ids").is_null())
                .then(pl.lit(None, pl.List(pl.String)))
                .otherwise(pl.concat_list(pl.col("flow_ids").cast(pl.String)))
                .alias("flow_ids")
            )
    extra = pl.col("extra_json")
    fills = []
    for col, keys in _FROM_EXTRA.items():
        exprs = [extra.str.json_path_match(f"$.{k}") for k in keys]
        if col in df.columns:
            exprs.insert(0, pl.col(col).cast(pl.String))
        fills.append(pl.coalesce(exprs).alias(col))
    df = df.with_columns(fills)
    df = df.with_columns(
        pl.col("start_ns").cast(pl.Int64, strict=False),
        *(
            [pl.col(c).cast(pl.Int64, strict=False) for c in ("end_ns", "dur_ns")]
            if "end_ns" in df.columns and "dur_ns" in df.columns
            else []
        ),
    )
    if "dur_ns" not in df.columns and "end_ns" in df.columns:
        df = df.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"))
    if "end_ns" not in df.columns:
        if "dur_ns" not in df.columns:
            df = df.with_columns(pl.lit(0, pl.Int64).alias("dur_ns"))
        df = df.with_columns((pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"))
    if "source" not in df.columns:
        df = df.with_columns(pl.lit(None, pl.String).alias("source"))
    df = df.with_columns(
        pl.col("name").alias("name_raw"),
        pl.coalesce(
            pl.col("source"),
            pl.when(pl.col("name").is_in(list(HW_EVENT_NAMES)))
            .then(pl.lit("neuron_hw"))
            .otherwise(pl.lit("neuron_rt")),
        ).alias("source"),
    ).with_columns(
        pl.when(pl.col("source") == "framework")
        .then(pl.col("name").str.replace(_SUFFIX.pattern, ""))
        .otherwise(pl.col("name"))
        .alias("name")
    )
    # Explorer writes nrt_sequence_id as a number; keep its decimal text.
    df = df.with_columns(pl.col("nrt_sequence_id").str.replace(r"^\"|\"$", ""))
    return conform(df, SYSTEM_EVENTS).sort("start_ns", "event_id", nulls_last=True)


def load_system_events_parquet(
    paths: Sequence[Path],
    *,
    version: str | None = None,
    dump: Mapping[str, Mapping[str, str]] | None = None,
    schema_fields: Mapping[str, Mapping[str, str]] | None = None,
    notes: list[str] | None = None,
) -> pl.DataFrame:
    """Load ``SystemProfileEvents.parquet`` (or its ``_0``, ``_1``... parts) into SYSTEM_EVENTS.

    Columns are found by name through :mod:`.columns` (``version``, Explorer's own
    ``schema_fields`` and the schema ``dump`` only name and resolve them); the columns read under another name are added to ``notes``.

    Raises:
        InputError: a file is unreadable or lacks a required column.
    """
    if not paths:
        return pl.DataFrame(schema=SYSTEM_EVENTS)
    df, found = resolve(
        read_parquet(paths),
        "SystemProfileEvents",
        path=paths[0],
        version=version,
        dump=dump,
        schema_fields=schema_fields,
    )
    if notes is not None:
        notes.extend(found)
    return _normalise_system(df, paths[0])


def _to_ns(value: Any, scale: int, path: Path) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise InputError(path, f"timestamp {value!r} is not a number")
    if isinstance(value, int):
        return value * scale
    try:
        return int((Decimal(str(value)) * scale).to_integral_value())
    except InvalidOperation as exc:
        raise InputError(path, f"timestamp {value!r} is not a number") from exc


def _json_default(v: Any) -> Any:
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    return str(v)


_LEGACY_COLUMNS = (
    "id",
    "instance_id",
    "process_id",
    "thread_id",
    "nc_idx",
    "pcore_idx",
    "worker_gid",
    "framework_stream_id",
    "trace_event_source",
)


def _legacy_source(ev: dict[str, Any]) -> str | None:
    src = ev.get("trace_event_source")
    if isinstance(src, str):
        return src
    group = str(ev.get("group", ""))
    if ev.get("type") == 99999 or group.startswith("framework"):  # §3.3 doc example
        return "framework"
    return None  # decided from the name in _normalise_system


def legacy_events(doc: Any, path: Path) -> list[dict[str, Any]]:
    """The event list of a ``system_profile.json`` document (``trace_event`` or ``trace_events``,
    or a bare list, §3.3, §7.8)."""
    events: Any
    if isinstance(doc, list):
        events = doc
    elif isinstance(doc, dict):
        events = doc.get("trace_event", doc.get("trace_events"))
        if events is None:
            raise InputError(path, "has no 'trace_event' or 'trace_events' list")
    else:
        raise InputError(path, "is not a system_profile.json document")
    if not isinstance(events, list):
        raise InputError(path, "'trace_event' is not a list")
    return [e for e in events if isinstance(e, dict)]


def load_system_profile_json(path: Path) -> pl.DataFrame:
    """Load a legacy ``system_profile.json`` (§3.3) into SYSTEM_EVENTS.

    Attributes may be flat or nested under ``args``; ``timestamp``/``duration`` are scaled by
    ``timestamp_unit`` (default ns); ids are cast to text first, as the documentation advises.
    """
    doc = read_json(path, exact=True)
    rows = []
    for i, raw in enumerate(legacy_events(doc, path)):
        ev = dict(raw.get("args") or {}) if isinstance(raw.get("args"), dict) else {}
        ev.update({k: v for k, v in raw.items() if k != "args"})
        unit = str(ev.pop("timestamp_unit", "ns"))
        scale = _TIME_SCALE.get(unit)
        if scale is None:
            raise InputError(path, f"unknown timestamp_unit {unit!r}", "expected ns, us, ms or s")
        name = ev.pop("name", None)
        start = _to_ns(ev.pop("timestamp", None), scale, path)
        dur = _to_ns(ev.pop("duration", None), scale, path)
        if name is None or start is None:
            continue
        flow = ev.pop("flow_id", ev.pop("flow_ids", None))
        flows = (
            None
            if flow is None
            else [str(f) for f in flow]
            if isinstance(flow, list)
            else [str(flow)]
        )
        row: dict[str, Any] = {
            "name": str(name),
            "start_ts": start,
            "duration_ns": dur if dur is not None else 0,
            "flow_id": flows,
            "trace_event_source": _legacy_source(ev),
        }
        if "id" not in ev:
            row["id"] = i
        for k in _LEGACY_COLUMNS:
            if k in ev and k != "trace_event_source":
                row[k] = str(ev.pop(k))
        ev.pop("trace_event_source", None)
        row["extra_attributes_json"] = orjson.dumps(ev, default=_json_default).decode()
        rows.append(row)
    schema = {
        "id": pl.String(),
        "name": pl.String(),
        "start_ts": pl.Int64(),
        "duration_ns": pl.Int64(),
        "flow_id": pl.List(pl.String),
        "trace_event_source": pl.String(),
        **{k: pl.String() for k in _LEGACY_COLUMNS},
        "extra_attributes_json": pl.String(),
    }
    df = pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)
    return _normalise_system(df, path)


def legacy_warnings(path: Path) -> list[str]:
    """The ``warnings`` strings of a ``system_profile.json`` (§3.3)."""
    doc = read_json(path)
    if not isinstance(doc, dict):
        return []
    out = []
    for w in doc.get("warnings") or []:
        if isinstance(w, str):
            out.append(w)
        elif isinstance(w, dict):
            out.append(str(w.get("message") or w.get("msg") or orjson.dumps(w).decode()))
    return out


# ----------------------------------------------------------------------------- schema version


def read_schema_version(dirs: Sequence[ProfileDir]) -> tuple[str, Path] | None:
    """The first ``profile_schema_version`` found in the ``Metadata`` / ``SystemProfileMetadata`` /
    ``SchemaFields`` tables of ``dirs`` (§3.2), with the file it came from."""
    names = next(c for c in TABLES["Metadata"] if c.name == "profile_schema_version")
    for d in dirs:
        for table in ("Metadata", "SystemProfileMetadata", "SchemaFields"):
            for f in d.files(table):
                df = read_parquet([f])
                for col in (names.name, *names.aliases):
                    if col in df.columns:
                        vals = df.get_column(col).drop_nulls()
                        if len(vals):
                            return str(vals[0]), f
    return None


def read_schema_fields(dirs: Sequence[ProfileDir]) -> dict[str, dict[str, str]]:
    """What the ``SchemaFields`` tables of ``dirs`` say of each table's fields (the first entry
    for a (table, field) wins); empty when Explorer wrote none."""
    out: dict[str, dict[str, str]] = {}
    for d in dirs:
        files = d.files(SCHEMA_FIELDS_TABLE)
        if files:
            for table, fields in schema_fields_of(read_parquet(files)).items():
                for name, text in fields.items():
                    out.setdefault(table, {}).setdefault(name, text)
    return out


def check_schema_version(version: str, path: Path) -> str | None:
    """Return a message when ``version``'s MAJOR is not one this parser knows (semver, §3.2)."""
    major = version.strip().split(".")[0]
    if not major.isdigit():
        return f"{path}: profile_schema_version {version!r} is not semver"
    if int(major) not in KNOWN_SCHEMA_MAJORS:
        known = ", ".join(str(m) for m in sorted(KNOWN_SCHEMA_MAJORS))
        return (
            f"{path}: profile_schema_version {version} has unknown major {major} "
            f"(known: {known}); its tables are read by the columns they have, and "
            f"`{SCHEMA_COMMAND}` prints the names that Explorer writes"
        )
    return None


# ----------------------------------------------------------------------------- dropped events


def dropped_event_warnings(
    events: pl.DataFrame,
    legacy_json: Sequence[Path] = (),
    dirs: Sequence[ProfileDir] = (),
    max_events_per_nc: int = DEFAULT_MAX_EVENTS_PER_NC,
) -> list[str]:
    """Signs that the per-core ring buffer overflowed and the oldest events were overwritten.

    Documented signs (§2.5, §3.3): the warning "System profile events were dropped due to full
    ring buffer" in the legacy JSON ``warnings``; a ``Warning`` table in the Parquet output is
    scanned for the same text [INF]. As a heuristic [INF], a core holding at least
    ``max_events_per_nc`` events is flagged too.
    """
    out: list[str] = []
    for p in legacy_json:
        out += [f"{p}: {w}" for w in legacy_warnings(p) if DROPPED_RE.search(w)]
    for d in dirs:
        for f in d.files("Warning"):
            df = read_parquet([f])
            for col, dt in df.schema.items():
                if dt == pl.String:
                    for v in df.get_column(col).drop_nulls().unique().sort():
                        if DROPPED_RE.search(v):
                            out.append(f"{f}: {v}")
    if events.height:
        counts = (
            events.filter(pl.col("nc_idx").is_not_null())
            .group_by("process_id", "nc_idx")
            .len()
            .filter(pl.col("len") >= max_events_per_nc)
            .sort("process_id", "nc_idx")
        )
        for pid, nc, n in counts.iter_rows():
            out.append(
                f"process {pid} NC {nc}: {n} events reach the ring-buffer size "
                f"({max_events_per_nc}); older events were probably overwritten"
            )
    return out

"""What a capture holds and how each part of it was read: the document of ``nprof-report inspect``.

A person who runs ``build`` on a capture nobody here has seen needs to know, before trusting the
numbers, what the reader found: how many events of which category, how the device activities
were linked to ops (and by which rule), how much device time stayed unlinked, and for a Neuron
profile which Explorer schema it was, which columns were read under another name and why, what
the ``privateuse1_driver`` rows were taken for and how far the link chain got. Every part is
computed by the same code ``build`` uses (the derived frames, :mod:`.neuron`), never by a second
reader, so what ``inspect`` says is what the report was built from.

The document's keys are a versioned interface (:data:`INSPECT_VERSION`, ``docs/inspect.md``).
``incomplete`` lists what makes the report's numbers incomplete; the CLI exits 1 when it is not
empty.
"""

from __future__ import annotations

import json
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from nprof_report.errors import InputError
from nprof_report.parse.frames import load_frames
from nprof_report.parse.inputs import Inputs, Source, resolve
from nprof_report.parse.neuron import (
    NeuronLinks,
    correlate,
    device_time_rows,
    load_session,
    neuron_figures,
)
from nprof_report.parse.neuron.columns import (
    KNOWN_SCHEMA_MAJORS,
    SCHEMA_FIELDS_TABLE,
    TABLES,
    find_schema_dump,
    plan,
    read_schema_dump,
    schema_major,
)
from nprof_report.parse.neuron.crosscheck import cross_check
from nprof_report.parse.neuron.files import (
    CAPTURE_RECORD_NAMES,
    CAPTURE_SEARCH_LEVELS,
    NeuronSession,
    find_sessions,
)
from nprof_report.parse.neuron.link import driver_events
from nprof_report.parse.neuron.load import read_schema_fields, read_schema_version
from nprof_report.parse.read.source import open_trace
from nprof_report.parse.schema import TraceFrames
from nprof_report.parse.sources import neuron_root
from nprof_report.parse.steps import PROFILER_STEP, describe

INSPECT_VERSION = "1.0"
# unlinked device time above this share of all device time makes the report's op figures incomplete
UNLINKED_LIMIT_PCT = 1.0
# the whole file is decoded for its top-level keys only up to this size (a second copy in memory)
TOP_LEVEL_LIMIT = 256 << 20
PHASES = {"X": "complete", "i": "instant", "I": "instant", "s": "flow", "f": "flow", "t": "flow"}
PHASES |= {"M": "metadata", "C": "counter", "B": "begin", "E": "end", "b": "async", "e": "async"}


@dataclass(frozen=True)
class Inspection:
    """The document (JSON-ready) and whether the report's numbers would be incomplete."""

    document: dict[str, Any]

    @property
    def incomplete(self) -> list[str]:
        """Every source's reasons for exit 1, in order."""
        return [r for s in self.document["sources"] for r in s["incomplete"]]


def inspect_path(path: Path) -> Inspection:
    """Inspect anything ``build`` accepts (a run, a bundle, a Neuron tree, a trace file).

    Raises:
        InputError: bad input (the CLI's exit code 2).
    """
    inputs = resolve(path)
    return inspection_of(path, inputs, [inspect_source(s) for s in inputs.sources])


def inspection_of(path: Path, inputs: Inputs, sources: list[dict[str, Any]]) -> Inspection:
    """The document of ``path`` from its sources' parts."""
    m = inputs.manifest
    doc = {
        "inspect_version": INSPECT_VERSION,
        "path": str(path),
        "run": None
        if m is None
        else {
            "backend": m.backend,
            "device": m.device,
            "tool_version": m.tool_version,
            "versions": dict(sorted(m.versions.items())),
        },
        "notes": list(inputs.notes),
        "sources": sources,
        "complete": not any(s["incomplete"] for s in sources),
    }
    return Inspection(doc)


def inspect_source(source: Source) -> dict[str, Any]:
    """One source: its trace (``trace`` null when it has none) and its Neuron sessions."""
    return inspect_frames(source)[0]


def inspect_frames(source: Source) -> tuple[dict[str, Any], TraceFrames | None]:
    """:func:`inspect_source`'s document, and the frames it was made from (None without a
    trace)."""
    out: dict[str, Any] = {"label": source.label, "trace": None, "neuron": []}
    warnings: list[str] = []
    incomplete: list[str] = []
    frames = None
    if source.trace is not None:
        frames = load_frames(source.trace)
        out["trace"] = trace_part(source.trace, frames, warnings, incomplete)
    root = neuron_root(source)
    sessions = find_sessions(root) if root is not None else []
    if frames is not None and frames.events is not None and len(sessions) > 1:
        pids = set(frames.events["pid"].drop_nulls().unique().cast(pl.String).to_list())
        mine = [s for s in sessions if s.process_id is not None and str(s.process_id) in pids]
        sessions = mine or sessions
    out["neuron"] = [neuron_part(s, frames, warnings, incomplete) for s in sessions]
    out["device_time_source"] = device_time_source(out)
    out["warnings"] = warnings
    out["incomplete"] = incomplete
    return out, frames


def device_time_source(part: dict[str, Any]) -> str:
    """Where the ops' device time comes from, as ``build`` decides it (``LoadedSource``):
    ``privateuse1_driver`` rows read as executions, else the Neuron system trace through the
    link chain, else trace.json's device activities; ``none`` when there is none."""
    trace = part["trace"]
    if trace is not None and trace["privateuse1_driver"]["meaning"] == "device":
        return "trace.json privateuse1_driver rows (device executions)"
    if any(n["chain"] and n["chain"]["driver_linked_to_neuron_rt"] for n in part["neuron"]):
        return "Neuron system trace (nc_exec_running, linked through nrt_sequence_id)"
    if trace is not None and trace["device_activities"]["total"]:
        return "trace.json device activities"
    return "none"


# ----------------------------------------------------------------------------- the trace


def file_facts(path: Path) -> dict[str, Any]:
    """Size, gzip, the top-level JSON type and its keys other than ``traceEvents`` (``None``, and
    ``valid_json`` None, for a file above :data:`TOP_LEVEL_LIMIT` decompressed: decoding it whole
    a second time would hold it twice in memory)."""
    with open_trace(path) as f:
        size, gz = f.size, f.gzip
        decoded = f.stated_size() <= TOP_LEVEL_LIMIT
        data = f.read_all() if decoded else _head(f.raw.read(1 << 16), gz)
    top: Any = None
    if decoded and data:
        try:
            top = orjson.loads(data)
        except orjson.JSONDecodeError:
            top = None
    head = data.lstrip(b" \t\r\n\xef\xbb\xbf")[:1]
    kind = {b"{": "object", b"[": "array"}.get(head, "unknown")
    keys = {k: v for k, v in top.items() if k != "traceEvents"} if isinstance(top, dict) else {}
    return {
        "size_bytes": size,
        "gzip": gz,
        "top_level": kind,
        "valid_json": (top is not None) if decoded else None,
        "top_level_keys": ({k: type_name(v) for k, v in sorted(keys.items())} if decoded else None),
        "versions": {
            k: v
            for k, v in sorted(keys.items())
            if "version" in k.lower() and isinstance(v, (int, float, str))
        },
    }


def _head(chunk: bytes, gz: bool) -> bytes:
    """The first decompressed bytes of a file whose first bytes are ``chunk``."""
    if not gz:
        return chunk
    try:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(chunk, 1 << 10)
    except zlib.error:
        return b""


def type_name(value: Any) -> str:
    """A JSON value's type in one word (``int``, ``float``, ``str``, ``bool``, ``null``, ``list``,
    ``object``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    return "list" if isinstance(value, list) else "object"


def _linked_by(frames: TraceFrames) -> dict[str, int]:
    """How each linked device activity found its op, counted by method."""
    links = frames.links
    to_op = links.filter(pl.col("kind") == "op->device").select(
        pl.col("dst_id").alias("event_id"), pl.col("method").alias("_op")
    )
    rt = (
        links.filter(pl.col("kind") == "runtime->device")
        .unique("dst_id", keep="first", maintain_order=True)
        .select(pl.col("dst_id").alias("event_id"), pl.col("method").alias("_rt"))
    )
    dev = (
        frames.device.select("event_id", pl.col("cat").cast(pl.String))
        .join(to_op, on="event_id")
        .join(rt, on="event_id", how="left")
        .select("cat", "_op", "_rt")
    )
    words = {"correlation": "correlation", "flow": "ac2g flow"}
    counts: Counter[str] = Counter()
    for cat, op, rtm in dev.iter_rows():
        if op == "external_id":
            counts[
                "GPU annotation (External id)" if cat == "gpu_user_annotation" else "External id"
            ] += 1
        else:
            counts[f"enclosure + {words.get(rtm, rtm or 'no runtime link')}"] += 1
    return dict(sorted(counts.items()))


def trace_part(
    path: Path, frames: TraceFrames, warnings: list[str], incomplete: list[str]
) -> dict[str, Any]:
    """The trace's facts (module docstring); fills ``warnings`` and ``incomplete``."""
    meta = frames.meta
    events = frames.events if frames.events is not None else pl.DataFrame()
    facts = file_facts(path)
    if facts["valid_json"] is False and facts["top_level"] != "unknown":
        warnings.append(
            f"{path.name}: the file is not valid JSON as a whole; the events were recovered "
            "as build recovers them (see the notes)"
        )
    start = events["ts_ns"].min() if events.height else None
    end = (events["ts_ns"] + events["dur_ns"].fill_null(0)).max() if events.height else None
    span = (
        (int(end) - int(start)) / 1000 if isinstance(start, int) and isinstance(end, int) else None
    )
    phases = Counter(PHASES.get(p, "other") for p in events["ph"].cast(pl.String).to_list())
    complete = events.filter(pl.col("ph") == "X")
    by_cat = (
        complete.group_by(pl.col("cat").cast(pl.String).fill_null("(none)"))
        .len()
        .sort("cat")
        .iter_rows()
    )
    device = frames.device
    linked_ids = frames.links.filter(pl.col("kind") == "op->device")["dst_id"].unique()
    is_linked = pl.col("event_id").is_in(linked_ids.implode())
    linked = device.filter(is_linked)
    total_ns = int(device["dur_ns"].sum() or 0)
    linked_ns = int(linked["dur_ns"].sum() or 0)
    unlinked_ns = total_ns - linked_ns
    unlinked_pct = 100.0 * unlinked_ns / total_ns if total_ns else 0.0
    if unlinked_pct > UNLINKED_LIMIT_PCT:
        incomplete.append(
            f"{path.name}: {unlinked_pct:.1f} % of device time ({unlinked_ns / 1000:.3f} µs) "
            f"is linked to no op (limit {UNLINKED_LIMIT_PCT:g} %): the ops' device time is low"
        )
    dist = meta.distributed_info or {}
    steps = frames.steps
    warnings.extend(frames.notes)
    driver = frames.facts.get("privateuse1_driver", {"meaning": "none", "rows": 0, "evidence": ""})
    return {
        "file": {
            "path": str(path),
            **facts,
            "schemaVersion": meta.schema_version,
            "timestamp_convention": meta.timestamp_convention,
            "base_time_ns": meta.base_time_ns,
            "span_us": span,
        },
        "events": {"total": events.height, **dict(sorted(phases.items()))},
        "events_by_category": dict(by_cat),
        # the rule that found them (steps.py): ProfilerStep#N, annotation:<name> or window
        "steps": {
            "count": steps.height,
            "rule": "ProfilerStep#N" if frames.step_rule == PROFILER_STEP else frames.step_rule,
            "rule_detail": describe(frames.step_rule),
        },
        "device_activities": {
            "total": device.height,
            "linked": linked.height,
            "unlinked": device.height - linked.height,
            "by_category": dict(
                device.group_by(pl.col("cat").cast(pl.String)).len().sort("cat").iter_rows()
            ),
            "linked_by": _linked_by(frames),
        },
        "device_time_us": {
            "total": total_ns / 1000,
            "linked": linked_ns / 1000,
            "unlinked_pct": round(unlinked_pct, 3),
            "unlinked_limit_pct": UNLINKED_LIMIT_PCT,
        },
        "partial_overlaps": int(frames.facts.get("partial_overlaps", 0)),
        "distributed": {
            "rank": dist.get("rank"),
            "world_size": dist.get("world_size"),
            "backend": dist.get("backend"),
        },
        "device_properties": [
            {k: p.get(k) for k in ("id", "name", "computeMajor", "computeMinor", "totalGlobalMem")}
            for p in meta.device_properties
        ],
        "privateuse1_driver": dict(driver),
    }


# ----------------------------------------------------------------------------- Neuron


def capture_record(session_dir: Path) -> dict[str, Any]:
    """The nearest ``neuron-capture.json`` (or run manifest) above the session, or {}."""
    for d in (session_dir, *session_dir.parents[:CAPTURE_SEARCH_LEVELS]):
        for name in CAPTURE_RECORD_NAMES:
            try:
                doc = json.loads((d / name).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(doc, dict):
                return doc
    return {}


def tables_part(session: NeuronSession) -> tuple[dict[str, Any], list[str]]:
    """Per Explorer table: rows, files, and how each column was read; with the required
    columns found under no name (``table.column``)."""
    dirs = (*session.system_profile_dirs, *session.device_profile_dirs)
    described = read_schema_fields(dirs)
    dump_path = find_schema_dump(session.path)
    dump = read_schema_dump(dump_path) if dump_path is not None else None
    files: dict[str, list[Path]] = {}
    for d in dirs:
        for table, paths in d.tables:
            files.setdefault(table, []).extend(paths)
    out: dict[str, Any] = {}
    required: list[str] = []
    for table, found_files in sorted(files.items()):
        present: list[str] = []
        rows = 0
        for p in found_files:
            try:
                names = pl.read_parquet_schema(p)
                rows += pl.scan_parquet(p).select(pl.len()).collect().item()
            except Exception as exc:
                raise InputError(p, f"is not a readable Parquet file ({exc})") from exc
            present += [n for n in names if n not in present]
        entry: dict[str, Any] = {"rows": rows, "files": len(found_files), "columns": len(present)}
        if table in TABLES:
            found = plan(present, table, schema_fields=described, dump=dump)
            entry |= {
                "read_as_named": list(found.own),
                "read_renamed": [
                    {"column": c, "read_from": n, "via": v} for c, n, v in found.renamed
                ],
                "missing": list(found.missing),
                "required_missing": list(found.required_missing),
            }
            required += [f"{table}.{c}" for c in found.required_missing]
        out[table] = entry
    return out, required


def neuron_part(
    session: NeuronSession,
    frames: TraceFrames | None,
    warnings: list[str],
    incomplete: list[str],
) -> dict[str, Any]:
    """One Neuron session: schema, tables, driver rows, clock offset, link chain, capture
    settings, and what a complete report still needs."""
    dirs = (*session.system_profile_dirs, *session.device_profile_dirs)
    found = read_schema_version(dirs)
    version = found[0] if found is not None else None
    major = schema_major(version)
    tables, required = tables_part(session)
    where = session.path
    if version is not None and major not in KNOWN_SCHEMA_MAJORS:
        incomplete.append(
            f"{where}: Explorer schema {version} has a major ({major}) the column mapping does "
            f"not know (known: {', '.join(str(m) for m in sorted(KNOWN_SCHEMA_MAJORS))})"
        )
    if required:
        incomplete.append(f"{where}: required columns missing: {', '.join(required)}")
    has_system = session.has_processed
    missing: list[dict[str, Any]] = []
    if not has_system:
        command = f"neuron-explorer view -d {where} --output-format parquet"
        missing.append(
            {"what": "the system trace (SystemProfileEvents)", "command": command, "blocks": True}
        )
        incomplete.append(f"{where}: no system trace was converted; run `{command}`")
    if session.trace_json is None and frames is None:
        missing.append(
            {
                "what": "trace.json (framework ops)",
                "command": "capture with torch.profiler and NeuronConfig (nprof-report capture)",
                "blocks": False,
            }
        )
    record = capture_record(where)
    config = record.get("neuron_config") if isinstance(record.get("neuron_config"), dict) else {}
    part: dict[str, Any] = {
        "session": str(where),
        "explorer_schema_version": version,
        "schema_major_known": major in KNOWN_SCHEMA_MAJORS if major is not None else None,
        "schema_fields_table": SCHEMA_FIELDS_TABLE in tables,
        "schema_dump": str(find_schema_dump(where)) if find_schema_dump(where) else None,
        "tables": tables,
        "system_trace": has_system,
        "raw_files": {
            "ntrace.pb": session.pb("ntrace.pb") is not None,
            "trace_info.pb": session.pb("trace_info.pb") is not None,
            "neff": len(session.neffs),
            "ntff": len(session.ntffs),
        },
        "neuron_config": {
            "recorded": bool(config),
            "passed": sorted(config.get("passed", {})) if isinstance(config, dict) else [],
            "dropped": list(config.get("dropped", [])) if isinstance(config, dict) else [],
        },
        "clock_offset_us": None,
        "chain": None,
        "missing_for_complete_report": missing,
    }
    if required or not has_system:
        return part
    data = load_session(session)
    events = frames.events if frames is not None else None
    links = correlate(data, events)
    windows = (
        list(zip(frames.steps["start_ns"].to_list(), frames.steps["end_ns"].to_list()))
        if frames is not None
        else []
    )
    figures = neuron_figures(data, windows, events, links)
    warnings.extend(figures.warnings)
    drivers = driver_events(events) if events is not None and events.height else pl.DataFrame()
    execs = links.executions
    part["chain"] = {
        "driver_rows": drivers.height,
        "driver_linked_to_neuron_rt": links.driver_rt["event_id"].n_unique()
        if links.driver_rt.height
        else 0,
        "neuron_rt_linked_to_nc_exec_running": links.rt_hw.height,
        "executions": execs.height,
        "executions_linked_to_neff": links.exec_files.height,
    }
    offset, between = _clock_offset(frames, links, figures.clock.framework_offset_ns)
    part["clock_offset_us"] = offset
    part["clock_offset_between"] = between
    return part


def _clock_offset(
    frames: TraceFrames | None, links: NeuronLinks, framework_offset_ns: int | None
) -> tuple[float | None, str | None]:
    """trace.json minus the system trace, in µs, and what was compared."""
    driver = frames.facts.get("privateuse1_driver", {}) if frames is not None else {}
    if frames is not None and frames.events is not None and driver.get("meaning") == "device":
        rows = device_time_rows(frames.events, links).filter(pl.col("kind") == "op")
        check = cross_check(frames, rows, links.device_by_driver, links.executions)
        if check.offset_ns is not None:
            return check.offset_ns / 1000, (
                "trace.json privateuse1_driver executions minus the system trace's linked "
                "nc_exec_running (median start difference)"
            )
    if framework_offset_ns is not None:
        return -framework_offset_ns / 1000, (
            "trace.json events minus Explorer's framework copies of them (median start difference)"
        )
    return None, None

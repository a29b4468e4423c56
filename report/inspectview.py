"""``nprof-report inspect``: the inspection document (:mod:`nprof_report.parse`) as JSON or as a
checklist a person reads in ten seconds, and the fingerprint written to a file.

Each checklist line is ``[ok]`` (as expected), ``[..]`` (worth knowing, the numbers stand) or
``[!!]`` (the report's numbers are incomplete: the command exits 1).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import orjson

from nprof_report.errors import InputError
from nprof_report.parse import inspect_and_fingerprint, inspect_path

OK, NOTE, BAD = "[ok]", "[..]", "[!!]"
WARNINGS_SHOWN = 8  # per source in the checklist; --format json has them all


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _counts(mapping: dict[str, int], limit: int = 6) -> str:
    items = sorted(mapping.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{k} {v}" for k, v in items[:limit])
    return shown + (f", +{len(items) - limit} more" if len(items) > limit else "")


def _trace_lines(t: dict[str, Any]) -> list[tuple[str, str, str]]:
    f = t["file"]
    span = f"{f['span_us'] / 1e3:.3f} ms" if f["span_us"] is not None else "no events"
    ev = t["events"]
    others = ", ".join(f"{ev[k]} {k}" for k in sorted(ev) if k not in ("total", "complete"))
    dev = t["device_activities"]
    dt = t["device_time_us"]
    steps = t["steps"]
    dist = {k: v for k, v in t["distributed"].items() if v is not None}
    drv = t["privateuse1_driver"]
    lines = [
        (
            NOTE if f["valid_json"] is False else OK,
            "file",
            f"{_size(f['size_bytes'])}{' gzip' if f['gzip'] else ''}, JSON {f['top_level']}, "
            f"schemaVersion {f['schemaVersion']}, {f['timestamp_convention']} timestamps, "
            f"span {span}",
        ),
        (
            OK,
            "events",
            f"{ev.get('complete', 0)} complete ({_counts(t['events_by_category'])})"
            + (f"; {others}" if others else ""),
        ),
        (
            OK if steps["count"] and steps["rule"] != "window" else NOTE,
            "steps",
            f"{steps['count']} by rule {steps['rule']}"
            + ("" if steps["rule"] == "ProfilerStep#N" else f" ({steps['rule_detail']})"),
        ),
        (
            OK if not t["partial_overlaps"] else NOTE,
            "overlaps",
            f"{t['partial_overlaps']} events partially overlap another on their thread",
        ),
    ]
    if dev["total"]:  # a CPU-only trace has none: its "device time from" line says so
        lines[3:3] = [
            (
                OK if not dev["unlinked"] else NOTE,
                "device",
                f"{dev['total']} activities, {dev['linked']} linked to an op"
                + (f" ({_counts(dev['linked_by'])})" if dev["linked_by"] else "")
                + f", {dev['unlinked']} unlinked",
            ),
            (
                BAD if dt["unlinked_pct"] > dt["unlinked_limit_pct"] else OK,
                "device time",
                f"{dt['total']:.3f} µs, {dt['linked']:.3f} µs linked, {dt['unlinked_pct']:.3f} % "
                f"unlinked (limit {dt['unlinked_limit_pct']:g} %)",
            ),
        ]
    if dist:
        lines.append((OK, "distributed", ", ".join(f"{k} {v}" for k, v in dist.items())))
    if t["device_properties"]:
        names = sorted({str(p["name"]) for p in t["device_properties"] if p.get("name")})
        lines.append(
            (OK, "devices", f"{len(t['device_properties'])}: {', '.join(names) or 'not named'}")
        )
    if drv["meaning"] != "none":
        lines.append(
            (OK, "driver rows", f"{drv['rows']} read as {drv['meaning']}: {drv['evidence']}")
        )
    return lines


def _neuron_lines(n: dict[str, Any]) -> list[tuple[str, str, str]]:
    known = n["schema_major_known"]
    lines = [
        (OK, "session", n["session"]),
        (
            OK if known else (NOTE if known is None else BAD),
            "schema",
            f"Explorer {n['explorer_schema_version'] or 'version not recorded'}"
            + ("" if known is None else (" (major known)" if known else " (major NOT known)"))
            + ("; SchemaFields table present" if n["schema_fields_table"] else "")
            + (f"; schema dump {n['schema_dump']}" if n["schema_dump"] else ""),
        ),
    ]
    for table, e in n["tables"].items():
        if "read_renamed" not in e:
            continue
        renamed = "; ".join(
            f"{r['column']} <- {r['read_from']} ({r['via']})" for r in e["read_renamed"]
        )
        mark = BAD if e["required_missing"] else (NOTE if e["read_renamed"] else OK)
        detail = (
            f"{e['rows']} rows in {e['files']} files, {len(e['read_as_named'])} columns by name"
        )
        if renamed:
            detail += f", renamed: {renamed}"
        if e["missing"]:
            detail += f", missing: {', '.join(e['missing'])}"
        if e["required_missing"]:
            detail += f" (required: {', '.join(e['required_missing'])})"
        lines.append((mark, table, detail))
    lines.append(
        (
            OK if n["system_trace"] else BAD,
            "system trace",
            "converted" if n["system_trace"] else "not converted",
        )
    )
    if n["clock_offset_us"] is not None:
        lines.append(
            (OK, "clock offset", f"{n['clock_offset_us']:.3f} µs ({n['clock_offset_between']})")
        )
    c = n["chain"]
    if c is not None:
        lines.append(
            (
                OK if c["driver_rows"] == c["driver_linked_to_neuron_rt"] else NOTE,
                "link chain",
                f"driver {c['driver_rows']} -> neuron_rt {c['driver_linked_to_neuron_rt']} -> "
                f"nc_exec_running {c['neuron_rt_linked_to_nc_exec_running']} links -> "
                f"executions {c['executions']} -> NEFF {c['executions_linked_to_neff']}",
            )
        )
    cfg = n["neuron_config"]
    lines.append(
        (
            OK if cfg["recorded"] and not cfg["dropped"] else NOTE,
            "NeuronConfig",
            (
                f"passed {', '.join(cfg['passed']) or 'nothing'}"
                + (f"; dropped {'; '.join(cfg['dropped'])}" if cfg["dropped"] else "")
            )
            if cfg["recorded"]
            else "not recorded (no neuron-capture.json)",
        )
    )
    for m in n["missing_for_complete_report"]:
        lines.append((BAD if m["blocks"] else NOTE, "missing", f"{m['what']}: {m['command']}"))
    return lines


def checklist(doc: dict[str, Any]) -> str:
    """The document as the checklist (module docstring)."""
    out = [f"nprof-report inspect {doc['path']} (inspect {doc['inspect_version']})"]
    run = doc["run"]
    if run is not None:
        versions = ", ".join(f"{k} {v}" for k, v in run["versions"].items() if v)
        out.append(f"run: {run['backend']} on {run['device']}; {versions}")
    for s in doc["sources"]:
        out.append(f"\n== {s['label']}")
        rows = _trace_lines(s["trace"]) if s["trace"] is not None else []
        source = s["device_time_source"]
        rows.append((NOTE if source == "none" else OK, "device time from", source))
        for n in s["neuron"]:
            rows += _neuron_lines(n)
        width = max((len(r[1]) for r in rows), default=0)
        out += [f"  {mark} {what.ljust(width)}  {text}" for mark, what, text in rows]
        if s["warnings"]:
            shown = s["warnings"][:WARNINGS_SHOWN]
            out.append("  warnings:")
            out += [f"    - {w}" for w in shown]
            if len(s["warnings"]) > len(shown):
                out.append(f"    ({len(s['warnings']) - len(shown)} more: --format json)")
    for note in doc["notes"]:
        out.append(f"note: {note}")
    reasons = [r for s in doc["sources"] for r in s["incomplete"]]
    if reasons:
        out.append("\nINCOMPLETE: the report's numbers would be incomplete (exit 1):")
        out += [f"  - {r}" for r in reasons]
    else:
        out.append("\ncomplete: nothing makes the report's numbers incomplete (exit 0)")
    return "\n".join(out)


def run_inspect(path: Path, *, fmt: str, fingerprint: Path | None) -> tuple[str, bool]:
    """``(text to print, complete)``; writes the fingerprint (atomically) when asked."""
    if fingerprint is None:
        inspection = inspect_path(path)
    else:
        inspection, shape = inspect_and_fingerprint(path)
        write_json(fingerprint, shape)
    doc = inspection.document
    text = (
        orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()
        if fmt == "json"
        else checklist(doc)
    )
    return text, not inspection.incomplete


def write_json(path: Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` to ``path`` through a temporary file in the same folder."""
    folder = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
    except OSError as exc:
        raise InputError(path, f"cannot be written ({exc.strerror or exc})") from exc
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

"""Neuron side of the parse stage: sessions, loaders, correlation, figures (formats.md §2-§5).

Entry points for the CLI and the report:

* :func:`find_sessions` -- Neuron sessions under a folder (:mod:`.files`).
* :func:`load_session` -- one session's processed tables as frames (:class:`NeuronData`).
* :func:`correlate` -- the §4 link chain for one session (:class:`NeuronLinks`).
* :func:`neuron_device_time_by_event` -- device ns per Kineto driver event and framework op,
  to join onto the ops table.
* :func:`neuron_figures` -- per-step figures, device-summary figures, clock check, warnings.

Only ``neuron-explorer view`` outputs are read; the binary captures are never parsed (§3, §7.4).
Everything that §7 leaves unconfirmed degrades to a warning string, never an exception; unreadable
or invalid files raise :class:`~nprof_report.errors.InputError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from nprof_report.parse.neuron.columns import find_schema_dump, read_schema_dump
from nprof_report.parse.neuron.crosscheck import CrossCheck
from nprof_report.parse.neuron.device import (
    DEVICE_EXECUTION_INFO,
    DEVICE_INSTRUCTION,
    DEVICE_SUMMARY,
    FRAMEWORK_MAPPING,
    load_device_profile_dir,
    load_device_profile_json,
    load_framework_mapping,
)
from nprof_report.parse.neuron.figures import (
    DeviceSummaryFigures,
    StepFigures,
    device_summary_figures,
    step_figures,
    step_warnings,
)
from nprof_report.parse.neuron.files import (
    NeffFile,
    NeuronSession,
    NtffFile,
    ProfileDir,
    device_profile_warmup,
    find_sessions,
)
from nprof_report.parse.neuron.link import (
    DRIVER_RT_LINKS,
    EXEC_FILES,
    EXECUTIONS,
    RT_HW_LINKS,
    ClockAlignment,
    clock_alignment,
    device_time_by_driver_event,
    driver_events,
    link_driver_to_runtime,
    link_executions_to_files,
    link_runtime_to_hw,
    merge_executions,
    mixed_flow_warnings,
)
from nprof_report.parse.neuron.load import (
    SYSTEM_EVENTS,
    check_schema_version,
    conform,
    dropped_event_warnings,
    load_system_events_parquet,
    load_system_profile_json,
    read_schema_fields,
    read_schema_version,
)

__all__ = [
    "DEVICE_EXECUTION_INFO",
    "DEVICE_INSTRUCTION",
    "DEVICE_SUMMARY",
    "DEVICE_TIME",
    "DRIVER_RT_LINKS",
    "EXECUTIONS",
    "EXEC_FILES",
    "FRAMEWORK_MAPPING",
    "RT_HW_LINKS",
    "SYSTEM_EVENTS",
    "ClockAlignment",
    "DeviceSummaryFigures",
    "NeffFile",
    "NeuronData",
    "NeuronFigures",
    "NeuronLinks",
    "NeuronSession",
    "NtffFile",
    "ProfileDir",
    "StepFigures",
    "correlate",
    "device_time_rows",
    "find_sessions",
    "link_ops_via_framework_mapping",
    "load_session",
    "load_sessions",
    "neuron_device_time_by_event",
    "neuron_figures",
]

DEVICE_TIME = pl.Schema(
    {
        "event_id": pl.Int64(),  # Kineto EVENTS.event_id
        "kind": pl.String(),  # "driver" (privateuse1_driver event) or "op" (its cpu_op)
        "device_ns": pl.Int64(),
        "n_executions": pl.UInt32(),
        "method": pl.String(),
    }
)


@dataclass(frozen=True)
class NeuronData:
    """One session's processed tables.

    Attributes:
        session: the files found.
        events: SYSTEM_EVENTS (empty when the session was never converted).
        summary, instruction, execution_info: DEVICE_SUMMARY, DEVICE_INSTRUCTION,
            DEVICE_EXECUTION_INFO over all device profiles of the session.
        framework_mapping: FRAMEWORK_MAPPING (older torch-neuronx, §3.5).
        schema_version: ``profile_schema_version`` if a table carries it.
        warnings: schema, dropped-event and file-layout warnings.
    """

    session: NeuronSession
    events: pl.DataFrame
    summary: pl.DataFrame
    instruction: pl.DataFrame
    execution_info: pl.DataFrame
    framework_mapping: pl.DataFrame
    schema_version: str | None
    warnings: tuple[str, ...]


def load_session(session: NeuronSession) -> NeuronData:
    """Load a session's processed outputs (Parquet preferred, legacy JSON otherwise).

    Explorer tables are read by the columns they have (:mod:`.columns`): an unknown
    ``profile_schema_version`` major is a warning; Explorer's own ``SchemaFields`` table, then the
    guessed aliases, then a schema dump saved beside the session (``neuron-profile-schema.yaml``,
    from capture) resolve renamed columns.

    Raises:
        InputError: unreadable or invalid file, or a table without a required column.
    """
    warnings = [f"{session.path}: {n}" for n in session.notes]
    all_dirs = (*session.system_profile_dirs, *session.device_profile_dirs)
    found = read_schema_version(all_dirs)
    version = None
    if found is not None:
        version, vpath = found
        msg = check_schema_version(version, vpath)
        if msg is not None:
            warnings.append(msg)
    dump_path = find_schema_dump(session.path)
    dump = read_schema_dump(dump_path) if dump_path is not None else None
    described = read_schema_fields(all_dirs)

    sys_parquet = [p for d in session.system_profile_dirs for p in d.files("SystemProfileEvents")]
    if sys_parquet:
        events = load_system_events_parquet(
            sys_parquet, version=version, dump=dump, schema_fields=described, notes=warnings
        )
    elif session.system_profile_json:
        events = pl.concat([load_system_profile_json(p) for p in session.system_profile_json])
    else:
        events = pl.DataFrame(schema=SYSTEM_EVENTS)
        if session.pb(name="ntrace.pb") is not None:
            warnings.append(
                f"{session.path}: ntrace.pb was not converted; run `neuron-explorer view -d "
                f"{session.path} --output-format parquet` on a machine with the Neuron tools"
            )
    warnings += dropped_event_warnings(
        events, session.system_profile_json, session.system_profile_dirs
    )

    known = [n.model_id for n in session.neffs] + [
        n.model_id for n in session.ntffs if n.model_id is not None
    ]
    frames = [
        load_device_profile_dir(
            d, known, version=version, dump=dump, schema_fields=described, notes=warnings
        )
        for d in session.device_profile_dirs
    ]
    frames += [load_device_profile_json(p, m) for m, p in session.device_profile_json]
    summary = pl.concat([f[0] for f in frames]) if frames else pl.DataFrame(schema=DEVICE_SUMMARY)
    instr = pl.concat([f[1] for f in frames]) if frames else pl.DataFrame(schema=DEVICE_INSTRUCTION)
    info = (
        pl.concat([f[2] for f in frames]) if frames else pl.DataFrame(schema=DEVICE_EXECUTION_INFO)
    )
    fmap = (
        pl.concat([load_framework_mapping(p) for p in session.framework_mappings])
        if session.framework_mappings
        else pl.DataFrame(schema=FRAMEWORK_MAPPING)
    )
    return NeuronData(
        session=session,
        events=events,
        summary=summary,
        instruction=instr,
        execution_info=info,
        framework_mapping=fmap,
        schema_version=version,
        warnings=tuple(warnings),
    )


def load_sessions(root: Path, *, kineto_events: pl.DataFrame | None = None) -> list[NeuronData]:
    """Load every session under ``root``.

    With ``kineto_events``, sessions whose ``<instance>_pid_<pid>`` folder names a process that
    appears in the Kineto trace are preferred (one trace.json belongs to one process); when none
    matches, all sessions are kept.
    """
    sessions = find_sessions(root)
    if kineto_events is not None and len(sessions) > 1:
        pids = set(kineto_events.get_column("pid").drop_nulls().unique().to_list())
        mine = [s for s in sessions if s.process_id is not None and str(s.process_id) in pids]
        sessions = mine or sessions
    return [load_session(s) for s in sessions]


@dataclass(frozen=True)
class NeuronLinks:
    """The §4 link chain of one session; each frame carries a ``method`` column.

    Attributes:
        driver_rt: DRIVER_RT_LINKS, link (a) (plus framework-mapping rows, §3.5).
        rt_hw: RT_HW_LINKS, link (b).
        executions: EXECUTIONS, link (c).
        exec_files: EXEC_FILES, link (d).
        device_by_driver: device ns per Kineto driver (or mapped op) event.
    """

    driver_rt: pl.DataFrame
    rt_hw: pl.DataFrame
    executions: pl.DataFrame
    exec_files: pl.DataFrame
    device_by_driver: pl.DataFrame


def link_ops_via_framework_mapping(
    kineto_events: pl.DataFrame, mapping: pl.DataFrame, sys_events: pl.DataFrame
) -> pl.DataFrame:
    """Older torch-neuronx (§3.5): ``cpu_op`` whose ``Sequence number`` equals a mapping's
    ``seq_nr`` -> runtime rows carrying its ``nrta_seq_id`` in ``flow_ids``.

    Returns DRIVER_RT_LINKS rows whose ``event_id`` is the cpu_op (method
    ``framework_mapping:seq_nr``). A backward op shares its forward op's sequence number, so
    only ops without a non-zero ``Fwd thread id`` (forward ops) are used.
    """
    if mapping.height == 0 or kineto_events.height == 0:
        return pl.DataFrame(schema=DRIVER_RT_LINKS)
    ops = kineto_events.filter((pl.col("cat") == "cpu_op") & (pl.col("ph") == "X")).select(
        "event_id",
        pl.col("args").str.json_path_match("$['Sequence number']").cast(pl.Int64).alias("seq_nr"),
        pl.col("args")
        .str.json_path_match("$['Fwd thread id']")
        .cast(pl.Int64)
        .fill_null(0)
        .alias("_fwd"),
    )
    ops = ops.filter(pl.col("seq_nr").is_not_null() & (pl.col("_fwd") == 0))
    rt = (
        sys_events.filter(pl.col("source") == "neuron_rt")
        .select(pl.col("event_id").alias("rt_id"), pl.col("name").alias("rt_name"), "flow_ids")
        .explode("flow_ids")
        .rename({"flow_ids": "nrt_sequence_id"})
    )
    j = (
        ops.join(mapping.select("seq_nr", "nrt_sequence_id").unique(), on="seq_nr")
        .join(rt, on="nrt_sequence_id")
        .with_columns(pl.lit("framework_mapping:seq_nr").alias("method"))
    )
    return conform(j, DRIVER_RT_LINKS).sort("event_id", "rt_id")


def correlate(data: NeuronData, kineto_events: pl.DataFrame | None = None) -> NeuronLinks:
    """Run links (a)-(d) for one session (see :mod:`.link`)."""
    ev = data.events
    k = kineto_events if kineto_events is not None else pl.DataFrame()
    drv_rt = link_driver_to_runtime(k, ev) if k.height else pl.DataFrame(schema=DRIVER_RT_LINKS)
    if k.height and data.framework_mapping.height:
        drv_rt = pl.concat([drv_rt, link_ops_via_framework_mapping(k, data.framework_mapping, ev)])
    rt_hw = link_runtime_to_hw(ev)
    executions = merge_executions(ev)
    files = link_executions_to_files(
        executions,
        [(n.model_id, str(n.path)) for n in data.session.neffs],
        [(n.model_id, str(n.path), n.is_session) for n in data.session.ntffs],
        data.summary,
        data.execution_info,
        device_profile_warmup(data.session.path),
    )
    return NeuronLinks(
        driver_rt=drv_rt,
        rt_hw=rt_hw,
        executions=executions,
        exec_files=files,
        device_by_driver=device_time_by_driver_event(drv_rt, rt_hw, executions),
    )


def device_time_rows(kineto_events: pl.DataFrame, links: NeuronLinks) -> pl.DataFrame:
    by = links.device_by_driver
    if by.height == 0:
        return pl.DataFrame(schema=DEVICE_TIME)
    drv = driver_events(kineto_events).select("event_id", "external_id")
    is_drv = pl.col("event_id").is_in(drv.get_column("event_id").implode())
    driver_rows = by.filter(is_drv).with_columns(pl.lit("driver").alias("kind"))
    # Framework-mapping rows already point at the op.
    mapped = by.filter(~is_drv).with_columns(pl.lit("op").alias("kind"))
    ops = kineto_events.filter((pl.col("cat") == "cpu_op") & (pl.col("ph") == "X")).select(
        pl.col("event_id").alias("op_id"), "external_id"
    )
    # Driver -> op: Kineto External id of the innermost enclosing cpu_op (§1.6, [INF] for Neuron).
    op_rows = (
        driver_rows.join(drv, on="event_id")
        .join(ops, on="external_id")
        .group_by("op_id")
        .agg(
            pl.col("device_ns").sum(),
            pl.col("n_executions").sum(),
            ("external_id>" + pl.col("method")).unique().sort().str.join("|").alias("method"),
        )
        .rename({"op_id": "event_id"})
        .with_columns(pl.lit("op").alias("kind"))
    )
    out = pl.concat(
        [conform(f, DEVICE_TIME) for f in (driver_rows, op_rows, mapped)], how="vertical"
    )
    return out.sort("kind", "event_id")


def neuron_device_time_by_event(events: pl.DataFrame, root: Path) -> pl.DataFrame:
    """Device time per Kineto event, for ``nprof-report ops`` on a Neuron tree.

    Args:
        events: the Kineto EVENTS frame of the trace.json (``parse/schema.py``).
        root: a folder holding the Neuron session(s) of that trace (any level, §2.5).

    Returns:
        DEVICE_TIME: ``event_id``, ``kind`` (``driver``: the privateuse1_driver event;
        ``op``: the cpu_op whose External id it carries, i.e. the op's *self* device time),
        ``device_ns`` (union of the per-pcore ``nc_exec_running`` spans of the executions it
        led to), ``n_executions``, ``method`` (link methods joined by ``>``). Events with no
        Neuron link are absent.
    """
    frames = []
    for data in load_sessions(root, kineto_events=events):
        frames.append(device_time_rows(events, correlate(data, events)))
    if not frames:
        return pl.DataFrame(schema=DEVICE_TIME)
    return (
        pl.concat(frames)
        .group_by("event_id", "kind")
        .agg(
            pl.col("device_ns").sum(),
            pl.col("n_executions").sum(),
            pl.col("method").unique().sort().str.join("|"),
        )
        .select(list(DEVICE_TIME))
        .sort("kind", "event_id")
    )


@dataclass(frozen=True)
class NeuronFigures:
    """What the report shows for a Neuron run.

    Attributes:
        steps: per step window, in the order given.
        device: Summary-based engine / MFU / MBU figures.
        clock: trace.json vs system trace, and sync-point check.
        warnings: every warning from loading, linking and the measurement checks.
        cross_check: when trace.json's privateuse1_driver rows are device executions, their
            per-op device time against the system trace's (:mod:`.crosscheck`); else None.
    """

    steps: tuple[StepFigures, ...]
    device: DeviceSummaryFigures
    clock: ClockAlignment
    warnings: tuple[str, ...]
    cross_check: CrossCheck | None = None


def neuron_figures(
    data: NeuronData,
    steps: Sequence[tuple[int, int]],
    kineto_events: pl.DataFrame | None = None,
    links: NeuronLinks | None = None,
) -> NeuronFigures:
    """Per-step Neuron figures plus warnings for one session.

    Args:
        data: from :func:`load_session`.
        steps: ``(start_ns, end_ns)`` per ProfilerStep (epoch ns, STEPS frame).
        kineto_events: the trace's EVENTS frame (clock check, compile warning, link (a)).
        links: reuse an earlier :func:`correlate` result.
    """
    k = kineto_events if kineto_events is not None else pl.DataFrame()
    links = links if links is not None else correlate(data, kineto_events)
    warnings = list(data.warnings)
    warnings += step_warnings(data.events, steps, kineto_events)
    warnings += mixed_flow_warnings(data.events)
    if data.events.height and data.summary.height == 0 and links.executions.height:
        warnings.append(
            f"{data.session.path}: no device profile (Summary) was found; "
            "engine and MFU figures are empty"
        )
    drv = driver_events(k) if k.height else None
    if drv is not None and drv.height and links.driver_rt.height == 0 and data.events.height:
        warnings.append(
            "no Kineto privateuse1_driver event could be linked to the Neuron runtime "
            "(no nrt_sequence_id arg and no framework rows matched); per-op device time is empty"
        )
    if k.height and data.events.height and drv is not None and drv.height == 0:
        warnings.append(
            "trace.json has no privateuse1_driver events; per-op Neuron device time is empty"
        )
    clock = (
        clock_alignment(k, data.events)
        if data.events.height
        else ClockAlignment(0, None, None, 0, 0, None)
    )
    return NeuronFigures(
        steps=tuple(step_figures(data.events, links.executions, links.rt_hw, steps)),
        device=device_summary_figures(data.summary, links.executions),
        clock=clock,
        warnings=tuple(warnings),
    )

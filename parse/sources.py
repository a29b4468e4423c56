"""Load one source: its Kineto frames plus, when the folder holds a Neuron profile, Neuron device time.

On TorchNeuron the Kineto trace may carry no device-typed activity at all (key_averages' NEURON
columns then stay empty, formats.md 1.10); the device time of each framework op comes from the
Neuron system trace instead, through the link chain in :mod:`.neuron`. ``neuron_device`` maps a
Kineto ``event_id`` (the op) to its device ns; ``device_source`` says where device time came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import polars as pl

from nprof_report.parse import cache
from nprof_report.parse.frames import load_frames
from nprof_report.parse.inputs import Source
from nprof_report.parse.neuron import (
    NeuronData,
    NeuronFigures,
    correlate,
    device_time_rows,
    find_sessions,
    load_sessions,
    neuron_figures,
)
from nprof_report.parse.neuron.crosscheck import cross_check
from nprof_report.parse.neuron.figures import LOADS
from nprof_report.parse.neuron.files import PROCESS_DIR_RE
from nprof_report.parse.privateuse1 import device_meaning
from nprof_report.parse.schema import TraceFrames
from nprof_report.parse.steps import with_steps


@dataclass(frozen=True)
class LoadedSource:
    """A source's frames and the device time attributed to its ops."""

    source: Source
    frames: TraceFrames
    neuron_device_ns: dict[int, int] = field(default_factory=dict)
    neuron: list[tuple[NeuronData, NeuronFigures]] = field(default_factory=list)
    neuron_busy: list[tuple[int, int]] = field(default_factory=list)
    neuron_loads: list[tuple[int, int]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def device_source(self) -> str:
        """Where device time comes from, in words for the report."""
        if self.neuron_device_ns:
            return "Neuron system trace (nc_exec_running spans linked through nrt_sequence_id)"
        if device_meaning(self.frames.device):
            return (
                "trace.json privateuse1_driver rows read as Neuron device executions "
                "(linked by External id / correlation); the system trace only cross-checks them"
            )
        if self.frames.device.height:
            return "device activities in trace.json (linked by External id / correlation)"
        return "none: the trace holds no device activity"


SESSION_MARKERS = (
    "ntrace.pb",
    "trace_info.pb",
    "*.neff",
    "*.ntff",
    "framework_mapping_*.json",
    "system_profile.json",
    "SystemProfileEvents*.parquet",
)


def neuron_root(source: Source) -> Path | None:
    """Where to look for this source's Neuron profile, or None.

    A bundle of a run is searched whole. A trace file given on its own is paired only with a
    Neuron session in its own folder (``trace.json`` sits beside ``ntrace.pb``, formats.md 2.5),
    never with whatever else lies below that folder, except in an ``<instance-id>_pid_<pid>/``
    folder, whose ``<timestamp>/`` sessions are that process's (§9.6).
    """
    if source.implementation is not None:
        return source.folder
    if source.trace is None:
        return source.folder
    folder = source.trace.parent
    if any(next(folder.glob(pattern), None) for pattern in SESSION_MARKERS):
        return folder
    if PROCESS_DIR_RE.match(folder.name):  # a rank's trace above its <timestamp>/ sessions
        return folder
    return None


def needs_all_events(source: Source) -> bool:
    """Whether ``source`` has a Neuron profile: only the Neuron link reads every event and args."""
    root = neuron_root(source)
    return root is not None and bool(find_sessions(root))


def load_source(
    source: Source, *, use_cache: bool = True, step_annotation: str | None = None
) -> LoadedSource:
    """Parse ``source`` (or read its frames from :mod:`.cache`); add Neuron device time when its
    folder holds Neuron sessions. ``step_annotation``: the user annotation whose instances are
    the steps (:mod:`.steps`), instead of the rule that applies; the cache keeps the frames of
    that rule, and the steps are found again from them."""
    if source.trace is None:
        raise ValueError("a source without trace.json has no framework ops")
    root = neuron_root(source)
    has_neuron = needs_all_events(source)
    if cache.enabled(use_cache):
        frames = cache.cached_frames(source, work_only=not has_neuron)
    else:
        frames = load_frames(source.trace, work_only=not has_neuron)
    if step_annotation is not None:
        frames = with_steps(frames, step_annotation)
    notes: list[str] = []
    if root is None or not has_neuron or frames.events is None:
        return LoadedSource(source, frames)  # (work_only=False always keeps the events)
    events = frames.events
    device: dict[int, int] = {}
    neuron: list[tuple[NeuronData, NeuronFigures]] = []
    busy: list[tuple[int, int]] = []
    loads: list[tuple[int, int]] = []
    windows = list(zip(frames.steps["start_ns"].to_list(), frames.steps["end_ns"].to_list()))
    # When trace.json's driver rows are device executions, the ops carry device time already:
    # the system trace cross-checks it and is not added (one execution is never counted twice).
    in_trace = device_meaning(frames.device)
    for data in load_sessions(root, kineto_events=events):
        notes.extend(f"{source.label}: {w}" for w in (*data.session.notes, *data.warnings))
        if data.events.is_empty():
            continue
        links = correlate(data, events)
        rows = device_time_rows(events, links).filter(pl.col("kind") == "op")
        check = None
        if in_trace:
            check = cross_check(frames, rows, links.device_by_driver, links.executions)
            notes.append(f"{source.label}: {check.note}")
        else:
            for eid, ns in zip(rows["event_id"].to_list(), rows["device_ns"].to_list()):
                device[eid] = device.get(eid, 0) + ns
        busy += list(
            zip(links.executions["start_ns"].to_list(), links.executions["end_ns"].to_list())
        )
        loaded = data.events.filter(pl.col("name").is_in(list(LOADS)))
        loads += list(zip(loaded["start_ns"].to_list(), loaded["end_ns"].to_list()))
        figures = replace(neuron_figures(data, windows, events, links), cross_check=check)
        notes.extend(f"{source.label}: {w}" for w in figures.warnings)
        neuron.append((data, figures))
    return LoadedSource(source, frames, device, neuron, busy, loads, notes)

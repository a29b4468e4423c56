"""A trace file's frames: its rows read (:mod:`.read`), then derived (:mod:`.derive`)."""

from __future__ import annotations

from pathlib import Path

from nprof_report.parse.derive import derive
from nprof_report.parse.read import read
from nprof_report.parse.read.source import changed, snapshot
from nprof_report.parse.schema import TraceFrames


def load_frames(path: Path, *, work_only: bool = False) -> TraceFrames:
    """Read a trace file (streaming, bounded memory) and derive its frames.

    ``work_only=True`` reads only the rows the other frames are made of, with several processes
    for a large file, and keeps no ``events`` (None; the other frames are identical): only the
    Neuron link reads every event and the raw args, so callers without a Neuron profile save
    that memory and time. A trace replaced or written to while it is read is an error.
    """
    before = snapshot(path)
    rows = read(path, keep_events=not work_only)
    if snapshot(path) != before:  # the split workers reopen it by path: one version throughout
        raise changed(path)
    return derive(rows)

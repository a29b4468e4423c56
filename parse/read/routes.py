"""Which route reads a trace file: :func:`read`, the one function the rest of parse calls.

============  =================================================================================
keep_events   route
============  =================================================================================
True          :func:`~.stream.read_trace_stream`: every event and its ``args`` (the Neuron link
              reads them), in bounded memory; then :func:`~nprof_report.parse.parts.trace_rows`
False         :func:`~.split.read_work_parts`: the work rows only, by several processes for a
              large file (:mod:`.workerpool`), else by the streaming loader
============  =================================================================================

Both give what the reference loader (:func:`~.reference.read_trace`) gives, and hand it every
file that is not a clean trace, so that errors and recoveries are worded in one place.
"""

from __future__ import annotations

from pathlib import Path

from nprof_report.parse.parts import TraceRows, trace_rows
from nprof_report.parse.read.split import read_work_parts
from nprof_report.parse.read.stream import read_trace_stream


def read(path: Path, *, keep_events: bool = False) -> TraceRows:
    """The rows of the trace at ``path``; ``keep_events``: every event (``EVENTS``) too, else only
    the work rows, taken apart (``events`` None)."""
    if keep_events:
        return trace_rows(read_trace_stream(path))
    return read_work_parts(path)

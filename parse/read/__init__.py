"""Trace files into rows: everything that reads Kineto JSON, behind :func:`read`.

:func:`read` (:mod:`.routes`) picks the route. The reference loader (:mod:`.reference`) decodes a
whole document and words every error; the streaming loader (:mod:`.stream`) finds the events
array and cuts it into pieces, which :mod:`.columns` decodes (Polars' JSON readers where exact,
:mod:`.polars_json`; typed msgspec structs; else the per-event rules); :mod:`.split` has worker
processes (:mod:`.workerpool`) decode the blocks of a large file. Every route reads an event by
the rules of :mod:`.rows` and opens the file through :func:`~.source.open_trace`.

The names below are imported when first used: :mod:`.workerpool` is imported by the CLI before
anything heavy, and importing it runs this file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nprof_report.lazy import lazy_getattr

if TYPE_CHECKING:
    from nprof_report.parse.read.routes import read
    from nprof_report.parse.read.source import TraceFile, open_trace
    from nprof_report.parse.read.workerpool import DECODE_WORKERS_ENV, prestart

__all__ = ["DECODE_WORKERS_ENV", "TraceFile", "open_trace", "prestart", "read"]

_HOME = {
    "read": "routes",
    "TraceFile": "source",
    "open_trace": "source",
    "DECODE_WORKERS_ENV": "workerpool",
    "prestart": "workerpool",
}

__getattr__ = lazy_getattr(__name__, _HOME)

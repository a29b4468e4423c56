"""What ``diff`` and ``check`` take from parse, in one place.

Every parse import of the diff modules goes through here, so that a reorganised parse package
is followed by changing this module alone.
"""

from __future__ import annotations

from nprof_report.parse.inputs import resolve
from nprof_report.parse.kineto import TraceFrames
from nprof_report.parse.parallel import load_sources

__all__ = ["TraceFrames", "load_sources", "resolve"]

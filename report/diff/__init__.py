"""The diff wing: ``nprof-report diff`` and ``check``.

:mod:`.inputs` turns each side (captures, or a stored ``summary.json``/``diff.json``) into
summary records, :mod:`.compare` aligns and compares them (:mod:`.stats`: the bootstrap and the
between-runs interval; :mod:`.structure`: the work per step, counted), :mod:`.check` decides the
gate, :mod:`.render` writes the diff's files and :mod:`.command` runs the two commands.

Names are imported when first used, as parse's door does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nprof_report.lazy import lazy_getattr

if TYPE_CHECKING:
    from nprof_report.report.diff.check import parse_threshold
    from nprof_report.report.diff.command import check_regression, diff_report

__all__ = [
    "check_regression",
    "diff_report",
    "parse_threshold",
]

# where each name lives (relative to this package)
_HOME = {
    "check_regression": "command",
    "diff_report": "command",
    "parse_threshold": "check",
}

__getattr__ = lazy_getattr(__name__, _HOME)

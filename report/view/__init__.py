"""The view wing: the ``summary.json`` document into the report's HTML and PDF.

:mod:`.model` formats the document into a ``ReportModel`` (:mod:`.tables`, :mod:`.columns`,
:mod:`.glossary`) and places the sections that :mod:`.sweepview` and :mod:`.ranksection` return;
:mod:`.charts`, :mod:`.sweepchart` and :mod:`.rankcharts` draw the SVG charts
(:mod:`.chartsvg` writes them); :mod:`.render` fills the templates and :mod:`.pdf` makes the PDF
in a worker process; :mod:`.safetext` keeps hostile text inert. It reads the document only, never
a frame, and imports nothing of the diff wing.

Names are imported when first used (the CLI asks for the PDF worker's ``prestart`` without the
rest of the report).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nprof_report.lazy import lazy_getattr

if TYPE_CHECKING:
    from nprof_report.report.view.charts import CHART_RC
    from nprof_report.report.view.chartsvg import figure_svg
    from nprof_report.report.view.model import ReportModel, build_model
    from nprof_report.report.view.pdf import prestart, render_pdf, start_pdf, starts_early
    from nprof_report.report.view.render import environment, render_html
    from nprof_report.report.view.safetext import FORMULA_START
    from nprof_report.report.view.tables import Table

__all__ = [
    "CHART_RC",
    "FORMULA_START",
    "ReportModel",
    "Table",
    "build_model",
    "environment",
    "figure_svg",
    "prestart",
    "render_html",
    "render_pdf",
    "start_pdf",
    "starts_early",
]

# where each name lives (relative to this package)
_HOME = {
    "CHART_RC": "charts",
    "FORMULA_START": "safetext",
    "ReportModel": "model",
    "Table": "tables",
    "build_model": "model",
    "environment": "render",
    "figure_svg": "chartsvg",
    "prestart": "pdf",
    "starts_early": "pdf",
    "render_html": "render",
    "render_pdf": "pdf",
    "start_pdf": "pdf",
}

__getattr__ = lazy_getattr(__name__, _HOME)

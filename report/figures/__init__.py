"""The figures wing: the frames and jobs of each source in, the ``summary.json`` document out.

:mod:`.analyses` analyses one source (:mod:`.breakdown`, :mod:`.comms`, :mod:`.diff_profile`),
:mod:`.ranks` makes the cross-rank figures, :mod:`.summary` and :mod:`.sweep` put the analyses
into the document (:mod:`.summary_types` declares it, :mod:`.findings` reads it for findings) and
:mod:`.records` keeps its long lists as columns until they are written. It imports neither the
view nor the diff wing.

Names are imported when first used, as parse's door does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nprof_report.lazy import lazy_getattr

if TYPE_CHECKING:
    from nprof_report.report.figures.analyses import ImplementationAnalysis, analyse
    from nprof_report.report.figures.diff_profile import OP_SERIES, PARTS
    from nprof_report.report.figures.ranks import RankFigures, cross_rank, rank_figures
    from nprof_report.report.figures.records import (
        TEXT_CHARS,
        Listed,
        Tagged,
        cut_text,
        json_pieces,
    )
    from nprof_report.report.figures.summary import SUMMARY_FORMAT, SUMMARY_VERSION, build_summary
    from nprof_report.report.figures.summary_types import (
        CheckRecord,
        ComparisonPoint,
        DiffProfile,
        Finding,
        ImplementationRecord,
        Metric,
        NeuronRecord,
        RanksRecord,
        RunRecord,
        SideImplementation,
        Summary,
        SweepRecord,
        metric_figures,
    )
    from nprof_report.report.figures.sweep import crossover_title, detail_implementations, summarise

__all__ = [
    "OP_SERIES",
    "PARTS",
    "SUMMARY_FORMAT",
    "SUMMARY_VERSION",
    "TEXT_CHARS",
    "CheckRecord",
    "ComparisonPoint",
    "DiffProfile",
    "Finding",
    "ImplementationAnalysis",
    "ImplementationRecord",
    "Listed",
    "Metric",
    "NeuronRecord",
    "RankFigures",
    "RanksRecord",
    "RunRecord",
    "SideImplementation",
    "Summary",
    "SweepRecord",
    "Tagged",
    "analyse",
    "build_summary",
    "cross_rank",
    "crossover_title",
    "cut_text",
    "detail_implementations",
    "json_pieces",
    "metric_figures",
    "rank_figures",
    "summarise",
]

# where each name lives (relative to this package)
_HOME = {
    "CheckRecord": "summary_types",
    "ComparisonPoint": "summary_types",
    "DiffProfile": "summary_types",
    "Finding": "summary_types",
    "ImplementationAnalysis": "analyses",
    "ImplementationRecord": "summary_types",
    "Listed": "records",
    "Metric": "summary_types",
    "NeuronRecord": "summary_types",
    "OP_SERIES": "diff_profile",
    "PARTS": "diff_profile",
    "RankFigures": "ranks",
    "RanksRecord": "summary_types",
    "RunRecord": "summary_types",
    "SUMMARY_FORMAT": "summary",
    "SUMMARY_VERSION": "summary",
    "SideImplementation": "summary_types",
    "Summary": "summary_types",
    "SweepRecord": "summary_types",
    "Tagged": "records",
    "analyse": "analyses",
    "build_summary": "summary",
    "cross_rank": "ranks",
    "crossover_title": "sweep",
    "detail_implementations": "sweep",
    "json_pieces": "records",
    "cut_text": "records",
    "TEXT_CHARS": "records",
    "metric_figures": "summary_types",
    "rank_figures": "ranks",
    "summarise": "sweep",
}

__getattr__ = lazy_getattr(__name__, _HOME)

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
    from nprof_report.report.figures.bulk import Collector, Tables
    from nprof_report.report.figures.diff_profile import (
        COUNT_SERIES,
        DECLARED,
        OP_SERIES,
        OP_SERIES_SCHEMA,
        PARTS,
        op_series_frame,
    )
    from nprof_report.report.figures.failures import failure_sentence
    from nprof_report.report.figures.findings import OUTPUT_WRONG, named
    from nprof_report.report.figures.ranks import RankFigures, cross_rank, rank_figures
    from nprof_report.report.figures.records import (
        DOCUMENT_TEXT_CHARS,
        TEXT_CHARS,
        Tagged,
        cut_text,
        json_pieces,
        round_as_python,
    )
    from nprof_report.report.figures.roofline import PeakOverride, at_largest, roof_pct
    from nprof_report.report.figures.runs import (
        METRIC_WORDS,
        Member,
        RunGroup,
        backend_sentence,
        run_label,
        run_sentence,
        summarise,
    )
    from nprof_report.report.figures.stored import (
        SHOWN_ROWS,
        read_summary,
        restore_summary,
        store_summary,
        top_ops_rank,
    )
    from nprof_report.report.figures.summary import (
        CONSTRUCTED_MARK,
        SUMMARY_FORMAT,
        SUMMARY_VERSION,
        build_summary,
    )
    from nprof_report.report.figures.summary_types import (
        ONE_STEP,
        BackendComparison,
        BackendsRecord,
        CheckRecord,
        Comparison,
        ComparisonPoint,
        ConstructedInput,
        DiffProfile,
        FailureRecord,
        Finding,
        ImplementationRecord,
        Metric,
        NeuronRecord,
        RanksRecord,
        RooflineBasis,
        RooflineRecord,
        RunComparison,
        RunRecord,
        RunSide,
        SideImplementation,
        Summary,
        SweepRecord,
        metric_figures,
    )
    from nprof_report.report.figures.sweep import crossover_title, detail_implementations

__all__ = [
    "CONSTRUCTED_MARK",
    "COUNT_SERIES",
    "DECLARED",
    "DOCUMENT_TEXT_CHARS",
    "METRIC_WORDS",
    "ONE_STEP",
    "OP_SERIES",
    "OP_SERIES_SCHEMA",
    "OUTPUT_WRONG",
    "PARTS",
    "SHOWN_ROWS",
    "SUMMARY_FORMAT",
    "SUMMARY_VERSION",
    "TEXT_CHARS",
    "BackendComparison",
    "BackendsRecord",
    "CheckRecord",
    "Collector",
    "Comparison",
    "ComparisonPoint",
    "ConstructedInput",
    "DiffProfile",
    "FailureRecord",
    "Finding",
    "ImplementationAnalysis",
    "ImplementationRecord",
    "Member",
    "Metric",
    "NeuronRecord",
    "PeakOverride",
    "RankFigures",
    "RanksRecord",
    "RooflineBasis",
    "RooflineRecord",
    "RunComparison",
    "RunGroup",
    "RunRecord",
    "RunSide",
    "SideImplementation",
    "Summary",
    "SweepRecord",
    "Tables",
    "Tagged",
    "analyse",
    "at_largest",
    "backend_sentence",
    "build_summary",
    "cross_rank",
    "crossover_title",
    "cut_text",
    "detail_implementations",
    "failure_sentence",
    "json_pieces",
    "metric_figures",
    "named",
    "op_series_frame",
    "rank_figures",
    "read_summary",
    "restore_summary",
    "roof_pct",
    "round_as_python",
    "run_label",
    "run_sentence",
    "store_summary",
    "summarise",
    "top_ops_rank",
]

# where each name lives (relative to this package)
_HOME = {
    "BackendComparison": "summary_types",
    "BackendsRecord": "summary_types",
    "CONSTRUCTED_MARK": "summary",
    "ConstructedInput": "summary_types",
    "FailureRecord": "summary_types",
    "METRIC_WORDS": "runs",
    "Member": "runs",
    "OUTPUT_WRONG": "findings",
    "RunComparison": "summary_types",
    "RunGroup": "runs",
    "RunSide": "summary_types",
    "backend_sentence": "runs",
    "failure_sentence": "failures",
    "named": "findings",
    "run_label": "runs",
    "run_sentence": "runs",
    "CheckRecord": "summary_types",
    "COUNT_SERIES": "diff_profile",
    "Comparison": "summary_types",
    "ComparisonPoint": "summary_types",
    "DECLARED": "diff_profile",
    "DiffProfile": "summary_types",
    "Finding": "summary_types",
    "ImplementationAnalysis": "analyses",
    "ImplementationRecord": "summary_types",
    "Metric": "summary_types",
    "NeuronRecord": "summary_types",
    "ONE_STEP": "summary_types",
    "OP_SERIES": "diff_profile",
    "OP_SERIES_SCHEMA": "diff_profile",
    "op_series_frame": "diff_profile",
    "PeakOverride": "roofline",
    "PARTS": "diff_profile",
    "RankFigures": "ranks",
    "RanksRecord": "summary_types",
    "RooflineBasis": "summary_types",
    "RooflineRecord": "summary_types",
    "RunRecord": "summary_types",
    "SUMMARY_FORMAT": "summary",
    "SUMMARY_VERSION": "summary",
    "SideImplementation": "summary_types",
    "Summary": "summary_types",
    "SweepRecord": "summary_types",
    "Tagged": "records",
    "analyse": "analyses",
    "at_largest": "roofline",
    "build_summary": "summary",
    "cross_rank": "ranks",
    "crossover_title": "sweep",
    "detail_implementations": "sweep",
    "json_pieces": "records",
    "cut_text": "records",
    "TEXT_CHARS": "records",
    "DOCUMENT_TEXT_CHARS": "records",
    "metric_figures": "summary_types",
    "rank_figures": "ranks",
    "roof_pct": "roofline",
    "round_as_python": "records",
    "summarise": "runs",
    "SHOWN_ROWS": "stored",
    "Collector": "bulk",
    "Tables": "bulk",
    "read_summary": "stored",
    "restore_summary": "stored",
    "store_summary": "stored",
    "top_ops_rank": "stored",
}

__getattr__ = lazy_getattr(__name__, _HOME)

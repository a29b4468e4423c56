"""The sweep and the numerical check in the report: charts, tables and the page-1 sentences.

Everything comes from ``summary["sweep"]`` and ``summary["numerical_check"]``
(:mod:`nprof_report.report.figures.sweep`); ``templates/sweep.html.j2`` places it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nprof_report.report.figures import (
    CheckRecord,
    ComparisonPoint,
    Metric,
    Summary,
    SweepRecord,
    crossover_title,
    metric_figures,
)
from nprof_report.report.view import sweepchart
from nprof_report.report.view.charts import Chart
from nprof_report.report.view.columns import (
    NUMERICAL_CHECK_COLUMNS,
    SWEEP_COLUMNS,
    SWEEP_TIME_COLUMNS,
)
from nprof_report.report.view.tables import Table, make_table

GLOSSARY = [
    (
        "Numerical check",
        "Before profiling, each implementation's output on the same inputs is compared with the "
        "first (reference) implementation's: it passes when every element is within atol + rtol × "
        "|reference| (torch.isclose; default tolerances those of torch.testing.assert_close for "
        "the dtype). Max abs error: largest |output − reference|; max rel error: largest "
        "|output − reference| / |reference| over the elements where the reference is not 0.",
    ),
    (
        "Crossover size",
        "In a sweep, each implementation is faster, slower or within noise against the baseline at "
        "each size (the noise rule of the comparison table). The crossover is the smallest size "
        "from which the verdict at the largest size holds at every larger size.",
    ),
]


@dataclass(frozen=True)
class SweepView:
    """What ``templates/sweep.html.j2`` shows."""

    heading: str
    intro: str
    charts: list[Chart]
    tables: list[Table]


def _check_table(checks: list[CheckRecord]) -> Table:
    records = []
    for c in checks:
        shown = c["status"].upper() if c["status"] == "fail" else c["status"]
        records.append(
            {
                **c,
                "check": f"{shown} ({c['note']})" if c["note"] else shown,
                "tolerance": "–"
                if c["atol"] is None
                else f"atol {c['atol']:g}, rtol {c['rtol']:g}",
            }
        )
    reference = checks[0]["reference"] if checks else "–"
    return make_table(
        "Numerical check against the reference",
        "numerical-check.csv",
        NUMERICAL_CHECK_COLUMNS,
        records,
        note=f"Each output compared elementwise with {reference}'s on the same inputs, before "
        "profiling: pass when every element is within atol + rtol × |reference| "
        "(torch.isclose); errors computed in float64.",
    )


def _sweep_table(sweep: SweepRecord) -> Table:
    comps = {c["label"]: c for c in sweep["comparisons"]}
    records: list[dict[str, Any]] = []
    for series in sweep["series"]:
        comp = comps.get(series["label"])
        at: dict[str, tuple[ComparisonPoint | None, str | None]] = (
            {p["size_label"]: (p, v) for p, v in zip(comp["points"], comp["verdicts"])}
            if comp
            else {}
        )
        metric: Metric = (comp.get("metric") if comp else None) or "unprofiled"
        for p in series["points"]:
            point, verdict = at.get(p["size_label"], (None, None))
            records.append(
                {
                    "label": series["label"],
                    "size_label": p["size_label"],
                    **{k: p[k] for _, k in SWEEP_TIME_COLUMNS},
                    "ratio": metric_figures(point, metric)[1] if point else None,
                    "verdict": verdict or ("baseline" if comp is None else None),
                }
            )
    return make_table(
        "Time per call at every size",
        "sweep.csv",
        SWEEP_COLUMNS,
        records,
        note="Medians. Ratio and verdict against the baseline on un-profiled time when both were "
        "timed without the profiler, else on profiled steps; 'within noise' as in the comparison "
        "table. The per-implementation sections show the largest and the smallest size.",
    )


def _charts(sweep: SweepRecord) -> list[Chart]:
    labels = [s["label"] for s in sweep["series"]]
    points = [s["points"] for s in sweep["series"]]
    timed = all(p["unprofiled_median_us"] for pts in points for p in pts)
    key = "unprofiled_median_us" if timed else "step_median_us"
    return [
        Chart(
            "Time per call against size",
            sweepchart.scaling_overlay(labels, points, key),
            ("Un-profiled" if timed else "Profiled") + " median time per call of every "
            "implementation, log-log: where the lines cross, the faster implementation changes.",
        ),
        Chart(
            "Where the time goes as the size grows",
            sweepchart.scaling_by_implementation(labels, points),
            "Per implementation, log-log: un-profiled and profiled time, host dispatch and device "
            "time per step (device time only where the trace records device activities). Where "
            "device time rises above dispatch, device work dominates.",
        ),
    ]


def check_sentence(checks: list[CheckRecord]) -> str | None:
    """The page-1 sentence on the numerical check."""
    if not checks:
        return None
    compared = [c for c in checks if c["status"] in ("pass", "fail")]
    failed = [c for c in checks if c["status"] == "fail"]
    reference = checks[0]["reference"]
    if failed:
        names = list(dict.fromkeys(c["label"] for c in failed))
        where = {
            n: ", ".join(c["size_label"] or "the captured size" for c in failed if c["label"] == n)
            for n in names
        }
        return (
            "NUMERICAL CHECK FAILED: "
            + "; ".join(f"{n} at {where[n]}" for n in names)
            + f" (output differs from {reference}'s beyond tolerance; still profiled, so its "
            "timings describe a computation that is not the reference's)."
        )
    if not compared:
        return f"Numerical check: no output could be compared with {reference}'s."
    tol = compared[0]
    return (
        f"Numerical check: every output matches {reference}'s within tolerance (atol "
        f"{tol['atol']:g}, rtol {tol['rtol']:g})"
        + (" at every size." if len({c["size_label"] for c in checks}) > 1 else ".")
    )


@dataclass(frozen=True)
class SweepSection:
    """The sweep's section, and the sentences it adds to page 1's verdict (the model places
    both, with :data:`GLOSSARY`)."""

    view: SweepView
    sentences: list[str]


def sweep_section(summary: Summary) -> SweepSection | None:
    """The sweep's section and page-1 sentences, when the summary has a sweep or a numerical
    check."""
    checks = summary.get("numerical_check") or []
    sweep = summary.get("sweep")
    if not checks and not sweep:
        return None
    sentences = []
    tables = []
    charts: list[Chart] = []
    intro = ""
    if sweep:
        largest = "×".join(map(str, sweep["largest"]))
        smallest = "×".join(map(str, sweep["smallest"]))
        wrong = summary.get("output_wrong") or []
        titles = [
            t for c in sweep["comparisons"] if (t := crossover_title(c, sweep["largest"], wrong))
        ]
        sentences.append(
            f"These figures are for the largest size, {largest}; the sweep covers "
            f"{len(sweep['sizes'])} sizes from {smallest}."
            + (" " + "; ".join(titles) + "." if titles else "")
        )
        charts = _charts(sweep)
        tables.append(_sweep_table(sweep))
        intro = (
            f"{len(sweep['sizes'])} sizes, each captured as its own bundles in this run. The "
            f"headline and the comparisons above are for {largest}; the per-implementation "
            f"sections follow for {largest} and for {smallest} (labelled '@ {smallest}')."
        )
    sentence = check_sentence(checks)
    if sentence:
        sentences.append(sentence)
    if checks:
        tables.append(_check_table(checks))
    view = SweepView(
        "Sizes and numerical check" if sweep else "Numerical check", intro, charts, tables
    )
    return SweepSection(view, sentences)

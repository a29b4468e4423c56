"""Size sweeps and the numerical check, in ``summary.json``.

A run that swept several sizes holds one bundle per implementation and size. The summary's usual
content (headline, comparisons, findings, per-implementation detail) is that of the *largest* size;
``sweep`` adds, per implementation, the headline figures at every size (un-profiled and profiled
time, host dispatch and device time per step, ...), the comparison with the baseline at every size, the crossover
sizes, and the full per-implementation records of the *smallest* size. ``numerical_check`` lists
every implementation's check against the reference at every size (any run captured by nprof-report
0.1 or later with ``format_minor`` 1).

Crossover rule: at each size an implementation is *faster*, *slower* or *within noise* against the
baseline by the comparison rule of :func:`~nprof_report.report.figures.summary.compare` (un-profiled time
when both have it, else profiled steps). The crossover is the smallest size from which the verdict
at the largest size holds at every larger size.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import asdict, replace
from typing import cast

from nprof_report.bundle import Manifest, elements, size_label
from nprof_report.report.figures.analyses import ImplementationAnalysis
from nprof_report.report.figures.failures import failure_findings, failures
from nprof_report.report.figures.findings import SEVERITY_RANK, Severity, named
from nprof_report.report.figures.ranks import RankFigures
from nprof_report.report.figures.roofline import (
    PeakOverride,
    roofline,
    roofline_caveats,
    roofline_findings,
)
from nprof_report.report.figures.summary import build_summary, compare, headline
from nprof_report.report.figures.summary_types import (
    CheckRecord,
    ComparisonFigures,
    ComparisonPoint,
    Crossover,
    Finding,
    Headline,
    ImplementationRecord,
    Metric,
    Summary,
    SweepComparison,
    SweepRecord,
    SweepSeries,
    metric_figures,
)

Size = tuple[int, ...]
FASTER, SLOWER, NOISE = "faster", "slower", "within noise"


def _size_of(a: ImplementationAnalysis) -> Size | None:
    impl = a.implementation
    return tuple(impl.size) if impl is not None and impl.size else None


def summarise(
    analyses: list[ImplementationAnalysis],
    manifest: Manifest | None,
    caveats: list[str],
    ranks: list[RankFigures] | None = None,
    peaks: PeakOverride | None = None,
) -> Summary:
    """:func:`~nprof_report.report.figures.summary.build_summary` of one run, plus the sweep, the
    numerical check, the implementations that failed and the roofline (``ranks`` as there; a
    sweep is one process, so it has no ranks; ``peaks``: ``--peak-gbps`` / ``--peak-gflops``)."""
    sizes = sorted({s for a in analyses if (s := _size_of(a)) is not None}, key=elements)
    checks = numerical_checks(manifest)
    wrong = output_wrong(checks)
    failed = failures(manifest)
    if len(sizes) < 2 or manifest is None:
        summary = build_summary(analyses, manifest, caveats, ranks, output_wrong=wrong)
    else:
        largest, smallest = sizes[-1], sizes[0]
        at = {s: [a for a in analyses if _size_of(a) == s] for s in sizes}
        shown = replace(manifest, workload={**manifest.workload, "shape": list(largest)})
        others = [f"{size_label(s)}: {n}" for s in sizes[:-1] for a in at[s] for n in a.notes]
        summary = build_summary(at[largest], shown, caveats + others, output_wrong=wrong)
        small = build_summary(at[smallest], shown, [])
        summary["sweep"] = _sweep_record(sizes, at, small)
    summary["numerical_check"] = checks
    if failed:
        summary["failures"] = failed
    summary["roofline"], summary["roofline_basis"] = roofline(summary, manifest, analyses, peaks)
    summary["caveats"] += roofline_caveats(summary["roofline"], summary["roofline_basis"])
    summary["findings"] = sorted(  # stable: the run's own findings first at each severity
        check_findings(checks)
        + failure_findings(failed)
        + sweep_findings(summary.get("sweep"), wrong)
        + roofline_findings(summary["roofline"])
        + summary["findings"],
        key=lambda f: SEVERITY_RANK[f["severity"]],
    )
    return summary


def output_wrong(checks: list[CheckRecord]) -> list[str]:
    """The implementations whose output failed the numerical check at some size."""
    return list(dict.fromkeys(c["label"] for c in checks if c["status"] == "fail"))


def detail_label(label: str, size: Size | list[int]) -> str:
    """How the smallest size's detail sections are named: ``naive @ 4×512``."""
    return f"{label} @ {size_label(size)}"


def detail_implementations(summary: Summary) -> list[ImplementationRecord]:
    """The smallest size's implementation records of a sweep (none for one size)."""
    sweep = summary.get("sweep")
    return list(sweep["smallest_detail"]["implementations"]) if sweep else []


def _sweep_record(
    sizes: list[Size], at: dict[Size, list[ImplementationAnalysis]], small: Summary
) -> SweepRecord:
    labels = list(dict.fromkeys(a.label for s in sizes for a in at[s]))
    heads: dict[tuple[str, Size], Headline] = {
        (a.label, s): headline(a) for s in sizes for a in at[s]
    }
    series: list[SweepSeries] = [
        {
            "label": label,
            "points": [
                {
                    "size": list(s),
                    "size_label": size_label(s),
                    "elements": elements(s),
                    **heads[label, s],
                }
                for s in sizes
                if (label, s) in heads
            ],
        }
        for label in labels
    ]
    base = labels[0]
    comparisons: list[SweepComparison] = []
    for label in labels[1:]:
        points: list[ComparisonPoint] = [
            {
                "size": list(s),
                "size_label": size_label(s),
                **compare(heads[base, s], heads[label, s]),
            }
            for s in sizes
            if (base, s) in heads and (label, s) in heads
        ]
        comparisons.append(
            {"baseline": base, "label": label, "points": points, **crossover(points)}
        )
    for impl in small["implementations"]:
        impl["label"] = detail_label(impl["label"], sizes[0])
    for comp in small["comparisons"]:
        comp["label"] = detail_label(comp["label"], sizes[0])
        comp["baseline"] = detail_label(comp["baseline"], sizes[0])
    return {
        "sizes": [list(s) for s in sizes],
        "largest": list(sizes[-1]),
        "smallest": list(sizes[0]),
        "series": series,
        "comparisons": comparisons,
        "smallest_detail": {
            "implementations": small["implementations"],
            "comparisons": small["comparisons"],
        },
    }


def verdict_at(point: ComparisonFigures) -> tuple[str | None, Metric | None]:
    """(faster / slower / within noise, the metric used) of one comparison point."""
    metrics: tuple[Metric, ...] = ("unprofiled", "step")
    for metric in metrics:
        delta, _, noisy = metric_figures(point, metric)
        if noisy is None:
            continue
        if not noisy:
            return NOISE, metric
        return (FASTER if cast(float, delta) < 0 else SLOWER), metric
    return None, None


def crossover(points: list[ComparisonPoint]) -> Crossover:
    """The verdict at each size (ascending) and the size from which the largest size's holds.

    ``from_size`` is None when no size was compared; ``below`` describes the sizes under it:
    ``within noise``, ``faster``, ``slower``, ``mixed`` or None (the verdict holds everywhere).
    """
    verdicts = [verdict_at(p)[0] for p in points]
    known = [(p, v) for p, v in zip(points, verdicts) if v is not None]
    if not known:
        return {"verdicts": verdicts, "holds": None, "from_size": None, "below": None}
    last = known[-1][1]
    start = len(known) - 1
    while start > 0 and known[start - 1][1] == last:
        start -= 1
    under = {v for _, v in known[:start]}
    below = None if not under else next(iter(under)) if len(under) == 1 else "mixed"
    return {
        "verdicts": verdicts,
        "holds": last,
        "from_size": known[start][0]["size"],
        "below": below,
        "metric": verdict_at(known[-1][0])[1],
    }


def _finding(severity: Severity, rule: str, title: str, evidence: str) -> Finding:
    return {"severity": severity, "rule": rule, "title": title, "evidence": evidence}


def crossover_title(
    comp: SweepComparison, largest: list[int] | None = None, wrong: Collection[str] = ()
) -> str | None:
    """``fused beats naive from 64×4096 on; below it the difference is within noise``.

    A claim never runs past the last size where both ran: when that is below ``largest`` (the
    sweep's largest size; one of the two failed above it) the title says ``from A to B, the last
    size where both ran``. ``wrong``: labels marked as their output failed the numerical check.
    """
    holds, from_size, under = comp["holds"], comp["from_size"], comp["below"]
    label, base = named(comp["label"], wrong), named(comp["baseline"], wrong)
    if holds is None or from_size is None:  # one is None where the other is
        return None
    points = comp["points"]
    start = size_label(from_size)
    last = size_label(points[-1]["size"])
    stops = largest is not None and list(points[-1]["size"]) != list(largest)
    span = f"{size_label(points[0]['size'])} to {last}"
    what = {
        FASTER: f"{label} beats {base}",
        SLOWER: f"{label} is slower than {base}",
        NOISE: f"{label} and {base} are within noise of each other",
    }[holds]
    if under is None:
        if len(points) < 2:
            return None
        return f"{what} at every size " + (
            f"both ran ({span}; no claim beyond {last})" if stops else f"measured ({span})"
        )
    below = {
        NOISE: "the difference is within noise",
        FASTER: f"{label} is faster",
        SLOWER: f"{base} is faster",
        "mixed": "the result changes from size to size",
    }[under]
    if stops:
        reach = f"at {last}" if start == last else f"from {start} to {last}"
        return f"{what} {reach}, the last size where both ran; below it {below}"
    return f"{what} from {start} on; below it {below}"


def sweep_findings(sweep: SweepRecord | None, wrong: Collection[str] = ()) -> list[Finding]:
    """A crossover finding per implementation against the baseline (``wrong``: labels whose
    output failed the numerical check); where device time overtakes host dispatch."""
    if not sweep:
        return []
    out = []
    for comp in sweep["comparisons"]:
        title = crossover_title(comp, sweep.get("largest"), wrong)
        if title is None:
            continue
        metric = comp.get("metric") or "unprofiled"
        ratios = ", ".join(
            f"{p['size_label']} {p.get(f'{metric}_ratio')}x ({v or 'not compared'})"
            for p, v in zip(comp["points"], comp["verdicts"])
        )
        rule_text = (
            "difference is larger than the sum of the two half-IQRs"
            if metric == "unprofiled"
            else "interquartile ranges do not overlap"
        )
        what = "un-profiled time per call" if metric == "unprofiled" else "profiled step time"
        out.append(
            _finding(
                "medium" if comp["below"] else "info",
                "size-crossover",
                title,
                f"{what}, {comp['label']} / {comp['baseline']}: {ratios}; beyond noise when the "
                f"{rule_text}",
            )
        )
    for series in sweep["series"]:
        pts = [
            p
            for p in series["points"]
            if p["device_per_step_us"] is not None and p["dispatch_per_step_us"] is not None
        ]
        dominated = [cast(float, p["device_per_step_us"]) > p["dispatch_per_step_us"] for p in pts]
        if not pts or not dominated[-1] or all(dominated):
            continue
        first = len(dominated) - 1
        while first > 0 and dominated[first - 1]:
            first -= 1
        evidence = ", ".join(
            f"{p['size_label']} {p['device_per_step_us']} vs {p['dispatch_per_step_us']} us"
            for p in pts
        )
        out.append(
            _finding(
                "info",
                "device-overtakes-dispatch",
                f"{series['label']}: device time per step exceeds host dispatch from "
                f"{pts[first]['size_label']} on",
                f"device vs dispatch per step (medians): {evidence}",
            )
        )
    return out


def numerical_checks(manifest: Manifest | None) -> list[CheckRecord]:
    """Every implementation's numerical check at every size, from the manifest."""
    if manifest is None:
        return []
    return [
        cast(
            CheckRecord,
            {
                "label": i.name,
                "size": i.size,
                "size_label": size_label(i.size) if i.size else None,
                **asdict(i.check),
            },
        )
        for i in manifest.implementations
        if i.check is not None
    ]


def check_findings(checks: list[CheckRecord]) -> list[Finding]:
    """One high finding per implementation whose output differs from the reference's."""
    failed: dict[str, list[CheckRecord]] = {}
    for c in checks:
        if c["status"] == "fail":
            failed.setdefault(c["label"], []).append(c)
    out = []
    for label, rows in failed.items():
        where = ", ".join(r["size_label"] or "the captured size" for r in rows)
        evidence = "; ".join(
            f"{r['size_label'] or 'size'}: "
            + (
                f"{r['note']}"
                if r["max_abs_error"] is None
                else f"max abs error {r['max_abs_error']:.3g}, max rel error "
                f"{r['max_rel_error']:.3g}, {r['note']}"
            )
            for r in rows
        )
        out.append(
            _finding(
                "high",
                "numerical-mismatch",
                f"{label}'s output differs from {rows[0]['reference']}'s beyond tolerance at "
                f"{where}; it was profiled all the same",
                f"{evidence} (atol {rows[0]['atol']}, rtol {rows[0]['rtol']})",
            )
        )
    return out

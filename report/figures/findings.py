"""Rule-based findings over the summary, ranked, each with the evidence that triggered it.

Each rule is a small function over one comparison or one implementation record (and the run's
provenance), listed in :data:`COMPARISON_RULES` and :data:`IMPLEMENTATION_RULES`. A rule reads
figures from the summary document only, so every number a finding quotes is also in
``summary.json``. Thresholds are module constants, quoted in the finding's evidence.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Literal

from nprof_report.report.figures import ranks
from nprof_report.report.figures.summary_types import (
    Comparison,
    Finding,
    ImplementationRecord,
    Metric,
    RunRecord,
    Summary,
    metric_figures,
)

NOISY_IQR_FRACTION = 0.30
FIRST_STEP_OUTLIER = 2.0
HIGH_OVERHEAD_PCT = 50.0
SEVERITY_RANK = {"high": 0, "medium": 1, "info": 2}
Severity = Literal["high", "medium", "info"]
# (summary metric prefix, wording, rule id, how the noise test reads)
DIFFERENCES: tuple[tuple[Metric, str, str, str], ...] = (
    ("step", "steps are", "step-time-difference", "interquartile ranges do not overlap"),
    (
        "unprofiled",
        "calls (un-profiled) are",
        "unprofiled-difference",
        "larger than the sum of the two half-IQRs",
    ),
)


def _finding(severity: Severity, rule: str, title: str, evidence: str) -> Finding:
    return {"severity": severity, "rule": rule, "title": title, "evidence": evidence}


def _fusion(comp: Comparison, run: RunRecord | None) -> list[Finding]:
    delta = comp.get("ops_per_step_delta")
    if delta is None or delta >= 0:
        return []
    return [
        _finding(
            "info",
            "fusion-removed-dispatches",
            f"{comp['label']} dispatches {-delta:g} fewer framework ops per step than {comp['baseline']}",
            f"framework ops per step: {comp['label']} vs {comp['baseline']}, delta {delta:g}",
        )
    ]


def _differences(comp: Comparison, run: RunRecord | None) -> list[Finding]:
    out = []
    for metric, what, rule, noise_rule in DIFFERENCES:
        delta, ratio, exceeds = metric_figures(comp, metric)
        if exceeds and delta is not None:
            faster = delta < 0
            out.append(
                _finding(
                    "medium",
                    rule,
                    f"{comp['label']} {what} {'faster' if faster else 'slower'} than "
                    f"{comp['baseline']} beyond run-to-run noise ({ratio}x)",
                    f"median {metric} delta {delta} us; {noise_rule}",
                )
            )
    return out


def _within_noise(comp: Comparison, run: RunRecord | None) -> list[Finding]:
    if comp.get("step_exceeds_noise") is not False:
        return []
    return [
        _finding(
            "info",
            "step-time-within-noise",
            f"{comp['label']} vs {comp['baseline']}: profiled step-time difference is within noise",
            f"median step delta {comp['step_delta_us']} us; interquartile ranges overlap",
        )
    ]


def _dispatch_bound(impl: ImplementationRecord, run: RunRecord | None) -> list[Finding]:
    h = impl["headline"]
    dev, disp = h.get("device_per_op_us"), h.get("dispatch_per_op_us")
    if dev is None or disp is None or dev >= disp:
        return []
    return [
        _finding(
            "high",
            "dispatch-bound",
            f"{impl['label']} is dispatch-bound: device time per op is below its host dispatch cost",
            f"device per op {dev} us < dispatch per op {disp} us",
        )
    ]


def _empty_device_time(impl: ImplementationRecord, run: RunRecord | None) -> list[Finding]:
    backend = run["backend"] if run else None
    if backend not in ("neuron", "cuda") or impl["has_device_activities"]:
        return []
    return [
        _finding(
            "high",
            "empty-device-time",
            f"{impl['label']}: the trace holds no device activities, so the device-time column is empty",
            f"backend {backend}; 0 device activities. Check that the loop synchronises the "
            "device before prof.step() and that the profiler's device activity was enabled",
        )
    ]


def _profiler_overhead(impl: ImplementationRecord, run: RunRecord | None) -> list[Finding]:
    h = impl["headline"]
    pct = h.get("profiler_overhead_pct")
    if pct is None or pct <= HIGH_OVERHEAD_PCT:
        return []
    return [
        _finding(
            "medium",
            "profiler-overhead",
            f"{impl['label']}: profiled steps are {pct}% slower than un-profiled calls",
            f"profiled median step {h['step_median_us']} us vs un-profiled {h['unprofiled_median_us']} us "
            f"(threshold {HIGH_OVERHEAD_PCT}%); compare implementations on un-profiled time",
        )
    ]


def _noisy_steps(impl: ImplementationRecord, run: RunRecord | None) -> list[Finding]:
    st = impl.get("step_time_us")
    if not st or not st["median"] or st["iqr"] / st["median"] <= NOISY_IQR_FRACTION:
        return []
    return [
        _finding(
            "medium",
            "noisy-steps",
            f"{impl['label']}: step times vary widely between steps",
            f"IQR {st['iqr']} us is {100 * st['iqr'] / st['median']:.0f}% of the median "
            f"{st['median']} us (threshold {100 * NOISY_IQR_FRACTION:.0f}%)",
        )
    ]


def _compilation_in_steps(impl: ImplementationRecord, run: RunRecord | None) -> list[Finding]:
    loading = [c for c in impl["gaps"]["by_cause"] if c["cause"] == "compilation or loading"]
    if not loading:
        return []
    return [
        _finding(
            "high",
            "compilation-in-steps",
            f"{impl['label']}: compilation or NEFF loading happens inside the measured steps",
            f"{loading[0]['count']} device idle gaps ({loading[0]['total_us']} us) overlap a "
            "load; warm up longer before profiling",
        )
    ]


def _first_step_outlier(impl: ImplementationRecord, run: RunRecord | None) -> list[Finding]:
    st, steps = impl.get("step_time_us"), impl["steps"]
    if len(steps) < 3 or not st or not st["median"]:
        return []
    first = steps[0]["dur_us"]
    if first <= FIRST_STEP_OUTLIER * st["median"]:
        return []
    return [
        _finding(
            "info",
            "first-step-outlier",
            f"{impl['label']}: the first active step is {first / st['median']:.1f}x the median",
            f"step {steps[0]['step']}: {first} us vs median {st['median']} us "
            f"(threshold {FIRST_STEP_OUTLIER}x); medians are used throughout",
        )
    ]


ComparisonRule = Callable[[Comparison, RunRecord | None], list[Finding]]
ImplementationRule = Callable[[ImplementationRecord, RunRecord | None], list[Finding]]
COMPARISON_RULES: tuple[ComparisonRule, ...] = (_fusion, _differences, _within_noise)
"""Rules over one comparison with the baseline (and the run's provenance), in the order listed."""
IMPLEMENTATION_RULES: tuple[ImplementationRule, ...] = (
    _dispatch_bound,
    _empty_device_time,
    _profiler_overhead,
    _noisy_steps,
    _compilation_in_steps,
    _first_step_outlier,
)
"""Rules over one implementation's record (and the run's provenance), in the order listed."""


OUTPUT_WRONG = " (output wrong)"
"""What follows the name of an implementation whose output failed the numerical check, in every
sentence that ranks it."""


def named(label: str, wrong: Collection[str]) -> str:
    """``label``, marked when its output failed the numerical check."""
    return label + OUTPUT_WRONG if label in wrong else label


def marked(comp: Comparison, wrong: Collection[str]) -> Comparison:
    """``comp`` with both labels as sentences that rank them name them."""
    if comp["label"] not in wrong and comp["baseline"] not in wrong:
        return comp
    return {
        **comp,
        "label": named(comp["label"], wrong),
        "baseline": named(comp["baseline"], wrong),
    }


def find(summary: Summary) -> list[Finding]:
    """Evaluate every rule; most severe first, then in implementation order (a job's cross-rank
    findings before its ranks' own)."""
    run = summary["run"]
    wrong = set(summary.get("output_wrong") or ())
    out = [
        f
        for comp in summary["comparisons"]
        for rule in COMPARISON_RULES
        for f in rule(marked(comp, wrong), run)
    ]
    out += [
        f
        for impl in summary["implementations"]
        for rule in IMPLEMENTATION_RULES
        for f in rule(impl, run)
    ]
    out = ranks.findings(summary.get("ranks")) + out
    return sorted(out, key=lambda f: SEVERITY_RANK[f["severity"]])

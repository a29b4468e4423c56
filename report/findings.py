"""Rule-based findings over the summary, ranked, each with the evidence that triggered it.

A rule reads figures from the summary document only, so every number a finding quotes is also in
``summary.json``. Thresholds are module constants, quoted in the finding's evidence.
"""

from __future__ import annotations

from typing import Any

from nprof_report.report import ranks

NOISY_IQR_FRACTION = 0.30
FIRST_STEP_OUTLIER = 2.0
HIGH_OVERHEAD_PCT = 50.0
SEVERITY_RANK = {"high": 0, "medium": 1, "info": 2}
# (summary metric prefix, wording, rule id, how the noise test reads)
DIFFERENCES = (
    ("step", "steps are", "step-time-difference", "interquartile ranges do not overlap"),
    (
        "unprofiled",
        "calls (un-profiled) are",
        "unprofiled-difference",
        "larger than the sum of the two half-IQRs",
    ),
)


def _finding(severity: str, rule: str, title: str, evidence: str) -> dict[str, str]:
    return {"severity": severity, "rule": rule, "title": title, "evidence": evidence}


def find(summary: dict[str, Any]) -> list[dict[str, str]]:
    """Evaluate every rule; most severe first, then in implementation order."""
    out: list[dict[str, str]] = []
    run = summary.get("run") or {}
    backend = run.get("backend")
    for comp in summary["comparisons"]:
        delta = comp.get("ops_per_step_delta")
        if delta is not None and delta < 0:
            out.append(
                _finding(
                    "info",
                    "fusion-removed-dispatches",
                    f"{comp['label']} dispatches {-delta:g} fewer framework ops per step than {comp['baseline']}",
                    f"framework ops per step: {comp['label']} vs {comp['baseline']}, delta {delta:g}",
                )
            )
        for metric, what, rule, noise_rule in DIFFERENCES:
            if comp.get(f"{metric}_exceeds_noise"):
                faster = comp[f"{metric}_delta_us"] < 0
                out.append(
                    _finding(
                        "medium",
                        rule,
                        f"{comp['label']} {what} {'faster' if faster else 'slower'} than "
                        f"{comp['baseline']} beyond run-to-run noise ({comp[f'{metric}_ratio']}x)",
                        f"median {metric} delta {comp[f'{metric}_delta_us']} us; {noise_rule}",
                    )
                )
        if comp.get("step_exceeds_noise") is False:
            out.append(
                _finding(
                    "info",
                    "step-time-within-noise",
                    f"{comp['label']} vs {comp['baseline']}: profiled step-time difference is within noise",
                    f"median step delta {comp['step_delta_us']} us; interquartile ranges overlap",
                )
            )
    for impl in summary["implementations"]:
        h = impl["headline"]
        label = impl["label"]
        dev, disp = h.get("device_per_op_us"), h.get("dispatch_per_op_us")
        if dev is not None and disp is not None and dev < disp:
            out.append(
                _finding(
                    "high",
                    "dispatch-bound",
                    f"{label} is dispatch-bound: device time per op is below its host dispatch cost",
                    f"device per op {dev} us < dispatch per op {disp} us",
                )
            )
        if backend in ("neuron", "cuda") and not impl["has_device_activities"]:
            out.append(
                _finding(
                    "high",
                    "empty-device-time",
                    f"{label}: the trace holds no device activities, so the device-time column is empty",
                    f"backend {backend}; 0 device activities. Check that the loop synchronises the "
                    "device before prof.step() and that the profiler's device activity was enabled",
                )
            )
        pct = h.get("profiler_overhead_pct")
        if pct is not None and pct > HIGH_OVERHEAD_PCT:
            out.append(
                _finding(
                    "medium",
                    "profiler-overhead",
                    f"{label}: profiled steps are {pct}% slower than un-profiled calls",
                    f"profiled median step {h['step_median_us']} us vs un-profiled {h['unprofiled_median_us']} us "
                    f"(threshold {HIGH_OVERHEAD_PCT}%); compare implementations on un-profiled time",
                )
            )
        st = impl.get("step_time_us")
        if st and st["median"] and st["iqr"] / st["median"] > NOISY_IQR_FRACTION:
            out.append(
                _finding(
                    "medium",
                    "noisy-steps",
                    f"{label}: step times vary widely between steps",
                    f"IQR {st['iqr']} us is {100 * st['iqr'] / st['median']:.0f}% of the median "
                    f"{st['median']} us (threshold {100 * NOISY_IQR_FRACTION:.0f}%)",
                )
            )
        loading = [c for c in impl["gaps"]["by_cause"] if c["cause"] == "compilation or loading"]
        if loading:
            out.append(
                _finding(
                    "high",
                    "compilation-in-steps",
                    f"{label}: compilation or NEFF loading happens inside the measured steps",
                    f"{loading[0]['count']} device idle gaps ({loading[0]['total_us']} us) overlap a "
                    "load; warm up longer before profiling",
                )
            )
        steps = impl["steps"]
        if len(steps) >= 3 and st and st["median"]:
            first = steps[0]["dur_us"]
            if first > FIRST_STEP_OUTLIER * st["median"]:
                out.append(
                    _finding(
                        "info",
                        "first-step-outlier",
                        f"{label}: the first active step is {first / st['median']:.1f}x the median",
                        f"step {steps[0]['step']}: {first} us vs median {st['median']} us "
                        f"(threshold {FIRST_STEP_OUTLIER}x); medians are used throughout",
                    )
                )
    out = ranks.findings(summary.get("ranks")) + out  # a job's findings before its ranks' own
    return sorted(out, key=lambda f: SEVERITY_RANK[f["severity"]])

"""``check``: is NEW a regression against the baseline, beyond the threshold and the noise?

A metric fails when the lower end of its 95 % interval (:mod:`~nprof_report.report.diff.stats`)
lies above ``max_regression_pct`` of BASE's median: the regression is larger than the threshold
even at the favourable end of the noise. With too few steps to estimate the noise the
difference itself is compared with the threshold.

With several baseline runs the noise is the spread between runs instead
(:func:`~nprof_report.report.diff.stats.between_runs`): NEW's median against the baseline runs'
mean, with the 95 % prediction interval of one more run. On a shared machine two captures of the
same code differ by more than the steps within one capture show; the baselines' spread measures it.

Metrics: ``step`` (step time), ``device`` (device time per step), ``dispatch`` (host dispatch
per step: the summed duration of the top-level ops). With ops named, the same metrics of those
ops instead: host total time per step, device total time per step, launch latency.
"""

from __future__ import annotations

from typing import Any

from nprof_report.errors import InputError
from nprof_report.report.diff.compare import METRIC_WORDS, SERIES_WORDS, difference_record
from nprof_report.report.diff.stats import BETWEEN_RUNS_METHOD, between_runs

OP_METRICS = {"step": "host_total_us", "device": "device_total_us", "dispatch": "launch_us"}
DEFAULT_MAX_REGRESSION_PCT = 5.0


def parse_threshold(text: str) -> float:
    """``5%`` or ``5`` -> 5.0 (percent)."""
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        raise ValueError(f"{text!r} is not a percentage like 5%") from None
    if not value >= 0:
        raise ValueError(f"{text!r} is not a percentage like 5%")
    return value


def _matches(op: dict[str, Any], wanted: str) -> bool:
    return wanted in (op["name"], " > ".join([*op["context"], op["name"]]))


def _targets(
    pair: dict[str, Any], metric: str, ops: list[str], where: str
) -> list[tuple[str, dict[str, Any] | None]]:
    """(what, difference record) for the metric of the pair, or of each named op."""
    if not ops:
        return [(METRIC_WORDS[metric], pair["metrics"][metric])]
    out = []
    for wanted in ops:
        found = [o for o in pair["ops"] if _matches(o, wanted)]
        if not found:
            raise InputError(where, f"--op {wanted}: no op of that name in both BASE and NEW")
        for o in found:
            label = " > ".join([*o["context"], o["name"]])
            out.append((f"{label} {SERIES_WORDS[OP_METRICS[metric]]}", o[OP_METRICS[metric]]))
    return out


def check(
    docs: list[dict[str, Any]],
    *,
    max_regression_pct: float,
    metrics: list[str],
    ops: list[str],
) -> list[str]:
    """Judge NEW against the baselines; return one line per failure.

    ``docs``: the diff documents of NEW against each baseline run (one, or several for the
    between-runs rule). The verdicts are recorded in the first one, ``docs[0]["check"]``.
    """
    doc = docs[0]
    where = doc["sides"]["new"]["path"]
    results: list[dict[str, Any]] = []
    failures: list[str] = []
    for pair in doc["pairs"]:
        others = [(d, _partner(d, pair)) for d in docs[1:]]
        for metric in metrics:
            for what, rec in _targets(pair, metric, ops, where):
                if rec is None or rec["delta_pct"] is None:
                    raise InputError(
                        where,
                        f"{pair['label']}: no {what} in BASE to compare (--metric {metric})",
                    )
                base_us = [rec["base_us"], *_other_medians(others, metric, ops, what)]
                if others:
                    rec = difference_record(between_runs(base_us, rec["new_us"]))
                    assert rec is not None
                bound = rec["low_pct"] if rec["low_pct"] is not None else rec["delta_pct"]
                failed = bound > max_regression_pct
                results.append(
                    {
                        "label": pair["label"],
                        "metric": metric,
                        "what": what,
                        "baseline_medians_us": base_us,
                        "base_us": rec["base_us"],
                        "new_us": rec["new_us"],
                        "delta_pct": rec["delta_pct"],
                        "low_pct": rec["low_pct"],
                        "high_pct": rec["high_pct"],
                        "failed": failed,
                    }
                )
                if failed:
                    failures.append(_line(pair["label"], what, rec, max_regression_pct))
    doc["check"] = {
        "max_regression_pct": max_regression_pct,
        "metrics": metrics,
        "ops": ops,
        "baselines": [d["sides"]["base"]["path"] for d in docs],
        "noise": "step-to-step interval (diff.json's method)"
        if len(docs) == 1
        else BETWEEN_RUNS_METHOD,
        "rule": "fails when the lower end of the interval exceeds the threshold",
        "results": results,
        "passed": not failures,
    }
    return failures


def _other_medians(
    others: list[tuple[dict[str, Any], dict[str, Any]]], metric: str, ops: list[str], what: str
) -> list[float]:
    """BASE's median of ``what`` in each further baseline's (document, pair)."""
    medians = []
    for d, pair in others:
        where = d["sides"]["base"]["path"]
        rec = dict(_targets(pair, metric, ops, where)).get(what)
        if rec is None or rec["base_us"] is None:
            raise InputError(where, f"{pair['label']}: no {what} to compare")
        medians.append(rec["base_us"])
    return medians


def _partner(doc: dict[str, Any], pair: dict[str, Any]) -> dict[str, Any]:
    """The pair of another baseline's document that compares the same NEW implementation."""
    pairs: list[dict[str, Any]] = doc["pairs"]
    for other in pairs:
        if other["new_label"] == pair["new_label"]:
            return other
    raise InputError(
        doc["sides"]["base"]["path"], f"has no implementation to compare with {pair['new_label']}"
    )


def _line(label: str, what: str, rec: dict[str, Any], threshold: float) -> str:
    interval = (
        f"interval {rec['low_pct']:+.1f} % to {rec['high_pct']:+.1f} %"
        if rec["low_pct"] is not None
        else rec.get("spread") or "noise not estimable"
    )
    return (
        f"{label}: {what} {rec['delta_pct']:+.1f} % ({rec['base_us']} -> {rec['new_us']} µs; "
        f"{interval}) exceeds the {threshold:g} % allowed"
    )

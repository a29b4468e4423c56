"""``check``: is NEW a regression against the baseline: more work per step, or slower beyond the
threshold and the noise?

*Structure* (:mod:`~nprof_report.report.diff.structure`): framework ops, runtime calls and device
activities per step, and the bytes and FLOPs a study declares, counted. A count is exact: NEW
fails when it exceeds the baseline's by more than ``max_count_increase`` (default 0); fewer is an
improvement. With several baselines NEW is compared with the largest of theirs (baselines of the
same code that disagree are said so).

*Time*: a metric fails when the lower end of its 95 % interval (:mod:`~nprof_report.report.diff.stats`)
lies above ``max_regression_pct`` of BASE's median: the regression is larger than the threshold
even at the favourable end of the noise. With too few steps to estimate the noise the difference
itself is compared with the threshold. With several baseline runs the noise is the spread between
runs (:func:`~nprof_report.report.diff.stats.between_runs`): NEW's median against the baseline
runs' mean, with the 95 % prediction interval of one more run.

*When time decides.* On a shared machine two captures of the same code differ by more than the
steps within one capture show. With one baseline that noise is unknown: the time verdict is
advice and does not fail the gate (``strict_time`` makes it). With several, when the baselines'
medians spread (max - min over their mean) by more than ``max_regression_pct``, time cannot tell
a regression of that size on this machine: the verdict is advice again and the exit code rests
on the structure alone (``strict_time``: it counts anyway). Each is stated in the notes.

Time metrics: ``step`` (step time), ``device`` (device time per step), ``dispatch`` (host dispatch
per step: the summed duration of the top-level ops). With ops named, the same metrics of those
ops instead: host total time per step, device total time per step, launch latency; and their
calls, runtime calls and device activities per step for the structural ones.
"""

from __future__ import annotations

import statistics
from typing import Any

from nprof_report.errors import InputError
from nprof_report.report.diff.compare import METRIC_WORDS, SERIES_WORDS, difference_record
from nprof_report.report.diff.optable import matching, record
from nprof_report.report.diff.stats import BETWEEN_RUNS_METHOD, between_runs
from nprof_report.report.diff.structure import (
    PATH_SERIES,
    PATH_WORDS,
    STRUCTURAL_METRICS,
    WORDS,
    change_names,
    count_text,
    same_work,
)

OP_METRICS = {"step": "host_total_us", "device": "device_total_us", "dispatch": "launch_us"}
TIME_METRICS = tuple(OP_METRICS)
METRICS = (*TIME_METRICS, *STRUCTURAL_METRICS)
"""Every ``--metric`` name."""
DEFAULT_METRICS = ("step", *STRUCTURAL_METRICS)
"""Without ``--metric``: step time and every structural count (bytes and FLOPs where declared)."""
DEFAULT_MAX_REGRESSION_PCT = 5.0
DEFAULT_MAX_COUNT_INCREASE = 0
KEEP_BASELINES = 3
"""How many baseline runs the messages advise keeping (docs/gate.md says why)."""


def parse_threshold(text: str) -> float:
    """``5%`` or ``5`` -> 5.0 (percent)."""
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        raise ValueError(f"{text!r} is not a percentage like 5%") from None
    if not value >= 0:
        raise ValueError(f"{text!r} is not a percentage like 5%")
    return value


def _rows(pair: dict[str, Any], wanted: str) -> list[tuple[str, dict[str, Any]]]:
    """(status, record) of each op of the pair named ``wanted`` (:func:`~.optable.matching`):
    the aligned ones, then the added, then the removed, in the table's order."""
    return [
        (r["status"], record(r, pair["base_steps"], pair["new_steps"]))
        for r in matching(pair["table"], wanted).iter_rows(named=True)
    ]


def _label(op: dict[str, Any]) -> str:
    return " > ".join([*op["context"], op["name"]])


def _targets(
    pair: dict[str, Any],
    metric: str,
    ops: list[str],
    where: str,
    skipped: list[str] | None = None,
) -> list[tuple[str, dict[str, Any] | None]]:
    """(what, difference record) for the time metric of the pair, or of each named op. An op in
    one side only has no time to compare: with ``skipped`` (the default metrics, which count it)
    it is named there, else it is an error."""
    if not ops:
        return [(METRIC_WORDS[metric], pair["metrics"][metric])]
    out = []
    for wanted in ops:
        rows = _rows(pair, wanted)
        found = [o for status, o in rows if status == "aligned"]
        one_side = [o for status, o in rows if status != "aligned"]
        if not found and one_side and skipped is not None:
            skipped.append(
                f"{pair['label']}: --op {wanted} is in one side only: its counts are checked, "
                "not its time"
            )
            continue
        if not found:
            raise InputError(where, f"--op {wanted}: no op of that name in both BASE and NEW")
        for o in found:
            out.append((f"{_label(o)} {SERIES_WORDS[OP_METRICS[metric]]}", o[OP_METRICS[metric]]))
    return out


def _count_targets(
    pair: dict[str, Any], metric: str, ops: list[str], where: str
) -> list[tuple[str, dict[str, Any] | None, str]]:
    """(what, {base, new, delta} or None, the ops the change comes from) for a structural
    metric of the pair, or of each named op (in BASE, NEW or both: an added op has 0 in BASE)."""
    structure = pair["structure"]
    if not ops:
        return [
            (WORDS[metric], structure["metrics"][metric], change_names(structure["paths"], metric))
        ]
    if metric not in PATH_SERIES:
        raise InputError(where, f"--metric {metric} is declared per call, not per op (--op)")
    series = PATH_SERIES[metric]
    out = []
    for wanted in ops:
        found: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
        for status, o in _rows(pair, wanted):
            value = o.get(series)
            if status == "aligned":
                found.append((o, value))
            elif status == "added":
                found.append((o, None if value is None else {"base": 0, "new": value}))
            else:
                found.append((o, None if value is None else {"base": value, "new": 0}))
        if not found:
            raise InputError(where, f"--op {wanted}: no op of that name in BASE or NEW")
        for o, rec in found:
            out.append((f"{_label(o)} {PATH_WORDS[metric]}", rec, ""))
    return out


def check(
    docs: list[dict[str, Any]],
    *,
    max_regression_pct: float,
    metrics: list[str] | None,
    ops: list[str],
    max_count_increase: float = DEFAULT_MAX_COUNT_INCREASE,
    strict_time: bool = False,
) -> list[str]:
    """Judge NEW against the baselines; return one line per failure (those that decide the exit
    code).

    ``docs``: the diff documents of NEW against each baseline run (one, or several for the
    between-runs rule). ``metrics`` None: :data:`DEFAULT_METRICS`, bytes and FLOPs only where
    both sides declare them. The verdicts, and notes on what was not decided by time and why,
    are recorded in the first document, ``docs[0]["check"]``.
    """
    explicit = metrics is not None
    chosen = list(metrics) if metrics is not None else list(DEFAULT_METRICS)
    doc = docs[0]
    where = doc["sides"]["new"]["path"]
    k = len(docs)
    results: list[dict[str, Any]] = []
    counted: list[dict[str, Any]] = []
    time_failures: list[str] = []
    notes: list[str] = []
    for pair in doc["pairs"]:
        others = [(d, _partner(d, pair)) for d in docs[1:]]
        for metric in chosen:
            if metric in STRUCTURAL_METRICS:
                counted += _check_counts(
                    pair, others, metric, ops, where, explicit, max_count_increase, notes
                )
                continue
            for what, rec in _targets(pair, metric, ops, where, None if explicit else notes):
                if rec is None or rec["delta_pct"] is None:
                    raise InputError(
                        where,
                        f"{pair['label']}: no {what} in BASE to compare (--metric {metric})",
                    )
                base_us = [rec["base_us"], *_other_medians(others, metric, ops, what)]
                if others:
                    rec = difference_record(between_runs(base_us, rec["new_us"]))
                    assert rec is not None
                spread = _spread_pct(base_us)
                decides = spread is not None and spread <= max_regression_pct
                bound = rec["low_pct"] if rec["low_pct"] is not None else rec["delta_pct"]
                over = bound > max_regression_pct
                binding = decides or strict_time
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
                        "spread_pct": spread,
                        "decides": decides,
                        "binding": binding,
                        "exceeds_threshold": over,
                        "failed": over and binding,
                    }
                )
                line = _line(pair["label"], what, rec, max_regression_pct, k)
                if over and binding:
                    time_failures.append(line)
                elif binding:
                    notes.append(f"time: {line}")
                else:
                    why = (
                        "one baseline: the noise between runs is unknown"
                        if k == 1
                        else ("the baselines disagree by more than the threshold")
                    )
                    notes.append(f"time (advice, {why}): {line}")
                if k > 1 and not decides:
                    notes.append(
                        _undecided(pair["label"], what, base_us, spread, max_regression_pct)
                    )
    failures = [_count_failure(c, max_count_increase) for c in counted if c["failed"]]
    failures += time_failures
    time_notes, basis = _time_verdict(results, k, strict_time, max_regression_pct)
    structure_notes = _structure_notes(doc, counted)
    if not counted and results and not any(r["binding"] for r in results):
        time_notes.append(
            "no structural metric was checked and time does not decide: this check cannot fail "
            "(check the default metrics, or pass --strict-time)"
        )
    doc["check"] = {
        "max_regression_pct": max_regression_pct,
        "max_count_increase": max_count_increase,
        "metrics": chosen,
        "ops": ops,
        "strict_time": strict_time,
        "baselines": [d["sides"]["base"]["path"] for d in docs],
        "noise": "step-to-step interval (diff.json's method); the noise between runs is unknown"
        if k == 1
        else BETWEEN_RUNS_METHOD,
        "rule": "structure: fails when a count per step exceeds the baseline's by more than "
        f"{count_text(max_count_increase)}; time: fails when the lower end of the interval "
        "exceeds the threshold, where time decides (several baselines whose medians spread by "
        "no more than the threshold, or --strict-time)",
        "exit_basis": basis,
        "results": results,
        "structure_results": counted,
        "notes": [*structure_notes, *notes, *time_notes],
        "passed": not failures,
    }
    return failures


def _check_counts(
    pair: dict[str, Any],
    others: list[tuple[dict[str, Any], dict[str, Any]]],
    metric: str,
    ops: list[str],
    where: str,
    explicit: bool,
    allowed: float,
    notes: list[str],
) -> list[dict[str, Any]]:
    """The structural results of ``metric`` for one pair (none where a default metric has no
    figure on a side: bytes and FLOPs that the study does not declare)."""
    if ops and metric not in PATH_SERIES and not explicit:
        return []  # bytes and FLOPs are declared per call, not per op
    out = []
    further = [
        dict((w, r) for w, r, _ in _count_targets(p, metric, ops, d["sides"]["base"]["path"]))
        for d, p in others
    ]
    for what, rec, names in _count_targets(pair, metric, ops, where):
        if rec is None:
            if explicit:
                why = (
                    "neither run declares it"
                    if metric in ("bytes", "flops")
                    else "a side's summary.json is older than the per-op counts"
                )
                raise InputError(where, f"{pair['label']}: no {what} to compare ({why})")
            if metric in ("bytes", "flops") and _declared_on_one_side(pair, metric):
                notes.append(f"{pair['label']}: {WORDS[metric]} declared on one side only")
            continue
        counts = [rec["base"]]
        for d, table in zip(others, further):
            other = table.get(what)
            if other is None:
                raise InputError(d[0]["sides"]["base"]["path"], f"{pair['label']}: no {what}")
            counts.append(other["base"])
        base = max(counts)
        delta = rec["new"] - base
        out.append(
            {
                "label": pair["label"],
                "metric": metric,
                "what": what,
                "baseline_counts": counts,
                "base": base,
                "new": rec["new"],
                "delta": delta,
                "changes": names,
                "baselines_agree": len(set(counts)) == 1,
                "improved": delta < 0,
                "failed": delta > allowed,
            }
        )
    return out


def _declared_on_one_side(pair: dict[str, Any], metric: str) -> bool:
    return metric in pair["structure"].get("one_sided", [])


def _spread_pct(medians: list[float]) -> float | None:
    """How far the baseline runs' medians spread: (max - min) over their mean, in percent (None
    with one run: its run-to-run noise is unknown)."""
    if len(medians) < 2:
        return None
    mean = statistics.fmean(medians)
    if not mean:
        return None
    return round(100 * (max(medians) - min(medians)) / mean, 2)


def _undecided(
    label: str, what: str, medians: list[float], spread: float | None, threshold: float
) -> str:
    span = f"{min(medians):.3f} to {max(medians):.3f} µs"
    spread_text = "unknown" if spread is None else f"{spread:.1f} % of their mean"
    return (
        f"time cannot decide on this machine: {label}: the {len(medians)} baselines' {what} "
        f"medians span {span} (spread {spread_text}), more than the {threshold:g} % allowed"
    )


def _time_verdict(
    results: list[dict[str, Any]], k: int, strict: bool, threshold: float
) -> tuple[list[str], str]:
    """What the exit code rests on, and the notes that say why time did or did not decide it."""
    if not results:
        return [], "structure"
    undecided = [r for r in results if not r["decides"]]
    if not undecided:
        return [], "structure and time"
    keep = (
        f"keep {KEEP_BASELINES} baselines of the same code (--baseline three times): their "
        "spread is the noise that time is judged against"
    )
    if k == 1:
        if strict:
            return [
                "--strict-time: the time verdict counts although, with one baseline, the noise "
                f"between runs is unknown; {keep}"
            ], "structure and time (--strict-time)"
        return [
            "with one baseline the noise between runs is unknown: the time verdict is advice and "
            f"does not fail the gate (--strict-time makes it); {keep}"
        ], "structure alone"
    if strict:
        return [
            "--strict-time: the time verdict counts although the baselines disagree by more "
            f"than the {threshold:g} % allowed"
        ], "structure and time (--strict-time)"
    alone = len(undecided) == len(results)
    return [
        (
            "the exit code rests on the structural metrics alone"
            if alone
            else "those time results do not decide the exit code"
        )
        + " (time cannot decide on this machine where the baselines disagree by more than the "
        "threshold; --strict-time makes it count)"
    ], "structure alone" if alone else "structure and time"


def _structure_notes(doc: dict[str, Any], counted: list[dict[str, Any]]) -> list[str]:
    """One line per implementation on its structure: the same work, fewer (an improvement), or
    baselines that disagree."""
    notes = []
    for pair in doc["pairs"]:
        mine = [c for c in counted if c["label"] == pair["label"]]
        if not mine:
            continue
        better = [c for c in mine if c["improved"]]
        worse = [c for c in mine if c["delta"] > 0]
        for c in mine:
            if not c["baselines_agree"]:
                notes.append(
                    f"structure: {pair['label']}: the baselines disagree on {c['what']} ("
                    + ", ".join(count_text(x) for x in c["baseline_counts"])
                    + "); NEW is compared with the largest"
                )
        for c in better:
            text = (
                f"structure: {pair['label']}: {c['what']} {count_text(c['new'])} instead of "
                f"{count_text(c['base'])}: an improvement"
            )
            notes.append(text + (f" ({c['changes']})" if c["changes"] else ""))
        for c in worse:
            if not c["failed"]:
                notes.append(
                    f"structure: {pair['label']}: {c['what']} {count_text(c['new'])} instead of "
                    f"{count_text(c['base'])}, within the increase allowed"
                    + (f" ({c['changes']})" if c["changes"] else "")
                )
        if not better and not worse:
            same = ""
            if _totals_only(mine):
                same = " (" + same_work({c["metric"]: {"new": c["new"]} for c in mine}) + ")"
            notes.append(
                f"structure: {pair['label']}: the same work per step as the baseline{same}"
            )
    return notes


def _totals_only(results: list[dict[str, Any]]) -> bool:
    return all(c["what"] == WORDS[c["metric"]] for c in results)


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


def _line(label: str, what: str, rec: dict[str, Any], threshold: float, k: int) -> str:
    if rec["low_pct"] is None:
        interval = rec.get("spread") or "noise not estimable"  # one step: no spread
    else:
        kind = "prediction interval" if k > 1 else "interval"
        interval = f"{kind} {rec['low_pct']:+.1f} % to {rec['high_pct']:+.1f} %"
    bound = rec["low_pct"] if rec["low_pct"] is not None else rec["delta_pct"]
    verdict = "exceeds" if bound > threshold else "within"
    against = f"the {k} baselines' mean" if k > 1 else "the baseline"
    return (
        f"{label}: {what} {rec['delta_pct']:+.1f} % against {against} ({rec['base_us']} -> "
        f"{rec['new_us']} µs; {interval}): {verdict} the {threshold:g} % allowed"
    )


def _count_failure(c: dict[str, Any], allowed: float) -> str:
    text = (
        f"{c['label']}: {c['what']} {count_text(c['new'])} instead of {count_text(c['base'])} "
        f"(+{count_text(c['delta'])}; {count_text(allowed)} allowed)"
    )
    return text + (f": {c['changes']}" if c["changes"] else "")

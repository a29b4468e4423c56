"""The work a step does, counted: what ``diff`` names first and ``check`` compares exactly.

Time on a shared machine varies from capture to capture by more than most regressions; the work
a step dispatches does not. A profile counts it: the framework ops a step dispatches (nested ones
included), the runtime calls it makes (launches, copies, synchronizations), the device activities
it runs, and, where the study declares them for an implementation, the bytes it moves and the
FLOPs it does per call. Each is a median over the run's profiled steps, in total and per op path
(:mod:`~nprof_report.report.figures.diff_profile`). They are counts: a difference is exact, with
no interval; more is a regression, fewer an improvement.

The per-step totals come from each implementation's per-step rows (``all_ops``,
``runtime_calls``, ``device_activities``), which every ``summary.json`` of version 1 holds; the
per-path runtime calls and device activities from ``diff_profile``'s op series, which summaries
written before them lack (those paths then count framework ops alone). Declared bytes and FLOPs
come from ``diff_profile.declared`` or from the run's ``workload`` (a number, or one per
implementation name), where present.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from nprof_report.report.diff.optable import record
from nprof_report.report.figures import DECLARED, RunRecord, SideImplementation

STRUCTURAL_METRICS = ("ops", "runtime-calls", "device-activities", "bytes", "flops")
"""``--metric`` names of the structural metrics, in the order they are reported."""

STEP_COLUMN = {
    "ops": "all_ops",
    "runtime-calls": "runtime_calls",
    "device-activities": "device_activities",
}
"""The per-step row column of each counted metric."""

PATH_SERIES = {
    "ops": "calls",
    "runtime-calls": "runtime_calls",
    "device-activities": "device_activities",
}
"""The op-path series of each counted metric (``bytes`` and ``flops`` are per call, not per op)."""

DECLARED_KEY = {"bytes": DECLARED[0], "flops": DECLARED[1]}

WORDS = {
    "ops": "framework ops per step",
    "runtime-calls": "runtime calls per step",
    "device-activities": "device activities per step",
    "bytes": "declared bytes moved per step",
    "flops": "declared FLOPs per step",
}
PATH_WORDS = {
    "ops": "calls per step",
    "runtime-calls": "runtime calls per step",
    "device-activities": "device activities per step",
}
# how a sentence says what NEW does (label + verb + count + noun)
_VERB = {
    "ops": ("dispatches", "framework ops per step"),
    "runtime-calls": ("makes", "runtime calls per step"),
    "device-activities": ("runs", "device activities per step"),
    "bytes": ("declares", "bytes moved per step"),
    "flops": ("declares", "FLOPs per step"),
}
MAX_NAMED = 8
"""Op names a sentence names before it says how many more there are."""


def count_text(x: float | None) -> str:
    """A count as the pages print it: ``7``, ``7.5``; ``–`` for none."""
    if x is None:
        return "–"
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _median(values: Sequence[float | None]) -> float | None:
    """The median, an int where it is whole (counts stay counts in diff.json)."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    m = statistics.median(present)
    return int(m) if float(m).is_integer() else m


def _declared(impl: SideImplementation, run: RunRecord | None, key: str) -> float | None:
    """The declared ``key`` (bytes_moved, flops) per call of ``impl``, where present."""
    profile: Mapping[str, Any] = impl.get("diff_profile") or {}
    declared: Mapping[str, Any] = profile.get("declared") or {}
    own = _number(declared.get(key))
    if own is not None:
        return own
    workload: Any = run.get("workload") if run else None
    value = workload.get(key) if isinstance(workload, Mapping) else None
    if isinstance(value, Mapping):  # one per implementation name (a sweep's label: size/name)
        label = impl.get("label") or ""
        value = value.get(label, value.get(label.rsplit("/", 1)[-1]))
    return _number(value)


def _number(x: Any) -> float | None:
    """``x`` as a float where it is a count (a non-negative number, not a bool)."""
    if isinstance(x, int | float) and not isinstance(x, bool) and x >= 0:
        return float(x)
    return None


def totals(impl: SideImplementation, run: RunRecord | None) -> dict[str, float | None]:
    """Per structural metric, the median per step of ``impl`` (None where it has none: no
    steps, or no declaration)."""
    rows: Sequence[Mapping[str, Any]] = impl.get("steps") or []
    out: dict[str, float | None] = {}
    for metric, column in STEP_COLUMN.items():
        out[metric] = _median([r.get(column) for r in rows]) if rows else None
    # the capture calls the implementation once per profiled step: per call is per step
    for metric, key in DECLARED_KEY.items():
        out[metric] = _declared(impl, run, key)
    return out


def _change(base: float | None, new: float | None) -> dict[str, Any] | None:
    if base is None or new is None:
        return None
    return {"base": base, "new": new, "delta": new - base}


def path_changes(table: pl.DataFrame, sb: int, sn: int) -> list[dict[str, Any]]:
    """Op paths whose counts per step differ, in the order NEW (else BASE) first runs them:
    name, context, ``status`` (added, removed, more, fewer or changed) and, per counted metric,
    ``{base, new, delta}`` (None where a side's document lacks the series; an added op counts
    from 0, a removed one to 0). ``table``: the pair's op table (:mod:`.optable`); the paths are
    found in its columns, and only they are made records."""
    changed = pl.lit(False)
    for series in PATH_SERIES.values():
        delta = (
            pl.when(pl.col("status") == "aligned")
            .then(pl.col(f"{series}_delta"))
            .otherwise(pl.coalesce(f"{series}_new", f"{series}_base"))
        )
        changed = changed | (delta.is_not_null() & (delta != 0)).fill_null(False)
    rows = []
    for op in table.filter(changed).iter_rows(named=True):
        rec = record(op, sb, sn)
        changes: dict[str, dict[str, Any] | None] = {}
        for metric, series in PATH_SERIES.items():
            value = rec[series]
            if op["status"] == "aligned":
                changes[metric] = value and _change(value["base"], value["new"])
            elif value is None:
                changes[metric] = None
            else:
                changes[metric] = (
                    _change(0.0, value) if op["status"] == "added" else _change(value, 0.0)
                )
        status = op["status"]
        if status == "aligned":
            ops_delta = (changes["ops"] or {}).get("delta") or 0
            status = "changed" if not ops_delta else ("more" if ops_delta > 0 else "fewer")
        rows.append(
            {
                "name": op["name"],
                "context": op["context"],
                "kind": op["kind"],
                "status": status,
                "order": op["order"],
                **changes,
            }
        )
    big = 1 << 62
    rows.sort(
        key=lambda r: (
            r["order"] if r["order"] is not None else big,
            r["context"],
            r["name"],
        )
    )
    return rows


def _named(paths: list[dict[str, Any]], metric: str, sign: int) -> tuple[list[str], bool]:
    """Op names whose ``metric`` count went up (``sign`` 1) or down (-1), each once, in run
    order; ``2× aten::sub`` where it changed by 2. An op inside an op whose count changed the
    same way is left to it (``aten::sum`` stands for the ``aten::fill_`` it calls): the second
    value says whether there were such."""
    moved = {
        (*p["context"], p["name"])
        for p in paths
        if (c := p.get(metric)) is not None and c["delta"] and (c["delta"] > 0) == (sign > 0)
    }
    by_name: dict[str, float] = {}
    inside = False
    for p in paths:
        change = p.get(metric)
        if change is None or not change["delta"] or (change["delta"] > 0) != (sign > 0):
            continue
        context = tuple(p["context"])
        if any(context[:i] in moved for i in range(1, len(context) + 1)):
            inside = True
            continue
        by_name[p["name"]] = by_name.get(p["name"], 0.0) + abs(change["delta"])
    names = [name if n == 1 else f"{count_text(n)}× {name}" for name, n in by_name.items()]
    return names, inside


def _names_text(names: list[str]) -> str:
    if len(names) > MAX_NAMED:
        return ", ".join(names[:MAX_NAMED]) + f" and {len(names) - MAX_NAMED} more"
    return ", ".join(names)


def change_names(paths: list[dict[str, Any]], metric: str) -> str:
    """``added aten::sub, aten::exp; removed aten::div``: which ops a metric's change comes from
    (empty where the per-path series cannot say)."""
    if metric not in PATH_SERIES:
        return ""
    words = ("added", "removed") if metric == "ops" else ("more from", "fewer from")
    parts = []
    for word, sign in zip(words, (+1, -1)):
        names, inside = _named(paths, metric, sign)
        if names:
            text = f"{word} {_names_text(names)}"
            if inside and metric == "ops":
                text += " (and the ops they call)"
            parts.append(text)
    return "; ".join(parts)


def _sentence(
    label: str, metrics: dict[str, dict[str, Any] | None], paths: list[dict[str, Any]]
) -> str:
    """The structural change in words, the ops that make it named: page 1's first sentence."""
    clauses = []
    for metric in STRUCTURAL_METRICS:
        change = metrics.get(metric)
        if change is None:
            continue
        verb, noun = _VERB[metric]
        names = change_names(paths, metric)
        if change["delta"]:
            text = (
                f"{verb} {count_text(change['new'])} {noun} instead of {count_text(change['base'])}"
            )
        elif names:
            text = f"{verb} {count_text(change['new'])} {noun}, as BASE, but not the same ones"
        else:
            continue
        clauses.append(text + (f": {names}" if names else ""))
    if clauses:
        return f"{label} " + "; ".join(clauses) + "."
    return f"{label} does the same work per step as BASE: " + same_work(metrics) + "."


def same_work(metrics: Mapping[str, Mapping[str, Any] | None], side: str = "new") -> str:
    """``7 framework ops, 14 runtime calls, 14 device activities per step``."""
    parts = []
    for metric in STRUCTURAL_METRICS:
        change = metrics.get(metric)
        if change is None:
            continue
        value = change[side]
        noun = _VERB[metric][1].removesuffix(" per step")
        if metric in ("runtime-calls", "device-activities") and not value:
            parts.append(f"no {noun}")
        else:
            parts.append(f"{count_text(value)} {noun}")
    return ", ".join(parts) + " per step"


def compare_structure(
    base: SideImplementation,
    new: SideImplementation,
    base_run: RunRecord | None,
    new_run: RunRecord | None,
    label: str,
    table: pl.DataFrame,
) -> dict[str, Any]:
    """A pair's ``structure`` record: per metric ``{base, new, delta}`` (None where a side has
    no such figure), the op paths whose counts changed (``table``: the pair's op table), and
    the sentence page 1 opens with."""
    b, n = totals(base, base_run), totals(new, new_run)
    metrics = {m: _change(b[m], n[m]) for m in STRUCTURAL_METRICS}
    sb, sn = len(base["diff_profile"]["steps"]), len(new["diff_profile"]["steps"])
    paths = path_changes(table, sb, sn)
    return {
        "metrics": metrics,
        "paths": paths,
        "paths_changed": len(paths),
        "changed": any(c is not None and c["delta"] for c in metrics.values()) or bool(paths),
        "per_path_counts": [m for m in PATH_SERIES if _has_series(base, new, PATH_SERIES[m])],
        # figures only one side has (bytes declared by NEW's study and not BASE's)
        "one_sided": [m for m in STRUCTURAL_METRICS if (b[m] is None) != (n[m] is None)],
        "sentence": _sentence(label, metrics, paths),
    }


def _has_series(base: SideImplementation, new: SideImplementation, series: str) -> bool:
    """Whether both sides' op series hold ``series`` (older summaries lack the counts)."""
    for impl in (base, new):
        ops = impl["diff_profile"]["ops"]
        if ops.height and ops[series][0] is None:
            return False
    return True

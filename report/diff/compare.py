"""BASE against NEW: per implementation, step metrics, aligned ops, the waterfall and a verdict.

Implementations are paired by label (a run's implementation names); two sides of one
implementation each are paired whatever their labels. Ops are aligned by path
(:mod:`~nprof_report.report.figures.diff_profile`): name plus enclosing ops. Every difference is NEW's
median over steps minus BASE's, with the interval of :mod:`~nprof_report.report.diff.stats`.

An aligned op has *moved* when the larger of its host self and device self differences (its
*impact* on the step) exceeds the noise and is at least :data:`MOVED_MIN_SHARE_PCT` of BASE's
median step time: with dozens of ops, some 95 % intervals exclude zero by chance, and those
differences are tiny beside the step.

The work per step, counted (framework ops, runtime calls, device activities, declared bytes and
FLOPs, :mod:`.structure`), is compared exactly beside the times: each pair's ``structure``.

The waterfall splits the step-time difference into parts that add up to it: per side, the
parts of the middle step (the two middle steps averaged when their count is even, as the median
is), so each side's parts sum to its median step time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nprof_report import __version__
from nprof_report.errors import InputError
from nprof_report.report.diff.inputs import DIFF_FORMAT, DIFF_VERSION, Side
from nprof_report.report.diff.optable import (
    MOVED_MIN_SHARE_PCT,
    op_table,
    record,
    rows_of,
    shown,
    top_op,
    with_shares,
)
from nprof_report.report.diff.stats import (
    CONFIDENCE,
    MAX_BOOTSTRAP_STEPS,
    METHOD,
    MIN_STEPS,
    RESAMPLES,
    Difference,
    differences,
)
from nprof_report.report.diff.structure import compare_structure
from nprof_report.report.figures import (
    ONE_STEP,
    PARTS,
    DiffProfile,
    RunRecord,
    SideImplementation,
)

# rows the pages show (diff.json and the CSVs hold every row)
TOP_MOVERS = 10
MAX_OP_ROWS = 40
STEP_METRICS = {"step": "dur_us", "device": "device_us", "dispatch": "dispatch_us"}
METRIC_WORDS = {
    "step": "step time",
    "device": "device time per step",
    "dispatch": "host dispatch per step",
}
SERIES_WORDS = {
    "host_self_us": "host self time",
    "host_total_us": "host total time",
    "device_self_us": "device time",
    "device_total_us": "device total time",
    "launch_us": "launch latency",
}


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(float(x), nd)


def _pct(x: float | None, base: float) -> float | None:
    return None if (x is None or not base) else round(100 * x / base, 2)


def difference_record(d: Difference | None, *, one_step: bool = False) -> dict[str, Any] | None:
    """A difference as diff.json keeps it (µs; percentages of BASE's median); ``one_step``: a
    side has one step, said in ``spread`` (:data:`ONE_STEP`) where a verdict would be."""
    if d is None:
        return None
    low_pct, high_pct = _pct(d.low, d.base), _pct(d.high, d.base)
    spread = {"spread": ONE_STEP} if one_step and d.low is None else {}
    return {
        **spread,
        "base_us": _r(d.base),
        "new_us": _r(d.new),
        "delta_us": _r(d.delta),
        "delta_pct": _pct(d.delta, d.base),
        "low_us": _r(d.low),
        "high_us": _r(d.high),
        "low_pct": low_pct,
        "high_pct": high_pct,
        # the ± of the verdict
        "half_width_pct": None
        if (low_pct is None or high_pct is None)
        else round((high_pct - low_pct) / 2, 2),
        "exceeds_noise": d.exceeds_noise,
    }


def pair(
    base: Side, new: Side
) -> tuple[list[tuple[SideImplementation, SideImplementation]], list[str]]:
    """Implementations paired by label, and a note for each one left without a partner."""
    if len(base.implementations) == 1 and len(new.implementations) == 1:
        return [(base.implementations[0], new.implementations[0])], []
    by_label = {i["label"]: i for i in new.implementations}
    pairs = [(b, by_label[b["label"]]) for b in base.implementations if b["label"] in by_label]
    paired = {b["label"] for b, _ in pairs}
    notes = [
        f"only in BASE: {i['label']}" for i in base.implementations if i["label"] not in paired
    ]
    notes += [f"only in NEW: {i['label']}" for i in new.implementations if i["label"] not in paired]
    if not pairs:
        raise InputError(
            new.path,
            "shares no implementation name with " + str(base.path),
            "BASE has "
            + ", ".join(i["label"] for i in base.implementations)
            + "; NEW has "
            + ", ".join(i["label"] for i in new.implementations),
        )
    return pairs, notes


def _step_values(impl: SideImplementation, column: str) -> list[float]:
    rows: Sequence[Mapping[str, Any]] = impl["steps"]  # a column of STEP_METRICS
    return [r[column] for r in rows if r.get(column) is not None]


def _middle(values: list[float], order: list[int]) -> float:
    """Mean of ``values`` at the middle position(s) of ``order``."""
    n = len(order)
    mid = [order[(n - 1) // 2], order[n // 2]]
    return (values[mid[0]] + values[mid[1]]) / 2


def waterfall(base: DiffProfile, new: DiffProfile) -> dict[str, Any] | None:
    """The median step's parts on each side and their differences (adding up to the total)."""
    sides = []
    for profile in (base, new):
        steps = profile["step_us"]
        if not steps:
            return None
        order = sorted(range(len(steps)), key=lambda i: (steps[i], profile["steps"][i]))
        parts = {p: _middle(profile["parts_us"].get(p, [0.0] * len(steps)), order) for p in PARTS}
        sides.append((_middle(steps, order), parts))
    (b_step, b_parts), (n_step, n_parts) = sides
    rows = [
        {
            "part": p,
            "base_us": _r(b_parts[p], 4),
            "new_us": _r(n_parts[p], 4),
            "delta_us": _r(n_parts[p] - b_parts[p], 4),
        }
        for p in PARTS
        if b_parts[p] or n_parts[p]
    ]
    return {
        "base_step_us": _r(b_step, 4),
        "new_step_us": _r(n_step, 4),
        "total_delta_us": _r(n_step - b_step, 4),
        "parts": rows,
    }


def _label(op: dict[str, Any]) -> str:
    return " > ".join([*op["context"], op["name"]])


def verdict(step: dict[str, Any] | None, top: dict[str, Any] | None) -> str:
    """The first sentence of the report: how much slower or faster, and where it comes from
    (``top``: the op that moved the step most in its direction, :func:`~.optable.top_op`)."""
    if step is None or step["delta_pct"] is None:
        return "No step time to compare: the traces hold no ProfilerStep#N annotations."
    pct = step["delta_pct"]
    way = "slower" if pct > 0 else "faster"
    if step["low_pct"] is None and step.get("spread"):
        return f"NEW is {abs(pct):.1f} % {way} per step; {step['spread']}, so no noise verdict."
    if step["low_pct"] is None:
        return (
            f"NEW is {abs(pct):.1f} % {way} per step; too few steps (fewer than {MIN_STEPS} on "
            "a side) to tell whether that exceeds the noise."
        )
    spread = step["half_width_pct"]
    interval = f"{CONFIDENCE} % interval {step['low_pct']:+.1f} % to {step['high_pct']:+.1f} %"
    if not step["exceeds_noise"]:
        return (
            f"No step-time difference beyond the noise: NEW is {abs(pct):.1f} % ± {spread:.1f} % "
            f"{way} per step ({interval})."
        )
    text = f"NEW is {abs(pct):.1f} % ± {spread:.1f} % {way} per step ({interval})"
    if top is not None and step["delta_us"]:
        share = top["share_of_step_delta_pct"]
        text += f"; {share:.0f} % of it is {_label(top)}'s {SERIES_WORDS[top['impact_metric']]}"
    return text + "."


def compare_pair(
    base: SideImplementation,
    new: SideImplementation,
    *,
    intervals: bool = True,
    base_run: RunRecord | None = None,
    new_run: RunRecord | None = None,
) -> dict[str, Any]:
    """One implementation's comparison (``intervals``: as :func:`~.stats.differences`; the
    runs: where declared bytes and FLOPs may be, :mod:`.structure`). ``table`` holds every op
    (:func:`~.optable.op_table`); ``ops``, ``added`` and ``removed`` the records of those the
    pages show (:func:`~.optable.shown`)."""
    found = differences(
        [(_step_values(base, col), _step_values(new, col)) for col in STEP_METRICS.values()],
        intervals=intervals,
    )
    bp, np_ = base["diff_profile"], new["diff_profile"]
    sb, sn = len(bp["steps"]), len(np_["steps"])
    one_step = min(sb, sn) == 1
    metrics = {m: difference_record(d, one_step=one_step) for m, d in zip(STEP_METRICS, found)}
    step = metrics["step"]
    base_step_us = (step or {}).get("base_us") or 0.0
    step_delta = (step or {}).get("delta_us")
    table = with_shares(op_table(bp, np_, base_step_us, intervals=intervals), step_delta)
    top = top_op(table, step_delta, sb, sn) if step_delta else None
    counts = table.group_by("status").len()
    count = dict(zip(counts["status"].to_list(), counts["len"].to_list()))
    aligned = rows_of(table, "aligned")
    label = new["label"] if new["label"] == base["label"] else f"{base['label']} → {new['label']}"
    return {
        "label": label,
        "base_label": base["label"],
        "new_label": new["label"],
        "base_steps": sb,
        "new_steps": sn,
        "base_step_rule": base.get("step_rule"),
        "new_step_rule": new.get("step_rule"),
        "verdict": verdict(step, top),
        # the work per step, counted: page 1's first sentence, check's structural metrics
        "structure": compare_structure(base, new, base_run, new_run, label, table),
        "counts": {
            "aligned": count.get("aligned", 0),
            "moved": int(aligned["moved"].sum()),
            "added": count.get("added", 0),
            "removed": count.get("removed", 0),
            "kernels_changed": int(aligned["kernels_changed"].sum()),
        },
        "metrics": metrics,
        "waterfall": waterfall(bp, np_),
        "table": table,
        **{
            key: [
                record(r, sb, sn) for r in shown(table, status, MAX_OP_ROWS).iter_rows(named=True)
            ]
            for key, status in (("ops", "aligned"), ("added", "added"), ("removed", "removed"))
        },
    }


def diff_document(base: Side, new: Side, *, intervals: bool = True) -> dict[str, Any]:
    """The ``diff.json`` document (format ``nprof-diff`` version 1); without ``intervals``, the
    medians alone (a further baseline of ``check``, of which only they are read)."""
    pairs, notes = pair(base, new)
    return {
        "format": DIFF_FORMAT,
        "format_version": DIFF_VERSION,
        "tool_version": __version__,
        "method": {
            "interval": METHOD,
            "confidence_pct": CONFIDENCE,
            "resamples": RESAMPLES,
            "min_steps": MIN_STEPS,
            "max_bootstrap_steps": MAX_BOOTSTRAP_STEPS,
            "moved_min_share_pct": MOVED_MIN_SHARE_PCT,
            "pages_show": {"top_movers": TOP_MOVERS, "rows_per_table": MAX_OP_ROWS},
        },
        "pairs": [
            compare_pair(b, n, intervals=intervals, base_run=base.run, new_run=new.run)
            for b, n in pairs
        ],
        "unpaired": notes,
        "caveats": [f"BASE: {c}" for c in base.caveats]
        + [f"NEW: {c}" for c in new.caveats]
        + _rule_caveats(pairs),
        "sides": {"base": base.record(), "new": new.record()},
    }


def _rule_caveats(pairs: list[tuple[SideImplementation, SideImplementation]]) -> list[str]:
    """A caveat for each pair whose sides found their steps by different rules (a stored
    document from before issue 27 has none, and says nothing)."""
    out = []
    for b, n in pairs:
        rb, rn = b.get("step_rule"), n.get("step_rule")
        if rb and rn and rb != rn:
            out.append(
                f"{n['label']}: BASE's steps are by the rule {rb}, NEW's by {rn} "
                "(parse/steps.py); their step times measure different spans"
            )
    return out

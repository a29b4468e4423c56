"""Page 1's sentences, as a reviewer reads them: which implementation is fastest (and whether its
output is right), what bounds each step, what failed, and whether the inputs were captured at all.

Every figure quoted comes from the summary (``summary.json``); :mod:`.model` and :mod:`.runsview`
place the sentences.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal

from nprof_report.report.figures import (
    Comparison,
    FailureRecord,
    ImplementationRecord,
    Metric,
    Summary,
    failure_sentence,
    metric_figures,
    named,
)
from nprof_report.report.view.tables import as_us


def fastest(
    impls: Sequence[ImplementationRecord],
    comparisons: Sequence[Comparison],
    wrong: Collection[str] = (),
) -> str:
    """``fused is fastest by un-profiled time per call: … against … for naive (1.9× faster); the
    difference exceeds the run-to-run noise.`` The first of ``impls`` is the baseline; ``wrong``:
    labels whose output failed the numerical check, marked wherever they are ranked."""
    if not impls:
        return "No implementation could be analysed."
    key: Literal["unprofiled_median_us", "step_median_us"] = (
        "unprofiled_median_us"
        if all(i["headline"].get("unprofiled_median_us") is not None for i in impls)
        else "step_median_us"
    )
    timed = [(i, t) for i in impls if (t := i["headline"][key]) is not None]
    if not timed:
        return "No step timings were found in the traces."
    best, best_time = min(timed, key=lambda it: it[1])
    base = impls[0]
    base_time = base["headline"][key]
    what = (
        "un-profiled time per call"
        if key == "unprofiled_median_us"
        else "median profiled step time"
    )
    text = f"{named(best['label'], wrong)} is fastest by {what}: {as_us(best_time)}"
    if best is not base and base_time:
        ratio = base_time / best_time
        comp = next((c for c in comparisons if c["label"] == best["label"]), None)
        metric: Metric = "unprofiled" if key == "unprofiled_median_us" else "step"
        noise = "exceeds" if comp and metric_figures(comp, metric)[2] else "does not exceed"
        judged = f"the difference {noise} the run-to-run noise."
        if metric == "step" and comp and comp.get("step_spread"):
            judged = f"{comp['step_spread']}, so no noise verdict."  # one step: no spread
        text += (
            f" against {as_us(base_time)} for {named(base['label'], wrong)} ({ratio:.2f}× "
            f"faster); {judged}"
        )
    else:
        text += f", the baseline ({named(base['label'], wrong)}) itself."
    ops = [(i["label"], i["headline"].get("framework_ops_per_step")) for i in impls]
    if all(o is not None for _, o in ops):
        text += (
            " Framework ops dispatched per step: "
            + ", ".join(f"{lbl} {o:g}" for lbl, o in ops)
            + "."
        )
    return text


UNLIKE = "NOT LIKE WITH LIKE"
"""How page 1 starts the sentence that says the implementations compared measure different
things (:func:`unlike_sentence`)."""


def unlike_sentence(impls: Sequence[ImplementationRecord]) -> str | None:
    """Page 1's warning where the implementations compared do not measure the same thing: their
    steps found by different rules (``ProfilerStep#N`` annotations against a whole profiled
    window, ``parse/steps.py``), or their device time from different sources (a GPU's
    activities, a Neuron system trace, none): traces of different workloads or platforms given
    together, whose ratios compare different spans or different devices."""
    differences = []
    rules = {i.get("step_rule") or "ProfilerStep" for i in impls}
    if len(rules) > 1:
        differences.append(
            "Steps: " + "; ".join(f"{i['label']}, {step_rule_words(i)}" for i in impls) + "."
        )
    sources = {i["label"]: i["device_time_source"].split(" (")[0] for i in impls}
    if len(set(sources.values())) > 1:
        differences.append(
            "Device time from: " + "; ".join(f"{k}, {v}" for k, v in sources.items()) + "."
        )
    if not differences:
        return None
    return (
        f"{UNLIKE}: these traces do not measure the same thing. {' '.join(differences)} Their "
        "step times and ratios compare different spans or different devices; compare traces of "
        "one workload, captured alike."
    )


def step_rule_words(impl: ImplementationRecord) -> str:
    """What the steps of ``impl`` are, in words (its ``step_rule``, ``parse/steps.py``)."""
    rule = impl.get("step_rule") or "ProfilerStep"
    n = impl["headline"]["steps"]
    if rule.startswith("annotation:"):
        return f"the {n} instances of the user annotation {rule[len('annotation:') :]!r}"
    if rule == "window":
        return "no ProfilerStep#N annotations: the whole profiled window is one step"
    return f"the {n} ProfilerStep#N annotations"


def shown_comparisons(comparisons: Sequence[Comparison]) -> list[Mapping[str, Any]]:
    """The comparisons as their table shows them: where a side has one step, the noise cell
    says so (``one step: no spread``) instead of a verdict."""
    return [
        {**c, "step_exceeds_noise": c["step_spread"]} if c.get("step_spread") else c
        for c in comparisons
    ]


def ops_words(n: float | None) -> str:
    """``1 framework op``, ``6 framework ops``."""
    if n is None:
        return "no framework op"
    return f"{n:g} framework op" + ("" if n == 1 else "s")


def bound_sentence(
    impls: Sequence[ImplementationRecord], backend: str | None, explain: bool = True
) -> str | None:
    """Host dispatch per step against device time per step, and which bounds the step, per
    implementation; where there is no device (a CPU run), what the split means there (in full
    with ``explain``, else in a clause)."""
    timed = [i for i in impls if i["headline"].get("step_median_us") is not None]
    if not timed:
        return None
    parts = []
    for i in timed:
        h = i["headline"]
        if h.get("bound_by") is None:
            continue
        kind = "dispatch-bound" if h["bound_by"] == "dispatch" else "device-bound"
        parts.append(
            f"{i['label']} is {kind}: {as_us(h['dispatch_per_step_us'])} of host dispatch per "
            f"step ({ops_words(h['framework_ops_per_step'])}) for "
            f"{as_us(h['device_per_step_us'])} of device work"
        )
    text = (
        ("Host dispatch against device time per step: " + "; ".join(parts) + ".") if parts else ""
    )
    hostonly = [i for i in timed if i["headline"].get("bound_by") is None]
    if hostonly:
        figures = ", ".join(
            f"{i['label']} {as_us(i['headline']['dispatch_per_step_us'])} for "
            f"{ops_words(i['headline']['framework_ops_per_step'])}"
            for i in hostonly
        )
        if backend in (None, "cpu") and not explain:
            text += f" No device: host dispatch per step ({figures}) holds the computation itself."
        elif backend in (None, "cpu"):
            where = "On the CPU" if backend == "cpu" else "In traces without device activity"
            text += (
                f" {where} there is no device: each op computes on the thread that dispatches "
                f"it, so host dispatch per step ({figures}) holds the computation itself and "
                "bounds the step, with no device time to set against it (on CUDA or Neuron the "
                "same split tells a host-bound step from a device-bound one)."
            )
        else:
            text += (
                f" No device activity was recorded for {', '.join(i['label'] for i in hostonly)} "
                f"although the backend is {backend}: host dispatch per step ({figures}) cannot "
                "be set against device work (see the findings)."
            )
    return text.strip() or None


def failures_sentence(records: Sequence[FailureRecord]) -> str | None:
    """``narrow_only FAILED at 16×256 (RuntimeError: …); it ran at …``, for each failure."""
    if not records:
        return None
    return ". ".join(failure_sentence(r) for r in records) + "."


def failed_note(record: FailureRecord) -> str:
    """How the question lists an implementation that failed: ``narrow_only (failed at
    16×256)``."""
    sizes = [s for s in record["sizes"] if s]
    where = f" at {', '.join(sizes)}" if sizes else ""
    status = "failed" if record["status"] == "failed" else record["status"]
    return f"{record['label']} ({status}{where})"


def listed(labels: Sequence[str], records: Sequence[FailureRecord]) -> str:
    """The implementations a question asks about: those with figures, then those that failed
    at every size shown, marked."""
    failed = {r["label"]: r for r in records}
    names = [failed_note(failed[n]) if n in failed else n for n in labels]
    names += [failed_note(r) for r in records if r["label"] not in labels]
    return ", ".join(names)


def constructed_banner(summary: Summary) -> str | None:
    """The sentence at the top of page 1 when any input was constructed, not captured."""
    records = summary.get("constructed") or []
    if not records:
        return None
    labels = list(dict.fromkeys(r["label"] for r in records))
    notes = list(dict.fromkeys(r["note"] for r in records))
    everyone = {i["label"] for i in summary["implementations"]} <= set(labels)
    one = len(labels) == 1
    if everyone:
        who = (
            "every input of this report is a constructed trace"
            if not one
            else (f"{labels[0]} is a constructed trace")
        )
    else:
        who = f"{', '.join(labels)} {'is a constructed trace' if one else 'are constructed traces'}"
    return (
        f"CONSTRUCTED, NOT CAPTURED: {who} ({'; '.join(notes)}). "
        f"{'Its' if one else 'Their'} figures show how the report reads such a trace, not how "
        "any hardware performs."
    )

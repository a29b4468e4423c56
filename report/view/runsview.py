"""Several runs in one report: page 1 per study, the runs side by side, the backends by structure.

Everything comes from the summary's ``runs``, ``across_runs`` and ``backends``
(:mod:`nprof_report.report.figures.runs`). Page 1 compares like with like: implementations
within a run at one size, and the same implementation at the same size across runs; never one
implementation of a run with another of another run. Runs of different studies (``build
--allow-mixed``) each get a block of their own, compared with nothing outside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from nprof_report.report.figures import (
    METRIC_WORDS,
    BackendComparison,
    CheckRecord,
    ImplementationRecord,
    RunComparison,
    RunSide,
    Summary,
    backend_sentence,
    run_sentence,
)
from nprof_report.report.view import charts
from nprof_report.report.view.charts import Chart
from nprof_report.report.view.columns import (
    ACROSS_RUNS_COLUMNS,
    BACKEND_OP_FIGURES,
    COMPARISON_COLUMNS,
    HEADLINE_COLUMNS,
)
from nprof_report.report.view.pageone import (
    bound_sentence,
    failures_sentence,
    fastest,
    listed,
    ops_words,
    shown_comparisons,
    unlike_sentence,
)
from nprof_report.report.view.safetext import show_bidi
from nprof_report.report.view.sweepview import check_sentence
from nprof_report.report.view.tables import Col, Table, as_text, as_us, make_table

GLOSSARY = [
    (
        "Runs side by side",
        "With several runs, each record is labelled with its run (its backend when the runs "
        "differ by backend, else its name) and its size where the runs hold several. Each "
        "implementation is compared with its run's first implementation at the same size, and "
        "with the same implementation at the same size in the study's first run (the baseline "
        "run), by the noise rule of the comparison table: never one implementation of a run "
        "with another of another run.",
    ),
    (
        "Backends side by side",
        "Runs of one study on different backends, compared by structure: the framework ops the "
        "study code dispatches, aligned by name; the device work each op launched, nested ops' "
        "included (kernel names differ between backends, so device work is grouped under the op "
        "that launched it); the host dispatch per call.",
    ),
]


@dataclass(frozen=True)
class StudyBlock:
    """One study's question, verdict and tables; the first study's are page 1."""

    study: str | None
    heading: str
    anchor: str
    question: str
    verdict: list[str]  # its paragraphs
    headline: Table
    comparisons: Table
    across: Table | None

    @property
    def tables(self) -> list[Table]:
        return [self.headline, self.comparisons, *([self.across] if self.across else [])]


@dataclass(frozen=True)
class BackendBlock:
    """One implementation (at one size) on two backends: what differs, and its ops aligned."""

    title: str
    sentence: str
    table: Table


@dataclass(frozen=True)
class BackendsView:
    """The backends section (``templates/runs.html.j2``)."""

    heading: str
    intro: str
    blocks: list[BackendBlock] = field(default_factory=list)
    charts: list[Chart] = field(default_factory=list)

    @property
    def tables(self) -> list[Table]:
        return [b.table for b in self.blocks]


@dataclass(frozen=True)
class RunsView:
    """What a report of several runs places: the title, a block per study, the charts of the
    runs side by side and the backends section."""

    title: str
    run_id: str
    blocks: list[StudyBlock]
    charts: list[Chart]
    backends: BackendsView | None


def subject(label: str) -> str:
    """A label without its run: ``naive``, ``naive @ 64×4096``."""
    return label.split("/", 1)[-1]


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text).strip("-").lower() or "x"


def _describe(run: RunSide, baseline: bool) -> str:
    where = [f"backend {run['backend']}"] if run["backend"] else []
    if run["device"]:
        where.append(run["device"])
    if run["constructed"]:
        where.append("CONSTRUCTED")
    if baseline:
        where.insert(0, "the baseline run")
    return run["name"] + (f" ({'; '.join(where)})" if where else "")


def _largest(run: RunSide) -> str | None:
    return run["sizes"][-1] if run["sizes"] else None


def _at(run: RunSide, size: str | None) -> list[str]:
    return [m["label"] for m in run["members"] if m["size_label"] == size]


def _checks_of(run: RunSide, checks: list[CheckRecord]) -> list[CheckRecord]:
    prefix = run["prefix"] + "/"
    return [c for c in checks if c["label"].startswith(prefix)]


def _question(study: str | None, runs: list[RunSide], names: str, sizes: list[str]) -> str:
    described = ", ".join(_describe(r, k == 0) for k, r in enumerate(runs))
    at = f" at {', '.join(sizes)}" if sizes else ""
    if len(runs) == 1:
        what = f"{study} implementation" if study else "source"
        return f"Which {what} ({names}) is fastest in {described}{at}, and where does its time go?"
    if study is None:
        return (
            f"How do the runs {described} compare, source by source ({names}), and where does "
            "their time go?"
        )
    return (
        f"Which {study} implementation ({names}) is fastest in each run, and how do the runs "
        f"{described} compare{at}, implementation by implementation and size by size? Where "
        "does the time go?"
    )


def _verdict(
    runs: list[RunSide],
    records: dict[str, ImplementationRecord],
    summary: Summary,
    across: list[RunComparison],
    checks: list[CheckRecord],
) -> list[str]:
    """The verdict's paragraphs: each run's fastest, the failures, each run against the
    baseline run, what bounds each run's steps, the numerical check."""
    wrong = summary.get("output_wrong") or []
    comparisons = summary["comparisons"]
    sentences = []
    for run in runs:
        size = _largest(run)
        labels = _at(run, size)
        recs = [records[lbl] for lbl in labels if lbl in records]
        if not recs:
            continue
        where = f"In {run['name']}" + (f", at {size}" if size else "") + ": "
        unlike = unlike_sentence(recs)
        sentences += [where + unlike] if unlike else []
        sentences.append(where + fastest(recs, comparisons, wrong))
    base = runs[0]
    for run in runs[1:]:
        common = [s for s in run["sizes"] if s in base["sizes"]]
        size = common[-1] if common else None
        mine = [c for c in across if c["run"] == run["name"] and c["size_label"] == size]
        said = [t for c in mine if (t := run_sentence(c, wrong))]
        if said:
            more = sum(1 for c in across if c["run"] == run["name"]) > len(mine)
            sentences.append(
                f"Against {base['name']}, the same implementation"
                + (f" at {size}" if size else "")
                + ": "
                + "; ".join(said)
                + (" (every size in the table below)." if more else ".")
            )
    explained = False
    for run in runs:
        recs = [records[lbl] for lbl in _at(run, _largest(run)) if lbl in records]
        bound = bound_sentence(recs, run["backend"], explain=not explained)
        if bound:
            sentences.append(f"{run['name']}: {bound}")
            explained = explained or run["backend"] in (None, "cpu")
    names = {r["name"] for r in runs}
    failed = failures_sentence([f for f in summary.get("failures", []) if f["run"] in names])
    if failed:
        sentences.insert(min(len(runs), len(sentences)), failed)
    check = check_sentence(checks)
    if check:
        sentences.append(check)
    return sentences or ["No implementation could be analysed."]


def _names(runs: list[RunSide], summary: Summary) -> str:
    names = list(dict.fromkeys(m["implementation"] for r in runs for m in r["members"]))
    run_names = {r["name"] for r in runs}
    failed = [
        f | {"label": f["implementation"]}
        for f in summary.get("failures", [])
        if f["run"] in run_names
    ]
    return listed(names, failed)


def study_block(
    summary: Summary, study: str | None, runs: list[RunSide], first: bool
) -> StudyBlock:
    """A study's page-1 part (``first``: the report's own page 1, with the usual CSV names)."""
    labels = [m["label"] for r in runs for m in r["members"]]
    chosen = set(labels)
    records = {i["label"]: i for i in summary["implementations"] if i["label"] in chosen}
    comparisons = [c for c in summary["comparisons"] if c["label"] in chosen]
    across = [c for c in summary.get("across_runs", []) if c["label"] in chosen]
    checks = [c for r in runs for c in _checks_of(r, summary.get("numerical_check", []))]
    tag = "" if first else f"-{_slug(study or 'traces')}"
    sizes = list(dict.fromkeys(s for r in runs for s in r["sizes"]))
    headline = make_table(
        "Headline figures per implementation, run and size",
        f"headline{tag}.csv",
        HEADLINE_COLUMNS,
        [{"label": lbl, **records[lbl]["headline"]} for lbl in labels if lbl in records],
        note=(
            "Medians over the active steps; '–' where the trace has no such data. Labels name "
            "the run and, where the runs hold several, the size."
        ),
    )
    comps = make_table(
        "Difference from the run's first implementation at the same size",
        f"comparisons{tag}.csv",
        COMPARISON_COLUMNS,
        shown_comparisons(comparisons),
        note="Like with like: implementations of one run at one size.",
    )
    across_table = (
        make_table(
            f"The same implementation and size, each run against {runs[0]['name']}",
            f"across-runs{tag}.csv",
            ACROSS_RUNS_COLUMNS,
            across,
            note=(
                "Ratio: this run's median over the baseline run's. Verdict and times on "
                "un-profiled time when both were timed without the profiler, else on profiled "
                "steps; 'within noise' as in the comparison table."
            ),
        )
        if across
        else None
    )
    return StudyBlock(
        study,
        f"Study: {study}" if study else "Traces without a study",
        f"study{tag or '-' + _slug(study or 'traces')}",
        _question(study, runs, _names(runs, summary), sizes),
        _verdict(runs, records, summary, across, checks),
        headline,
        comps,
        across_table,
    )


def _runs_chart(summary: Summary, runs: list[RunSide]) -> Chart | None:
    across = [c for c in summary.get("across_runs", []) if c["run"] in {r["name"] for r in runs}]
    if not across:
        return None
    records = {i["label"]: i for i in summary["implementations"]}
    pairs = [c for c in across if c["label"] in records and c["baseline"] in records]
    timed = all(
        records[lbl]["headline"].get("unprofiled_median_us") is not None
        for c in pairs
        for lbl in (c["label"], c["baseline"])
    )
    key: Literal["unprofiled_median_us", "step_median_us"] = (
        "unprofiled_median_us" if timed else "step_median_us"
    )
    keys = list(dict.fromkeys(subject(c["label"]) for c in pairs))
    series: dict[str, list[float | None]] = {}
    for c in pairs:
        where = keys.index(subject(c["label"]))
        for run, label in ((c["baseline_run"], c["baseline"]), (c["run"], c["label"])):
            values = series.setdefault(run, [None] * len(keys))
            values[where] = records[label]["headline"][key]
    what = "un-profiled time per call" if timed else "profiled step time (median)"
    return Chart(
        "Runs side by side",
        charts.paired_bars([show_bidi(k) for k in keys], series, f"{what} (µs)"),
        f"Each implementation at each size, one bar per run ({what}); the ratios and the noise "
        "rule are in the table on page 1.",
    )


def _side_words(record: ImplementationRecord, backend: str) -> str:
    h = record["headline"]
    text = (
        f"on {backend}, {ops_words(h.get('framework_ops_per_step'))} per step and "
        f"{as_us(h['dispatch_per_step_us'])} of host dispatch"
    )
    if h.get("device_per_step_us") is not None:
        text += f" for {as_us(h['device_per_step_us'])} of device work ({h['bound_by']}-bound)"
    else:
        text += ", no device work (the ops compute on the host)"
    return text


def _backend_block(
    c: BackendComparison,
    across: dict[tuple[str, str], RunComparison],
    records: dict[str, ImplementationRecord],
    wrong: list[str],
    n: int,
) -> BackendBlock:
    sides = (("baseline", c["baseline_backend"]), ("other", c["backend"]))
    cols = [Col("Framework op", "op", as_text, 2.6, text=True)]
    for header, key, fmt in BACKEND_OP_FIGURES:
        cols += [Col(f"{header} ({b})", f"{side}.{key}", fmt) for side, b in sides]
    rows: list[dict[str, Any]] = []
    for op in c["ops"]:
        row: dict[str, Any] = {"op": op["op"]}
        for side, _ in sides:
            figures = op[side]  # type: ignore[literal-required]
            for _, key, _ in BACKEND_OP_FIGURES:
                row[f"{side}.{key}"] = figures.get(key) if figures else None
        rows.append(row)
    what = subject(c["label"])
    comp = across.get((c["baseline"], c["label"]))
    verdict = backend_sentence(comp, c["backend"], c["baseline_backend"], wrong) if comp else None
    sentence = (
        f"{what}: {_side_words(records[c['baseline']], c['baseline_backend'])}; "
        f"{_side_words(records[c['label']], c['backend'])}."
        + (f" {verdict[len(what) + 2 :]}." if verdict else "")
    )
    table = make_table(
        f"{what}: framework ops on {c['baseline_backend']} and {c['backend']}",
        f"backends-{n}-{_slug(what)}.csv",
        cols,
        rows,
        note=(
            "Framework ops aligned by name (top-level ops, as the study code dispatched them); "
            "device work grouped under the op that launched it, nested ops' included; medians "
            "per call. '–': not dispatched on that backend, or no device."
        ),
    )
    return BackendBlock(what, sentence, table)


def backends_view(summary: Summary) -> BackendsView | None:
    """The backends section, when runs of one study differ by backend."""
    record = summary.get("backends")
    if not record:
        return None
    records = {i["label"]: i for i in summary["implementations"]}
    across = {(c["baseline"], c["label"]): c for c in summary.get("across_runs", [])}
    wrong = summary.get("output_wrong") or []
    blocks = [
        _backend_block(c, across, records, wrong, n) for n, c in enumerate(record["comparisons"])
    ]
    labels = [lbl for c in record["comparisons"] for lbl in (c["baseline"], c["label"])]
    labels = list(dict.fromkeys(labels))
    chart = Chart(
        "Host dispatch and device time per step, by backend",
        charts.paired_bars(
            [show_bidi(lbl) for lbl in labels],
            {
                "host dispatch / step": [
                    records[lbl]["headline"]["dispatch_per_step_us"] for lbl in labels
                ],
                "device time / step": [
                    records[lbl]["headline"]["device_per_step_us"] for lbl in labels
                ],
            },
            "µs per step (median)",
        ),
        "Where device time is below host dispatch the device waits on the host "
        "(dispatch-bound); on the CPU there is no device time: the ops compute inside their "
        "dispatch.",
    )
    metric = next((METRIC_WORDS[c["metric"]] for c in across.values() if c["metric"]), "step time")
    return BackendsView(
        f"Backends side by side: {' vs '.join(record['backends'])}",
        f"Runs {', '.join(record['runs'])} of one study on {', '.join(record['backends'])}, "
        "implementation by implementation: which backend is faster (by "
        f"{metric}, with the noise rule of page 1), then the framework ops each dispatched, "
        "aligned by name, with their host dispatch and the device work they launched.",
        blocks,
        [chart],
    )


def runs_view(summary: Summary) -> RunsView:
    """Page 1 and the sections of a report of several runs."""
    runs = summary.get("runs") or []
    studies: dict[str | None, list[RunSide]] = {}  # by name in any case, as runs.by_study
    for r in runs:
        studies.setdefault(r["study"].casefold() if r["study"] else None, []).append(r)
    blocks = [
        study_block(summary, group[0]["study"], group, k == 0)
        for k, group in enumerate(studies.values())
    ]
    if len(blocks) > 1:
        rest = "; ".join(f"{b.heading} in its own section" for b in blocks[1:])
        note = (
            f"This report holds the runs of {len(blocks)} studies (build --allow-mixed), never "
            f"compared with each other: {blocks[0].heading.lower()} here; {rest}. "
        )
        blocks[0] = replace(blocks[0], verdict=[note.strip(), *blocks[0].verdict])
    names = [r["name"] for r in runs]
    known = [g[0]["study"] for g in studies.values() if g[0]["study"]]
    title = (
        f"{known[0]} study: {' vs '.join(names)}"
        if len(studies) == 1 and known
        else f"Runs compared: {' vs '.join(names)}"
    )
    chart_list = [c for group in studies.values() if (c := _runs_chart(summary, group))]
    return RunsView(title, " vs ".join(names), blocks, chart_list, backends_view(summary))

"""The summary document into a ``ReportModel``: formatted text, tables and charts, no arithmetic left.

Templates only place what this module prepared; every number shown comes from the summary
(``summary.json``), formatted here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from nprof_report.report.figures import (
    Finding,
    ImplementationRecord,
    NeuronRecord,
    RunRecord,
    Summary,
    detail_implementations,
)
from nprof_report.report.view import charts
from nprof_report.report.view.charts import Chart
from nprof_report.report.view.columns import (
    CHAINS_COLUMNS,
    COMPARISON_COLUMNS,
    FILES_COLUMNS,
    GAP_CAUSES_COLUMNS,
    HEADLINE_COLUMNS,
    KEY_AVERAGES_COLUMNS,
    LARGEST_GAPS_COLUMNS,
    LINKS_COLUMNS,
    NEURON_STEPS_COLUMNS,
    STEPS_COLUMNS,
    TOP_OPS_COLUMNS,
    TOP_OPS_RANK,
)
from nprof_report.report.view.glossary import GLOSSARY
from nprof_report.report.view.pageone import (
    bound_sentence,
    constructed_banner,
    failures_sentence,
    fastest,
    listed,
    shown_comparisons,
    step_rule_words,
    unlike_sentence,
)
from nprof_report.report.view.ranksection import RanksSection, ranks_section
from nprof_report.report.view.rooflineview import GLOSSARY as ROOFLINE_GLOSSARY
from nprof_report.report.view.rooflineview import RooflineView, roofline_section
from nprof_report.report.view.runsview import GLOSSARY as RUNS_GLOSSARY
from nprof_report.report.view.runsview import BackendsView, StudyBlock, runs_view
from nprof_report.report.view.safetext import show_bidi
from nprof_report.report.view.sweepview import GLOSSARY as SWEEP_GLOSSARY
from nprof_report.report.view.sweepview import SweepView, sweep_section
from nprof_report.report.view.tables import Table, as_number, as_us, make_table

MAX_IMPLEMENTATIONS = 8
"""Implementations (traces, ranks) with a section and a place in the charts."""
MAX_FINDINGS = 25
"""Findings listed; all of them are in summary.json."""


@dataclass(frozen=True)
class ImplementationSection:
    """Per-implementation detail; one that is not ``shown`` (past :data:`MAX_IMPLEMENTATIONS`)
    still has its tables written as CSV."""

    label: str
    anchor: str
    description: str
    tables: list[Table]
    shown: bool = True


@dataclass(frozen=True)
class ReportModel:
    """Everything the templates place."""

    title: str
    run_id: str
    question: str
    verdict: str  # the whole verdict; page 1 shows it as ``verdict_parts``, one paragraph each
    headline: Table
    comparisons: Table
    findings: list[Finding]
    left_out: list[str]  # what the report leaves to summary.json and the CSV files
    charts: list[Chart]
    sections: list[ImplementationSection]
    caveats: list[str]
    provenance: list[tuple[str, str]]
    environment: list[tuple[str, str]]
    files: Table | None
    glossary: list[tuple[str, str]]
    generated_from: list[str]
    sweep: SweepView | None = None  # sizes and numerical check (view/sweepview.py)
    ranks: RanksSection | None = None  # several ranks of one job (view/ranksection.py)
    roofline: RooflineView | None = None  # against the device's peaks (view/rooflineview.py)
    banner: str | None = None  # at the top of page 1: some input was constructed
    across: Table | None = None  # several runs: each against the baseline run (view/runsview.py)
    studies: list[StudyBlock] = field(default_factory=list)  # further studies (--allow-mixed)
    backends: BackendsView | None = None  # runs on different backends (view/runsview.py)
    verdict_parts: list[str] = field(default_factory=list)

    @property
    def page_tables(self) -> list[Table]:
        """The tables of page 1 and of the further studies' blocks (all written as CSV)."""
        tables = [self.headline, self.comparisons, *([self.across] if self.across else [])]
        return tables + [t for b in self.studies for t in b.tables]


def build_model(summary: Summary) -> ReportModel:
    """Format the summary for the templates."""
    if summary.get("runs"):
        return _runs_model(summary)
    run = summary["run"]
    impls = summary["implementations"]
    labels = [i["label"] for i in impls]
    failures = summary.get("failures") or []
    wrong = summary.get("output_wrong") or []
    run_id = (run["run_id"] if run else "") or " vs ".join(labels)
    workload: dict[str, Any] = (run["workload"] if run else None) or {}
    shape = "×".join(str(d) for d in workload.get("shape", [])) or "unknown shape"
    question = (
        f"Which {workload.get('name', 'RMSNorm')} implementation ({listed(labels, failures)}) is "
        f"fastest on {run['device'] or 'the captured device'} (backend "
        f"{run['backend'] or 'unknown'}) for a {shape} {workload.get('dtype', '')} input, and "
        "where does its time go: host dispatch or device work?"
        if run
        else f"How do {', '.join(labels)} compare, and where does their time go: host dispatch "
        "or device work?"
    )
    headline = make_table(
        "Headline figures per implementation",
        "headline.csv",
        HEADLINE_COLUMNS,
        [{"label": i["label"], **i["headline"]} for i in impls],
        note=(
            "Medians over the active steps; '–' where the trace has no such data. Bound by: "
            "dispatch where host dispatch per step exceeds device time per step (the device waits "
            "on the host), else device. The other figures are in each implementation's section "
            "and headline.csv."
        ),
    )
    comparisons = make_table(
        f"Difference from the baseline ({labels[0] if labels else '–'})",
        "comparisons.csv",
        COMPARISON_COLUMNS,
        shown_comparisons(summary["comparisons"]),
    )
    shown = impls[:MAX_IMPLEMENTATIONS]
    sweep = sweep_section(summary)
    roofline = roofline_section(summary)
    verdict = [
        unlike_sentence(impls),
        fastest(impls, summary["comparisons"], wrong),
        failures_sentence(failures),
        bound_sentence(shown, run["backend"] if run else None),
        *(sweep.sentences if sweep else []),
        *(roofline.sentences if roofline else []),
    ]
    return ReportModel(
        title=f"{workload.get('name', 'RMSNorm')} study: {run_id}"
        if run
        else f"Profile comparison: {run_id}",
        run_id=run_id,
        question=question,
        verdict=" ".join(s for s in verdict if s),
        verdict_parts=[s for s in verdict if s],
        headline=headline,
        comparisons=comparisons,
        findings=summary["findings"][:MAX_FINDINGS],
        left_out=_left_out(impls, shown, summary["findings"]),
        charts=_charts(shown),
        sections=[
            *(_section(i, shown=k < len(shown)) for k, i in enumerate(impls)),
            *(_section(i) for i in detail_implementations(summary)[:MAX_IMPLEMENTATIONS]),
        ],
        caveats=summary["caveats"],
        provenance=_provenance(run),
        environment=sorted((run["environment"] or {}).items()) if run else [],
        files=make_table(
            "Files and checksums",
            "files.csv",
            FILES_COLUMNS,
            run["files"] or [],
        )
        if run
        else None,
        glossary=[
            *GLOSSARY,
            *(SWEEP_GLOSSARY if sweep else []),
            *(ROOFLINE_GLOSSARY if roofline and roofline.view.tables else []),
        ],
        generated_from=[i["trace"] for i in impls],
        sweep=sweep.view if sweep else None,
        ranks=ranks_section(summary),
        roofline=roofline.view if roofline else None,
        banner=constructed_banner(summary),
    )


def _left_out(
    impls: list[ImplementationRecord], shown: list[ImplementationRecord], findings: list[Finding]
) -> list[str]:
    """What the report leaves to summary.json and the CSV files."""
    left_out = []
    if len(impls) > len(shown):
        left_out.append(
            f"Sections and charts cover the first {len(shown)} of {len(impls):,} implementations; "
            "the others are in the headline table, its CSV and summary.json."
        )
    if len(findings) > MAX_FINDINGS:
        left_out.append(
            f"The first {MAX_FINDINGS} of {len(findings):,} findings are listed; all of them "
            "are in summary.json."
        )
    return left_out


def _runs_model(summary: Summary) -> ReportModel:
    """A report of several runs (:mod:`.runsview`): page 1 is the first study's."""
    view = runs_view(summary)
    page, *others = view.blocks
    impls = summary["implementations"]
    shown = impls[:MAX_IMPLEMENTATIONS]
    sweep = sweep_section(summary)  # the numerical check of every run
    provenance: list[tuple[str, str]] = []
    for r in summary.get("runs") or []:
        provenance.append(
            (
                f"Run {r['name']}",
                f"{r['path']}; study {r['study'] or '–'}; backend {r['backend'] or '–'}; "
                f"device {r['device'] or '–'}"
                + (f"; captured {r['run']['created_utc']}" if r["run"] else "; no manifest")
                + ("; CONSTRUCTED" if r["constructed"] else ""),
            )
        )
    return ReportModel(
        title=view.title,
        run_id=view.run_id,
        question=page.question,
        verdict=" ".join(page.verdict),
        verdict_parts=page.verdict,
        headline=page.headline,
        comparisons=page.comparisons,
        findings=summary["findings"][:MAX_FINDINGS],
        left_out=_left_out(impls, shown, summary["findings"]),
        charts=_charts(shown) + view.charts,
        sections=[_section(i, shown=k < len(shown)) for k, i in enumerate(impls)],
        caveats=summary["caveats"],
        provenance=provenance,
        environment=[],
        files=None,
        glossary=[*GLOSSARY, *RUNS_GLOSSARY, *(SWEEP_GLOSSARY if sweep else [])],
        generated_from=[i["trace"] for i in impls],
        sweep=sweep.view if sweep else None,
        banner=constructed_banner(summary),
        across=page.across,
        studies=others,
        backends=view.backends,
    )


def _charts(impls: list[ImplementationRecord]) -> list[Chart]:
    labels = [show_bidi(i["label"]) for i in impls]
    out = [
        Chart(
            "Step time per implementation",
            charts.step_times(labels, [[s["dur_us"] for s in i["steps"]] for i in impls]),
            "Box: median and interquartile range of the profiled steps; whiskers 1.5 IQR; dots: every step.",
        )
    ]
    med = [i["median_step"] for i in impls]
    out.append(
        Chart(
            "Where the median step goes (host timeline, exclusive)",
            charts.stacked_breakdown(
                labels,
                {
                    "framework dispatch (ops)": [m["framework_us"] if m else 0.0 for m in med],
                    "runtime calls in ops": [m["runtime_us"] if m else 0.0 for m in med],
                    "waiting on the device (calls outside ops)": [
                        m["sync_us"] if m else 0.0 for m in med
                    ],
                    "outside ops (Python, prof.step)": [m["outside_us"] if m else 0.0 for m in med],
                },
                "µs in the median step (the bar adds up to that step's duration)",
            ),
            "Each instant of the step on the thread that dispatched its ops goes to the innermost event running then; device execution overlaps these and is shown in the timeline.",
        )
    )
    out.append(
        Chart(
            "Host dispatch per framework op",
            charts.step_times(
                labels,
                [i["dispatch_samples_us"] for i in impls],
                "duration of each top-level framework op (µs)",
            ),
            "Every top-level op call in the profiled steps.",
        )
    )
    if any(i["headline"].get("unprofiled_median_us") is not None for i in impls):
        out.append(
            Chart(
                "Profiled step vs un-profiled call",
                charts.paired_bars(
                    labels,
                    {
                        "profiled step (median)": [
                            i["headline"].get("step_median_us") for i in impls
                        ],
                        "un-profiled call (median)": [
                            i["headline"].get("unprofiled_median_us") for i in impls
                        ],
                    },
                    "µs",
                ),
                "The gap between the two bars is the profiler's own overhead.",
            )
        )
    if any(i["timeline"] for i in impls):
        out.append(
            Chart(
                "Timeline of the median step",
                charts.timelines(
                    labels,
                    [
                        [{**b, "label": show_bidi(b["label"] or "")} for b in i["timeline"]]
                        for i in impls
                    ],
                    [(m["dur_us"] if m else 0.0) or 1.0 for m in med],
                ),
                "Framework ops by nesting level (L0 = dispatched by Python), runtime calls, and device activity.",
            )
        )
    if any(i["gaps"]["count"] for i in impls):
        out.append(
            Chart(
                "Device idle gaps",
                charts.histogram(
                    labels,
                    [i["gaps"]["durations_us"] for i in impls],
                    "gap between device activities (µs)",
                ),
                "Gaps inside the profiled steps; their causes are listed per implementation.",
            )
        )
    return out


def _section(impl: ImplementationRecord, shown: bool = True) -> ImplementationSection:
    label = impl["label"]
    slug = "".join(c if c.isalnum() else "-" for c in label).strip("-").lower() or "impl"
    figures = make_table(
        "More headline figures",
        f"{slug}-headline.csv",
        [replace(c, shown=not c.shown) for c in HEADLINE_COLUMNS[1:]],
        [impl["headline"]],
        note="The others are in the headline table on page 1; all of them in this CSV.",
    )
    top_ops = make_table(
        "Framework ops dispatched per step",
        f"{slug}-top-ops.csv",
        TOP_OPS_COLUMNS,
        impl["top_ops"],
        rank=TOP_OPS_RANK,
    )
    steps = make_table(
        "Per step",
        f"{slug}-steps.csv",
        STEPS_COLUMNS,
        impl["steps"],
    )
    keyavg = make_table(
        "key_averages() equivalent",
        f"{slug}-key-averages.csv",
        KEY_AVERAGES_COLUMNS,
        impl["key_averages"],
        note="Same rules as prof.key_averages(); ProfilerStep#N grouped as ProfilerStep*; sorted by self CPU time.",
    )
    links = make_table(
        "Links between framework ops, runtime calls and device activities",
        f"{slug}-links.csv",
        LINKS_COLUMNS,
        [{"link": k, "count": v} for k, v in sorted(impl["links"].items())],
    )
    chains = make_table(
        "Heaviest ops: op → runtime → device",
        f"{slug}-chains.csv",
        CHAINS_COLUMNS,
        impl["chains"],
    )
    gaps = impl["gaps"]
    gap_causes = make_table(
        "Device idle gaps by cause",
        f"{slug}-gap-causes.csv",
        GAP_CAUSES_COLUMNS,
        gaps["by_cause"],
        note=f"{gaps['count']} gaps, {as_us(gaps['total_us'])} in all.",
    )
    largest = make_table(
        "Largest device idle gaps",
        f"{slug}-gaps.csv",
        LARGEST_GAPS_COLUMNS,
        gaps["largest"],
    )
    has_chain = any(c["device_us_per_call"] or c["runtime"] != "–" for c in impl["chains"])
    tables = [figures, top_ops, chains, steps, keyavg, links]
    if not has_chain:
        tables.remove(chains)
    if gaps["count"]:
        tables += [gap_causes, largest]
    for n, neuron in enumerate(impl.get("neuron") or []):
        tables.append(_neuron_table(neuron, f"{slug}-neuron-steps-{n}.csv"))
    description = (impl.get("description") or impl["trace"]) + (
        f". Device time from: {impl['device_time_source']}. Steps: {step_rule_words(impl)}."
    )
    return ImplementationSection(label, f"impl-{slug}", description, tables, shown)


def _neuron_table(neuron: NeuronRecord, csv: str) -> Table:
    engines = ", ".join(f"{k} {v}%" for k, v in neuron["engine_active_pct"].items())
    clock = neuron["clock"]
    return make_table(
        "Neuron system trace per step",
        csv,
        NEURON_STEPS_COLUMNS,
        neuron["steps"],
        note=(
            f"Engine active: {engines or '–'}; MFU estimate {as_number(neuron['mfu_estimated_pct'], '%')}, "
            f"MBU estimate {as_number(neuron['mbu_estimated_pct'], '%')}; clock alignment error "
            f"{as_us(clock['framework_error_us'])} over {clock['framework_matches']} matched events."
        ),
    )


def _provenance(run: RunRecord | None) -> list[tuple[str, str]]:
    if not run:
        return [("Run", "trace files captured elsewhere; no manifest")]
    versions = ", ".join(f"{k} {v}" for k, v in (run.get("versions") or {}).items() if v)
    sched = run.get("schedule") or {}
    host = run.get("host") or {}
    return [
        ("Run id", run.get("run_id", "–")),
        ("Captured (UTC)", run.get("created_utc", "–")),
        ("Command", " ".join(run.get("command") or [])),
        ("Backend", run.get("backend", "–")),
        ("Device", run.get("device", "–")),
        (
            "Host",
            f"{host.get('hostname', '–')} ({host.get('platform', '–')}, {host.get('cpu_count', '–')} CPUs)",
        ),
        ("Versions", versions or "–"),
        ("Workload", (run.get("workload") or {}).get("input", "–")),
        (
            "Schedule",
            f"wait={sched.get('wait')}, warmup={sched.get('warmup')}, active={sched.get('active')}, repeat={sched.get('repeat')}",
        ),
        ("Profiler", ", ".join(f"{k}={v}" for k, v in (run.get("profiler") or {}).items())),
        ("Manifest format", f"{run.get('format')} v{run.get('format_version')}"),
    ]

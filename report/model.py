"""The summary document into a ``ReportModel``: formatted text, tables and charts, no arithmetic left.

Templates only place what this module prepared; every number shown comes from the summary
(``summary.json``), formatted here.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nprof_report.report import charts
from nprof_report.textout import format_time_us

if TYPE_CHECKING:
    from nprof_report.report.ranksection import RanksSection

GLOSSARY = [
    (
        "Step time",
        "Duration of one ProfilerStep#N annotation: the implementation's call, the device synchronisation and prof.step(). Median and interquartile range (IQR, p25–p75) over the active steps.",
    ),
    (
        "Framework ops per step",
        "Top-level cpu_op events in a step: ops with no op around them, i.e. what the Python code dispatched. Nested aten calls are not counted again.",
    ),
    (
        "Host dispatch",
        "Summed duration of the top-level framework ops of a step: host time spent inside the framework. Per op: divided by the framework ops per step.",
    ),
    (
        "Framework self time",
        "Summed self CPU time of every op in a step (its own time, excluding nested ops and runtime calls).",
    ),
    (
        "Runtime calls",
        "Host-side calls into the device runtime or driver (cuda_runtime, privateuse1_runtime, privateuse1_driver …) and their summed duration.",
    ),
    (
        "Device time",
        "Summed duration of device activities (kernels, copies, syncs) launched from the step, linked to their op by External id, correlation id or ac2g flow.",
    ),
    ("Device busy %", "Device time per step divided by the median step time."),
    (
        "Un-profiled time",
        "Median wall time of one call plus synchronisation measured with torch.utils.benchmark, without the profiler.",
    ),
    (
        "Profiler overhead",
        "Median profiled step time minus the median un-profiled call time (absolute and relative to the un-profiled time).",
    ),
    (
        "Exceeds noise",
        "A difference exceeds the run-to-run noise when the interquartile ranges of the two step-time samples do not overlap (un-profiled: when the difference is larger than the sum of the two half-IQRs).",
    ),
    (
        "Host breakdown of the median step",
        "Self times on the thread that dispatched the step's ops, which add up to the step: framework dispatch (ops, nested annotations), runtime calls made inside ops (launches), waiting on the device (runtime calls outside any op: the loop's synchronize), and outside ops (Python between ops, prof.step()).",
    ),
    (
        "Launch → device start",
        "Median time from the start of a runtime call to the start of the device activity it launched (linked by correlation id or ac2g flow). On Neuron: submit (nrt_model_submit) to nc_exec_running start.",
    ),
    (
        "Device idle gap and cause",
        "A hole between merged device-busy intervals inside a step. Its cause is the host activity that overlaps it most: host dispatch (a framework op), runtime call, synchronization (a runtime call outside ops), transfer (the gap ends at a copy), compilation or loading (a Neuron load overlaps it), host outside ops.",
    ),
    (
        "Neuron figures",
        "From the Neuron system trace: NEFF submissions (nrt_model_submit), hardware executions (nc_exec_running, one span per execution merged across physical cores), model switches, copies in/out (dmem_buf_copyin/out), host blocked on the device (kbl_exec_wait), device busy and idle per step; engine active %, MFU and MBU estimates from the device profiles' Summary tables.",
    ),
    (
        "Self CPU / CPU total / Self device / Device total",
        "As in prof.key_averages(): self = own time minus children's; device total = device time of the op and everything it called; an op nested in an op of the same name with no sibling counts once.",
    ),
]


@dataclass(frozen=True)
class Table:
    """A table with pre-formatted cells; ``csv`` names its CSV file next to the report."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    csv: str
    raw_rows: list[list[Any]] = field(default_factory=list)
    note: str | None = None


@dataclass(frozen=True)
class Chart:
    """An SVG chart, placed as an ``<img>`` with the SVG inlined in a ``data:`` URI."""

    title: str
    svg: str
    caption: str

    @property
    def data_uri(self) -> str:
        """The SVG as ``data:image/svg+xml;base64,…``.

        Inside an ``<img>`` the SVG is read by WeasyPrint's XML parser and stays out of its HTML
        parser and CSS cascade, where the charts' ~2,000 elements took about a third of the PDF
        layout; browsers draw it the same either way (the page's CSP allows ``img-src data:``).
        """
        return "data:image/svg+xml;base64," + base64.b64encode(self.svg.encode()).decode("ascii")


@dataclass(frozen=True)
class ImplementationSection:
    """Per-implementation detail."""

    label: str
    anchor: str
    description: str
    tables: list[Table]


@dataclass(frozen=True)
class ReportModel:
    """Everything the templates place."""

    title: str
    run_id: str
    question: str
    verdict: str
    headline: Table
    comparisons: Table
    findings: list[dict[str, str]]
    charts: list[Chart]
    sections: list[ImplementationSection]
    caveats: list[str]
    provenance: list[tuple[str, str]]
    environment: list[tuple[str, str]]
    files: Table | None
    glossary: list[tuple[str, str]]
    generated_from: list[str]
    ranks: RanksSection | None = None  # several ranks of one job (report/ranksection.py)


def _us(x: float | None) -> str:
    return "–" if x is None else format_time_us(float(x))


def _num(x: float | None, unit: str = "") -> str:
    if x is None:
        return "–"
    return f"{x:g}{unit}"


def _table(
    title: str,
    csv: str,
    columns: list[tuple[str, str, Any]],
    records: list[dict[str, Any]],
    note: str | None = None,
) -> Table:
    """``columns`` are (header, key, formatter)."""
    rows = [[fmt(r.get(key)) for _, key, fmt in columns] for r in records]
    raw = [[r.get(key) for _, key, _ in columns] for r in records]
    return Table(title, [h for h, _, _ in columns], rows, csv, raw, note)


def _text(x: Any) -> str:
    return "–" if x is None else str(x)


def _yesno(x: bool | None) -> str:
    return "–" if x is None else ("yes" if x else "no")


def build_model(summary: dict[str, Any]) -> ReportModel:
    """Format the summary for the templates."""
    run = summary.get("run") or {}
    impls = summary["implementations"]
    labels = [i["label"] for i in impls]
    run_id = run.get("run_id") or " vs ".join(labels)
    workload = run.get("workload") or {}
    shape = "×".join(str(d) for d in workload.get("shape", [])) or "unknown shape"
    question = (
        f"Which RMSNorm implementation ({', '.join(labels)}) is fastest on "
        f"{run.get('device') or 'the captured device'} (backend {run.get('backend') or 'unknown'}) "
        f"for a {shape} {workload.get('dtype', '')} input, and where does its time go?"
        if run
        else f"How do {', '.join(labels)} compare, and where does their time go?"
    )
    headline_records = [{"label": i["label"], **i["headline"]} for i in impls]
    headline = _table(
        "Headline figures per implementation",
        "headline.csv",
        [
            ("Implementation", "label", _text),
            ("Step median", "step_median_us", _us),
            ("Step IQR", "step_iqr_us", _us),
            ("Steps", "steps", _text),
            ("Framework ops / step", "framework_ops_per_step", _num),
            ("Host dispatch / step", "dispatch_per_step_us", _us),
            ("Dispatch / op", "dispatch_per_op_us", _us),
            ("Device time / step", "device_per_step_us", _us),
            ("Device busy", "device_busy_pct", lambda v: _num(v, "%")),
            ("Device activities / step", "device_activities_per_step", _num),
            ("Un-profiled / call", "unprofiled_median_us", _us),
            ("Profiler overhead", "profiler_overhead_pct", lambda v: _num(v, "%")),
        ],
        headline_records,
        note="Medians over the active steps; '–' where the trace has no such data.",
    )
    comparisons = _table(
        f"Difference from the baseline ({labels[0] if labels else '–'})",
        "comparisons.csv",
        [
            ("Implementation", "label", _text),
            ("Step Δ", "step_delta_us", _us_signed),
            ("Step ratio", "step_ratio", lambda v: _num(v, "×")),
            ("Exceeds noise (steps)", "step_exceeds_noise", _yesno),
            ("Un-profiled Δ", "unprofiled_delta_us", _us_signed),
            ("Un-profiled ratio", "unprofiled_ratio", lambda v: _num(v, "×")),
            ("Exceeds noise (un-profiled)", "unprofiled_exceeds_noise", _yesno),
            ("Framework ops Δ / step", "ops_per_step_delta", _num),
        ],
        summary["comparisons"],
    )
    return ReportModel(
        title=f"RMSNorm study: {run_id}" if run else f"Profile comparison: {run_id}",
        run_id=run_id,
        question=question,
        verdict=_verdict(summary),
        headline=headline,
        comparisons=comparisons,
        findings=summary["findings"],
        charts=_charts(impls),
        sections=[_section(i) for i in impls],
        caveats=summary["caveats"],
        provenance=_provenance(run),
        environment=sorted((run.get("environment") or {}).items()),
        files=_table(
            "Files and checksums",
            "files.csv",
            [
                ("Path", "path", _text),
                ("Role", "role", _text),
                ("Bytes", "bytes", _text),
                ("sha256", "sha256", _text),
            ],
            run.get("files") or [],
        )
        if run
        else None,
        glossary=GLOSSARY,
        generated_from=[i["trace"] for i in impls],
        ranks=_ranks_section(summary),
    )


def _ranks_section(summary: dict[str, Any]) -> RanksSection | None:
    from nprof_report.report.ranksection import ranks_section  # it builds on this module's Table

    return ranks_section(summary)


def _us_signed(x: float | None) -> str:
    if x is None:
        return "–"
    return ("+" if x > 0 else "−" if x < 0 else "±") + format_time_us(abs(float(x)))


def _verdict(summary: dict[str, Any]) -> str:
    impls = summary["implementations"]
    if not impls:
        return "No implementation could be analysed."
    key = (
        "unprofiled_median_us"
        if all(i["headline"].get("unprofiled_median_us") is not None for i in impls)
        else "step_median_us"
    )
    timed = [i for i in impls if i["headline"].get(key) is not None]
    if not timed:
        return "No step timings were found in the traces."
    best = min(timed, key=lambda i: i["headline"][key])
    base = impls[0]
    what = (
        "un-profiled time per call"
        if key == "unprofiled_median_us"
        else "median profiled step time"
    )
    text = f"{best['label']} is fastest by {what}: {_us(best['headline'][key])}"
    if best is not base and base["headline"].get(key):
        ratio = base["headline"][key] / best["headline"][key]
        comp: dict[str, Any] = next(
            (c for c in summary["comparisons"] if c["label"] == best["label"]), {}
        )
        noise_key = (
            "unprofiled_exceeds_noise" if key == "unprofiled_median_us" else "step_exceeds_noise"
        )
        noise = "exceeds" if comp.get(noise_key) else "does not exceed"
        text += (
            f" against {_us(base['headline'][key])} for {base['label']} ({ratio:.2f}× faster); "
            f"the difference {noise} the run-to-run noise."
        )
    else:
        text += f", the baseline ({base['label']}) itself."
    ops = [(i["label"], i["headline"].get("framework_ops_per_step")) for i in impls]
    if all(o is not None for _, o in ops):
        text += (
            " Framework ops dispatched per step: "
            + ", ".join(f"{lbl} {o:g}" for lbl, o in ops)
            + "."
        )
    return text


def _charts(impls: list[dict[str, Any]]) -> list[Chart]:
    labels = [i["label"] for i in impls]
    out = [
        Chart(
            "Step time per implementation",
            charts.step_times(labels, [[s["dur_us"] for s in i["steps"]] for i in impls]),
            "Box: median and interquartile range of the profiled steps; whiskers 1.5 IQR; dots: every step.",
        )
    ]
    med = [i.get("median_step") or {} for i in impls]
    out.append(
        Chart(
            "Where the median step goes (host timeline, exclusive)",
            charts.stacked_breakdown(
                labels,
                {
                    "framework dispatch (op self time)": [
                        m.get("framework_us") or 0.0 for m in med
                    ],
                    "runtime calls in ops": [m.get("runtime_us") or 0.0 for m in med],
                    "waiting on the device (calls outside ops)": [
                        m.get("sync_us") or 0.0 for m in med
                    ],
                    "outside ops (Python, prof.step)": [
                        max(m.get("outside_us") or 0.0, 0.0) for m in med
                    ],
                },
                "µs in the median step (the bar adds up to that step's duration)",
            ),
            "Self times on the thread that dispatched the step's ops; device execution overlaps these and is shown in the timeline.",
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
                    [i["timeline"] for i in impls],
                    [(i.get("median_step") or {}).get("dur_us") or 1.0 for i in impls],
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


def _section(impl: dict[str, Any]) -> ImplementationSection:
    label = impl["label"]
    slug = "".join(c if c.isalnum() else "-" for c in label).strip("-").lower() or "impl"
    top_ops = _table(
        "Framework ops dispatched per step",
        f"{slug}-top-ops.csv",
        [
            ("Op", "name", _text),
            ("Calls / step", "calls_per_step", _num),
            ("Dispatch median", "dispatch_median_us", _us),
            ("Dispatch p90", "dispatch_p90_us", _us),
            ("Framework self median", "self_cpu_median_us", _us),
            ("Runtime calls median", "runtime_median_us", _us),
            ("Launch → device start", "launch_latency_median_us", _us),
            ("Device median", "device_median_us", _us),
            ("Device activities", "device_activities", _text),
        ],
        impl["top_ops"],
    )
    steps = _table(
        "Per step",
        f"{slug}-steps.csv",
        [
            ("Step", "step", _text),
            ("Duration", "dur_us", _us),
            ("Top ops", "top_ops", _text),
            ("All ops", "all_ops", _text),
            ("Dispatch", "dispatch_us", _us),
            ("Op self", "op_self_us", _us),
            ("Runtime calls", "runtime_calls", _text),
            ("Runtime", "runtime_us", _us),
            ("Device acts", "device_activities", _text),
            ("Device", "device_us", _us),
        ],
        impl["steps"],
    )
    keyavg = _table(
        "key_averages() equivalent",
        f"{slug}-key-averages.csv",
        [
            ("Name", "name", _text),
            ("Type", "device_type", _text),
            ("Calls", "calls", _text),
            ("Self CPU", "self_cpu_us", _us),
            ("CPU total", "cpu_total_us", _us),
            ("Self device", "self_device_us", _us),
            ("Device total", "device_total_us", _us),
        ],
        impl["key_averages"],
        note="Same rules as prof.key_averages(); ProfilerStep#N grouped as ProfilerStep*.",
    )
    links = _table(
        "Links between framework ops, runtime calls and device activities",
        f"{slug}-links.csv",
        [("Link (method)", "link", _text), ("Count", "count", _text)],
        [{"link": k, "count": v} for k, v in sorted(impl["links"].items())],
    )
    chains = _table(
        "Heaviest ops: op → runtime → device",
        f"{slug}-chains.csv",
        [
            ("Op", "op", _text),
            ("Calls", "calls", _text),
            ("Device / call", "device_us_per_call", _us),
            ("Runtime calls per op call", "runtime", _text),
            ("Device activities per op call", "device", _text),
        ],
        impl["chains"],
    )
    gaps = impl["gaps"]
    gap_causes = _table(
        "Device idle gaps by cause",
        f"{slug}-gap-causes.csv",
        [("Cause", "cause", _text), ("Gaps", "count", _text), ("Total", "total_us", _us)],
        gaps["by_cause"],
        note=f"{gaps['count']} gaps, {_us(gaps['total_us'])} in all.",
    )
    largest = _table(
        "Largest device idle gaps",
        f"{slug}-gaps.csv",
        [
            ("Step", "step", _text),
            ("Offset in step", "offset_us", _us),
            ("Duration", "dur_us", _us),
            ("Cause", "cause", _text),
        ],
        gaps["largest"],
    )
    has_chain = any(c["device_us_per_call"] or c["runtime"] != "–" for c in impl["chains"])
    tables = (
        [top_ops, chains, steps, keyavg, links] if has_chain else [top_ops, steps, keyavg, links]
    )
    if gaps["count"]:
        tables += [gap_causes, largest]
    for n, neuron in enumerate(impl.get("neuron") or []):
        tables.append(_neuron_table(neuron, f"{slug}-neuron-steps-{n}.csv"))
    description = (impl.get("description") or impl["trace"]) + (
        f". Device time from: {impl['device_time_source']}."
    )
    return ImplementationSection(label, f"impl-{slug}", description, tables)


def _neuron_table(neuron: dict[str, Any], csv: str) -> Table:
    engines = ", ".join(f"{k} {v}%" for k, v in neuron["engine_active_pct"].items())
    clock = neuron["clock"]
    return _table(
        "Neuron system trace per step",
        csv,
        [
            ("Submissions", "submissions", _text),
            ("HW executions", "executions", _text),
            ("Model switches", "model_switches", _text),
            ("Loads", "loads", _text),
            ("Copies in", "copyin_count", _text),
            ("Copy-in time", "copyin_us", _us),
            ("Copies out", "copyout_count", _text),
            ("Host blocked", "host_blocked_us", _us),
            ("Submit→start median", "submit_to_start_median_us", _us),
            ("Device busy", "device_busy_us", _us),
            ("Device idle", "device_idle_us", _us),
        ],
        neuron["steps"],
        note=(
            f"Engine active: {engines or '–'}; MFU estimate {_num(neuron['mfu_estimated_pct'], '%')}, "
            f"MBU estimate {_num(neuron['mbu_estimated_pct'], '%')}; clock alignment error "
            f"{_us(clock['framework_error_us'])} over {clock['framework_matches']} matched events."
        ),
    )


def _provenance(run: dict[str, Any]) -> list[tuple[str, str]]:
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

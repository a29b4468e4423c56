"""The summary document into a ``ReportModel``: formatted text, tables and charts, no arithmetic left.

Templates only place what this module prepared; every number shown comes from the summary
(``summary.json``), formatted here.
"""

from __future__ import annotations

import base64
import heapq
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from nprof_report.report import charts
from nprof_report.report.glossary import GLOSSARY
from nprof_report.report.safetext import csv_row, show_bidi
from nprof_report.report.sweep import detail_implementations
from nprof_report.textout import format_time_us

if TYPE_CHECKING:
    from nprof_report.report.ranksection import RanksSection
    from nprof_report.report.sweepview import SweepView

MAX_ROWS = 25
"""Rows a table shows; all of them are in its CSV file and in summary.json."""
MAX_IMPLEMENTATIONS = 8
"""Implementations (traces, ranks) with a section and a place in the charts."""
MAX_FINDINGS = 25
"""Findings listed; all of them are in summary.json."""
CELL_CHARS = 120
"""Characters a text cell shows; a longer name is shortened in the middle (the whole of it in
the cell's tooltip, the CSV and summary.json)."""

BREAK_CHARS = 40
"""A text cell longer than this may break after ``::``, ``,``, ``(``, ``<``, ``_`` and ``/``."""


@dataclass(frozen=True)
class Cell:
    """A formatted table cell: the pieces between which a line may break (``<wbr>``), and the
    whole text where the cell shows it shortened (``title``)."""

    parts: tuple[str, ...]
    full: str | None = None

    @property
    def text(self) -> str:
        """What the cell shows."""
        return "".join(self.parts)


@dataclass(frozen=True)
class CsvRows:
    """Every row of a table as its CSV holds them, made while the CSV is written (a table of
    100,000 op names is not copied into lists first), text that a spreadsheet would read as a
    formula quoted as text (:func:`~nprof_report.report.safetext.csv_row`)."""

    records: Sequence[dict[str, Any]]
    keys: tuple[str, ...]

    def __iter__(self) -> Iterator[list[Any]]:
        return (csv_row(r.get(k) for k in self.keys) for r in self.records)

    def __len__(self) -> int:
        return len(self.records)


@dataclass(frozen=True)
class Table:
    """A table as shown (``headers``, ``rows``) and as its CSV file ``csv`` holds it (``columns``,
    ``raw_rows``: every column and every row).

    The report shows at most :data:`MAX_ROWS` rows, and ``note`` says how many it left out.
    ``widths`` are the shown columns' shares of the table width in percent, ``kinds`` their
    alignment (``t`` text, ``n`` number): the tables use CSS's fixed layout, whose cost does not
    depend on what the cells hold.
    """

    title: str
    headers: list[str]
    widths: list[float]
    kinds: list[str]
    rows: list[list[Cell]]
    csv: str
    columns: list[str]
    raw_rows: CsvRows
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
    verdict: str
    headline: Table
    comparisons: Table
    findings: list[dict[str, str]]
    left_out: list[str]  # what the report leaves to summary.json and the CSV files
    charts: list[Chart]
    sections: list[ImplementationSection]
    caveats: list[str]
    provenance: list[tuple[str, str]]
    environment: list[tuple[str, str]]
    files: Table | None
    glossary: list[tuple[str, str]]
    generated_from: list[str]
    sweep: SweepView | None = None  # sizes and numerical check (report/sweepview.add_sweep)
    ranks: RanksSection | None = None  # several ranks of one job (report/ranksection.py)


def _us(x: float | None) -> str:
    return "–" if x is None else format_time_us(float(x))


def _num(x: float | None, unit: str = "") -> str:
    if x is None:
        return "–"
    return f"{x:g}{unit}"


@dataclass(frozen=True)
class Col:
    """One column of a table: header, the record's key, formatter, relative width, and whether
    the report shows it (every column goes to the CSV)."""

    header: str
    key: str
    fmt: Callable[[Any], str]
    width: float = 1.0
    text: bool = False
    shown: bool = True


def make_table(
    title: str,
    csv: str,
    cols: list[Col],
    records: list[dict[str, Any]],
    note: str | None = None,
    rank: tuple[str, Callable[[dict[str, Any]], Any]] | None = None,
) -> Table:
    """The table of ``records``; only the first :data:`MAX_ROWS` are formatted and shown.

    With ``rank`` (what it ranks by, in words; a key, largest first), a table with more rows
    shows the :data:`MAX_ROWS` largest by that key, in their original order.
    """
    shown_records = records
    left_out = max(len(records) - MAX_ROWS, 0)
    if left_out:
        if rank is not None:
            keep = heapq.nlargest(MAX_ROWS, range(len(records)), key=lambda k: rank[1](records[k]))
            shown_records = [records[k] for k in sorted(keep)]
            which = f"{MAX_ROWS} of {len(records):,} rows, those with the most {rank[0]}"
        else:
            shown_records = records[:MAX_ROWS]
            which = f"the first {MAX_ROWS} of {len(records):,} rows"
        kept = f"Showing {which}; the other {left_out:,} are in {csv} and summary.json."
        note = f"{note} {kept}" if note else kept
    visible = [c for c in cols if c.shown]
    return Table(
        title=title,
        headers=[c.header for c in visible],
        widths=_widths(visible),
        kinds=["t" if c.text else "n" for c in visible],
        rows=[[_cell(c.fmt(r.get(c.key)), c.text) for c in visible] for r in shown_records],
        csv=csv,
        columns=[c.header for c in cols],
        raw_rows=CsvRows(records, tuple(c.key for c in cols)),
        note=note,
    )


# A4 less the margins, in pt, and the mean advance of a character of DejaVu Sans at the tables'
# 7.5 pt (digits 0.64 em, lower case letters about 0.55 em; the headers' bold about 0.67 em)
TABLE_PT = 515.0
CHAR_PT = 4.4
HEADER_CHAR_PT = 5.0
PADDING_PT = 9.0
NUMBER_CHARS = 9  # "123.456us"
NAME_CHARS = 18  # a column of names gets at least this, then its share of what is left


def _widths(cols: list[Col]) -> list[float]:
    """Each column's share of the table width (percent): first what its longest header word needs
    (and a number, for a column of numbers), so that no word has to break; what is left in
    proportion to the columns' ``width``. Where the needs add up to more than the table, they
    shrink in proportion."""
    need = []
    for c in cols:
        header = max(len(w) for w in c.header.split()) * HEADER_CHAR_PT
        cells = (NAME_CHARS if c.text else NUMBER_CHARS) * CHAR_PT
        need.append(100 * (max(header, cells) + PADDING_PT) / TABLE_PT)
    spare = max(100 - sum(need), 0.0)
    total = sum(c.width for c in cols)
    widths = [n + spare * c.width / total for n, c in zip(need, cols)]
    scale = 100 / sum(widths)
    return [round(w * scale, 2) for w in widths]


# after these, a name may break across lines; a long name has few spaces
_BREAK_AFTER = re.compile(r"(?<=::)|(?<=[,(<_/])")


def _cell(text: str, is_text: bool) -> Cell:
    """A cell of ``text``: a number or a short text as it is; a long text shortened in the middle
    to :data:`CELL_CHARS` characters, in pieces after which a line may break."""
    if not is_text or len(text) <= BREAK_CHARS:
        return Cell((text,))
    full = None
    if len(text) > CELL_CHARS:
        full = text
        head = CELL_CHARS * 2 // 3
        text = f"{text[:head]} … {text[head - CELL_CHARS + 3 :]}"
    return Cell(tuple(p for p in _BREAK_AFTER.split(text) if p), full)


def as_text(x: Any) -> str:
    return "–" if x is None else str(x)


def _yesno(x: bool | None) -> str:
    return "–" if x is None else ("yes" if x else "no")


HEADLINE_COLUMNS = [
    Col("Implementation", "label", as_text, 2.2, text=True),
    Col("Step median", "step_median_us", _us),
    Col("Step IQR", "step_iqr_us", _us),
    Col("Steps", "steps", as_text, shown=False),
    Col("Framework ops / step", "framework_ops_per_step", _num),
    Col("Host dispatch / step", "dispatch_per_step_us", _us, shown=False),
    Col("Dispatch / op", "dispatch_per_op_us", _us, shown=False),
    Col("Device time / step", "device_per_step_us", _us),
    Col("Device busy", "device_busy_pct", lambda v: _num(v, "%"), shown=False),
    Col("Device activities / step", "device_activities_per_step", _num, shown=False),
    Col("Un-profiled / call", "unprofiled_median_us", _us),
    Col("Profiler overhead", "profiler_overhead_pct", lambda v: _num(v, "%"), shown=False),
]
"""The page-1 table: the columns a verdict needs are shown, the others go to each
implementation's section and to headline.csv."""


def build_model(summary: dict[str, Any]) -> ReportModel:
    """Format the summary for the templates."""
    run = summary.get("run") or {}
    impls = summary["implementations"]
    labels = [i["label"] for i in impls]
    run_id = run.get("run_id") or " vs ".join(labels)
    workload = run.get("workload") or {}
    shape = "×".join(str(d) for d in workload.get("shape", [])) or "unknown shape"
    question = (
        f"Which {workload.get('name', 'RMSNorm')} implementation ({', '.join(labels)}) is fastest on "
        f"{run.get('device') or 'the captured device'} (backend {run.get('backend') or 'unknown'}) "
        f"for a {shape} {workload.get('dtype', '')} input, and where does its time go?"
        if run
        else f"How do {', '.join(labels)} compare, and where does their time go?"
    )
    headline = make_table(
        "Headline figures per implementation",
        "headline.csv",
        HEADLINE_COLUMNS,
        [{"label": i["label"], **i["headline"]} for i in impls],
        note=(
            "Medians over the active steps; '–' where the trace has no such data. "
            "The other figures are in each implementation's section and headline.csv."
        ),
    )
    comparisons = make_table(
        f"Difference from the baseline ({labels[0] if labels else '–'})",
        "comparisons.csv",
        [
            Col("Implementation", "label", as_text, 2.0, text=True),
            Col("Step Δ", "step_delta_us", _us_signed),
            Col("Step ratio", "step_ratio", lambda v: _num(v, "×")),
            Col("Exceeds noise (steps)", "step_exceeds_noise", _yesno, 1.1),
            Col("Un-profiled Δ", "unprofiled_delta_us", _us_signed),
            Col("Un-profiled ratio", "unprofiled_ratio", lambda v: _num(v, "×")),
            Col("Exceeds noise (un-profiled)", "unprofiled_exceeds_noise", _yesno, 1.3),
            Col("Framework ops Δ / step", "ops_per_step_delta", _num, shown=False),
        ],
        summary["comparisons"],
    )
    shown = impls[:MAX_IMPLEMENTATIONS]
    findings = summary["findings"]
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
    return ReportModel(
        title=f"{workload.get('name', 'RMSNorm')} study: {run_id}"
        if run
        else f"Profile comparison: {run_id}",
        run_id=run_id,
        question=question,
        verdict=_verdict(summary),
        headline=headline,
        comparisons=comparisons,
        findings=findings[:MAX_FINDINGS],
        left_out=left_out,
        charts=_charts(shown),
        sections=[
            *(_section(i, shown=k < len(shown)) for k, i in enumerate(impls)),
            *(_section(i) for i in detail_implementations(summary)[:MAX_IMPLEMENTATIONS]),
        ],
        caveats=summary["caveats"],
        provenance=_provenance(run),
        environment=sorted((run.get("environment") or {}).items()),
        files=make_table(
            "Files and checksums",
            "files.csv",
            [
                Col("Path", "path", as_text, 3.0, text=True),
                Col("Role", "role", as_text, 1.2, text=True),
                Col("Bytes", "bytes", as_text),
                Col("sha256", "sha256", as_text, 3.0, text=True),
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
    labels = [show_bidi(i["label"]) for i in impls]
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
                    [
                        [{**b, "label": show_bidi(b["label"] or "")} for b in i["timeline"]]
                        for i in impls
                    ],
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


def _section(impl: dict[str, Any], shown: bool = True) -> ImplementationSection:
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
        [
            Col("Op", "name", as_text, 3.0, text=True),
            Col("Calls / step", "calls_per_step", _num),
            Col("Dispatch median", "dispatch_median_us", _us),
            Col("Dispatch p90", "dispatch_p90_us", _us),
            Col("Framework self median", "self_cpu_median_us", _us),
            Col("Runtime calls median", "runtime_median_us", _us),
            Col("Launch → device start", "launch_latency_median_us", _us),
            Col("Device median", "device_median_us", _us),
            Col("Device activities", "device_activities", as_text),
        ],
        impl["top_ops"],
        rank=(
            "dispatch time per step",
            lambda r: (r.get("calls_per_step") or 0) * (r.get("dispatch_median_us") or 0),
        ),
    )
    steps = make_table(
        "Per step",
        f"{slug}-steps.csv",
        [
            Col("Step", "step", as_text),
            Col("Duration", "dur_us", _us),
            Col("Top ops", "top_ops", as_text),
            Col("All ops", "all_ops", as_text),
            Col("Dispatch", "dispatch_us", _us),
            Col("Op self", "op_self_us", _us),
            Col("Runtime calls", "runtime_calls", as_text),
            Col("Runtime", "runtime_us", _us),
            Col("Device acts", "device_activities", as_text),
            Col("Device", "device_us", _us),
        ],
        impl["steps"],
    )
    keyavg = make_table(
        "key_averages() equivalent",
        f"{slug}-key-averages.csv",
        [
            Col("Name", "name", as_text, 4.0, text=True),
            Col("Type", "device_type", as_text, 1.2, text=True),
            Col("Calls", "calls", as_text),
            Col("Self CPU", "self_cpu_us", _us),
            Col("CPU total", "cpu_total_us", _us),
            Col("Self device", "self_device_us", _us),
            Col("Device total", "device_total_us", _us),
        ],
        impl["key_averages"],
        note="Same rules as prof.key_averages(); ProfilerStep#N grouped as ProfilerStep*; sorted by self CPU time.",
    )
    links = make_table(
        "Links between framework ops, runtime calls and device activities",
        f"{slug}-links.csv",
        [Col("Link (method)", "link", as_text, 4.0, text=True), Col("Count", "count", as_text)],
        [{"link": k, "count": v} for k, v in sorted(impl["links"].items())],
    )
    chains = make_table(
        "Heaviest ops: op → runtime → device",
        f"{slug}-chains.csv",
        [
            Col("Op", "op", as_text, 2.5, text=True),
            Col("Calls", "calls", as_text, 0.8),
            Col("Device / call", "device_us_per_call", _us),
            Col("Runtime calls per op call", "runtime", as_text, 3.0, text=True),
            Col("Device activities per op call", "device", as_text, 3.0, text=True),
        ],
        impl["chains"],
    )
    gaps = impl["gaps"]
    gap_causes = make_table(
        "Device idle gaps by cause",
        f"{slug}-gap-causes.csv",
        [
            Col("Cause", "cause", as_text, 3.0, text=True),
            Col("Gaps", "count", as_text),
            Col("Total", "total_us", _us),
        ],
        gaps["by_cause"],
        note=f"{gaps['count']} gaps, {_us(gaps['total_us'])} in all.",
    )
    largest = make_table(
        "Largest device idle gaps",
        f"{slug}-gaps.csv",
        [
            Col("Step", "step", as_text),
            Col("Offset in step", "offset_us", _us),
            Col("Duration", "dur_us", _us),
            Col("Cause", "cause", as_text, 3.0, text=True),
        ],
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
        f". Device time from: {impl['device_time_source']}."
    )
    return ImplementationSection(label, f"impl-{slug}", description, tables, shown)


def _neuron_table(neuron: dict[str, Any], csv: str) -> Table:
    engines = ", ".join(f"{k} {v}%" for k, v in neuron["engine_active_pct"].items())
    clock = neuron["clock"]
    return make_table(
        "Neuron system trace per step",
        csv,
        [
            Col("Submissions", "submissions", as_text),
            Col("HW executions", "executions", as_text),
            Col("Model switches", "model_switches", as_text),
            Col("Loads", "loads", as_text),
            Col("Copies in", "copyin_count", as_text),
            Col("Copy-in time", "copyin_us", _us),
            Col("Copies out", "copyout_count", as_text),
            Col("Host blocked", "host_blocked_us", _us),
            Col("Submit→start median", "submit_to_start_median_us", _us),
            Col("Device busy", "device_busy_us", _us),
            Col("Device idle", "device_idle_us", _us),
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

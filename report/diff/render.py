"""``diff.json`` into diff.html, diff.pdf and CSV tables.

Every number the pages show is a number of ``diff.json`` to the digits shown (µs to three
decimals, percentages to one); the waterfall chart labels its bars with their values and draws
no numbered axis, so the PDF holds no figure that diff.json lacks.
"""

from __future__ import annotations

import base64
import csv
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from typing import Any

import matplotlib.pyplot as plt

from nprof_report.report.diff.compare import (
    MAX_OP_ROWS,
    SERIES_WORDS,
    STEP_METRICS,
    TOP_MOVERS,
)
from nprof_report.report.diff.compare import METRIC_WORDS as STEP_WORDS
from nprof_report.report.diff.optable import CHUNK, records, rows_of
from nprof_report.report.diff.structure import (
    PATH_SERIES,
    PATH_WORDS,
    STRUCTURAL_METRICS,
    count_text,
)
from nprof_report.report.diff.structure import WORDS as COUNT_WORDS
from nprof_report.report.diff.tables import split
from nprof_report.report.figures import json_pieces
from nprof_report.report.publish import Content, Streamed
from nprof_report.report.view import CHART_RC, environment, figure_svg, render_pdf


@dataclass(frozen=True)
class Table:
    """A table of the pages (formatted cells; the CSVs are written from diff.json's values)."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    note: str = ""


def _us(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def _signed(x: float | None) -> str:
    return "–" if x is None else f"{x:+.3f}"


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:+.1f} %"


def _interval(rec: dict[str, Any] | None) -> str:
    text = _interval_us(rec)
    if rec is not None and rec["low_pct"] is not None:
        text += f" ({rec['low_pct']:+.1f} % to {rec['high_pct']:+.1f} %)"
    return text


def _interval_us(rec: dict[str, Any] | None) -> str:
    if rec is None or rec["low_us"] is None:
        return "–"
    return f"{rec['low_us']:+.3f} to {rec['high_us']:+.3f}"


def _noise(rec: dict[str, Any] | None) -> str:
    if rec is not None and rec.get("spread"):
        return str(rec["spread"])  # one step: no spread
    if rec is None or rec["exceeds_noise"] is None:
        return "–"
    return "beyond" if rec["exceeds_noise"] else "within"


def _path(op: dict[str, Any]) -> str:
    return " > ".join([*op["context"], op["name"]])


def waterfall_svg(wf: dict[str, Any]) -> str:
    """Horizontal waterfall: each part's difference from where the previous one ended, then
    the total; bars labelled with their values, no numbered axis."""
    parts = wf["parts"]
    names = [p["part"] for p in parts] + ["step time (total)"]
    with plt.rc_context(CHART_RC):  # type: ignore[arg-type]
        fig, ax = plt.subplots(figsize=(6.2, 0.6 + 0.32 * len(names)))
        left = 0.0
        spans = []
        for p in parts:
            spans.append((left, p["delta_us"]))
            left += p["delta_us"]
        spans.append((0.0, wf["total_delta_us"]))
        width = max((abs(d) for _, d in spans), default=0.0) or 1.0
        for i, (start, delta) in enumerate(spans):
            last = i == len(spans) - 1
            ax.barh(
                i,
                delta,
                left=start,
                color="#222222" if last else ("#777777" if delta >= 0 else "#dddddd"),
                hatch="" if delta >= 0 or last else "//",
                edgecolor="black",
                linewidth=0.5,
                height=0.6,
            )
            end = start + delta
            ax.text(
                max(start, end) + 0.02 * width,
                i,
                f"{delta:+.3f} µs",
                va="center",
                ha="left",
                fontsize=7,
            )
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_yticks(range(len(names)), names)
        ax.invert_yaxis()
        ax.set_xticks([])
        lo = min(min(s, s + d) for s, d in spans)
        hi = max(max(s, s + d) for s, d in spans)
        ax.set_xlim(min(lo, 0) - 0.05 * width, max(hi, 0) + 0.45 * width)
        ax.set_xlabel("NEW − BASE, median step (µs); darker: slower, hatched: faster")
        return figure_svg(fig)


def data_uri(svg: str) -> str:
    """An SVG as an ``<img>`` source (the page's CSP allows ``img-src data:``)."""
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode("ascii")


def _metric_rows(pair: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for m in STEP_METRICS:
        rec = pair["metrics"][m]
        if rec is None:
            continue
        rows.append(
            [
                STEP_WORDS[m],
                rec["base_us"],
                rec["new_us"],
                rec["delta_us"],
                rec["delta_pct"],
                rec["low_us"],
                rec["high_us"],
                rec["exceeds_noise"],
            ]
        )
    return rows


def _calls(x: float | None) -> str:
    return "–" if x is None else f"{x:g}"


def _op_cells(op: dict[str, Any]) -> list[str]:
    cells = [_path(op), f"{_calls(op['calls']['base'])} → {_calls(op['calls']['new'])}"]
    for s in SERIES_WORDS:
        rec = op[s]
        cells.append("–" if rec is None else f"{_us(rec['base_us'])} → {_us(rec['new_us'])}")
    impact = op[op["impact_metric"]]
    cells += [
        f"{SERIES_WORDS[op['impact_metric']]} {_signed(op['impact_us'])}",
        _interval_us(impact),
        "moved" if op["moved"] else _noise(impact),
    ]
    return cells


def _op_table(title: str, ops: list[dict[str, Any]], limit: int, note: str) -> Table:
    return Table(
        title,
        [
            "op (enclosing ops > name)",
            "calls",
            *(f"{w} (µs)" for w in SERIES_WORDS.values()),
            "largest difference (µs)",
            "its 95 % interval (µs)",
            "noise",
        ],
        [_op_cells(o) for o in ops[:limit]],
        note,
    )


def _movers_table(ops: list[dict[str, Any]], moved: int) -> Table:
    """The first movers of ``ops`` (the rows shown; ``moved`` of the pair's ops moved)."""
    movers = [o for o in ops if o["moved"]]
    rows = []
    for o in movers[:TOP_MOVERS]:
        rec = o[o["impact_metric"]]
        rows.append(
            [
                _path(o),
                SERIES_WORDS[o["impact_metric"]],
                _us(rec["base_us"]),
                _us(rec["new_us"]),
                _signed(rec["delta_us"]),
                _pct(rec["delta_pct"]),
                _interval(rec),
                "–"
                if o["share_of_step_delta_pct"] is None
                else f"{o['share_of_step_delta_pct']:.1f} %",
            ]
        )
    return Table(
        "Top movers",
        [
            "op (enclosing ops > name)",
            "what moved",
            "BASE (µs)",
            "NEW (µs)",
            "difference (µs)",
            "change",
            "95 % interval (µs)",
            "share of the step difference",
        ],
        rows,
        f"{moved} {'op' if moved == 1 else 'ops'} moved beyond the noise"
        + (f"; the first {TOP_MOVERS} shown" if moved > TOP_MOVERS else "")
        + ". Medians per step.",
    )


def _only_table(title: str, ops: list[dict[str, Any]], total: int, limit: int) -> Table:
    return Table(
        title,
        ["op (enclosing ops > name)", "calls", "host self (µs)", "device (µs)", "kernels"],
        [
            [
                _path(o),
                _calls(o["calls"]),
                _us(o["host_self_us"]),
                _us(o["device_self_us"]),
                ", ".join(o["kernels"]) or "–",
            ]
            for o in ops[:limit]
        ],
        f"{total} in all" + (f"; the first {limit} shown" if total > limit else ""),
    )


def _time_result(r: dict[str, Any]) -> str:
    if r["failed"]:
        return "FAILED"
    if r.get("binding", True):
        return "passed"
    over = r.get("exceeds_threshold")
    return "advice: " + ("would fail" if over else "would pass")


def _count_result(c: dict[str, Any]) -> str:
    if c["failed"]:
        return "FAILED"
    return "passed (fewer: an improvement)" if c["improved"] else "passed"


def _gate_view(check: dict[str, Any]) -> dict[str, Any]:
    """What ``check`` decided, for page 1: the verdict, what the exit code rests on, the rules,
    one row per result and the notes."""
    k = len(check["baselines"])
    between = k > 1
    counted = check.get("structure_results", [])
    spread = any(r.get("spread_pct") is not None for r in check["results"])
    table = Table(
        "Time checked",
        [
            "implementation",
            "what",
            "baseline runs' medians (µs)" if between else "BASE (µs)",
            "NEW (µs)",
            "change" + (" from their mean" if between else ""),
            "95 % interval",
            *(["baselines' spread"] if spread else []),
            "result",
        ],
        [
            [
                r["label"],
                r["what"],
                ", ".join(_us(m) for m in r["baseline_medians_us"]),
                _us(r["new_us"]),
                _pct(r["delta_pct"]),
                "–" if r["low_pct"] is None else f"{r['low_pct']:+.1f} % to {r['high_pct']:+.1f} %",
                *(
                    ["–" if r.get("spread_pct") is None else f"{r['spread_pct']:.1f} %"]
                    if spread
                    else []
                ),
                _time_result(r),
            ]
            for r in check["results"]
        ],
        "A time result fails when even the lower end of its interval exceeds the allowed "
        "regression, where time decides: with several baselines whose medians spread by no more "
        "than the allowed regression (max − min over their mean), or with --strict-time.",
    )
    work = Table(
        "Work checked (counts per step: exact, no interval)",
        [
            "implementation",
            "what",
            "baseline runs" if between else "BASE",
            "NEW",
            "change",
            "result",
        ],
        [
            [
                c["label"],
                c["what"],
                ", ".join(count_text(x) for x in c["baseline_counts"]),
                count_text(c["new"]),
                ("+" if c["delta"] > 0 else "") + count_text(c["delta"]),
                _count_result(c),
            ]
            for c in counted
        ],
        "A count fails when NEW's exceeds the baseline's"
        + (" (the largest of the baselines')" if between else "")
        + f" by more than {count_text(check.get('max_count_increase', 0))}.",
    )
    noise = (
        f"the spread between the {k} baseline runs ({check['noise']})"
        if between
        else "the step-to-step interval of each run (Method); the noise between runs is unknown "
        "with one baseline"
    )
    return {
        "passed": check["passed"],
        "between_runs": between,
        "threshold": f"{check['max_regression_pct']:g}",
        "count_threshold": count_text(check.get("max_count_increase", 0)),
        "basis": check.get("exit_basis", "time"),
        "noise": noise,
        "work": work,
        "table": table,
        "notes": check.get("notes", []),
    }


def _structure_view(pair: dict[str, Any]) -> dict[str, Any] | None:
    """A pair's work per step: the sentence, the totals and the op paths whose counts changed."""
    structure = pair.get("structure")
    if structure is None:
        return None
    rows = []
    for m in STRUCTURAL_METRICS:
        c = structure["metrics"][m]
        if c is None:
            continue
        rows.append(
            [
                COUNT_WORDS[m],
                count_text(c["base"]),
                count_text(c["new"]),
                ("+" if c["delta"] > 0 else "") + count_text(c["delta"]),
            ]
        )
    totals = Table(
        "Work per step (medians over steps; counts)", ["what", "BASE", "NEW", "change"], rows
    )
    paths = structure["paths"]
    shown = [m for m in PATH_SERIES if m == "ops" or m in structure["per_path_counts"]]
    changed = Table(
        "Ops whose counts per step changed",
        [
            "op (enclosing ops > name)",
            "change",
            *(f"{PATH_WORDS[m]} (BASE → NEW)" for m in shown),
        ],
        [
            [
                _path(o),
                o["status"],
                *(
                    "–"
                    if o[m] is None
                    else f"{count_text(o[m]['base'])} → {count_text(o[m]['new'])}"
                    for m in shown
                ),
            ]
            for o in paths[:MAX_OP_ROWS]
        ],
        f"{len(paths)} in all"
        + (f"; the first {MAX_OP_ROWS} shown" if len(paths) > MAX_OP_ROWS else "")
        + "; in the order NEW first runs them.",
    )
    return {"sentence": structure["sentence"], "totals": totals, "paths": changed}


def _pair_view(pair: dict[str, Any], index: int) -> dict[str, Any]:
    metrics = Table(
        "Per step: median BASE, median NEW, difference",
        [
            "metric",
            "BASE (µs)",
            "NEW (µs)",
            "difference (µs)",
            "change",
            "95 % interval",
            "noise",
        ],
        [
            [
                STEP_WORDS[m],
                _us(r["base_us"]),
                _us(r["new_us"]),
                _signed(r["delta_us"]),
                _pct(r["delta_pct"]),
                _interval(r),
                _noise(r),
            ]
            for m, r in pair["metrics"].items()
            if r is not None and (r["base_us"] or r["new_us"])  # (no device: no device row)
        ],
        f"BASE {pair['base_steps']} steps, NEW {pair['new_steps']} steps.",
    )
    renamed = [o for o in pair["ops"] if o["kernels_changed"]]
    counts = pair["counts"]
    wf = pair["waterfall"]
    return {
        "anchor": f"pair-{index}",
        "label": pair["label"],
        "structure": _structure_view(pair),
        "verdict": pair["verdict"],
        "waterfall": data_uri(waterfall_svg(wf)) if wf and wf["parts"] else None,
        "waterfall_table": Table(
            "Where the step-time difference comes from (median step)",
            ["part", "BASE (µs)", "NEW (µs)", "difference (µs)"],
            [
                [p["part"], _us(p["base_us"]), _us(p["new_us"]), _signed(p["delta_us"])]
                for p in wf["parts"]
            ]
            + [
                [
                    "step time (total)",
                    _us(wf["base_step_us"]),
                    _us(wf["new_step_us"]),
                    _signed(wf["total_delta_us"]),
                ]
            ],
        )
        if wf
        else None,
        "movers": _movers_table(pair["ops"], counts["moved"]),
        "metrics": metrics,
        "ops": _op_table(
            "Aligned ops (BASE median → NEW median per step)",
            pair["ops"],
            MAX_OP_ROWS,
            f"{counts['aligned']} ops in both runs"
            + (
                f"; the first {MAX_OP_ROWS} shown (all in the CSV)"
                if counts["aligned"] > MAX_OP_ROWS
                else ""
            )
            + ".",
        ),
        "added": _only_table("Only in NEW (added)", pair["added"], counts["added"], MAX_OP_ROWS),
        "removed": _only_table(
            "Only in BASE (removed)", pair["removed"], counts["removed"], MAX_OP_ROWS
        ),
        "renamed": Table(
            "Kernels that changed under an aligned op",
            ["op", "BASE kernels", "NEW kernels"],
            [
                [_path(o), ", ".join(o["kernels_base"]) or "–", ", ".join(o["kernels_new"]) or "–"]
                for o in renamed[:MAX_OP_ROWS]
            ],
        ),
    }


def render_html(doc: dict[str, Any]) -> str:
    """Self-contained HTML of the diff: inline CSS and SVG, no script, nothing fetched."""
    css_dir = resources.files("nprof_report.templates").joinpath("css")
    css = css_dir.joinpath("report.css").read_text("utf-8") + css_dir.joinpath(
        "diff.css"
    ).read_text("utf-8")
    sides = doc["sides"]
    return (
        environment()
        .get_template("diff.html.j2")
        .render(
            d=doc,
            css=css,
            base=sides["base"]["path"],
            new=sides["new"]["path"],
            pairs=[_pair_view(p, i) for i, p in enumerate(doc["pairs"])],
            gate=_gate_view(doc["check"]) if "check" in doc else None,
        )
    )


def _csv(columns: list[str], rows: list[list[Any]]) -> bytes:
    buf = io.StringIO(newline="")
    writer = csv.writer(buf)
    writer.writerow(columns)
    writer.writerows(rows)
    return buf.getvalue().encode("utf-8")


def _op_rows(doc: dict[str, Any]) -> Iterator[list[Any]]:
    """A row of ``tables/diff_ops.csv`` per aligned op of every pair."""
    for pair in doc["pairs"]:
        aligned = rows_of(pair["table"], "aligned")
        for o in records(aligned, pair["base_steps"], pair["new_steps"]):
            calls = o["calls"]
            row = [pair["label"], " > ".join(o["context"]), o["name"], o["kind"]]
            row += [calls["base"], calls["new"], calls["delta"]]
            for s in SERIES_WORDS:
                rec = o[s] or {}
                row += [
                    rec.get("base_us"),
                    rec.get("new_us"),
                    rec.get("delta_us"),
                    rec.get("low_us"),
                    rec.get("high_us"),
                    rec.get("exceeds_noise"),
                ]
            yield [
                *row,
                o["impact_metric"],
                o["impact_us"],
                o["moved"],
                ";".join(o["kernels_base"]),
                ";".join(o["kernels_new"]),
            ]


def _only_rows(doc: dict[str, Any]) -> Iterator[list[Any]]:
    """A row of ``tables/diff_added_removed.csv`` per added or removed op of every pair."""
    for pair in doc["pairs"]:
        for status in ("added", "removed"):
            rows = rows_of(pair["table"], status)
            for o in records(rows, pair["base_steps"], pair["new_steps"]):
                yield [
                    pair["label"],
                    status,
                    " > ".join(o["context"]),
                    o["name"],
                    o["kind"],
                    o["calls"],
                    o["host_self_us"],
                    o["host_total_us"],
                    o["device_self_us"],
                    o["device_total_us"],
                    ";".join(o["kernels"]),
                ]


def _csv_streamed(columns: list[str], rows: Callable[[], Iterator[list[Any]]]) -> Streamed:
    """A CSV written a chunk of rows at a time, as its rows are made (an aligned op's record
    is made for its row, and let go)."""

    def pieces() -> Iterator[bytes]:
        yield _csv(columns, [])
        chunk: list[list[Any]] = []
        for row in rows():
            chunk.append(row)
            if len(chunk) == CHUNK:
                yield _csv_rows(chunk)
                chunk = []
        yield _csv_rows(chunk)

    return Streamed(pieces)


def _csv_rows(rows: list[list[Any]]) -> bytes:
    buf = io.StringIO(newline="")
    csv.writer(buf).writerows(rows)
    return buf.getvalue().encode("utf-8")


def csv_tables(doc: dict[str, Any]) -> dict[str, Content]:
    """Every row of the comparison as CSV, by file name (the op tables' written as their rows
    are made)."""
    steps, parts, work = [], [], []
    for pair in doc["pairs"]:
        label = pair["label"]
        structure = pair.get("structure") or {"metrics": {}, "paths": []}
        for m in STRUCTURAL_METRICS:
            c = structure["metrics"].get(m)
            if c is not None:
                work.append([label, m, "", "", "total", c["base"], c["new"], c["delta"]])
        for o in structure["paths"]:
            for m in PATH_SERIES:
                c = o[m]
                if c is not None and c["delta"]:
                    where = [" > ".join(o["context"]), o["name"], o["status"]]
                    work.append([label, m, *where, c["base"], c["new"], c["delta"]])
        steps += [[label, *r] for r in _metric_rows(pair)]
        wf = pair["waterfall"] or {"parts": []}
        parts += [[label, p["part"], p["base_us"], p["new_us"], p["delta_us"]] for p in wf["parts"]]
    # e.g. host_self_us_base: the series' key, then the record's field without its unit
    op_cols = ["calls_base", "calls_new", "calls_delta"] + [
        f"{s}_{k}"
        for s in SERIES_WORDS
        for k in ("base", "new", "delta", "low", "high", "exceeds_noise")
    ]
    files: dict[str, Content] = {
        "tables/diff_steps.csv": _csv(
            [
                "implementation",
                "metric",
                "base_us",
                "new_us",
                "delta_us",
                "delta_pct",
                "low_us",
                "high_us",
                "exceeds_noise",
            ],
            steps,
        ),
        "tables/diff_waterfall.csv": _csv(
            ["implementation", "part", "base_us", "new_us", "delta_us"], parts
        ),
        "tables/diff_ops.csv": _csv_streamed(
            [
                "implementation",
                "context",
                "name",
                "kind",
                *op_cols,
                "impact_metric",
                "impact_us",
                "moved",
                "kernels_base",
                "kernels_new",
            ],
            lambda: _op_rows(doc),
        ),
        "tables/diff_added_removed.csv": _csv_streamed(
            [
                "implementation",
                "status",
                "context",
                "name",
                "kind",
                "calls",
                "host_self_us",
                "host_total_us",
                "device_self_us",
                "device_total_us",
                "kernels",
            ],
            lambda: _only_rows(doc),
        ),
    }
    files["tables/diff_structure.csv"] = _csv(
        ["implementation", "metric", "context", "name", "status", "base", "new", "delta"], work
    )
    if "check" in doc:
        check = doc["check"]
        files["tables/diff_check.csv"] = _csv(
            [
                "implementation",
                "metric",
                "what",
                "baseline_medians_us",
                "base_us",
                "new_us",
                "delta_pct",
                "low_pct",
                "high_pct",
                "max_regression_pct",
                "failed",
                "spread_pct",
                "decides",
                "binding",
            ],
            [
                [
                    r["label"],
                    r["metric"],
                    r["what"],
                    ";".join(str(m) for m in r["baseline_medians_us"]),
                    r["base_us"],
                    r["new_us"],
                    r["delta_pct"],
                    r["low_pct"],
                    r["high_pct"],
                    check["max_regression_pct"],
                    r["failed"],
                    r.get("spread_pct"),
                    r.get("decides"),
                    r.get("binding"),
                ]
                for r in check["results"]
            ],
        )
        files["tables/diff_check_counts.csv"] = _csv(
            [
                "implementation",
                "metric",
                "what",
                "baseline_counts",
                "base",
                "new",
                "delta",
                "max_count_increase",
                "improved",
                "failed",
                "changes",
            ],
            [
                [
                    c["label"],
                    c["metric"],
                    c["what"],
                    ";".join(str(x) for x in c["baseline_counts"]),
                    c["base"],
                    c["new"],
                    c["delta"],
                    check.get("max_count_increase"),
                    c["improved"],
                    c["failed"],
                    c["changes"],
                ]
                for c in check.get("structure_results", [])
            ],
        )
    return files


def diff_files(doc: dict[str, Any], *, pdf: bool = True) -> dict[str, Content]:
    """The diff's own files by path relative to the output folder, in the order printed:
    ``diff.json`` (keys sorted, indented) and the Parquet tables it lists (:mod:`.tables`)."""
    # the Parquet tables first: their writing's working memory then comes before WeasyPrint's
    # import and layout, not on top of them (diff of 100,000 op paths: the peak of its pages)
    stored, tables = split(doc)
    html = render_html(doc)
    files: dict[str, Content] = {"diff.html": html.encode("utf-8")}
    if pdf:
        files["diff.pdf"] = render_pdf(html)
    files["diff.json"] = Streamed(lambda: json_pieces(stored))
    files.update(sorted(tables.items()))
    files.update(sorted(csv_tables(doc).items()))
    return files

"""The ``ranks`` record of the summary into the report's cross-rank section (tables, heat map).

Placed by ``templates/ranks.html.j2``; its CSV files go next to the report with the others,
including two that are not shown: every rank's key_averages rows (``ranks-key-averages.csv``) and
the rank x step matrix in long form (``ranks-step-times.csv``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nprof_report.report.figures import Summary, Tagged
from nprof_report.report.view.charts import Chart
from nprof_report.report.view.columns import KEY_AVERAGES_COLUMNS, RANKS_COLUMNS
from nprof_report.report.view.rankcharts import step_heatmap
from nprof_report.report.view.tables import Col, Table, as_text, as_us, make_table


@dataclass(frozen=True)
class RanksSection:
    """The cross-rank section: what it covers, the stragglers, the heat map and the tables."""

    intro: str
    stragglers: list[str]
    waited_for: list[str]
    chart: Chart
    tables: list[Table]
    csv_tables: list[Table]  # every table of the section, shown or not


def _table(
    title: str,
    csv: str,
    columns: list[tuple[str, str, Callable[[Any], str]]],
    records: Sequence[Mapping[str, Any]],
    note: str | None = None,
) -> Table:
    """A table through :func:`~.tables.make_table`: (header, record key, formatter) per column."""
    cols = [Col(h, key, fmt, text=fmt is as_text) for h, key, fmt in columns]
    return make_table(title, csv, cols, records, note=note)


_RULE_LABEL = {"ProfilerStep": "ProfilerStep#N", "window": "the whole profiled window"}
_RULE_WORDS = {
    "ProfilerStep": "the ProfilerStep#N annotations",
    "window": "no ProfilerStep#N annotations, so each rank's whole profiled window is one step",
}
_ANNOTATION = "annotation:"


def _rule_words(rule: str, words: dict[str, str]) -> str:
    """A step rule (``parse/steps.py``) in the words of ``words``, an annotation's by name."""
    if rule.startswith(_ANNOTATION):
        return f"the user annotation {rule[len(_ANNOTATION) :]!r}"
    return words.get(rule, rule)


def ranks_section(summary: Summary) -> RanksSection | None:
    """The section, or None when the inputs are not several ranks of one job."""
    record = summary.get("ranks")
    if not record:
        return None
    rows = record["ranks"]
    comm = "device activities" if record["comm_source"] == "device" else "host collective ops"
    rules = record.get("step_rules") or ["ProfilerStep"]  # a document from before issue 27
    intro = (
        f"{record['ranks_present']} ranks"
        + (f" of a job of world size {record['world_size']}" if record["world_size"] else "")
        + (f" ({record['backend']})" if record["backend"] else "")
        + f"; rank numbers from {record['rank_from']}. Communication time is measured on the "
        f"{comm} of collectives (c10d ops, record_param_comms, process-group annotations, and "
        "the device activities they launched), classified by collective. Steps: "
        + "; ".join(_rule_words(r, _RULE_WORDS) for r in rules)
        + "."
    )
    per_rank = make_table(
        "Per rank: medians over the profiled steps",
        "ranks.csv",
        RANKS_COLUMNS,
        rows,
        note="Device compute: device busy minus device communication.",
    )
    kinds = record["comm_kinds"]
    by_kind = _table(
        "Communication per step by collective (median)",
        "ranks-comm.csv",
        [
            ("Rank", ("rank"), as_text),
            *((kind, f"comm:{kind}", as_us) for kind in kinds),
        ],
        [{**r, **{f"comm:{k}": r["comm_by_kind_us"].get(k) for k in kinds}} for r in rows],
    )
    long_steps = [
        {"rank": row["rank"], "step": step, "dur_us": dur}
        for row, durs in zip(rows, record["step_time_us"])
        for step, dur in zip(record["steps"], durs)
    ]
    step_times = _table(
        "Step time per rank and step",
        "ranks-step-times.csv",
        [(c, c, as_text) for c in ("rank", "step", "dur_us")],
        long_steps,
    )
    impls = {i["label"]: i for i in summary["implementations"]}
    keyavg = _table(
        "key_averages() per rank",
        "ranks-key-averages.csv",
        [("rank", "rank", as_text)] + [(c.key, c.key, as_text) for c in KEY_AVERAGES_COLUMNS],
        # made as they are written: every rank's rows (a rank may have 100,000 names)
        Tagged("rank", [(row["rank"], impls[row["label"]]["key_averages"]) for row in rows]),
    )
    chart = Chart(
        "Step time per rank and step",
        step_heatmap(
            [r["rank"] for r in rows],
            record["steps"],
            record["step_time_us"],
            "step (" + ", ".join(_rule_words(r, _RULE_LABEL) for r in rules) + ")",
        ),
        "Darker is slower; white: the rank has no such step. A straggler shows as a dark row, "
        "a slow step of the whole job as a dark column.",
    )
    shown = [per_rank, by_kind] if kinds else [per_rank]
    return RanksSection(
        intro=intro,
        stragglers=[s["evidence"] for s in record["stragglers"]],
        waited_for=[w["evidence"] for w in record.get("waited_for", [])],
        chart=chart,
        tables=shown,
        csv_tables=[*shown, step_times, keyavg],
    )

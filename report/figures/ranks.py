"""Several ranks of one job: per-rank figures, the rank x step matrix and the stragglers.

A rank's figures (:class:`RankFigures`) are computed where its trace is parsed, by the same code
for the local pool and for Ray (:mod:`.jobs`): only these aggregates travel, never the frames.
:func:`cross_rank` then turns the figures of all ranks into the ``ranks`` record of
``summary.json``, from which the report's cross-rank section, ``ops --by-rank`` and the straggler
findings are made.

Rank: ``distributedInfo.rank`` of each trace; when those are missing or repeat (copies of one
trace), the number after ``rank`` in the file name (``rank3.pt.trace.json``,
``sampled_rank-1.json.gz``). The inputs are one job when every trace has a rank, the ranks are
distinct and the world sizes (where given) agree.

Straggler: a rank whose median step time exceeds the median of the ranks' medians by at least
:data:`STRAGGLER_PCT` % and by more than :data:`STRAGGLER_MADS` scaled median absolute
deviations of the other ranks' medians (the job's own spread). Its evidence compares each part of
its step -- host dispatch, device compute (device busy minus communication), communication per
kind -- with the median of the other ranks, and names the part that grew most.

Waited for: in a synchronous job every rank's step lasts as long as the slowest rank's work, so a
rank that computes longer shows no longer step; it shows as a rank whose host dispatch or device
compute exceeds the other ranks' median by :data:`STRAGGLER_PCT` % of the median step while it
spends less time in collectives than they do (they wait for it there).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import polars as pl

from nprof_report.parse import LoadedSource
from nprof_report.report.figures.analyses import ImplementationAnalysis
from nprof_report.report.figures.comms import comm_per_step
from nprof_report.report.figures.summary_types import (
    Finding,
    RankRow,
    RanksRecord,
    StepPart,
    Straggler,
    StragglerFigures,
    WaitedFor,
)
from nprof_report.textout import format_time_us

FILE_RANK = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
STRAGGLER_PCT = 5.0
STRAGGLER_MADS = 3.0
MAD_SCALE = 1.4826  # a normal sample's stdev from its median absolute deviation
EQUAL_FRACTION = 0.02  # a part within 2 % of the median step is "equal"


@dataclass(frozen=True)
class RankFigures:
    """The per-rank aggregates a rank's job returns (all times ns)."""

    label: str
    trace: str
    rank: int | None  # distributedInfo.rank
    file_rank: int | None  # the number after "rank" in the file name
    world_size: int | None
    backend: str | None
    steps: pl.DataFrame  # step, dur_ns, dispatch_ns, device_ns
    comm: pl.DataFrame  # comms.COMM_STEPS
    step_rule: str = "ProfilerStep"  # what its steps are (parse/steps.py)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def rank_figures(loaded: LoadedSource, analysis: ImplementationAnalysis) -> RankFigures:
    """One rank's figures from its loaded frames and its analysis."""
    dist = loaded.frames.meta.distributed_info or {}
    trace = loaded.source.trace
    match = FILE_RANK.search(trace.name) if trace is not None else None
    backend = dist.get("backend")
    return RankFigures(
        label=analysis.label,
        trace=analysis.trace_path,
        rank=_int(dist.get("rank")),
        file_rank=int(match.group(1)) if match else None,
        world_size=_int(dist.get("world_size")),
        backend=backend if isinstance(backend, str) else None,
        steps=analysis.steps.select("step", "dur_ns", "dispatch_ns", "device_ns"),
        comm=comm_per_step(loaded),
        step_rule=analysis.step_rule,
    )


def job_ranks(figures: list[RankFigures]) -> tuple[list[int], str] | None:
    """The rank of each figure and where it came from, when the figures are one job of several
    ranks (module docstring); else None."""
    if len(figures) < 2:
        return None
    sizes = {f.world_size for f in figures if f.world_size is not None}
    if len(sizes) > 1:
        return None
    for attr, origin in (("rank", "distributedInfo"), ("file_rank", "file name")):
        ranks = [getattr(f, attr) for f in figures]
        if None not in ranks and len(set(ranks)) == len(ranks):
            return ranks, origin
    return None


def _us(ns: float | None) -> float | None:
    return None if ns is None else round(ns / 1000, 3)


def _median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def _rank_row(rank: int, f: RankFigures, comm_column: str) -> RankRow:
    """Medians over a rank's steps; comm per kind as the median over steps (0 where absent)."""
    comm = f.comm.group_by("step").agg(pl.col(comm_column).sum().alias("comm_ns"))
    steps = f.steps.join(comm, on="step", how="left").fill_null(0).sort("step")
    per_kind = f.comm.pivot(on="kind", index="step", values=comm_column) if f.comm.height else None
    durs = [float(v) for v in steps["dur_ns"].to_list()]
    q = statistics.quantiles(durs, n=4, method="inclusive") if len(durs) >= 2 else durs * 3
    dev_comm = steps["comm_ns"] if comm_column == "device_comm_ns" else steps["comm_ns"] * 0
    compute = (steps["device_ns"] - dev_comm).to_list()
    step_med = _median(durs)
    device_med = _median([float(v) for v in steps["device_ns"].to_list()])
    kinds: dict[str, float | None] = {}
    if per_kind is not None:
        full = steps.select("step").join(per_kind, on="step", how="left").fill_null(0)
        for kind in sorted(c for c in full.columns if c != "step"):
            kinds[kind] = _us(_median([float(v) for v in full[kind].to_list()]))
    comm_med = _median([float(v) for v in steps["comm_ns"].to_list()])
    return {
        "rank": rank,
        "label": f.label,
        "trace": f.trace,
        "steps": len(durs),
        "step_median_us": _us(step_med) if durs else None,
        "step_p25_us": _us(q[0]) if durs else None,
        "step_p75_us": _us(q[2]) if durs else None,
        "step_iqr_us": _us(q[2] - q[0]) if durs else None,
        "step_min_us": _us(min(durs)) if durs else None,
        "step_max_us": _us(max(durs)) if durs else None,
        "dispatch_median_us": _us(_median([float(v) for v in steps["dispatch_ns"].to_list()])),
        "device_median_us": _us(device_med),
        "device_busy_pct": round(100 * device_med / step_med, 2) if step_med else None,
        "compute_median_us": _us(_median([float(v) for v in compute])),
        "comm_median_us": _us(comm_med),
        "comm_pct": round(100 * comm_med / step_med, 2) if step_med else None,
        "comm_by_kind_us": kinds,
    }


def cross_rank(figures: list[RankFigures]) -> RanksRecord | None:
    """The ``ranks`` record of ``summary.json``, or None when the inputs are not one job of
    several ranks."""
    found = job_ranks(figures)
    if found is None:
        return None
    ranks, origin = found
    device = any(f.comm["device_comm_ns"].sum() > 0 for f in figures)
    column = "device_comm_ns" if device else "host_comm_ns"
    order = sorted(range(len(figures)), key=lambda i: ranks[i])
    rows = [_rank_row(ranks[i], figures[i], column) for i in order]
    steps = sorted({s for f in figures for s in f.steps["step"].to_list()})
    matrix = []
    for i in order:
        by_step = dict(
            zip(figures[i].steps["step"].to_list(), figures[i].steps["dur_ns"].to_list())
        )
        matrix.append([_us(by_step.get(s)) for s in steps])
    first = figures[0]
    slow = stragglers(rows)
    return {
        "rank_from": origin,
        "world_size": first.world_size,
        "backend": first.backend,
        "ranks_present": len(rows),
        "comm_source": "device" if device else "host",
        "comm_kinds": sorted({k for r in rows for k in r["comm_by_kind_us"]}),
        "ranks": rows,
        "steps": steps,
        "step_rules": sorted({f.step_rule for f in figures}),
        "step_time_us": matrix,
        "stragglers": slow,
        "waited_for": waited_for(rows, {s["rank"] for s in slow}),
    }


def _timed(rows: list[RankRow]) -> tuple[list[RankRow], float]:
    """The ranks with a step median, and the median of those (none when fewer than two)."""
    timed = [r for r in rows if r["step_median_us"] is not None]
    if len(timed) < 2:
        return [], 0.0
    return timed, _median([_step_median(r) for r in timed])


def _step_median(row: RankRow) -> float:
    """The step median of a row that :func:`_timed` kept (it has one)."""
    return cast(float, row["step_median_us"])


def stragglers(rows: list[RankRow]) -> list[Straggler]:
    """The slow ranks, slowest first, each with the evidence (module docstring)."""
    timed, job_median = _timed(rows)
    out: list[Straggler] = []
    for row in timed:
        others = [r for r in timed if r is not row]
        other_meds = [_step_median(r) for r in others]
        centre = _median(other_meds)
        mad = _median([abs(m - centre) for m in other_meds])
        excess = _step_median(row) - job_median
        slower_pct = 100 * excess / job_median if job_median else 0.0
        if slower_pct < STRAGGLER_PCT or excess <= STRAGGLER_MADS * MAD_SCALE * mad:
            continue
        figures: StragglerFigures = {
            "rank": row["rank"],
            "label": row["label"],
            "step_median_us": _step_median(row),
            "others_median_us": round(centre, 3),
            "slower_pct": round(slower_pct, 1),
            "parts": _parts(row, others),
        }
        out.append({**figures, "evidence": _evidence(figures, job_median)})
    return sorted(out, key=lambda s: -s["slower_pct"])


def waited_for(rows: list[RankRow], stragglers: set[int]) -> list[WaitedFor]:
    """Ranks the others wait for in collectives (module docstring), stragglers left out."""
    timed, job_median = _timed(rows)
    out: list[WaitedFor] = []
    for row in timed:
        if row["rank"] in stragglers:
            continue
        others = [r for r in timed if r is not row]
        parts = _parts(row, others)
        work = max(p["delta_us"] for p in parts if not p["comm"])
        comm = sum(p["delta_us"] for p in parts if p["comm"])
        if job_median and 100 * work / job_median >= STRAGGLER_PCT and comm < 0:
            out.append(
                {
                    "rank": row["rank"],
                    "label": row["label"],
                    "work_excess_pct": round(100 * work / job_median, 1),
                    "parts": parts,
                    "evidence": _evidence_parts(f"rank {row['rank']}", parts, job_median),
                }
            )
    return sorted(out, key=lambda w: -w["work_excess_pct"])


def _parts(row: RankRow, others: list[RankRow]) -> list[StepPart]:
    """Each part of the step: this rank's median, the other ranks' median, the difference."""
    kinds = sorted({k for r in (row, *others) for k in r["comm_by_kind_us"]})
    named: list[tuple[str, str, str | None]] = [
        ("host dispatch", "dispatch_median_us", None),
        ("device compute", "compute_median_us", None),
    ]
    named += [(kind, "comm_by_kind_us", kind) for kind in kinds]

    def get(r: Mapping[str, Any], key: str, kind: str | None) -> float:
        value = r[key] if kind is None else r[key].get(kind)
        return float(value or 0.0)

    parts: list[StepPart] = []
    for name, key, kind in named:
        mine = get(row, key, kind)
        theirs = _median([get(r, key, kind) for r in others])
        parts.append(
            {
                "part": name,
                "comm": name not in ("host dispatch", "device compute"),
                "rank_us": round(mine, 3),
                "others_us": round(theirs, 3),
                "delta_us": round(mine - theirs, 3),
            }
        )
    return sorted(parts, key=lambda p: -p["delta_us"])


def _evidence(s: StragglerFigures, job_median: float) -> str:
    """``rank 17 is 9.0 % slower per step (…): device compute is equal (…), it waits 4.1 ms
    longer in all_reduce (…)``."""
    text = (
        f"rank {s['rank']} is {s['slower_pct']:g} % slower per step "
        f"(median {format_time_us(s['step_median_us'])} vs {format_time_us(s['others_median_us'])} "
        "on the other ranks)"
    )
    return _evidence_parts(text, s["parts"], job_median)


def _evidence_parts(text: str, parts: list[StepPart], job_median: float) -> str:
    """``text`` followed by what each part of the step does against the other ranks."""
    clauses = []
    for p in parts:
        mine, theirs = format_time_us(p["rank_us"]), format_time_us(p["others_us"])
        if abs(p["delta_us"]) <= EQUAL_FRACTION * job_median:
            if not p["comm"]:
                clauses.append(f"{p['part']} is equal ({mine} vs {theirs})")
            continue
        more = p["delta_us"] > 0
        amount = format_time_us(abs(p["delta_us"]))
        if p["comm"]:
            verb = f"it waits {amount} {'longer' if more else 'less'} in {p['part']}"
        else:
            verb = f"{p['part']} takes {amount} {'more' if more else 'less'}"
        clauses.append(f"{verb} ({mine} vs {theirs})")
    return text + (": " + ", ".join(clauses) if clauses else "")


def findings(record: RanksRecord | None) -> list[Finding]:
    """One ``straggler-rank`` finding per straggler, one ``rank-waited-for`` per rank the others
    wait for."""
    if not record:
        return []
    waited: list[Finding] = [
        {
            "severity": "medium",
            "rule": "rank-waited-for",
            "title": f"the other ranks wait for rank {w['rank']} in collectives: its work per "
            f"step exceeds theirs by {w['work_excess_pct']:g} % of the median step",
            "evidence": w["evidence"]
            + f" (threshold {STRAGGLER_PCT:g} % of the median step, with less time in collectives)",
        }
        for w in record.get("waited_for", [])
    ]
    return waited + [
        {
            "severity": "high",
            "rule": "straggler-rank",
            "title": f"rank {s['rank']} is a straggler: {s['slower_pct']:g} % slower per step "
            "than the job's median rank",
            "evidence": s["evidence"]
            + f" (threshold {STRAGGLER_PCT:g} % and {STRAGGLER_MADS:g} scaled MADs of the "
            "other ranks' medians)",
        }
        for s in record["stragglers"]
    ]

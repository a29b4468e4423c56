"""Several runs in one ``build``: like with like, the runs side by side, the backends by structure.

A *run* is a run folder (or bundles of one), or the loose traces given beside runs. With one run
the summary is that of :func:`.sweep.summarise`. With several (:func:`summarise`):

* every record's label says which run (its backend when the runs differ by backend, else its
  name) and which size where a run, or the runs together, hold several: ``cpu/naive``,
  ``neuron/naive @ 64×4096`` (:func:`run_label`, which ``report/jobs.py`` labels the sources
  with);
* ``comparisons[]`` hold each implementation against its run's first implementation *at the same
  size*, never across runs or sizes;
* ``across_runs[]`` hold each implementation at each size against the same implementation and
  size in the first run of its study (the baseline run), with the noise rule of
  :func:`.summary.compare` and the verdict of :func:`.sweep.verdict_at`;
* ``backends`` compares runs on different backends by structure: framework ops aligned by name
  (the same study code dispatches them), the device work each launched (kernel names differ
  between backends) and the host dispatch per call;
* ``runs[]`` describe each run, ``failures[]`` and ``numerical_check[]`` are those of every run,
  named as its records are.

Runs of different studies are never compared: ``build`` refuses them unless ``--allow-mixed``,
and then each study's runs are compared among themselves only.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from nprof_report.bundle import Manifest, elements, size_label
from nprof_report.report.figures.analyses import ImplementationAnalysis
from nprof_report.report.figures.failures import failure_findings, failures
from nprof_report.report.figures.findings import SEVERITY_RANK, named
from nprof_report.report.figures.ranks import RankFigures
from nprof_report.report.figures.roofline import PeakOverride
from nprof_report.report.figures.summary import build_summary, compare, run_record
from nprof_report.report.figures.summary_types import (
    BackendComparison,
    BackendOp,
    BackendOpSide,
    BackendsRecord,
    CheckRecord,
    FailureRecord,
    Finding,
    ImplementationRecord,
    RunComparison,
    RunSide,
    Summary,
    TopOpRow,
    metric_figures,
)
from nprof_report.report.figures.sweep import (
    FASTER,
    NOISE,
    check_findings,
    numerical_checks,
    verdict_at,
)
from nprof_report.report.figures.sweep import summarise as summarise_run

Size = tuple[int, ...]

MAX_BACKEND_OPS = 200
"""Framework ops a backend comparison aligns (the heaviest by host dispatch per step)."""


@dataclass(frozen=True)
class Member:
    """A source of a run: its label in the report, its implementation's name, its size."""

    label: str
    name: str
    size: Size | None


@dataclass(frozen=True)
class RunGroup:
    """One run among a build's inputs, and how its sources are labelled.

    ``prefix``: what its labels start with ("" with one run); ``sized``: whether labels carry
    the size; ``whole``: the run folder itself was given (so the implementations its manifest
    says failed are this report's to show).
    """

    name: str
    path: str
    manifest: Manifest | None
    members: tuple[Member, ...]
    prefix: str = ""
    sized: bool = False
    whole: bool = False

    @property
    def backend(self) -> str | None:
        return self.manifest.backend if self.manifest else None

    @property
    def device(self) -> str | None:
        return self.manifest.device if self.manifest else None

    @property
    def study(self) -> str | None:
        """The study's name (``workload.name``); None for traces without a manifest."""
        name = self.manifest.workload.get("name") if self.manifest else None
        return str(name) if name else None

    @property
    def study_key(self) -> str | None:
        """What tells studies apart: the name in any case (older runs wrote ``rmsnorm``)."""
        return study_key(self.study)

    def label(self, name: str, size: Size | list[int] | None = None) -> str:
        """How the report names an implementation of this run (at ``size``)."""
        return run_label(self.prefix, name, size, self.sized)


def study_key(name: str | None) -> str | None:
    """A study's name as runs of one study share it, whatever its case."""
    return name.casefold() if name else None


def run_label(prefix: str, name: str, size: Size | list[int] | None, sized: bool) -> str:
    """``cpu/naive``, ``neuron/naive @ 64×4096``; ``naive`` with no prefix and no size."""
    label = f"{prefix}/{name}" if prefix else name
    return f"{label} @ {size_label(size)}" if sized and size else label


def summarise(
    analyses: list[ImplementationAnalysis],
    manifest: Manifest | None,
    caveats: list[str],
    ranks: list[RankFigures] | None = None,
    runs: list[RunGroup] | None = None,
    peaks: PeakOverride | None = None,
) -> Summary:
    """The ``summary.json`` document of a build: of one run (:func:`.sweep.summarise`, with its
    roofline against ``peaks`` where given), or of several runs side by side."""
    if not runs or len(runs) < 2:
        return summarise_run(analyses, manifest, caveats, ranks, peaks)
    return summarise_runs(analyses, runs, caveats)


def summarise_runs(
    analyses: list[ImplementationAnalysis], runs: list[RunGroup], caveats: list[str]
) -> Summary:
    """Several runs: every record, compared like with like (module docstring)."""
    where = {m.label: (g, m) for g in runs for m in g.members}
    first: dict[tuple[str, Size | None], int] = {}
    pairs = []
    for i, a in enumerate(analyses):
        g, m = where[a.label]
        key = (g.name, m.size)
        if key in first:
            pairs.append((first[key], i))
        else:
            first[key] = i
    checks: list[CheckRecord] = []
    wrong: list[str] = []
    for g in runs:
        for c in numerical_checks(g.manifest):
            label = g.label(c["label"], c["size"])
            if label not in where:
                continue
            checks.append({**c, "label": run_label(g.prefix, c["label"], None, False)})
            if c["status"] == "fail":
                wrong.append(label)
    summary = build_summary(analyses, None, caveats, None, pairs=pairs, output_wrong=wrong)
    constructed = {c["label"] for c in summary.get("constructed", [])}
    recorded = {i["label"] for i in summary["implementations"]}
    summary["runs"] = [_side(g, recorded, constructed) for g in runs]
    summary["numerical_check"] = checks
    failed: list[FailureRecord] = [
        f for g in runs if g.whole for f in failures(g.manifest, g.label, g.name)
    ]
    if failed:
        summary["failures"] = failed
    across = across_runs(summary["implementations"], runs)
    if across:
        summary["across_runs"] = across
    backends = backends_record(summary["implementations"], runs, across)
    if backends:
        summary["backends"] = backends
    summary["findings"] = sorted(
        check_findings(checks)
        + failure_findings(failed)
        + run_findings(across, backends, wrong)
        + summary["findings"],
        key=lambda f: SEVERITY_RANK[f["severity"]],
    )
    return summary


def _side(g: RunGroup, recorded: set[str], constructed: set[str]) -> RunSide:
    sizes = sorted({m.size for m in g.members if m.size}, key=elements)
    members = [m for m in g.members if m.label in recorded]
    return {
        "name": g.name,
        "prefix": g.prefix,
        "path": g.path,
        "study": g.study,
        "backend": g.backend,
        "device": g.device,
        "sizes": [size_label(s) for s in sizes],
        "members": [
            {
                "label": m.label,
                "implementation": m.name,
                "size_label": size_label(m.size) if m.size else None,
            }
            for m in members
        ],
        "constructed": any(m.label in constructed for m in members),
        "run": run_record(g.manifest),
    }


def by_study(runs: list[RunGroup]) -> dict[str | None, list[RunGroup]]:
    """The runs of each study, in the order given; the first of each is its baseline run."""
    out: dict[str | None, list[RunGroup]] = {}
    for g in runs:
        out.setdefault(g.study_key, []).append(g)
    return out


def _times(ratio: float | None) -> float | None:
    """How many times faster or slower a ratio (other / baseline) is: 1 or more."""
    if not ratio:
        return None
    return round(max(ratio, 1 / ratio), 2)


def across_runs(impls: list[ImplementationRecord], runs: list[RunGroup]) -> list[RunComparison]:
    """Each implementation at each size against the same in its study's baseline run."""
    records = {i["label"]: i for i in impls}
    out: list[RunComparison] = []
    for groups in by_study(runs).values():
        base = groups[0]
        base_at = {(m.name, m.size): m.label for m in base.members if m.label in records}
        for g in groups[1:]:
            for m in g.members:
                b = base_at.get((m.name, m.size))
                if b is None or m.label not in records:
                    continue
                figures = compare(records[b]["headline"], records[m.label]["headline"])
                holds, metric = verdict_at(figures)
                ratio = metric_figures(figures, metric)[1] if metric else None
                out.append(
                    {
                        "baseline": b,
                        "label": m.label,
                        **figures,
                        "implementation": m.name,
                        "size_label": size_label(m.size) if m.size else None,
                        "baseline_run": base.name,
                        "run": g.name,
                        "holds": holds,
                        "metric": metric,
                        "times": _times(ratio),
                    }
                )
    return out


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(float(x), nd)


def _op_side(row: Mapping[str, Any], has_device: bool) -> BackendOpSide:
    calls = row.get("calls") or 0
    return {
        "calls_per_step": round(float(row.get("calls_per_step") or 0.0), 3),
        "dispatch_per_call_us": _r(row.get("dispatch_median_us")),
        "device_per_call_us": _r(row.get("device_median_us")) if has_device else None,
        "device_activities_per_call": round(row["device_activities"] / calls, 2)
        if has_device and calls
        else None,
    }


def _weight(row: TopOpRow) -> float:
    return (row.get("calls_per_step") or 0.0) * (row.get("dispatch_median_us") or 0.0)


def align_ops(base: ImplementationRecord, other: ImplementationRecord) -> list[BackendOp]:
    """The framework ops of two records aligned by name: the baseline's in its order, then the
    other's own (at most :data:`MAX_BACKEND_OPS`, the heaviest by host dispatch per step)."""
    rows_b = {r["name"]: r for r in base["top_ops"]}
    rows_o = {r["name"]: r for r in other["top_ops"]}
    names = list(dict.fromkeys([*rows_b, *rows_o]))
    if len(names) > MAX_BACKEND_OPS:
        weight = {
            n: max(
                _weight(rows_b[n]) if n in rows_b else 0.0,
                _weight(rows_o[n]) if n in rows_o else 0.0,
            )
            for n in names
        }
        kept = set(sorted(names, key=lambda n: -weight[n])[:MAX_BACKEND_OPS])
        names = [n for n in names if n in kept]
    return [
        {
            "op": n,
            "baseline": _op_side(rows_b[n], base["has_device_activities"]) if n in rows_b else None,
            "other": _op_side(rows_o[n], other["has_device_activities"]) if n in rows_o else None,
        }
        for n in names
    ]


def backends_record(
    impls: list[ImplementationRecord], runs: list[RunGroup], across: list[RunComparison]
) -> BackendsRecord | None:
    """The runs of one study on different backends, op by op (None when no two differ)."""
    backend = {g.name: g.backend for g in runs}
    records = {i["label"]: i for i in impls}
    comparisons: list[BackendComparison] = []
    for c in across:
        b, o = backend[c["baseline_run"]], backend[c["run"]]
        if b is None or o is None or b == o:
            continue
        comparisons.append(
            {
                "implementation": c["implementation"],
                "size_label": c["size_label"],
                "baseline": c["baseline"],
                "label": c["label"],
                "baseline_backend": b,
                "backend": o,
                "ops": align_ops(records[c["baseline"]], records[c["label"]]),
            }
        )
    if not comparisons:
        return None
    involved = {c["baseline_run"] for c in across} | {c["run"] for c in across}
    names = [g.name for g in runs if g.name in involved]
    return {
        "backends": list(dict.fromkeys(backend[n] or "" for n in names)),
        "runs": names,
        "comparisons": comparisons,
    }


METRIC_WORDS = {"unprofiled": "un-profiled time per call", "step": "profiled step time"}
_NOISE_RULE = {
    "unprofiled": "beyond noise when the difference is larger than the sum of the two half-IQRs",
    "step": "beyond noise when the interquartile ranges do not overlap",
}


def run_sentence(c: RunComparison, wrong: Collection[str] = ()) -> str | None:
    """``cpu/naive is 1.42× faster than …, beyond the run-to-run noise``."""
    holds, metric = c["holds"], c["metric"]
    if holds is None or metric is None:
        return None
    label, base = named(c["label"], wrong), named(c["baseline"], wrong)
    how = METRIC_WORDS[metric]
    if holds == NOISE:
        return f"{label} and {base} are within the run-to-run noise of each other ({how})"
    pace = "faster" if holds == FASTER else "slower"
    return f"{label} is {c['times']}× {pace} than {base} ({how}), beyond the run-to-run noise"


def backend_sentence(
    c: RunComparison, backend: str, base_backend: str, wrong: Collection[str]
) -> str | None:
    """``naive: neuron is 2.31× slower than cpu (neuron/naive against cpu/naive, un-profiled
    time per call), beyond the run-to-run noise``."""
    holds, metric = c["holds"], c["metric"]
    if holds is None or metric is None:
        return None
    what = c["label"].split("/", 1)[-1]  # without its run: naive, naive @ 64×4096
    pair = (
        f"{named(c['label'], wrong)} against {named(c['baseline'], wrong)}, {METRIC_WORDS[metric]}"
    )
    if holds == NOISE:
        return f"{what}: {backend} and {base_backend} are within the run-to-run noise of each other ({pair})"
    pace = "faster" if holds == FASTER else "slower"
    return f"{what}: {backend} is {c['times']}× {pace} than {base_backend} ({pair}), beyond the run-to-run noise"


def run_findings(
    across: list[RunComparison], backends: BackendsRecord | None, wrong: Collection[str]
) -> list[Finding]:
    """A finding per implementation and size compared across runs: which run (or backend) is
    faster, by how much, beyond the noise or not."""
    kinds = (
        {
            (c["baseline"], c["label"]): (c["baseline_backend"], c["backend"])
            for c in backends["comparisons"]
        }
        if backends
        else {}
    )
    out: list[Finding] = []
    for c in across:
        pair = kinds.get((c["baseline"], c["label"]))
        title = backend_sentence(c, pair[1], pair[0], wrong) if pair else run_sentence(c, wrong)
        if title is None:
            continue
        metric = c["metric"] or "step"
        delta, ratio, _ = metric_figures(c, metric)
        out.append(
            {
                "severity": "info" if c["holds"] == NOISE else "medium",
                "rule": "backend-difference" if pair else "run-difference",
                "title": title,
                "evidence": f"median {metric} delta {delta} us, ratio {ratio}x "
                f"({c['label']} / {c['baseline']}); {_NOISE_RULE[metric]}",
            }
        )
    return out

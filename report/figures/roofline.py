"""How close each implementation comes to the device's limit: the ``roofline`` of ``summary.json``.

Per implementation and size: the bytes and FLOPs the study declares for one call (the manifest's
``workload.work``), the time per call (the device time per step where the trace records device
activities, a step being one call; else the un-profiled median), the achieved GB/s and GFLOP/s,
the arithmetic intensity (FLOPs per byte), and against the device's peaks (:mod:`.peaks`; on the
CPU the peak the capture measured; ``--peak-gbps`` / ``--peak-gflops`` override either) the
percentage of each and whether the point is memory- or compute-bound: below the ridge intensity
(peak FLOP/s ÷ peak bandwidth) the bandwidth is the roof.

An achieved figure above the peak is not a result: the declared work or the peak is wrong (or,
on the CPU, the working set fits in a cache faster than the measured memory bandwidth). Such a
point keeps its figures, is flagged ``above_peak`` and becomes a caveat, and no finding or page-1
sentence uses it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from nprof_report.bundle import Manifest, size_label
from nprof_report.report.figures.analyses import ImplementationAnalysis
from nprof_report.report.figures.peaks import Peak, gpu_peak, neuron_peak
from nprof_report.report.figures.summary_types import (
    Finding,
    Headline,
    RooflineBasis,
    RooflineRecord,
    Summary,
)

LNC_VARIABLE = "NEURON_LOGICAL_NC_CONFIG"
GAP_RATIO = 2.0  # a finding when the best reaches this many times the worst's share of the roof
NO_WORK = (
    "The study declares no bytes_moved or flops, so there is no roofline: add them to its Study "
    "(docs/roofline.md)."
)


@dataclass(frozen=True)
class PeakOverride:
    """``--peak-gbps`` / ``--peak-gflops`` at build (None: not given)."""

    gbps: float | None = None
    gflops: float | None = None


def _sig(x: float | None, digits: int = 6) -> float | None:
    """``x`` rounded to ``digits`` significant digits."""
    if x is None or x == 0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - math.floor(math.log10(abs(x))))


def _gpu_name(analyses: Sequence[ImplementationAnalysis]) -> str | None:
    for a in analyses:
        for props in a.meta.device_properties:
            name = props.get("name")
            if isinstance(name, str) and name:
                return name
    return None


def _lnc(manifest: Manifest) -> int | None:
    value = manifest.hardware.get("logical_nc_config")
    if isinstance(value, int):
        return value
    text = manifest.environment.get(LNC_VARIABLE, "")
    return int(text) if text.isdigit() else None


def resolve_peak(
    manifest: Manifest, analyses: Sequence[ImplementationAnalysis], override: PeakOverride
) -> RooflineBasis:
    """The peaks the run is measured against, where they come from, and the device they are for."""
    dtype = str(manifest.workload.get("dtype") or "")
    device: str | None = manifest.device or None
    gbps: float | None = None
    gflops: float | None = None
    source: str | None = None
    kind = "none"
    measured = manifest.hardware.get("measured")
    peak: Peak | None = None
    if manifest.backend == "cpu" and isinstance(measured, dict):
        gbps, gflops = measured.get("bandwidth_gbps"), measured.get("gflops")
        kind = "measured"
        source = (
            f"measured on the capture host: bandwidth by {measured.get('bandwidth_method')}; "
            f"FLOP/s by {measured.get('gflops_method')}"
        )
    elif manifest.backend == "neuron":
        instance = manifest.hardware.get("instance_type")
        device = str(instance) if instance else "an unrecorded Neuron instance type"
        peak = neuron_peak(instance, _lnc(manifest))
    else:
        name = _gpu_name(analyses) or (manifest.device if manifest.backend == "cuda" else None)
        device = name or device
        peak = gpu_peak(name)
    if peak is not None:
        device, gbps, gflops = peak.device, peak.bandwidth_gbps, peak.gflops(dtype)
        kind, source = "published", peak.source
    given = [
        f"--peak-{what} {value:g} (command line)"
        for what, value in (("gbps", override.gbps), ("gflops", override.gflops))
        if value is not None
    ]
    if given:
        both = override.gbps is not None and override.gflops is not None
        gbps = override.gbps if override.gbps is not None else gbps
        gflops = override.gflops if override.gflops is not None else gflops
        kind = "command line" if both or kind == "none" else f"command line and {kind}"
        source = "; ".join([*given, *([source] if source and not both else [])])
    note = None
    if gbps is None and gflops is None:
        note = (
            f"No published or measured peak for {device or 'the device'}: achieved figures "
            "without a percentage (pass --peak-gbps / --peak-gflops to build)."
        )
    return {
        "device": device,
        "dtype": dtype or None,
        "peak_gbps": _sig(gbps),
        "peak_gflops": _sig(gflops),
        "peak_kind": kind,
        "peak_source": source,
        "ridge_flops_per_byte": _sig(gflops / gbps) if gbps and gflops else None,
        "note": note,
    }


def _points(
    summary: Summary, manifest: Manifest, analyses: Sequence[ImplementationAnalysis]
) -> list[tuple[str, list[int], Headline]]:
    """(label, size, headline) of every implementation at every size."""
    sweep = summary.get("sweep")
    if sweep:
        return [(s["label"], p["size"], p) for s in sweep["series"] for p in s["points"]]
    # one size: each source's own (a sweep of which one size was captured), else the run's
    sizes = {
        a.label: list(a.implementation.size)
        for a in analyses
        if a.implementation is not None and a.implementation.size
    }
    only = manifest.sizes[0] if len(manifest.sizes) == 1 else None
    return [
        (i["label"], size, i["headline"])
        for i in summary["implementations"]
        if (size := sizes.get(i["label"], only)) is not None
    ]


def _time(head: Headline) -> tuple[float | None, Literal["device", "unprofiled"] | None]:
    device = head.get("device_per_step_us")
    if device:
        return device, "device"
    unprofiled = head.get("unprofiled_median_us")
    if unprofiled:
        return unprofiled, "unprofiled"
    return None, None


def _pct(achieved: float | None, peak: float | None) -> float | None:
    return _sig(100 * achieved / peak, 4) if achieved is not None and peak else None


def roofline(
    summary: Summary,
    manifest: Manifest | None,
    analyses: Sequence[ImplementationAnalysis],
    override: PeakOverride | None = None,
) -> tuple[list[RooflineRecord], RooflineBasis | None]:
    """The roofline records and their basis (None for inputs without a run manifest)."""
    if manifest is None:
        return [], None
    basis = resolve_peak(manifest, analyses, override or PeakOverride())
    work = {tuple(w["size"]): w for w in manifest.workload.get("work") or []}
    if not work:
        return [], {**basis, "note": NO_WORK}
    peak_bw, peak_fl = basis["peak_gbps"], basis["peak_gflops"]
    ridge = basis["ridge_flops_per_byte"]
    records: list[RooflineRecord] = []
    for label, size, head in _points(summary, manifest, analyses):
        declared = work.get(tuple(size))
        if declared is None:
            continue
        nbytes, flops = declared.get("bytes"), declared.get("flops")
        time_us, source = _time(head)
        gbps = nbytes / time_us / 1e3 if (nbytes is not None and time_us) else None
        gflops = flops / time_us / 1e3 if (flops is not None and time_us) else None
        intensity = flops / nbytes if (flops is not None and nbytes) else None
        pct_bw, pct_fl = _pct(gbps, peak_bw), _pct(gflops, peak_fl)
        records.append(
            {
                "label": label,
                "size": list(size),
                "size_label": size_label(size),
                "bytes": nbytes,
                "flops": flops,
                "intensity": _sig(intensity, 4),
                "time_us": time_us,
                "time_source": source,
                "achieved_gbps": _sig(gbps, 4),
                "achieved_gflops": _sig(gflops, 4),
                "peak_gbps": peak_bw,
                "peak_gflops": peak_fl,
                "peak_source": basis["peak_kind"],
                "pct_of_peak_bw": pct_bw,
                "pct_of_peak_flops": pct_fl,
                "bound": None
                if intensity is None or ridge is None
                else ("memory" if intensity < ridge else "compute"),
                "above_peak": (pct_bw or 0) > 100 or (pct_fl or 0) > 100,
            }
        )
    return records, basis


def roof_pct(record: RooflineRecord) -> float | None:
    """The share of its own roof a point reaches: of the bandwidth when memory-bound (or when
    only the bandwidth is known), of the FLOP/s when compute-bound."""
    if record["bound"] == "compute":
        return record["pct_of_peak_flops"]
    return record["pct_of_peak_bw"]


def at_largest(records: list[RooflineRecord]) -> list[RooflineRecord]:
    """The records of the largest size with a percentage and not above the peak."""
    if not records:
        return []
    largest = max(records, key=lambda r: math.prod(r["size"]))["size"]
    return [
        r
        for r in records
        if r["size"] == largest and not r["above_peak"] and roof_pct(r) is not None
    ]


def roofline_caveats(records: list[RooflineRecord], basis: RooflineBasis | None) -> list[str]:
    """The points above the peak, and a device without a peak."""
    out = []
    if basis is not None and basis["note"] and records:
        out.append(basis["note"])
    above = [r for r in records if r["above_peak"]]
    if above and basis is not None:
        points = ", ".join(
            f"{r['label']} at {r['size_label']} ({r['achieved_gbps']:g} GB/s"
            + (f", {r['achieved_gflops']:g} GFLOP/s" if r["achieved_gflops"] is not None else "")
            + ")"
            for r in above
        )
        out.append(
            f"Roofline: achieved above the peak ({basis['peak_gbps']} GB/s, "
            f"{basis['peak_gflops']} GFLOP/s, {basis['peak_kind']}) for {points}: the declared "
            "bytes or FLOPs or the peak are wrong, or (on the CPU) the working set fits in a "
            "cache faster than the measured memory bandwidth; these points are not read as "
            "results."
        )
    return out


def roofline_findings(records: list[RooflineRecord]) -> list[Finding]:
    """An implementation far below the roof at the largest size where another comes close."""
    points = at_largest(records)
    if len(points) < 2:
        return []
    best = max(points, key=lambda r: roof_pct(r) or 0.0)
    out: list[Finding] = []
    for r in points:
        pct, top = roof_pct(r), roof_pct(best)
        if r is best or pct is None or top is None or top < GAP_RATIO * pct:
            continue
        what = "FLOP/s" if best["bound"] == "compute" else "bandwidth"
        slower = (r["time_us"] or 0) / (best["time_us"] or 1)
        moved = (
            f", as if it moved the declared bytes {slower:.3g} times at {best['label']}'s rate"
            if what == "bandwidth"
            else ""
        )
        out.append(
            {
                "severity": "medium",
                "rule": "roofline-gap",
                "title": f"{r['label']} reaches {pct:.3g} % of the peak {what} at "
                f"{r['size_label']}, against {best['label']}'s {top:.3g} %",
                "evidence": f"the same declared work ({r['bytes']:,} bytes, "
                f"{r['flops'] if r['flops'] is None else format(r['flops'], ',')} FLOPs); "
                f"{r['label']} {r['time_us']} µs per call ({r['time_source']}), "
                f"{best['label']} {best['time_us']} µs ({best['time_source']}): {slower:.3g}× "
                f"the time{moved}; achieved "
                f"{r['achieved_gbps']} vs {best['achieved_gbps']} GB/s of a peak "
                f"{best['peak_gbps']} GB/s ({best['peak_source']})",
            }
        )
    return out

"""Time each stage of ``nprof-report build``, on one input or on the standard set of inputs.

    nice -n 10 python bench/bench_build.py PATH... [--repeats 3] [--out DIR]
    nice -n 10 python bench/bench_build.py --suite [--run nprof-runs/<run>] [--repeats 5]

With paths (a run folder, a trace, a folder of rank traces; several are reported side by side,
as ``build`` does), the stages of ``report/build.py``'s ``build_report`` are called one by one in
this process: the charts (drawn while the model is built) are timed apart from the rest of the
model, and the PDF is split into WeasyPrint's layout (parse, CSS cascade, pagination) and its
drawing and writing (SVG, fonts, PDF objects). Imports are timed once, before the first repeat,
as a fresh ``nprof-report`` process pays them; each other stage is the median of the repeats.
The peak resident memory of the process is printed after each stage of the first repeat.
``analyse`` parses each trace, or reads its frames from the parse cache when that is warm, as
``build`` does; set ``NPROF_NO_CACHE=1`` to parse every time.

``--suite`` measures the inputs the README's figures are for: the RMSNorm run given with
``--run`` (if any), each trace in ``fixtures/public``, a folder of four rank traces, a trace with
2,000-character names and one with 100,000 distinct names (both CONSTRUCTED by
``bench/make_name_trace.py``). For each it runs, in fresh processes, the stages above (one repeat,
cache warm) and ``nprof-report build`` end to end, the latter ``--repeats`` times interleaved
across the inputs (the first run of each, which fills the parse cache, is not counted); it
prints a Markdown table with the medians, the parse (``analyse``) stage, layout and drawing,
and each process's peak memory against ``nprof-report ops`` on the same input.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
_PUBLIC = _HERE.parent / "fixtures" / "public"


def _peak_mib() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _Stages:
    """Seconds per stage for one repeat, in the order the stages ran, and the peak memory
    after each."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.peak_mib: dict[str, float] = {}

    def add(self, stage: str, seconds: float) -> None:
        self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds

    def time(self, stage: str, fn: Callable[..., Any], *args: Any) -> Any:
        t0 = time.perf_counter()
        result = fn(*args)
        self.add(stage, time.perf_counter() - t0)
        self.peak_mib[stage] = _peak_mib()
        return result


def _time_charts(stages: list[_Stages]) -> None:
    """Wrap the chart functions so that the time spent in them goes to the ``charts`` stage."""
    from nprof_report.report import charts

    def timed(fn: Callable[..., str]) -> Callable[..., str]:
        def wrapper(*args: Any) -> str:
            t0 = time.perf_counter()
            svg = fn(*args)
            stages[-1].add("charts", time.perf_counter() - t0)
            return svg

        return wrapper

    for name in ("step_times", "stacked_breakdown", "paired_bars", "timelines", "histogram"):
        setattr(charts, name, timed(getattr(charts, name)))


def _one_build(paths: list[Path], out: Path, s: _Stages) -> None:
    from nprof_report.report.build import (
        _collector_paused,
        _report_files,
        _tables,
        summarise_inputs,
    )
    from nprof_report.report.jobs import Engine
    from nprof_report.report.model import build_model
    from nprof_report.report.pdf import layout_pdf
    from nprof_report.report.publish import publish
    from nprof_report.report.render import render_html
    from nprof_report.report.sweepview import add_sweep

    with _collector_paused():  # as build_report does
        _, summary = s.time("analyse", summarise_inputs, paths, Engine())
        model = s.time("model", lambda: add_sweep(build_model(summary), summary))
        s.seconds["model"] -= s.seconds.get("charts", 0.0)
        html = s.time("render html", render_html, model)
    document = s.time("pdf layout", layout_pdf, html)
    pdf = s.time("pdf draw + write", document.write_pdf)
    files = _report_files(html, pdf, summary, _tables(model))
    s.time("write files", publish, out, files)
    print(f"  {len(document.pages)} pages, {len(pdf):,} bytes of PDF", flush=True)


def measure(paths: list[Path], repeats: int, out: Path | None) -> dict[str, Any]:
    """Stage medians (seconds) and peak memory after each stage of the first repeat (MiB)."""
    t0 = time.perf_counter()
    import weasyprint  # noqa: F401  (imported lazily by the build; timed here)

    from nprof_report.report import build  # noqa: F401  (polars, matplotlib, jinja2)

    imports = time.perf_counter() - t0
    runs: list[_Stages] = []
    _time_charts(runs)
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(repeats):
            runs.append(_Stages())
            t0 = time.perf_counter()
            _one_build(paths, out or Path(tmp) / "report", runs[-1])
            print(f"repeat {k + 1}: {time.perf_counter() - t0:.2f} s", flush=True)
    medians = {"imports (once)": imports}
    medians |= {st: statistics.median(r.seconds[st] for r in runs) for st in runs[0].seconds}
    return {"seconds": medians, "peak_mib": runs[0].peak_mib}


def _print_stages(result: dict[str, Any]) -> None:
    medians, peaks = result["seconds"], result["peak_mib"]
    total = sum(medians.values())
    print(f"\n{'stage':<28} {'seconds':>8} {'share':>7} {'peak MiB':>9}")
    for stage, sec in medians.items():
        peak = f"{peaks[stage]:9.0f}" if stage in peaks else ""
        print(f"{stage:<28} {sec:8.3f} {sec / total:7.1%} {peak}")
    print(f"{'total':<28} {total:8.3f} {1:7.1%}")


def _suite_inputs(work: Path, run: Path | None) -> dict[str, list[Path]]:
    """The standard inputs, written under ``work`` where they are generated."""
    sys.path.insert(0, str(_HERE))
    import make_name_trace

    inputs: dict[str, list[Path]] = {}
    if run is not None:
        inputs["RMSNorm run (3 implementations)"] = [run]
    for trace in sorted(_PUBLIC.glob("*.json")):
        inputs[trace.name] = [trace]
    ranks = work / "ranks"
    ranks.mkdir()
    for k in range(4):
        shutil.copy(
            _PUBLIC / "kineto-cuda-simple-add-benchmark.json", ranks / f"rank{k}.pt.trace.json"
        )
    inputs["folder of 4 rank traces (the CUDA add benchmark)"] = [ranks]
    inputs["60 ops and kernels, 2,000-char names (constructed)"] = [
        make_name_trace.write(work / "long-names.json", names=60, length=2000)
    ]
    inputs["100,000 distinct op names (constructed)"] = [
        make_name_trace.write(work / "many-names.json", names=100_000, length=0)
    ]
    return inputs


def _timed_process(cmd: list[str], env: dict[str, str]) -> float:
    """Wall seconds of ``cmd``."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr[-2000:]}")
    return wall


def _peak_of(cmd: list[str], env: dict[str, str]) -> float:
    """Peak memory of ``cmd`` measured in a child that runs nothing else (RUSAGE_CHILDREN only
    grows, so each measurement gets its own process)."""
    probe = (
        "import resource, subprocess, sys; "
        "subprocess.run(sys.argv[1:], check=True, capture_output=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, *cmd], env=env, capture_output=True, text=True, check=True
    )
    return float(out.stdout)


def suite(run: Path | None, repeats: int) -> int:
    """Measure the standard inputs; print one Markdown table."""
    cli = [sys.executable, "-m", "nprof_report"]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {**os.environ, "NPROF_CACHE_DIR": str(work / "cache")}
        env.pop("NPROF_NO_CACHE", None)
        inputs = _suite_inputs(work, run)
        builds: dict[str, list[float]] = {name: [] for name in inputs}
        for paths in inputs.values():  # fills the parse cache
            _timed_process([*cli, "build", *map(str, paths), "--out", str(work / "o")], env)
        for _ in range(repeats):
            for name, paths in inputs.items():
                cmd = [*cli, "build", *map(str, paths), "--out", str(work / "o")]
                builds[name].append(_timed_process(cmd, env))
        rows = []
        for name, paths in inputs.items():
            stages_json = work / "stages.json"
            subprocess.run(
                [
                    sys.executable,
                    __file__,
                    *map(str, paths),
                    "--repeats",
                    "1",
                    "--json",
                    str(stages_json),
                ],
                env=env,
                check=True,
                capture_output=True,
            )
            stages = json.loads(stages_json.read_text())["seconds"]
            build_peak = _peak_of(
                [*cli, "build", *map(str, paths), "--out", str(work / "o"), "--no-cache"], env
            )
            ops_peak = _peak_of([*cli, "ops", *map(str, paths[:1]), "--no-cache"], env)
            rows.append(
                (
                    name,
                    statistics.median(builds[name]),
                    min(builds[name]),
                    max(builds[name]),
                    stages["analyse"],
                    stages["charts"],
                    stages["pdf layout"],
                    stages["pdf draw + write"],
                    build_peak,
                    ops_peak,
                )
            )
    print(
        f"\n| input | `build`, cache warm: median (min–max) of {repeats} | parse/analyse | "
        "charts | PDF layout | PDF drawing | peak memory, `build --no-cache` / `ops --no-cache` |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, med, lo, hi, analyse, charts, layout, draw, bpeak, opeak in rows:
        print(
            f"| {name} | {med:.2f} s ({lo:.2f}–{hi:.2f}) | {analyse:.2f} s | {charts:.2f} s | "
            f"{layout:.2f} s | {draw:.2f} s | {bpeak:,.0f} / {opeak:,.0f} MiB |"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("paths", type=Path, nargs="*", help="run folders, traces, rank folders")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, help="where to write the report (default: a temp folder)")
    ap.add_argument("--json", type=Path, help="also write the stage figures there")
    ap.add_argument("--suite", action="store_true", help="measure the standard inputs")
    ap.add_argument("--run", type=Path, help="with --suite: an RMSNorm run folder to include")
    ns = ap.parse_args(argv)
    if ns.suite:
        return suite(ns.run, ns.repeats)
    if not ns.paths:
        ap.error("give a path, or --suite")
    result = measure(ns.paths, ns.repeats, ns.out)
    _print_stages(result)
    if ns.json:
        ns.json.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Time each stage of ``nprof-report build``, on one input or on the standard set of inputs.

    nice -n 10 python bench/bench_build.py PATH... [--repeats 3] [--out DIR]
    nice -n 10 python bench/bench_build.py --suite [--run nprof-runs/<run>] [--repeats 5]
        [--against OTHER/.venv/bin/python] [--only RMSNorm --only 2,000 ...]

With paths (a run folder, a trace, a folder of rank traces; several are reported side by side,
as ``build`` does), the stages of ``report/build.py``'s ``build_report`` are called one by one in
this process: the charts (drawn while the model is built) are timed apart from the rest of the
model, and the PDF is split into WeasyPrint's layout (parse, CSS cascade, pagination) and its
drawing and writing (SVG, fonts, PDF objects), both in this process and without the garbage
collector (``build`` makes the PDF in a worker process that has imported WeasyPrint meanwhile
and runs without it: :mod:`nprof_report.report.view.pdf`). Imports are timed once, before the first repeat,
as a fresh ``nprof-report`` process pays them; each other stage is the median of the repeats.
The peak resident memory of the process is printed after each stage of the first repeat.
``analyse`` parses each trace, or reads its frames from the parse cache when that is warm, as
``build`` does; set ``NPROF_NO_CACHE=1`` to parse every time.

``--suite`` measures the inputs docs/figures.md's figures are for: the RMSNorm run given with
``--run`` (if any), each trace in ``fixtures/public``, a folder of four rank traces, a trace with
2,000-character names and one with 100,000 distinct names (both CONSTRUCTED by
``bench/make_name_trace.py``). For each it runs, in fresh processes, the stages above (one repeat,
cache warm) and ``nprof-report build`` end to end, the latter ``--repeats`` times interleaved
across the inputs (the first run of each, which fills the parse cache, is not counted); it
prints a Markdown table with the medians, the parse (``analyse``) stage, layout and drawing,
and each process's peak memory against ``nprof-report ops`` on the same input. ``--against``
times another installation's ``build`` (the code before a change) in the same rounds, one run of
each after the other, and gives the ratios of the medians, of wall time and of CPU time (the
processes' own and their workers'); ``--only`` keeps the inputs whose names hold the text.
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
    from nprof_report.report.view import charts

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
        _data_files,
        _report_files,
        _tables,
        summarise_inputs,
    )
    from nprof_report.report.jobs import Engine
    from nprof_report.report.publish import publish
    from nprof_report.report.view.model import build_model
    from nprof_report.report.view.pdf import layout_pdf
    from nprof_report.report.view.render import render_html
    from nprof_report.runtime import collector_paused

    with collector_paused():  # as build_report does
        _, summary = s.time("analyse", summarise_inputs, paths, Engine())
        model = s.time("model", lambda: build_model(summary))
        s.seconds["model"] -= s.seconds.get("charts", 0.0)
        html = s.time("render html", render_html, model)
    with collector_paused():  # as in the PDF worker, which runs without it
        document = s.time("pdf layout", layout_pdf, html)
        pdf = s.time("pdf draw + write", document.write_pdf)
    files = _report_files(html, pdf, _data_files(summary, _tables(model)))
    s.time("write files", publish, out, files)
    print(f"  {len(document.pages)} pages, {len(pdf):,} bytes of PDF", flush=True)


def measure(paths: list[Path], repeats: int, out: Path | None) -> dict[str, Any]:
    """Stage medians (seconds) and peak memory after each stage of the first repeat (MiB)."""
    t0 = time.perf_counter()
    from nprof_report.report.view.pdf import import_weasyprint

    import_weasyprint()  # (imported lazily by the build's PDF worker; timed here)

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


def _timed_process(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds of ``cmd``, and the CPU seconds of it and the processes it waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr[-2000:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu


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


def _stages_of(paths: list[Path], work: Path, env: dict[str, str]) -> dict[str, float]:
    """The stage medians of one in-process build, in a fresh process."""
    stages_json = work / "stages.json"
    subprocess.run(
        [sys.executable, __file__, *map(str, paths), "--repeats", "1", "--json", str(stages_json)],
        env=env,
        check=True,
        capture_output=True,
    )
    seconds: dict[str, float] = json.loads(stages_json.read_text())["seconds"]
    return seconds


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s ({min(values):.2f}–{max(values):.2f})"


def suite(run: Path | None, repeats: int, against: str | None, only: list[str]) -> int:
    """Measure the standard inputs (those whose name holds one of ``only``, if given); print one
    Markdown table. With ``against`` (another installation's Python), its ``build`` is timed
    too, interleaved with this one's, each with a parse cache of its own."""
    trees = {"this": [sys.executable, "-m", "nprof_report"]}
    if against:
        trees["against"] = [against, "-m", "nprof_report"]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        envs = {t: {**os.environ, "NPROF_CACHE_DIR": str(work / f"cache-{t}")} for t in trees}
        for env in envs.values():
            env.pop("NPROF_NO_CACHE", None)
        inputs = {
            name: paths
            for name, paths in _suite_inputs(work, run).items()
            if not only or any(o.lower() in name.lower() for o in only)
        }
        wall: dict[tuple[str, str], list[float]] = {(t, n): [] for t in trees for n in inputs}
        cpu: dict[tuple[str, str], list[float]] = {(t, n): [] for t in trees for n in inputs}
        for k in range(repeats + 1):  # the first round fills the parse caches, not counted
            for name, paths in inputs.items():
                for tree, cli in trees.items():
                    cmd = [*cli, "build", *map(str, paths), "--out", str(work / f"o-{tree}")]
                    w, c = _timed_process(cmd, envs[tree])
                    if k:
                        wall[tree, name].append(w)
                        cpu[tree, name].append(c)
        cli, env = trees["this"], envs["this"]
        rows = []
        for name, paths in inputs.items():
            stages = _stages_of(paths, work, env)
            build_peak = _peak_of(
                [*cli, "build", *map(str, paths), "--out", str(work / "o"), "--no-cache"], env
            )
            ops_peak = _peak_of([*cli, "ops", *map(str, paths[:1]), "--no-cache"], env)
            cells = [
                name,
                f"{_spread(wall['this', name])}; CPU {statistics.median(cpu['this', name]):.2f} s",
            ]
            if against:
                ratio = statistics.median(wall["this", name]) / statistics.median(
                    wall["against", name]
                )
                cpu_ratio = statistics.median(cpu["this", name]) / statistics.median(
                    cpu["against", name]
                )
                cells.append(
                    f"{_spread(wall['against', name])}; CPU "
                    f"{statistics.median(cpu['against', name]):.2f} s; "
                    f"**{ratio:.2f}×** (CPU {cpu_ratio:.2f}×)"
                )
            cells += [
                f"{stages['analyse']:.2f} s",
                f"{stages['charts']:.2f} s",
                f"{stages['pdf layout']:.2f} s",
                f"{stages['pdf draw + write']:.2f} s",
                f"{build_peak:,.0f} / {ops_peak:,.0f} MiB",
            ]
            rows.append(cells)
    head = ["input", f"`build`, cache warm: median (min–max) of {repeats}"]
    if against:
        head.append(f"`build` of {against}; this one's median / its median")
    head += [
        "parse/analyse",
        "charts",
        "PDF layout",
        "PDF drawing",
        "peak memory, `build --no-cache` / `ops --no-cache`",
    ]
    print("\n| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    for cells in rows:
        print("| " + " | ".join(cells) + " |")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("paths", type=Path, nargs="*", help="run folders, traces, rank folders")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, help="where to write the report (default: a temp folder)")
    ap.add_argument("--json", type=Path, help="also write the stage figures there")
    ap.add_argument("--suite", action="store_true", help="measure the standard inputs")
    ap.add_argument("--run", type=Path, help="with --suite: an RMSNorm run folder to include")
    ap.add_argument(
        "--against",
        metavar="PYTHON",
        help="with --suite: also time the build of the installation whose Python this is "
        "(e.g. another checkout's .venv/bin/python), interleaved",
    )
    ap.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="TEXT",
        help="with --suite: only the inputs whose name holds TEXT (repeatable)",
    )
    ns = ap.parse_args(argv)
    if ns.suite:
        return suite(ns.run, ns.repeats, ns.against, ns.only)
    if not ns.paths:
        ap.error("give a path, or --suite")
    result = measure(ns.paths, ns.repeats, ns.out)
    _print_stages(result)
    if ns.json:
        ns.json.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

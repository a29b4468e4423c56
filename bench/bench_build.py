"""Time each stage of ``nprof-report build`` on one run folder, in one process.

    nice -n 10 python bench/bench_build.py nprof-runs/<run> [--repeats 3] [--out DIR]

The stages are those of ``report/build.py``'s ``build_report``, called one by one; the charts
(drawn while the model is built) are timed apart from the rest of the model, and the PDF is split
into WeasyPrint's layout (parse, CSS cascade, pagination) and its drawing and writing (SVG,
fonts, PDF objects). Imports are timed once, before the first repeat, as a fresh ``nprof-report``
process pays them; each other stage is the median of the repeats, so one-time warm-up in the first
repeat (Fontconfig, the hyphenation dictionary), which every ``nprof-report`` process pays, shows
in the per-repeat totals printed first but hardly in the medians.

``analyse`` parses each trace in this process, or reads its frames from the parse cache when that
is warm, as ``build`` does; set ``NPROF_NO_CACHE=1`` to parse every time. (``build`` may also parse
several traces at once in worker processes; this script does not.)
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


class _Stages:
    """Seconds per stage for one repeat, in the order the stages ran."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, stage: str, seconds: float) -> None:
        self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds

    def time(self, stage: str, fn: Callable[..., Any], *args: Any) -> Any:
        t0 = time.perf_counter()
        result = fn(*args)
        self.add(stage, time.perf_counter() - t0)
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


def _one_build(run: Path, out: Path, s: _Stages) -> None:
    from nprof_report.parse.inputs import resolve
    from nprof_report.report.analyses import analyse
    from nprof_report.report.build import _tables, _write_atomically, convert_neuron_traces
    from nprof_report.report.model import build_model
    from nprof_report.report.render import layout_pdf, render_html
    from nprof_report.report.summary import build_summary

    resolved = s.time("resolve", resolve, run)
    sources = [src for src in resolved.sources if src.trace is not None]
    caveats = list(resolved.notes) + s.time("convert neuron", convert_neuron_traces, sources)
    analyses = [s.time(f"analyse {src.label}", analyse, src) for src in sources]
    summary = s.time("summary", build_summary, analyses, resolved.manifest, caveats)
    model = s.time("model", build_model, summary)
    s.seconds["model"] -= s.seconds.get("charts", 0.0)
    html = s.time("render html", render_html, model)
    document = s.time("pdf layout", layout_pdf, html)
    pdf = s.time("pdf draw + write", document.write_pdf)
    s.time("write files", _write_atomically, out, html, pdf, summary, _tables(model))
    print(f"  {len(document.pages)} pages, {len(pdf):,} bytes of PDF", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("run", type=Path, help="a run folder written by nprof-report capture")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, help="where to write the report (default: a temp folder)")
    ns = ap.parse_args(argv)

    t0 = time.perf_counter()
    import weasyprint  # noqa: F401  (imported lazily by the build; timed here)

    from nprof_report.report import build  # noqa: F401  (polars, matplotlib, jinja2)

    imports = time.perf_counter() - t0
    runs: list[_Stages] = []
    _time_charts(runs)
    with tempfile.TemporaryDirectory() as tmp:
        out = ns.out or Path(tmp) / "report"
        for k in range(ns.repeats):
            runs.append(_Stages())
            t0 = time.perf_counter()
            _one_build(ns.run, out, runs[-1])
            print(f"repeat {k + 1}: {time.perf_counter() - t0:.2f} s", flush=True)

    medians = {"imports (once)": imports}
    medians |= {st: statistics.median(r.seconds[st] for r in runs) for st in runs[0].seconds}
    total = sum(medians.values())
    print(f"\n{'stage':<28} {'seconds':>8} {'share':>7}")
    for stage, sec in medians.items():
        print(f"{stage:<28} {sec:8.3f} {sec / total:7.1%}")
    print(f"{'total':<28} {total:8.3f} {1:7.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

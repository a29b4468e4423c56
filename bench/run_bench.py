"""Time and peak memory of loading a large trace, each stage in its own process.

Stages (each a fresh Python process, measured whole: start-up, load, exit):

- ``orjson``: ``orjson.loads(f.read())`` -- the baseline every ratio refers to;
- ``read_trace``: the reference loader (``nprof_report.parse.read.reference``);
- ``read_trace_stream``: the chunked loader (``nprof_report.parse.read.stream``), every event and args;
- ``stream_work``: the same with ``work_only=True`` (the rows ops/links are made of, no args);
- ``split_work``: ``read_work_parts``: the work rows decoded and taken apart by one process per
  CPU;
- ``ops``: ``nprof-report ops <file> --format json --no-cache`` (skipped when the command fails
  or is missing).

The library stages run with the allocator settings the CLI makes (``nprof_report.cli``), so
their figures are those ``ops`` and ``build`` see.

Each stage runs under a small wrapper process (``bench/proctree.py``) that starts it and samples,
every 10 ms, the resident memory of the stage's whole process tree: a stage that decodes with
worker processes is charged for all of them at once. The peak of that sum is "peak RSS"; the
largest single process (``ru_maxrss``) is reported beside it.
Repeats are interleaved (stage A, B, C, A, B, C, ...) and the median is reported, with ratios to
the ``orjson`` median of the same run and peak RSS relative to the size of the JSON text (the
file's size; for ``.json.gz``, the decompressed size).

    python bench/run_bench.py --mb 5                     # generate a 5 MB trace, about 30 s
    nice -n 10 python bench/run_bench.py --trace /tmp/big.json --repeats 3

Writes ``bench/out/bench.md`` and ``bench/out/bench.json`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import compileall
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE))

from make_large_trace import LAYOUTS, write_trace  # noqa: E402

# the library stages run with the allocator settings the CLI makes (nprof_report.cli)
_ALLOCATOR = (
    "import os\nfrom nprof_report.runtime import MALLOC_CONF\nos.environ.setdefault(*MALLOC_CONF)\n"
)
_LOADERS = {
    "orjson": (
        "import gzip, orjson, sys\n"
        "d = open(sys.argv[1], 'rb').read()\n"
        "d = gzip.decompress(d) if d[:2] == b'\\x1f\\x8b' else d\n"
        "doc = orjson.loads(d)\n"
        "print(len(doc['traceEvents'] if isinstance(doc, dict) else doc))\n"
    ),
    "read_trace": (
        _ALLOCATOR + "import sys\n"
        "from nprof_report.parse.read.reference import read_trace\n"
        "print(read_trace(sys.argv[1]).events.height)\n"
    ),
    "read_trace_stream": (
        _ALLOCATOR + "import sys\n"
        "from nprof_report.parse.read.stream import read_trace_stream\n"
        "print(read_trace_stream(sys.argv[1]).events.height)\n"
    ),
    "stream_work": (
        _ALLOCATOR + "import sys\n"
        "from nprof_report.parse.read.stream import read_trace_stream\n"
        "print(read_trace_stream(sys.argv[1], work_only=True).events.height)\n"
    ),
    "split_work": (
        _ALLOCATOR + "import sys\n"
        "from nprof_report.parse.read.split import read_work_parts\n"
        "print(read_work_parts(sys.argv[1]).parts.host.height)\n"
    ),
}
STAGES = [*_LOADERS, "ops"]


def compile_package() -> None:
    """Write nprof_report's bytecode, as a regular ``pip install`` does for every package.

    An editable install leaves that to the first import, and where ``PYTHONDONTWRITEBYTECODE``
    is set (as on this project's machines) it never happens: every process -- ``ops`` and each
    of its decode workers -- would compile the package's modules again, about 0.1 s each here,
    which is not the cost of parsing.
    """
    import nprof_report

    for folder in {Path(p) for p in nprof_report.__path__}:
        compileall.compile_dir(folder, quiet=1)


def _ops_command() -> list[str]:
    exe = Path(sys.executable).with_name("nprof-report")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("nprof-report")
    return [found] if found else [sys.executable, "-m", "nprof_report"]


def stage_command(stage: str, trace: Path) -> list[str]:
    if stage == "ops":
        return [*_ops_command(), "ops", str(trace), "--format", "json", "--no-cache"]
    return [sys.executable, "-c", _LOADERS[stage], str(trace)]


def measure(cmd: list[str], timeout: float) -> tuple[float, int, int, int, str]:
    """(wall s, peak tree RSS KiB, largest process KiB, exit code, stderr tail) of ``cmd``."""
    proc = subprocess.run(
        [sys.executable, str(_HERE / "proctree.py"), *cmd],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    for line in reversed(proc.stderr.splitlines()):
        if line.startswith("BENCH "):
            wall, rss, largest, rc = line.split()[1:]
            tail = proc.stderr[: proc.stderr.rfind("BENCH")].strip()[-400:]
            return float(wall), int(rss), int(largest), int(rc), tail
    raise RuntimeError(f"wrapper failed: {proc.stderr[-400:]}")


def _json_bytes(trace: Path) -> int:
    """The size of the JSON text: the file's, or what a .gz file decompresses to."""
    with trace.open("rb") as fh:  # follows the symlink
        if fh.read(2) != b"\x1f\x8b":
            return trace.stat().st_size
    total = 0
    with gzip.open(trace, "rb") as gz:
        while block := gz.read(8 << 20):
            total += len(block)
    return total


def run(trace: Path, stages: list[str], repeats: int, timeout: float) -> dict[str, Any]:
    size = _json_bytes(trace)
    samples: dict[str, list[tuple[float, int, int]]] = {s: [] for s in stages}
    skipped: dict[str, str] = {}
    for rep in range(repeats):
        for stage in stages:
            if stage in skipped:
                continue
            wall, rss, largest, rc, tail = measure(stage_command(stage, trace), timeout)
            if rc != 0:
                if stage == "ops":
                    skipped[stage] = f"exit code {rc}: {tail.splitlines()[-1] if tail else ''}"
                    continue
                raise RuntimeError(f"stage {stage} failed ({rc}): {tail}")
            samples[stage].append((wall, rss, largest))
            print(f"  rep {rep + 1} {stage:18s} {wall:8.2f} s {rss / 1024:9.0f} MiB", flush=True)
    rows: list[dict[str, Any]] = []
    base = samples.get("orjson") or []
    base_t = statistics.median(w for w, _, _ in base) if base else None
    base_m = statistics.median(m for _, m, _ in base) if base else None
    for stage in stages:
        if stage in skipped or not samples[stage]:
            rows.append({"stage": stage, "skipped": skipped.get(stage, "no samples")})
            continue
        t = statistics.median(w for w, _, _ in samples[stage])
        m = statistics.median(r for _, r, _ in samples[stage])
        big = statistics.median(b for _, _, b in samples[stage])
        rows.append(
            {
                "stage": stage,
                "time_s": round(t, 3),
                "peak_rss_mib": round(m / 1024, 1),
                "time_vs_orjson": round(t / base_t, 3) if base_t else None,
                "rss_vs_orjson": round(m / base_m, 3) if base_m else None,
                "rss_vs_json": round(m * 1024 / size, 3),
                "largest_process_mib": round(big / 1024, 1),
                "samples": [[round(w, 3), round(r / 1024, 1)] for w, r, _ in samples[stage]],
            }
        )
    return {
        "trace": str(trace),
        "json_bytes": size,
        "repeats": repeats,
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "rows": rows,
    }


def markdown(result: dict[str, Any]) -> str:
    mb = result["json_bytes"] / 1e6
    lines = [
        f"Trace `{result['trace']}`: {mb:.1f} MB of JSON; median of {result['repeats']} interleaved "
        f"run(s), each stage a whole process tree (peak RSS: all its processes at once); "
        f"{result['cpus']} CPUs.",
        "",
        "| stage | time (s) | time range (s) | peak RSS (MiB) | largest process (MiB) "
        "| time vs orjson | RSS vs orjson | RSS vs JSON size |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in result["rows"]:
        if "skipped" in r:
            lines.append(f"| {r['stage']} | skipped: {r['skipped']} | | | | | | |")
            continue
        times = [w for w, _ in r["samples"]]
        t_ratio, m_ratio = (
            "-" if r[k] is None else f"{r[k]:.2f}x" for k in ("time_vs_orjson", "rss_vs_orjson")
        )
        lines.append(
            f"| {r['stage']} | {r['time_s']:.2f} | {min(times):.2f}-{max(times):.2f} | "
            f"{r['peak_rss_mib']:.0f} | {r['largest_process_mib']:.0f} | "
            f"{t_ratio} | {m_ratio} | {r['rss_vs_json']:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", type=Path, help="an existing trace file")
    src.add_argument("--mb", type=float, help="generate a trace of this size (MB) in a temp dir")
    ap.add_argument("--pretty", action="store_true", help="with --mb: indented JSON")
    ap.add_argument("--layout", choices=LAYOUTS, default="compact", help="with --mb: the layout")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--stages", default=",".join(STAGES), help="comma-separated: " + ",".join(STAGES)
    )
    ap.add_argument("--out", type=Path, default=_HERE / "out")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per stage run")
    ns = ap.parse_args(argv)
    stages = [s for s in ns.stages.split(",") if s]
    if unknown := [s for s in stages if s not in STAGES]:
        ap.error(f"unknown stages {unknown}")
    with tempfile.TemporaryDirectory() as tmp:
        trace = ns.trace
        if trace is None:
            trace = Path(tmp) / "trace.json"
            t0 = time.perf_counter()
            layout = "indented" if ns.pretty else ns.layout
            size, n = write_trace(trace, ns.mb, ["cuda", "rocm", "triton", "cpu"], layout)
            print(
                f"generated {trace}: {size} bytes, {n} events in {time.perf_counter() - t0:.1f} s"
            )
        else:
            # a folder of its own: `nprof-report ops` looks at the trace's folder for other sources
            alone = Path(tmp) / trace.name
            alone.symlink_to(trace.resolve())
            trace = alone
        compile_package()
        result = run(trace, stages, ns.repeats, ns.timeout)
        result["trace"] = str(ns.trace) if ns.trace is not None else f"generated, --mb {ns.mb}"
    ns.out.mkdir(parents=True, exist_ok=True)
    md = markdown(result)
    (ns.out / "bench.md").write_text(md)
    (ns.out / "bench.json").write_text(json.dumps(result, indent=2) + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

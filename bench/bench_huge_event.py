"""Time and peak memory of ``ops`` and ``build`` on traces with one huge event (issue 27).

    python bench/bench_huge_event.py                      # the cases of the issue, 3 repeats
    python bench/bench_huge_event.py --scale 0.1 --repeats 1 --out /tmp/small

Cases, CONSTRUCTED in a temporary folder from the public ROCm trace (``fixtures/public``, 220
events, two ``ProfilerStep#N``), each with one event added in the first step, on a thread of its
own, the longest op of the trace (so every table, chart, finding and chain of the report shows it):

- ``name``: the op's name is ``--name-mb`` MB long (default 50);
- ``args``: the op's ``args`` hold ``Input Dims`` of ``--dims`` entries (default 5,000,000: 40 MB);
- ``spaces``: ``--spaces-mb`` MB of spaces (default 512) between two events of the array,
  gzip-compressed (about 1,000 : 1);
- ``normal``: a trace of ordinary events of the size of ``name`` (``make_large_trace.py``), whose
  ``ops`` is the yardstick.

Each command runs in a fresh process under :mod:`run_bench`'s wrapper (peak RSS of the process
tree, sampled every 10 ms), ``--no-cache``; the repeats are interleaved (every case, then again)
and the median is reported (peak RSS: of the whole process tree, ``build``'s PDF worker
included, with the range over the repeats; beside it the largest single process, as
``/usr/bin/time`` reports it). A case meets its bound when both ``ops`` and ``build`` finish
within ``--seconds`` (10) and within 3 x the JSON text + 256 MiB (``spaces``: 256 MiB, whatever
its size), by the median peak of the tree. Prints a Markdown table; writes ``huge_event.json``
into ``--out`` (default bench/out). ``--scale`` multiplies every size (a quick look).
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE))

from make_large_trace import SOURCES, write_trace  # noqa: E402
from run_bench import _json_bytes, _ops_command, compile_package, measure  # noqa: E402

BASE = _HERE.parent / "fixtures" / "public" / "kineto-rocm-mi250-minitoy-train.json"
MIB = 1 << 20
_HUGE_TID = 1  # a thread of its own: the op nests under nothing and overlaps nothing


def _huge_op(base: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """An op in the middle of the first step, longer than any other op of the trace."""
    step = next(e for e in base["traceEvents"] if e.get("name") == "ProfilerStep#1")
    event = {
        "ph": "X",
        "cat": "cpu_op",
        "name": "aten::huge",
        "pid": step["pid"],
        "tid": _HUGE_TID,
        "ts": round(step["ts"] + step["dur"] / 4, 3),
        "dur": round(step["dur"] / 2, 3),
        "args": {"External id": 10**9, "Record function id": 10**9},
    }
    for key, value in fields.items():
        if key == "args":
            event["args"] = {**event["args"], **value}
        else:
            event[key] = value
    return event


def _with(base: dict[str, Any], event: dict[str, Any]) -> dict[str, Any]:
    doc = copy.copy(base)
    events = base["traceEvents"]
    doc["traceEvents"] = [*events[: len(events) // 2], event, *events[len(events) // 2 :]]
    return doc


def make_name(path: Path, base: dict[str, Any], name_bytes: int) -> Path:
    """The ``name`` case: one op named ``aten::huge_`` and ``name_bytes`` more characters."""
    name = "aten::huge_" + "x" * name_bytes
    path.write_text(json.dumps(_with(base, _huge_op(base, name=name))))
    return path


def make_args(path: Path, base: dict[str, Any], dims: int) -> Path:
    """The ``args`` case: one op whose ``Input Dims`` hold ``dims`` entries (8 bytes each)."""
    event = _huge_op(base, name="aten::cat", args={"Input Dims": [[1, 2]] * dims})
    path.write_text(json.dumps(_with(base, event)))
    return path


def make_spaces(path: Path, base: dict[str, Any], spaces: int) -> Path:
    """The ``spaces`` case: ``spaces`` bytes of spaces between the first two events, gzipped."""
    text = json.dumps(base)
    first = text.index('"traceEvents": [') + len('"traceEvents": [')
    cut = text.index("}, {", first) + 3  # after the first event's separator
    with gzip.open(path, "wb", compresslevel=6) as out:
        out.write(text[:cut].encode())
        block = b" " * MIB
        for _ in range(spaces // MIB):
            out.write(block)
        out.write(b" " * (spaces % MIB))
        out.write(text[cut:].encode())
    return path


def make_cases(
    folder: Path, scale: float, name_mb: float, dims: int, spaces_mb: float
) -> dict[str, Path]:
    """Write the four cases into ``folder``."""
    base = json.loads(BASE.read_text())
    cases = {
        "name": make_name(folder / "name.json", base, int(name_mb * scale * MIB)),
        "args": make_args(folder / "args.json", base, int(dims * scale)),
        "spaces": make_spaces(folder / "spaces.json.gz", base, int(spaces_mb * scale * MIB)),
    }
    normal = folder / "normal.json"
    write_trace(normal, cases["name"].stat().st_size / 1e6, list(SOURCES))
    cases["normal"] = normal
    return cases


def bound_mib(case: str, json_bytes: int) -> float:
    """The memory bound of the issue: 3 x the JSON text + 256 MiB; whitespace: 256 MiB."""
    return 256.0 if case == "spaces" else 3 * json_bytes / MIB + 256


def commands(case: str, trace: Path, out: Path) -> dict[str, list[str]]:
    ops = [*_ops_command(), "ops", str(trace), "--format", "json", "--no-cache"]
    if case == "normal":
        return {"ops": ops}
    build = [
        *_ops_command(),
        "build",
        str(trace),
        "--out",
        str(out / f"report-{case}"),
        "--no-cache",
    ]
    return {"ops": ops, "build": build}


def run(cases: dict[str, Path], folder: Path, repeats: int, timeout: float) -> list[dict[str, Any]]:
    samples: dict[tuple[str, str], list[tuple[float, int, int]]] = {}
    for rep in range(repeats):
        for case, trace in cases.items():
            for command, argv in commands(case, trace, folder).items():
                wall, rss, largest, rc, tail = measure(argv, timeout)
                if rc != 0:
                    raise RuntimeError(f"{case} {command} failed ({rc}): {tail}")
                samples.setdefault((case, command), []).append((wall, rss, largest))
                print(
                    f"  rep {rep + 1} {case:7s} {command:6s} {wall:7.2f} s {rss / 1024:7.0f} MiB",
                    flush=True,
                )
    rows = []
    for (case, command), got in samples.items():
        size = _json_bytes(cases[case])
        wall = statistics.median(w for w, _, _ in got)
        peak = statistics.median(m for _, m, _ in got) / 1024
        largest = statistics.median(m for _, _, m in got) / 1024
        rows.append(
            {
                "case": case,
                "command": command,
                "file_bytes": cases[case].stat().st_size,
                "json_bytes": size,
                "seconds": round(wall, 2),
                "peak_mib": round(peak),
                "peak_range_mib": [
                    round(min(m for _, m, _ in got) / 1024),
                    round(max(m for _, m, _ in got) / 1024),
                ],
                "largest_process_mib": round(largest),
                "bound_mib": round(bound_mib(case, size)),
                "repeats": len(got),
            }
        )
    return rows


def table(rows: list[dict[str, Any]], seconds: float) -> str:
    normal = next((r for r in rows if r["case"] == "normal"), None)
    lines = [
        "| case | command | file | JSON text | time | peak RSS (range) | largest process | bound | within | time / normal ops | memory / normal ops |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for r in rows:
        ok = r["seconds"] <= seconds and (r["case"] == "normal" or r["peak_mib"] <= r["bound_mib"])
        vs_t = f"{r['seconds'] / normal['seconds']:.2f}x" if normal else "–"
        vs_m = f"{r['peak_mib'] / normal['peak_mib']:.2f}x" if normal else "–"
        bound = "–" if r["case"] == "normal" else f"{r['bound_mib']:,} MiB"
        lines.append(
            f"| {r['case']} | {r['command']} | {r['file_bytes'] / MIB:,.1f} MiB | "
            f"{r['json_bytes'] / MIB:,.1f} MiB | {r['seconds']:.2f} s | {r['peak_mib']:,} MiB "
            f"({r['peak_range_mib'][0]:,}–{r['peak_range_mib'][1]:,}) | {r['largest_process_mib']:,} MiB | "
            f"{bound} | {'yes' if ok else 'NO'} | {vs_t} | {vs_m} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--name-mb", type=float, default=50)
    ap.add_argument("--dims", type=int, default=5_000_000)
    ap.add_argument("--spaces-mb", type=float, default=512)
    ap.add_argument("--seconds", type=float, default=10.0, help="the time bound")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--out", type=Path, default=_HERE / "out")
    args = ap.parse_args()
    compile_package()
    folder = Path(tempfile.mkdtemp(prefix="nprof-huge-"))
    try:
        cases = make_cases(folder, args.scale, args.name_mb, args.dims, args.spaces_mb)
        rows = run(cases, folder, args.repeats, args.timeout)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    text = table(rows, args.seconds)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "huge_event.json").write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

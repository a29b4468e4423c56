"""Outputs at scale (issue 32), measured in one command: parse, build, diff and check against
``ops`` and a bare ``orjson.loads`` in the same interleaved rounds.

    nice -n 10 python bench/bench_scale.py --mb 530 --repeats 3        # about 25 minutes
    nice -n 10 python bench/bench_scale.py --mb 60 --names 20000 --repeats 1 --layouts compact

Inputs, CONSTRUCTED and written to ``--workdir`` when missing: the large trace of
``bench/make_large_trace.py`` in each of ``--layouts`` (``compact``: one line; ``gzip``: that
file gzipped; ``indented``; ``kineto``: as the profiler writes it) and a trace of ``--names``
distinct op paths (``bench/make_name_trace.py``). Each round runs, each command a fresh process
tree measured whole (wall time; peak RSS summed over the tree, sampled every 10 ms, as
``bench/run_bench.py`` does):

* per layout: ``orjson.loads`` of the file and ``nprof-report ops FILE --format json --no-cache``;
  on the plain layouts also ``bench/reader_floor.py``: Polars' JSON reader alone over the events,
  as the decode workers call it, one process per CPU (the floor under ``ops``' decoding);
* on the single-line file: ``build --no-cache`` and ``diff FILE FILE --no-cache``;
* on the many-path trace: ``ops``, ``diff`` of it with itself, and ``check`` of it against three
  baselines (the trace itself, as stored ``summary.json`` documents).

The rounds are interleaved (every command once, then again), and the report gives medians with
the ratios the issue sets targets for: ``ops`` against ``orjson.loads`` (time) and against the
file (peak memory); ``build`` against ``ops`` (time and peak); ``diff`` against ``ops`` (peak);
the many-path ``diff`` in seconds and against ``ops`` on that trace (peak); and the sizes of
``summary.json`` and ``diff.json``. After the rounds, ``bench/profile_ops.py`` runs once on each
plain layout: where ``ops``' time goes (decoding, deriving the frames, ``key_averages``).
Writes ``OUT/bench_scale.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE))

import make_name_trace  # noqa: E402
from make_large_trace import SOURCES, write_trace  # noqa: E402
from run_bench import _json_bytes, compile_package, measure, stage_command  # noqa: E402

EXE = str(Path(sys.executable).with_name("nprof-report"))
LAYOUT_NAMES = ("compact", "gzip", "indented", "kineto")
PLAIN = ("compact", "indented", "kineto")  # reader_floor.py and profile_ops.py read these
TARGETS = {
    "ops_vs_orjson": 0.25,
    "ops_peak_vs_file": 0.75,
    "build_vs_ops_time": 2.0,
    "build_vs_ops_peak": 1.25,
    "diff_vs_ops_peak": 1.25,
    "many_diff_s": 30.0,
    "many_diff_vs_ops_peak": 1.0,
    "summary_mb": 5.0,
    "diff_json_mb": 10.0,
}


def _inputs(work: Path, mb: float, names: int, layouts: list[str]) -> dict[str, Path]:
    """The traces, written when missing."""
    work.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    compact = work / f"big-{mb:g}.json"
    for layout in layouts:
        if layout == "gzip":
            path = work / f"big-{mb:g}.json.gz"
            if not path.exists():
                if not compact.exists():
                    write_trace(compact, mb, list(SOURCES))
                with compact.open("rb") as src, gzip.open(path, "wb", compresslevel=6) as dst:
                    shutil.copyfileobj(src, dst, 8 << 20)
        else:
            path = compact if layout == "compact" else work / f"big-{mb:g}-{layout}.json"
            if not path.exists():
                write_trace(path, mb, list(SOURCES), layout=layout)
        out[layout] = path
    many = work / f"many-{names}.json"
    if not many.exists():
        make_name_trace.write(many, names=names, length=0)
    out["many"] = many
    return out


def _commands(inputs: dict[str, Path], work: Path) -> dict[str, list[str]]:
    cmds: dict[str, list[str]] = {}
    for layout in LAYOUT_NAMES:
        if layout in inputs:
            cmds[f"orjson {layout}"] = stage_command("orjson", inputs[layout])
            cmds[f"ops {layout}"] = stage_command("ops", inputs[layout])
            if layout in PLAIN:
                floor = [sys.executable, str(_HERE / "reader_floor.py"), str(inputs[layout])]
                cmds[f"floor {layout}"] = floor
    big = inputs.get("compact") or next(inputs[k] for k in LAYOUT_NAMES if k in inputs)
    cmds["build"] = [EXE, "build", str(big), "--out", str(work / "out-build"), "--no-cache"]
    cmds["diff"] = [EXE, "diff", str(big), str(big), "--out", str(work / "out-diff"), "--no-cache"]
    many = str(inputs["many"])
    cmds["ops many"] = stage_command("ops", inputs["many"])
    cmds["diff many"] = [EXE, "diff", many, many, "--out", str(work / "out-many"), "--no-cache"]
    cmds["check many"] = [
        EXE,
        "check",
        many,
        *(a for k in range(3) for a in ("--baseline", str(work / f"base-{k}" / "summary.json"))),
    ]
    return cmds


def _baselines(inputs: dict[str, Path], work: Path) -> None:
    """Three stored summaries of the many-path trace, the baselines ``check many`` reads."""
    for k in range(3):
        out = work / f"base-{k}"
        if not (out / "summary.json").exists():
            measure([EXE, "build", str(inputs["many"]), "--out", str(out), "--no-cache"], 3600)


def run(work: Path, mb: float, names: int, layouts: list[str], repeats: int) -> dict[str, Any]:
    compile_package()
    inputs = _inputs(work, mb, names, layouts)
    _baselines(inputs, work)
    cmds = _commands(inputs, work)
    samples: dict[str, list[tuple[float, int]]] = {k: [] for k in cmds}
    for rep in range(repeats):
        for name, cmd in cmds.items():
            wall, rss, _, rc, tail = measure(cmd, 3600)
            if rc not in (0, 1) or (rc == 1 and not name.startswith("check")):
                raise RuntimeError(f"{name} failed ({rc}): {tail}")
            samples[name].append((wall, rss))
            print(f"  round {rep + 1} {name:18s} {wall:8.2f} s {rss / 1024:8.0f} MiB", flush=True)
    med = {
        k: (statistics.median(w for w, _ in v), statistics.median(r for _, r in v) / 1024)
        for k, v in samples.items()
    }
    files = {
        "summary.json": work / "out-build" / "summary.json",
        "diff.json (530 MB trace)": work / "out-diff" / "diff.json",
        "diff.json (many paths)": work / "out-many" / "diff.json",
    }
    sizes = {k: p.stat().st_size / 1e6 for k, p in files.items() if p.exists()}
    ratios: dict[str, float] = {}
    for layout in LAYOUT_NAMES:
        if f"ops {layout}" in med:
            ops_t, ops_m = med[f"ops {layout}"]
            ratios[f"ops_vs_orjson {layout}"] = ops_t / med[f"orjson {layout}"][0]
            ratios[f"ops_peak_vs_file {layout}"] = ops_m * 2**20 / _json_bytes(inputs[layout])
            if f"floor {layout}" in med:
                ratios[f"floor_vs_orjson {layout}"] = (
                    med[f"floor {layout}"][0] / med[f"orjson {layout}"][0]
                )
    base = next(f"ops {k}" for k in LAYOUT_NAMES if f"ops {k}" in med)
    ratios["build_vs_ops_time"] = med["build"][0] / med[base][0]
    ratios["build_vs_ops_peak"] = med["build"][1] / med[base][1]
    ratios["diff_vs_ops_peak"] = med["diff"][1] / med[base][1]
    ratios["many_diff_s"] = med["diff many"][0]
    ratios["many_diff_vs_ops_peak"] = med["diff many"][1] / med["ops many"][1]
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "repeats": repeats,
        "stages": _stages(inputs),
        "inputs": {k: str(v) for k, v in inputs.items()},
        "medians": {k: {"time_s": round(t, 2), "peak_mib": round(m)} for k, (t, m) in med.items()},
        "samples": {k: [[round(w, 2), round(r / 1024)] for w, r in v] for k, v in samples.items()},
        "ratios": {k: round(v, 3) for k, v in ratios.items()},
        "sizes_mb": {k: round(v, 3) for k, v in sizes.items()},
    }


def _stages(inputs: dict[str, Path]) -> dict[str, list[str]]:
    """``profile_ops.py``'s lines for each plain layout: where ``ops``' time goes."""
    out = {}
    for layout in PLAIN:
        if layout in inputs:
            cmd = [sys.executable, str(_HERE / "profile_ops.py"), str(inputs[layout])]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
            out[layout] = proc.stdout.splitlines()
    return out


def _target(key: str) -> float | None:
    return TARGETS.get(key.split(" ")[0])


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"{result['date']}, medians of {result['repeats']} interleaved round(s); each command a "
        "fresh process tree (peak: all its processes at once).",
        "",
        "| command | time (s) | peak (MiB) | runs (s / MiB) |",
        "| --- | --- | --- | --- |",
    ]
    for k, m in result["medians"].items():
        runs = ", ".join(f"{w:g} / {r}" for w, r in result["samples"][k])
        lines.append(f"| {k} | {m['time_s']:.2f} | {m['peak_mib']} | {runs} |")
    lines += ["", "| ratio | measured | target | met |", "| --- | --- | --- | --- |"]
    for k, v in result["ratios"].items():
        t = _target(k)
        bound, met = (f"≤ {t:g}", "yes" if v <= t else "no") if t else ("", "")
        lines.append(f"| {k} | {v:g} | {bound} | {met} |")
    for k, v in result["sizes_mb"].items():
        t = TARGETS["summary_mb" if k == "summary.json" else "diff_json_mb"]
        lines.append(f"| {k} (MB) | {v:g} | ≤ {t:g} | {'yes' if v <= t else 'no'} |")
    for layout, stage_lines in result["stages"].items():
        lines += ["", f"`bench/profile_ops.py`, {layout} (one process; stage, its time, peak):"]
        lines += ["", "```", *stage_lines, "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--mb", type=float, default=530.0, help="size of the large trace (MB)")
    ap.add_argument("--names", type=int, default=100_000, help="distinct op paths")
    ap.add_argument(
        "--layouts", default=",".join(LAYOUT_NAMES), help="of " + ", ".join(LAYOUT_NAMES)
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/nprof-bench-scale"))
    ap.add_argument("--out", type=Path, default=_HERE / "out")
    args = ap.parse_args(argv)
    layouts = [x for x in args.layouts.split(",") if x]
    if not set(layouts) <= set(LAYOUT_NAMES):
        ap.error(f"--layouts: one or more of {', '.join(LAYOUT_NAMES)}")
    result = run(args.workdir, args.mb, args.names, layouts, args.repeats)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_scale.json").write_text(json.dumps(result, indent=2) + "\n")
    text = markdown(result)
    (args.out / "bench_scale.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

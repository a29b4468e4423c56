"""Time and peak memory of ``diff`` and ``check`` on large inputs, against ``ops`` on the same
trace (issue 32's targets: ``diff`` of the 530 MB trace with itself within 1.25x ``ops``' peak;
``diff`` of 100,000 op paths within 30 s and ``ops``' peak; ``check`` of 20,000 paths against
three baselines).

    python bench/make_large_trace.py /tmp/d32/big.json --mb 530
    python bench/make_name_trace.py /tmp/d32/many.json --names 100000
    python bench/make_name_trace.py /tmp/d32/n20k.json --names 20000
    nice -n 10 python bench/bench_diff.py --big /tmp/d32/big.json --many /tmp/d32/many.json \\
        --check /tmp/d32/n20k.json --work /tmp/d32/work --repeats 3 \\
        [--against <checkout before>/.venv/bin/nprof-report]

Each command runs as a whole process tree, its summed resident memory sampled every 10 ms
(``run_bench.measure``); with ``--against``, each measurement of this checkout's
``nprof-report`` is followed by the same command of the other, repeat by repeat (interleaved).
Every command reads the trace itself (``--no-cache``). Prints a Markdown table of medians
(range), peak RSS, the ratio of each command's peak to ``ops``' on its trace, ``diff.json``'s
size, and the load average.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_bench import compile_package, measure


def _cases(args: argparse.Namespace) -> list[tuple[str, str, list[str]]]:
    """(case, the trace it is compared with ops on, the command's arguments; ``{out}`` is the
    command's output folder)."""
    cases = []
    for trace in (args.big, args.many):
        if trace is not None:
            t = str(trace)
            cases.append((f"ops {trace.name}", t, ["ops", t, "--format", "json", "--no-cache"]))
            cases.append(
                (f"diff {trace.name} itself", t, ["diff", t, t, "--out", "{out}", "--no-cache"])
            )
    if args.big is not None and args.copy is not None:
        b, c = str(args.big), str(args.copy)
        cases.append(
            (
                f"diff {args.big.name} {args.copy.name}",
                b,
                ["diff", b, c, "--out", "{out}", "--no-cache"],
            )
        )
    if args.check is not None:
        t = str(args.check)
        cases.append((f"ops {args.check.name}", t, ["ops", t, "--format", "json", "--no-cache"]))
        base = [a for _ in range(3) for a in ("--baseline", t)]
        cases.append(
            (f"check {args.check.name} x3 baselines", t, ["check", t, *base, "--no-cache"])
        )
    return cases


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--big", type=Path, help="the 530 MB trace (make_large_trace.py)")
    ap.add_argument("--many", type=Path, help="the 100,000-path trace (make_name_trace.py)")
    ap.add_argument("--check", type=Path, help="a trace to check against itself x3")
    ap.add_argument(
        "--copy",
        type=Path,
        help="a copy of --big under another path: diff of the two (each side read on its own)",
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--against", help="another checkout's nprof-report executable")
    ap.add_argument("--work", type=Path, help="where the diffs are written (default: a temp dir)")
    ap.add_argument("--timeout", type=float, default=1200)
    args = ap.parse_args(argv)
    compile_package()
    here = str(Path(sys.executable).with_name("nprof-report"))
    exes = {"after": here, **({"before": args.against} if args.against else {})}
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-diff-"))
    work.mkdir(parents=True, exist_ok=True)
    cases = _cases(args)
    walls: dict[tuple[str, str], list[float]] = {}
    peaks: dict[tuple[str, str], list[float]] = {}
    sizes: dict[tuple[str, str], int] = {}
    loads = []
    for repeat in range(args.repeats):
        for case, _, cmd in cases:
            for which, exe in exes.items():
                out = work / f"{which}-{case.replace(' ', '_')}"
                shutil.rmtree(out, ignore_errors=True)
                full = [exe, *(out.as_posix() if a == "{out}" else a for a in cmd)]
                loads.append(os.getloadavg()[0])
                wall, rss, _, rc, tail = measure(full, args.timeout)
                if rc not in (0, 1):  # check exits 1 on a regression
                    raise RuntimeError(f"{' '.join(full)}: exit {rc}: {tail}")
                walls.setdefault((case, which), []).append(wall)
                peaks.setdefault((case, which), []).append(rss / 1024)
                if (out / "diff.json").is_file():
                    sizes[(case, which)] = (out / "diff.json").stat().st_size
                print(
                    f"repeat {repeat + 1} {which:6} {case}: {wall:.2f} s, {rss / 1024:.0f} MiB",
                    file=sys.stderr,
                    flush=True,
                )
    print(f"{args.repeats} interleaved repeat(s); load average {min(loads):.1f}–{max(loads):.1f}\n")
    print("| command | code | time (s) | peak RSS (MiB) | peak / ops' | diff.json (MB) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for case, trace, _ in cases:
        ops_case = next(c for c, t, cmd in cases if t == trace and cmd[0] == "ops")
        for which in exes:
            w, p = walls[(case, which)], peaks[(case, which)]
            ops_peak = statistics.median(peaks[(ops_case, which)])
            size = sizes.get((case, which))
            print(
                f"| {case} | {which} | {statistics.median(w):.2f} ({min(w):.2f}–{max(w):.2f}) "
                f"| {statistics.median(p):.0f} ({min(p):.0f}–{max(p):.0f}) "
                f"| {statistics.median(p) / ops_peak:.2f}× "
                f"| {'–' if size is None else f'{size / 1e6:.1f}'} |"
            )
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

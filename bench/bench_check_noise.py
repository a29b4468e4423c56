"""The false-alarm rate of ``nprof-report check``: pairs of captures of the same code.

    python bench/bench_check_noise.py [--pairs 20] [--active 8] [--baselines 1] [--impl naive]
                                      [--out DIR]

Each try ("pair") is K baseline captures and one more, all CPU captures of the same code
(``capture --backend cpu --impl IMPL --active N``) taken one after the other, then
``check LAST --baseline FIRST [--baseline ...]`` with the defaults (the counts per step, and step
time at 5 %, which decides the exit code only where it can: docs/gate.md). A try passes when
``check`` exits 0. ``bench/bench_gate.py`` measures misses as well. Prints one line per pair (exit code, the step-time difference and
its 95 % interval from diff.json, the load average) and the rate at the end; writes
``results.json`` in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _capture(runs: Path, impl: str, active: int) -> Path:
    out = subprocess.run(
        [
            "nprof-report",
            "capture",
            "--backend",
            "cpu",
            "--impl",
            impl,
            "--active",
            str(active),
            "--out",
            str(runs),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip().splitlines()[-1])


def _pair(
    i: int, runs: Path, out: Path, impl: str, active: int, k: int, extra: list[str]
) -> dict[str, Any]:
    bases = [_capture(runs, impl, active) for _ in range(k)]
    new = _capture(runs, impl, active)
    diff_dir = out / f"diff{i:02d}"
    t0 = time.perf_counter()
    baselines = [a for b in bases for a in ("--baseline", str(b))]
    done = subprocess.run(
        ["nprof-report", "check", str(new), *baselines, "--out", str(diff_dir), *extra],
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - t0
    step: dict[str, Any] = {}
    if (diff_dir / "diff.json").is_file():
        doc = json.loads((diff_dir / "diff.json").read_text())
        step = doc["check"]["results"][0]
    return {
        "pair": i,
        "rc": done.returncode,
        "stderr": done.stderr.strip(),
        "delta_pct": step.get("delta_pct"),
        "low_pct": step.get("low_pct"),
        "high_pct": step.get("high_pct"),
        "check_s": round(seconds, 2),
        "load": os.getloadavg()[0],
        "bases": [str(b) for b in bases],
        "new": str(new),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--active", type=int, default=8)
    ap.add_argument("--baselines", type=int, default=1, help="baseline captures per try")
    ap.add_argument("--impl", default="naive")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("check_args", nargs="*", help="extra arguments for check (after --)")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="nprof-check-noise-"))
    out.mkdir(parents=True, exist_ok=True)
    runs = out / "runs"
    results = []
    for i in range(1, args.pairs + 1):
        r = _pair(i, runs, out, args.impl, args.active, args.baselines, args.check_args)
        results.append(r)
        print(
            f"pair {i:2d}: exit {r['rc']}  step {r['delta_pct']:+.1f} % "
            f"(interval {r['low_pct']} to {r['high_pct']})  load {r['load']:.1f}"
            if r["delta_pct"] is not None
            else f"pair {i:2d}: exit {r['rc']}  {r['stderr']}",
            flush=True,
        )
    passed = sum(r["rc"] == 0 for r in results)
    print(
        f"passed {passed} of {len(results)} "
        f"(active {args.active}, baselines {args.baselines}, impl {args.impl})"
    )
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(out, file=sys.stderr)


if __name__ == "__main__":
    main()

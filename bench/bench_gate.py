"""The regression gate's false-alarm and miss rates on REAL CPU captures of a tiny study.

    python bench/bench_gate.py [--tries 10] [--active 8] [--out DIR]

Each try captures, one after the other and each in a fresh process (``nprof-report capture
--backend cpu --study bench/gate_study.py``, as CI would): three baselines of the same code,
then three candidates:

* ``same``: the same code again (any failure is a false alarm);
* ``extra pass``: one more pass over the input (``gate_study.py:EXTRA_PASS``: the normaliser
  computed twice; any pass is a miss);
* ``2x input``: the same code on twice the input (``--shape 16,2048``; any pass is a miss).

Each candidate is checked against the first baseline alone and against all three, by two gates:

* ``gate``: ``check`` with its defaults (structure and step time at 5 %: time decides only with
  several baselines that agree within 5 %);
* ``time only``: ``check --metric step --strict-time``, the time verdict alone, binding (what
  ``check`` did before it counted the work).

Prints one line per try and the table of rates; writes ``results.json`` and ``table.md`` in
``--out``. The checks run in this process (the same code as the command, without its start-up).
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

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "bench" / "gate_study.py"
CANDIDATES = {
    "same": ("STUDY", ()),
    "extra pass": ("EXTRA_PASS", ()),
    "2x input": ("STUDY", ("--shape", "16,2048")),
}
GATES: dict[str, dict[str, Any]] = {
    "gate": {"metrics": None, "strict_time": False},
    "time only": {"metrics": ["step"], "strict_time": True},
}


def capture(runs: Path, name: str, extra: tuple[str, ...], active: int) -> Path:
    command = [sys.executable, "-m", "nprof_report", "capture", "--backend", "cpu"]
    command += ["--study", f"{STUDY}:{name}", "--active", str(active), "--out", str(runs)]
    out = subprocess.run(
        [*command, *extra],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip().splitlines()[-1])


def judge(new: Path, bases: list[Path], gate: dict[str, Any]) -> dict[str, Any]:
    from nprof_report.report.diff.check import check
    from nprof_report.report.diff.compare import diff_document
    from nprof_report.report.diff.inputs import load_side

    new_side = load_side(new)
    docs = [diff_document(load_side(b), new_side, intervals=k == 0) for k, b in enumerate(bases)]
    failures = check(docs, max_regression_pct=5.0, ops=[], **gate)
    record = docs[0]["check"]
    step = next((r for r in record["results"] if r["metric"] == "step"), None)
    return {
        "failed": bool(failures),
        "on": sorted(
            {"structure" for c in record["structure_results"] if c["failed"]}
            | {"time" for r in record["results"] if r["failed"]}
        ),
        "step_delta_pct": step and step["delta_pct"],
        "spread_pct": step and step["spread_pct"],
        "time_decides": step and step["decides"],
        "exit_basis": record["exit_basis"],
    }


def one_try(i: int, runs: Path, active: int) -> dict[str, Any]:
    bases = [capture(runs, "STUDY", (), active) for _ in range(3)]
    candidates = {c: capture(runs, name, extra, active) for c, (name, extra) in CANDIDATES.items()}
    verdicts = {}
    for c, path in candidates.items():
        for k in (1, 3):
            for g, gate in GATES.items():
                verdicts[f"{c}|{k}|{g}"] = judge(path, bases[:k], gate)
    return {
        "try": i,
        "load": round(os.getloadavg()[0], 2),
        "bases": [str(b) for b in bases],
        "candidates": {c: str(p) for c, p in candidates.items()},
        "verdicts": verdicts,
    }


def table(results: list[dict[str, Any]]) -> str:
    n = len(results)
    lines = [
        "| candidate | baselines | gate (defaults): failed | time only (`--metric step "
        "--strict-time`): failed |",
        "| --- | --- | --- | --- |",
    ]
    for c in CANDIDATES:
        what = "false alarms" if c == "same" else "misses"
        for k in (1, 3):
            cells = []
            for g in GATES:
                failed = sum(r["verdicts"][f"{c}|{k}|{g}"]["failed"] for r in results)
                bad = failed if c == "same" else n - failed
                cells.append(f"{failed} of {n} ({what}: {bad})")
            lines.append(f"| {c} | {k} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tries", type=int, default=10)
    ap.add_argument("--active", type=int, default=8)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="nprof-bench-gate-"))
    out.mkdir(parents=True, exist_ok=True)
    results = []
    t0 = time.perf_counter()
    for i in range(1, args.tries + 1):
        r = one_try(i, out / "runs", args.active)
        results.append(r)
        short = "  ".join(
            f"{key.replace('|', ' ')}: {'FAIL' if v['failed'] else 'pass'}"
            for key, v in r["verdicts"].items()
            if key.endswith("|gate")
        )
        print(f"try {i:2d} (load {r['load']:.1f}): {short}", flush=True)
        (out / "results.json").write_text(json.dumps(results, indent=1))
    md = table(results)
    loads = [r["load"] for r in results]
    md += (
        f"\n{len(results)} tries, {args.active} active steps, load average "
        f"{min(loads):.1f}–{max(loads):.1f}, {time.perf_counter() - t0:.0f} s\n"
    )
    (out / "table.md").write_text(md)
    print(md)
    print(out, file=sys.stderr)


if __name__ == "__main__":
    main()

"""Time the per-rank jobs of a generated job on the local pool and on a local Ray instance.

Generates a CONSTRUCTED job (``make_rank_job.py``: N copies of a real rank trace, one straggler),
then runs ``nprof-report ops JOB --by-rank`` -- every rank parsed, analysed and reduced to its
rank figures, the work ``build`` does before rendering -- with

* the local pool: ``--jobs W`` (W = 1 parses in the command's own process);
* local Ray: ``--ray local --jobs W`` (a Ray instance of W CPUs started and stopped by the command,
  its start-up included);

for each W of ``--workers``, each run with an empty frame cache of its own (the parse is timed,
not a cache hit). Runs are interleaved (every configuration once, then again ...) and the median
wall time is reported, with the speed-up over the local pool at W = 1 of the same run. The
straggler line of each run is checked to name the planted rank. A bare ``ray.init`` +
``ray.shutdown`` is timed too, the fixed cost of ``--ray local``.

    python bench/bench_ranks.py --ranks 8 --repeats 2 --runs 3 --workers 1,2,4

Writes ``bench/out/ranks.md`` and ``bench/out/ranks.json`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
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

from make_rank_job import make_job  # noqa: E402

EXE = Path(sys.executable).with_name("nprof-report")
RAY_START = "import ray; ray.init(num_cpus=1, include_dashboard=False); ray.shutdown()"


def _timed(command: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{proc.stderr[-2000:]}")
    return wall, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2, help="copies of the steps per rank")
    parser.add_argument("--runs", type=int, default=3, help="interleaved runs per configuration")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--straggler", type=int, default=3)
    parser.add_argument("--out", type=Path, default=_HERE / "out")
    a = parser.parse_args()
    workers = [int(w) for w in a.workers.split(",")]
    work = Path(tempfile.mkdtemp(prefix="nprof-ranks-bench-"))
    try:
        traces = make_job(work / "job", a.ranks, repeats=a.repeats, straggler=a.straggler)
        total = sum(p.stat().st_size for p in traces)
        configs = [("local", w) for w in workers] + [("ray", w) for w in workers]
        walls: dict[tuple[str, int], list[float]] = {c: [] for c in configs}
        ray_start: list[float] = []
        for run in range(a.runs):
            for engine, w in configs:
                cache = work / f"cache-{engine}-{w}-{run}"
                env = {**os.environ, "NPROF_CACHE_DIR": str(cache)}
                command = [str(EXE), "ops", str(work / "job"), "--by-rank", "--jobs", str(w)]
                if engine == "ray":
                    command += ["--ray", "local"]
                wall, out = _timed(command, env)
                if f"rank {a.straggler} is" not in out:
                    raise SystemExit(f"{engine} x{w}: the straggler was not found:\n{out}")
                walls[(engine, w)].append(wall)
                shutil.rmtree(cache, ignore_errors=True)
                print(f"run {run} {engine} x{w}: {wall:.1f} s", file=sys.stderr)
            ray_start.append(_timed([sys.executable, "-c", RAY_START], dict(os.environ))[0])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = statistics.median(walls[("local", 1)])
    rows: list[dict[str, Any]] = [
        {
            "engine": engine,
            "workers": w,
            "median_s": round(statistics.median(walls[(engine, w)]), 2),
            "runs_s": [round(x, 2) for x in walls[(engine, w)]],
            "speedup_vs_local_1": round(base / statistics.median(walls[(engine, w)]), 2),
        }
        for engine, w in configs
    ]
    result = {
        "ranks": a.ranks,
        "bytes_per_rank": total // a.ranks,
        "cpus": os.cpu_count(),
        "ray_init_shutdown_s": round(statistics.median(ray_start), 2),
        "rows": rows,
    }
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "ranks.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        f"{a.ranks} ranks x {total / a.ranks / 1e6:.1f} MB, {os.cpu_count()} CPUs; "
        f"`ops --by-rank`, medians of {a.runs} interleaved runs; bare ray.init+shutdown "
        f"{result['ray_init_shutdown_s']} s",
        "",
        "| engine | workers | median (s) | speed-up vs local x1 |",
        "| --- | --- | --- | --- |",
        *(
            f"| {r['engine']} | {r['workers']} | {r['median_s']} | {r['speedup_vs_local_1']} |"
            for r in rows
        ),
    ]
    (a.out / "ranks.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

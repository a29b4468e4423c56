"""Write a CONSTRUCTED job of N ranks, one trace each, with a planted straggler rank.

Each rank is a copy of one real rank trace (default: the public two-rank NCCL job of HTA,
``fixtures/public/kineto-cuda-2rank-sampled-rank0.json.gz``), its steps repeated ``--repeats``
times back to back (ids offset per repetition, so links never collide; step numbers continue),
with ``distributedInfo`` set to its rank and the world size, and an ``nprof_constructed`` key the
report quotes among its caveats.

Ranks differ by time *insertions*: at an instant ``t``, ``d`` µs are inserted into the timeline,
so every event that spans ``t`` grows by ``d`` and every later event moves by ``d``. The insertion
keeps each copy consistent (nesting, links and step membership are unchanged):

* every rank: a shift of its whole timeline by ``rank × 17 µs``, and at the middle of each step a
  random insertion of 0 to ``--jitter`` % of the step (seeded), the run-to-run noise;
* the straggler (``--straggler``): ``--delay-ms`` inserted into each all_reduce kernel (the
  kernels a ``c10d::allreduce_`` launched), at an instant no other device activity runs, i.e. a
  rank whose all_reduce takes longer, as behind a slow link, with the same device compute. The
  host op running at that instant grows too (the host waits for the device).

    python bench/make_rank_job.py /tmp/job --ranks 8 --straggler 5 --delay-ms 30
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import random
from pathlib import Path
from typing import Any

import orjson

_HERE = Path(__file__).resolve().parent
BASE = _HERE.parent / "fixtures" / "public" / "kineto-cuda-2rank-sampled-rank0.json.gz"
_ID_KEYS = ("External id", "correlation")
_RANK_SHIFT_US = 17.0
_GAP_US = 1000.0


def _load(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    doc: dict[str, Any] = orjson.loads(data)
    return doc


def _step_number(name: str) -> int | None:
    return int(name.split("#", 1)[1]) if name.startswith("ProfilerStep#") else None


def repeat(doc: dict[str, Any], repeats: int) -> list[dict[str, Any]]:
    """The timed events ``repeats`` times back to back, ids offset, step numbers continued."""
    meta = [e for e in doc["traceEvents"] if e.get("ph") == "M"]
    timed = [e for e in doc["traceEvents"] if e.get("ph") != "M" and e.get("cat") != "Trace"]
    start = min(float(e["ts"]) for e in timed)
    end = max(float(e["ts"]) + float(e.get("dur", 0)) for e in timed)
    ids = [int(e["args"][k]) for e in timed for k in _ID_KEYS if k in e.get("args", {})]
    ids += [int(e["id"]) for e in timed if isinstance(e.get("id"), int)]
    id_stride = max(ids, default=0) + 1
    steps = [n for e in timed if (n := _step_number(e.get("name", ""))) is not None]
    step_stride = max(steps) - min(steps) + 1 if steps else 0
    out = list(meta)
    for r in range(repeats):
        shift = r * (end - start + _GAP_US)
        for e in timed:
            c = dict(e)
            c["ts"] = float(e["ts"]) + shift
            if "args" in e:
                c["args"] = dict(e["args"])
                for k in _ID_KEYS:
                    if k in c["args"]:
                        c["args"][k] = int(c["args"][k]) + r * id_stride
            if isinstance(e.get("id"), int):
                c["id"] = e["id"] + r * id_stride
            n = _step_number(e.get("name", ""))
            if n is not None:
                c["name"] = f"ProfilerStep#{n + r * step_stride}"
            out.append(c)
    return out


def allreduce_kernels(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Kernels launched (same correlation) by a runtime call inside a ``c10d::allreduce_``."""
    spans = sorted(
        (float(e["ts"]), float(e["ts"]) + float(e["dur"]), e["tid"])
        for e in events
        if e.get("ph") == "X" and e.get("name") == "c10d::allreduce_"
    )
    launches = {
        e["args"]["correlation"]
        for e in events
        if e.get("cat") == "cuda_runtime"
        and "correlation" in e.get("args", {})
        and any(s <= float(e["ts"]) < t and tid == e["tid"] for s, t, tid in spans)
    }
    return [
        e
        for e in events
        if e.get("cat") == "kernel" and e.get("args", {}).get("correlation") in launches
    ]


def quiet_instant(kernel: dict[str, Any], device: list[tuple[float, float]]) -> float:
    """The middle of the longest stretch of ``kernel`` during which no other device activity
    runs (its middle when there is none), so that only the collective grows."""
    start, end = float(kernel["ts"]), float(kernel["ts"]) + float(kernel["dur"])
    busy = sorted((max(s, start), min(e, end)) for s, e in device if s < end and e > start)
    best, at, cursor = 0.0, (start + end) / 2, start
    for s, e in [*busy, (end, end)]:
        if s - cursor > best:
            best, at = s - cursor, (cursor + s) / 2
        cursor = max(cursor, e)
    return at


def insert(events: list[dict[str, Any]], points: list[tuple[float, float]]) -> None:
    """Insert ``d`` µs at each instant ``t`` of ``points`` (in place, see the module docstring)."""
    points = sorted(points)
    at = [t for t, _ in points]
    total = [0.0]
    for _, d in points:
        total.append(total[-1] + d)

    def moved(x: float) -> float:
        return x + total[bisect.bisect_right(at, x)]

    for e in events:
        if e.get("ph") == "M" or "ts" not in e:
            continue
        ts = float(e["ts"])
        if "dur" in e:
            e["dur"] = round(moved(ts + float(e["dur"])) - moved(ts), 3)
        e["ts"] = round(moved(ts), 3)


def rank_trace(
    doc: dict[str, Any],
    events: list[dict[str, Any]],
    rank: int,
    world: int,
    *,
    straggler: int | None,
    delay_ms: float,
    jitter_pct: float,
    seed: int,
) -> dict[str, Any]:
    """One rank's document (see the module docstring)."""
    mine = [dict(e) for e in events]
    rng = random.Random(seed * 100_003 + rank)
    steps = [e for e in mine if _step_number(e.get("name", "")) is not None]
    start = min(float(e["ts"]) for e in mine if "ts" in e)
    points = [(start - 1.0, rank * _RANK_SHIFT_US)]
    for s in steps:
        mid = float(s["ts"]) + float(s["dur"]) / 2
        points.append((mid, rng.uniform(0, jitter_pct / 100) * float(s["dur"])))
    if rank == straggler:
        kernels = allreduce_kernels(mine)
        chosen = {id(k) for k in kernels}
        device = [
            (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
            for e in mine
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and id(e) not in chosen
        ]
        for k in kernels:
            points.append((quiet_instant(k, device), delay_ms * 1000))
    insert(mine, points)
    out = {k: v for k, v in doc.items() if k != "traceEvents"}
    info = dict(doc.get("distributedInfo") or {"backend": "nccl"})
    info.update(rank=rank, world_size=world)
    out["distributedInfo"] = info
    out["nprof_constructed"] = (
        f"bench/make_rank_job.py: rank {rank} of {world}, a time-shifted copy of a real trace"
        + (
            f", all_reduce kernels {delay_ms:g} ms longer (planted straggler)"
            if rank == straggler
            else ""
        )
    )
    out["traceEvents"] = mine
    return out


def make_job(
    folder: Path,
    ranks: int,
    *,
    base: Path = BASE,
    repeats: int = 1,
    straggler: int | None = None,
    delay_ms: float = 30.0,
    jitter_pct: float = 1.0,
    seed: int = 0,
    gzip_output: bool = False,
) -> list[Path]:
    """Write ``rank<R>.pt.trace.json`` (``.gz``) for each rank into ``folder``; their paths."""
    doc = _load(base)
    events = repeat(doc, repeats)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for rank in range(ranks):
        trace = rank_trace(
            doc,
            events,
            rank,
            ranks,
            straggler=straggler,
            delay_ms=delay_ms,
            jitter_pct=jitter_pct,
            seed=seed,
        )
        data = orjson.dumps(trace)
        path = folder / f"rank{rank}.pt.trace.json{'.gz' if gzip_output else ''}"
        path.write_bytes(gzip.compress(data, 6) if gzip_output else data)
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--base", type=Path, default=BASE, help="the real rank trace to copy")
    parser.add_argument("--repeats", type=int, default=1, help="copies of its steps per rank")
    parser.add_argument("--straggler", type=int, default=None, help="rank to slow down")
    parser.add_argument("--delay-ms", type=float, default=30.0, help="added per all_reduce kernel")
    parser.add_argument("--jitter", type=float, default=1.0, help="noise, %% of a step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gzip", action="store_true")
    a = parser.parse_args()
    for path in make_job(
        a.folder,
        a.ranks,
        base=a.base,
        repeats=a.repeats,
        straggler=a.straggler,
        delay_ms=a.delay_ms,
        jitter_pct=a.jitter,
        seed=a.seed,
        gzip_output=a.gzip,
    ):
        print(path)


if __name__ == "__main__":
    main()

"""Write a CONSTRUCTED Kineto trace whose op and kernel names stress the report's layout.

    python bench/make_name_trace.py /tmp/long.json --names 60 --length 2000   # 2,000-char names
    python bench/make_name_trace.py /tmp/many.json --names 100000             # 100,000 names

Each distinct name is one ``cpu_op`` (``aten::op_<n>`` padded to ``--length`` characters with a
C++-template-like tail that has no space or other break opportunity, as CUDA kernel names do),
launched once per step through a ``cudaLaunchKernel`` runtime call onto a ``kernel`` of a name of
the same length, linked by External id, correlation id and an ``ac2g`` flow, as Kineto writes
them. The ops are spread over ``--steps`` ``ProfilerStep#N`` annotations. The file says it is
constructed (``"nprof_constructed"``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

_PID, _TID, _STREAM = 100, 100, 7


def name_of(prefix: str, n: int, length: int) -> str:
    """The ``n``-th name: ``prefix_n``, padded to ``length`` characters with no space."""
    head = f"{prefix}_{n}"
    if length <= len(head):
        return head
    tail = "<float,4,at::native::Tensor" + "Iterator" * (length // 8)
    return (head + tail)[:length]


def events(names: int, length: int, steps: int) -> list[dict[str, Any]]:
    """The trace's events: ``names`` distinct ops (each with its kernel) over ``steps`` steps."""
    out: list[dict[str, Any]] = []
    per_step = -(-names // steps)
    ts = 0.0
    ident = 1
    for step in range(steps):
        chunk = range(step * per_step, min(names, (step + 1) * per_step))
        start = ts
        for n in chunk:
            op_id, rt_id = ident, ident + 1
            ident += 2
            out.append(_x("cpu_op", name_of("aten::op", n, length), ts + 1, 6, op_id))
            rt = _x("cuda_runtime", "cudaLaunchKernel", ts + 2, 3, op_id, correlation=rt_id)
            out.append(rt)
            out.append(
                {
                    "ph": "s",
                    "id": rt_id,
                    "pid": _PID,
                    "tid": _TID,
                    "ts": ts + 2,
                    "cat": "ac2g",
                    "name": "ac2g",
                }
            )
            kernel = _x("kernel", name_of("void kernel", n, length), ts + 6, 4, op_id, rt_id)
            kernel.update(pid=0, tid=_STREAM)
            out.append(kernel)
            out.append(
                {
                    "ph": "f",
                    "id": rt_id,
                    "pid": 0,
                    "tid": _STREAM,
                    "ts": ts + 6,
                    "cat": "ac2g",
                    "name": "ac2g",
                    "bp": "e",
                }
            )
            ts += 10
        ts += 5
        out.append(_x("user_annotation", f"ProfilerStep#{step}", start, ts - start, ident))
        ident += 1
    return out


def _x(
    cat: str, name: str, ts: float, dur: float, ext: int, correlation: int | None = None
) -> dict[str, Any]:
    args: dict[str, Any] = {"External id": ext}
    if correlation is not None:
        args["correlation"] = correlation
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": _PID,
        "tid": _TID,
        "ts": round(ts, 3),
        "dur": dur,
        "args": args,
    }


def write(path: Path, names: int, length: int, steps: int = 4) -> Path:
    """Write the trace to ``path``."""
    doc = {
        "schemaVersion": 1,
        "nprof_constructed": "bench/make_name_trace.py: names that stress the report's layout",
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
        "traceEvents": events(names, length, steps),
    }
    path.write_bytes(orjson.dumps(doc))
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--names", type=int, default=100, help="distinct op names (each with a kernel)")
    ap.add_argument("--length", type=int, default=0, help="characters per name (0: as short as n)")
    ap.add_argument("--steps", type=int, default=4)
    ns = ap.parse_args(argv)
    write(ns.out, ns.names, ns.length, ns.steps)
    print(f"{ns.out}: {ns.out.stat().st_size:,} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Time and peak RSS of each stage of ``nprof-report ops`` in one process.

Polars/Arrow buffers are invisible to ``tracemalloc``, so this reads ``VmHWM`` (peak RSS) from
``/proc/self/status`` after each stage and then resets it (``5`` into ``/proc/self/clear_refs``),
so each line is the peak *during* that stage (Linux only):

    nice -n 10 python bench/profile_ops.py /tmp/nprof-big.json

Stages: the work-only read taken apart into the parts the frames are made of
(``read_work_parts``: several processes for a large plain file; ``NPROF_DECODE_WORKERS=1`` for
one), deriving the frames, ``key_averages`` -- what ``ops`` does for a trace without a Neuron
profile. The allocator is set as the CLI sets it. Worker processes' memory is not in these figures
(see ``run_bench.py``, which sums the process tree).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from nprof_report.runtime import MALLOC_CONF


def _status() -> dict[str, int]:
    out: dict[str, int] = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                out[key] = int(value.split()[0]) // 1024
    return out


class _Clock:
    def __init__(self) -> None:
        self.t0 = self.last = time.perf_counter()

    def mark(self, label: str) -> None:
        now = time.perf_counter()
        m = _status()
        print(
            f"{label:16s} {now - self.last:7.2f} s  (at {now - self.t0:6.2f} s)  "
            f"peak {m['VmHWM']:6d} MiB  now {m['VmRSS']:6d} MiB",
            flush=True,
        )
        try:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
        except OSError:
            pass  # peaks then accumulate from the start
        self.last = time.perf_counter()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("trace", type=Path)
    ns = ap.parse_args(argv)
    clock = _Clock()
    os.environ.setdefault(*MALLOC_CONF)
    from nprof_report.parse.derive import derive
    from nprof_report.parse.keyavg import key_averages
    from nprof_report.parse.read.split import read_work_parts

    clock.mark("import")
    rows = read_work_parts(ns.trace)
    clock.mark("read, parts")
    frames = derive(rows)
    del rows
    clock.mark("derive frames")
    table = key_averages(frames)
    clock.mark("key_averages")
    print(f"{frames.ops.height} ops, {frames.device.height} device activities, {table.height} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

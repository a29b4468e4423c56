"""Where a command's memory peaks: the Python stack at the moment of the peak.

Runs ``nprof-report ARGS`` in this process with a thread that samples, every few milliseconds,
the resident memory of the process and of its worker processes (``proctree.py``) and, whenever the
total or the parent's own reaches a new high, the main thread's stack (its frames in
nprof-report's own code). At the end it prints both peaks with their stacks and a timeline of the
largest total in each quarter second with the innermost function running then:

    nice -n 5 python bench/peak_stack.py build /tmp/big.json --out /tmp/o --no-cache

Linux only. The sampler holds the interpreter lock for a moment each time, so a stage that runs
Python for long without releasing it is sampled less often than one in Polars or NumPy.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from proctree import rss_kib, tree

OWN = ("nprof_report", "/parse/", "/report/", "/capture/")


def _stack(frame: object) -> list[str]:
    lines = []
    for fs in traceback.extract_stack(frame):  # type: ignore[arg-type]
        if any(k in fs.filename for k in OWN):
            lines.append(
                f"{Path(fs.filename).parent.name}/{Path(fs.filename).name}:{fs.lineno} {fs.name}"
            )
    return lines


class Sampler(threading.Thread):
    def __init__(self, period: float) -> None:
        super().__init__(daemon=True)
        self.period = period
        self.main_id = threading.main_thread().ident
        self.t0 = time.perf_counter()
        self.peak_tree = (0, 0.0, [""])
        self.peak_self = (0, 0.0, [""])
        self.buckets: dict[int, tuple[int, int, str]] = {}
        self.stop = False

    def run(self) -> None:
        me = os.getpid()
        while not self.stop:
            own = rss_kib(me)
            total = own + sum(rss_kib(p) for p in tree(me)[1:])
            t = time.perf_counter() - self.t0
            frame = sys._current_frames().get(self.main_id or 0)
            stack: list[str] | None = None
            if total > self.peak_tree[0] + 1024 or own > self.peak_self[0] + 1024:
                stack = _stack(frame) if frame else []
                if total > self.peak_tree[0]:
                    self.peak_tree = (total, t, stack)
                if own > self.peak_self[0]:
                    self.peak_self = (own, t, stack)
            key = int(t * 4)
            if key not in self.buckets or total > self.buckets[key][0]:
                if stack is None:
                    stack = _stack(frame) if frame else []
                self.buckets[key] = (total, own, stack[-1] if stack else "")
            time.sleep(self.period)

    def report(self) -> None:
        self.stop = True
        err = sys.stderr
        for label, (kib, t, stack) in (("tree", self.peak_tree), ("parent", self.peak_self)):
            print(f"\nPEAK {label}: {kib / 1024:.0f} MiB at {t:.2f} s", file=err)
            for line in stack[-14:]:
                print(f"    {line}", file=err)
        print("\ntimeline (largest total in each 0.25 s; parent; innermost function):", file=err)
        last = ""
        for key in sorted(self.buckets):
            total, own, where = self.buckets[key]
            mark = where if where != last else '"'
            last = where
            print(f"  {key / 4:6.2f} s {total / 1024:6.0f} {own / 1024:6.0f}  {mark}", file=err)
        err.flush()


def main() -> None:
    from nprof_report import runtime

    runtime.tune()
    sampler = Sampler(float(os.environ.get("PEAK_PERIOD", "0.004")))
    sampler.start()
    atexit.register(sampler.report)
    from nprof_report.cli import main as cli

    sys.argv = ["nprof-report", *sys.argv[1:]]
    cli()


if __name__ == "__main__":
    main()

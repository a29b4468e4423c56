"""Where a command's memory peaks: the Python stack at the moment of the peak.

Runs ``nprof-report ARGS`` in this process with a thread that samples, every few milliseconds,
the resident memory of the process and of its worker processes (``/proc``) and, whenever the
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

OWN = ("nprof_report", "/parse/", "/report/", "/capture/")


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out += [int(c) for c in fh.read().split()]
    except OSError:
        pass
    return out


def _cmdline(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return None


def _tree(pid: int) -> list[int]:
    """The process and its descendants, less a child that has not called exec yet (its command
    line is still its parent's): it shares the parent's pages, as ``run_bench.measure`` says."""
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        todo += [c for c in _children(p) if _cmdline(c) != _cmdline(p)]
    return pids


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
            own = _rss_kib(me)
            total = own + sum(_rss_kib(p) for p in _tree(me)[1:])
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

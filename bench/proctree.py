"""A process tree's resident memory from ``/proc``, and the wrapper that measures a command by it.

    python bench/proctree.py CMD [ARGS ...]

runs ``CMD`` and samples, every 10 ms, the resident memory of its whole process tree (``VmRSS``
of the process and of every descendant, summed), then writes ``BENCH <wall s> <peak KiB>
<largest KiB> <exit code>`` on stderr (``run_bench.measure`` reads it). A child that has not
called exec yet (its command line still its parent's: ``subprocess`` forks, then execs) is left
out of the sum: it shares the parent's pages, and counting them twice put a 600 MiB peak into
one run in three of ``diff`` (WeasyPrint's library lookups run ``ldconfig`` from the analysed
process) and of ``build`` (the PDF worker started after the analysis). Linux only.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time


def rss_kib(pid: int) -> int:
    """``VmRSS`` of ``pid`` (0 once it is gone)."""
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


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants, less a child that has not called exec yet."""
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        todo += [c for c in _children(p) if _cmdline(c) != _cmdline(p)]
    return pids


def tree_rss_kib(pid: int) -> int:
    """The resident memory of ``pid``'s tree, summed."""
    return sum(rss_kib(p) for p in tree(pid))


def main(argv: list[str]) -> int:
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, tree_rss_kib(proc.pid))
        time.sleep(0.01)
    wall = time.perf_counter() - start
    largest = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    sys.stderr.write(f"\nBENCH {wall:.4f} {max(peak, largest)} {largest} {proc.returncode}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""The processes that decode a large trace (:mod:`.split`), started as early as the CLI can.

A decode worker spends its first 0.3-0.4 s importing Polars and the parser; so does the parent
before it can cut the trace into blocks. :func:`prestart`, called by ``ops`` and ``build`` before
they import anything heavy, starts the workers a trace will need right away, so that both import
at once; the split then takes them (:func:`spawn`) instead of starting its own. This module
imports nothing heavy. A worker waits for its blocks on stdin; one that is never used (the trace
was cached, say) is stopped when the command ends.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
from pathlib import Path

from nprof_report.errors import InputError
from nprof_report.parse.read.source import open_trace
from nprof_report.procs import stop

__all__ = ["DECODE_WORKERS_ENV", "MIN_SPLIT_BYTES", "default_workers", "prestart", "spawn", "stop"]

# below this the workers' start-up (about 0.5 s) is not paid back
MIN_SPLIT_BYTES = 64 << 20
GZIP_RATIO = 20  # a trace compresses about 10-20x: smaller .gz files are not worth splitting
DECODE_WORKERS_ENV = "NPROF_DECODE_WORKERS"
_WORKER = [sys.executable, "-m", "nprof_report.parse.read.split"]
_GLIBC_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(64 << 20)}
_started: list[subprocess.Popen[bytes]] = []


def default_workers() -> int:
    """Processes to decode with: :data:`DECODE_WORKERS_ENV`, else the CPUs this process may use."""
    env = os.environ.get(DECODE_WORKERS_ENV)
    if env and env.isdigit():
        return max(1, int(env))
    return _cpus()


def _cpus() -> int:
    """The CPUs this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def worth_splitting(size: int, gz: bool, min_bytes: int = MIN_SPLIT_BYTES) -> bool:
    """Whether a file of ``size`` bytes (``gz``: gzip-compressed) is large enough to split."""
    return size >= (min_bytes // GZIP_RATIO if gz else min_bytes)


def prestart(paths: list[Path]) -> bool:
    """Start the decode workers now when one of ``paths`` is a trace file large enough to split;
    whether it did.

    Folders are left alone: which of their traces need decoding (and how many at once) is only
    known later.
    """
    workers = default_workers()
    if workers < 2 or _started:
        return False
    for path in paths:
        if not path.is_file():
            continue
        try:
            with open_trace(path) as trace:
                if worth_splitting(trace.size, trace.gzip):
                    break
        except InputError:
            continue  # the loader words it
    else:
        return False
    _started.extend(_start(workers) for _ in range(workers))
    return True


def spawn(workers: int) -> list[subprocess.Popen[bytes]]:
    """``workers`` decode workers: those already started (if for as many), then new ones."""
    if len(_started) != workers:  # started for another count, which shares the CPUs otherwise
        _release()
    ready = [p for p in _started if p.poll() is None]
    _release(keep=ready)
    return ready + [_start(workers) for _ in range(workers - len(ready))]


def _start(workers: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        _WORKER,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=worker_env(workers),
    )


def worker_env(workers: int) -> dict[str, str]:
    """The workers' environment: CPUs shared out, and glibc's allocator told to keep memory.

    One single-threaded worker per CPU finished 0.5 s sooner on a 530 MB trace here than one
    worker each decoding on every CPU, whose thread pools then fought over the cores. Each worker
    decodes one piece after another, allocating and freeing the same sizes; by default glibc
    hands each 8 MB buffer back to the kernel and faults it in again, which cost a tenth of the
    time here. A fixed mmap threshold (32 MiB) and a trim threshold of 64 MiB keep those buffers
    in the heap; measured on a 530 MB trace: 0.6 s less per worker, same peak. Values already set
    by the user win.
    """
    env = dict(os.environ)
    env.setdefault("POLARS_MAX_THREADS", str(max(1, _cpus() // workers)))
    for key, value in _GLIBC_MALLOC.items():
        env.setdefault(key, value)
    return env


def _release(keep: list[subprocess.Popen[bytes]] | None = None) -> None:
    """Forget the started workers; stop those not in ``keep`` (they were sent nothing)."""
    while _started:
        proc = _started.pop()
        if keep is None or proc not in keep:
            stop(proc)


atexit.register(_release)

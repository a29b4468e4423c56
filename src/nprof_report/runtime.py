"""How the CLI tunes its own process: allocator settings, decode workers started early, fast exit.

Nothing here changes what a command computes or writes; it changes how soon and in how much
memory. :func:`tune` runs first, before Polars or NumPy is imported; :func:`prestart` before a
command imports anything heavy; :func:`leave` ends a command that returned :data:`LEAVE_FAST`.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import gc
import os
import sys
from collections.abc import Iterator
from pathlib import Path

# decode workers started before a command imports anything heavy (by :func:`prestart`)
from nprof_report.parse import prestart as start_decode_workers

__all__ = [
    "BLAS_THREADS",
    "LEAVE_FAST",
    "MALLOC_CONF",
    "collector_paused",
    "give_back_memory",
    "leave",
    "prestart",
    "tune",
]

# what ``ops`` and ``build`` return: they only read and write files (no threads or processes of
# theirs are left running), so the process may end without the teardown; ``capture`` runs torch,
# whose threads and exit handlers get the usual shutdown
LEAVE_FAST = "leave fast"

# Polars' allocator (jemalloc) keeps freed pages for 10 s by default; parsing a large trace frees
# and reallocates hundreds of MB, so they are returned after 0.25 s (pola-rs/polars#23128). On a
# 530 MB trace `ops` then peaks at about 1.2x the file size instead of 1.4x. One arena instead of
# one per thread lets a thread reuse what another freed: `ops` 0.5 s faster (3 interleaved runs:
# 10.0 -> 9.5 s, kernel time 2.9 -> 2.3 s), same peak. Set before Polars is first imported
# (commands import it lazily), inherited by worker processes, and only where the user has not
# set it.
MALLOC_CONF = ("_RJEM_MALLOC_CONF", "dirty_decay_ms:250,muzzy_decay_ms:0,narenas:1")
# ... except in a command's own process when decode workers read its trace (:func:`prestart`):
# it returns them at once, so that what it holds is what is live, and its peak (deriving the
# frames, key_averages) is the command's. On a 530 MB trace `ops` peaked at 409-439 MiB with
# 250 ms, 398-427 with 20 or 50 ms, 372-394 with 0 ms, for 0-0.6 s more CPU in page faults (3
# interleaved runs each, 2026-12-04). Not where the process decodes the trace itself: on a 58 MB
# trace 0 ms cost `ops` 0.76 s of CPU (1.89 -> 2.65 s), nor in the workers, which reuse the
# same sizes block after block.
SPLIT_MALLOC_CONF = "dirty_decay_ms:0,muzzy_decay_ms:0,narenas:1"
# glibc serves a block of up to 32 MiB from its heap once one of that size was freed (its mmap
# threshold follows the largest freed block), and what it frees there stays in the process: once
# reading a gzip trace had freed its 21 MB buffer, deriving the frames of a 530 MB trace and
# key_averages held 25 MiB more after them and peaked 30-50 MiB higher (live memory, 385 and 387
# MiB against 336 and 357) than with the threshold fixed at glibc's initial 128 KiB, where every
# array of NumPy's larger than that is mapped and unmapped on its own.
MMAP_THRESHOLD = ("MALLOC_MMAP_THRESHOLD_", 128 << 10)
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
# NumPy's OpenBLAS starts a thread per CPU at import, which spins while it waits; nothing here
# calls BLAS, and on a 530 MB trace those threads took 50 ms of CPU from the parse (perf samples)
BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "1")


def tune() -> None:
    """Set the allocator and BLAS variables where the user has not (before Polars is imported),
    and glibc's mmap threshold where the user's environment does not set it (this process only:
    the decode workers keep the threshold they are given, ``workerpool.worker_env``)."""
    os.environ.setdefault(*MALLOC_CONF)
    os.environ.setdefault(*BLAS_THREADS)
    if MMAP_THRESHOLD[0] not in os.environ:
        with contextlib.suppress(OSError, AttributeError):  # another C library: left as it is
            ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD[1])


def prestart(paths: list[Path]) -> None:
    """Start the decode workers a large trace among ``paths`` needs (before Polars is imported);
    if it started them, this process keeps no freed pages (:data:`SPLIT_MALLOC_CONF`) unless the
    user set the allocator."""
    if start_decode_workers(paths) and os.environ.get(MALLOC_CONF[0]) == MALLOC_CONF[1]:
        os.environ[MALLOC_CONF[0]] = SPLIT_MALLOC_CONF


def give_back_memory() -> None:
    """Collect garbage and return the C heap's free pages to the system (glibc's
    ``malloc_trim``; elsewhere the collection alone). Between the two sides of a diff: the first
    side's analysis leaves freed pages that the second's would not all reuse (530 MB trace
    against a copy: the diff's peak 720 -> 684 MiB)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def leave(status: int = 0) -> None:
    """End a command that succeeded without the interpreter's teardown (freeing every module,
    a last garbage collection): 0.1-0.16 s after ``ops`` on a 530 MB trace. Exit handlers still
    run (they stop unused decode workers) and the output is flushed first."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError):  # a reader gone (a closed pipe) loses nothing more
            stream.flush()
    os._exit(status)


@contextlib.contextmanager
def collector_paused(*, freeze: bool = False) -> Iterator[None]:
    """Python's cyclic garbage collector off while the block makes many objects that are hardly
    ever garbage (imports; the summary, model and HTML of 100,000 op names), which it would walk
    again and again as they grow; as it was afterwards. ``freeze``: what the block made is left
    out of the collector's later passes too."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if enabled:
            gc.enable()

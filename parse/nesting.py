"""Nesting of host events per thread, as PyTorch nests them, with array operations.

Nesting follows ``EventList._populate_cpu_children`` in ``torch/autograd/profiler_util.py``: per
thread, events sorted by ``(start, -end)``, walked with a stack; the top is popped while the new
event starts at or after its end or ends after it, so partial overlaps never nest. :func:`nest`
computes the same parents and depths without the walk (:mod:`.derive` moves a runtime call linked
to an op by ``External id`` onto the op's thread first, as PyTorch does); :func:`nest_kept` leaves
out the events PyTorch filters out before its walk. :func:`levels`,
:func:`rows_of` and :func:`climb` walk the resulting tree (:mod:`.keyavg` uses them too);
:func:`give_back_freed` returns the memory the arrays leave behind.
"""

from __future__ import annotations

import ctypes
from concurrent.futures import Executor
from functools import cache
from typing import Any

import numpy as np

# below this many host events one thread nests them sooner than two
_HALVES_MIN = 100_000


def nest(
    segment: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, int]:
    """Parent position (-1 at the top) and depth of events sorted by (thread, start, -end), and
    how many events partially overlap a later one on their thread.

    Equivalent to PyTorch's stack walk: the stack always holds the chain of enclosing events of
    the last event, so an event's parent is the *last earlier* event of its thread that contains
    it (``start < end_j`` and ``end <= end_j``, i.e. ``end_j >= end + (dur == 0)``), found here by
    pointer jumping; an event is popped by the first later event it does not contain, which is
    the first event after its subtree, and that pop is a partial overlap when the event starts
    before its end.
    """
    n = len(starts)
    pos = np.arange(n, dtype=positions(n))
    first = np.ones(n, dtype=bool)
    first[1:] = segment[1:] != segment[:-1]
    need = ends + (ends == starts)  # the end a parent must reach
    ptr = np.where(first, -1, pos - 1)
    todo = np.flatnonzero(ptr >= 0)
    while len(todo):
        cand = ptr[todo]
        jump = ends[cand] < need[todo]  # the candidate does not contain it: jump past it
        todo = todo[jump]
        if not len(todo):
            break
        up = ptr[cand[jump]]
        ptr[todo] = up
        todo = todo[up >= 0]
    parent = ptr
    depth = _depths(parent)
    # subtree sizes, leaves first
    size = np.ones(n, dtype=pos.dtype)
    for level in levels(np.flatnonzero(parent >= 0), depth):
        np.add.at(size, parent[level], size[level])
    after = pos + size  # the first event after each subtree
    del pos, size
    last = np.empty(n, dtype=after.dtype)  # the last position of each event's thread
    seg_end = np.flatnonzero(np.append(segment[1:] != segment[:-1], True))
    last[:] = np.repeat(seg_end, np.diff(np.concatenate(([-1], seg_end))))
    popped = after <= last
    nxt = np.minimum(after, n - 1)
    overlaps = int(np.count_nonzero(popped & (starts[nxt] < ends)))
    return parent, depth, overlaps


def nest_halves(
    segment: np.ndarray, starts: np.ndarray, ends: np.ndarray, pool: Executor
) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`nest`, the two halves on two threads (NumPy releases the GIL), split where
    PyTorch's stack is empty: there no earlier event is the parent of a later one and no pop is
    a partial overlap, so the result is that of one run."""
    n = len(starts)
    cut = _root_cut(segment, starts, ends, n // 2) if n >= _HALVES_MIN else None
    if cut is None:
        return nest(segment, starts, ends)
    later = pool.submit(nest, segment[cut:], starts[cut:], ends[cut:])
    p0, d0, o0 = nest(segment[:cut], starts[:cut], ends[:cut])
    p1, d1, o1 = later.result()
    return np.concatenate([p0, np.where(p1 >= 0, p1 + cut, -1)]), np.concatenate([d0, d1]), o0 + o1


def nest_kept(
    segment: np.ndarray, starts: np.ndarray, ends: np.ndarray, keep: np.ndarray, pool: Executor
) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`nest_halves` of the ``keep`` events alone, as PyTorch nests them (it drops the
    others, ``_filter_name``, before the walk); each other event is a leaf under the last earlier
    kept event of its thread that contains it, and parents no event.

    Dropping an event changes the nesting of the rest only where it partially overlaps one: it
    would pop that event, so what follows it inside the popped one would not be its child.
    """
    if keep.all():
        return nest_halves(segment, starts, ends, pool)
    n = len(starts)
    kept = np.flatnonzero(keep)
    p_kept, d_kept, overlaps = nest_halves(segment[kept], starts[kept], ends[kept], pool)
    parent = np.full(n, -1, dtype=positions(n))
    parent[kept] = np.where(p_kept >= 0, kept[np.maximum(p_kept, 0)], -1)
    depth = np.zeros(n, dtype=np.int32)
    depth[kept] = d_kept
    dropped = np.flatnonzero(~keep)
    # the kept event just before each dropped one, on its thread; then up its ancestors (every
    # kept event between a kept event and its parent ends before the dropped one or inside the
    # skipped one, as in nest)
    before = np.searchsorted(kept, dropped) - 1
    cand = np.where(before >= 0, kept[np.maximum(before, 0)] if len(kept) else -1, -1)
    cand[(cand >= 0) & (segment[np.maximum(cand, 0)] != segment[dropped])] = -1
    need = ends[dropped] + (ends[dropped] == starts[dropped])
    todo = np.flatnonzero(cand >= 0)
    while len(todo):
        todo = todo[ends[cand[todo]] < need[todo]]
        cand[todo] = parent[cand[todo]]
        todo = todo[cand[todo] >= 0]
    parent[dropped] = cand
    depth[dropped] = np.where(cand >= 0, depth[np.maximum(cand, 0)] + 1, 0)
    return parent, depth, overlaps


def _root_cut(segment: np.ndarray, starts: np.ndarray, ends: np.ndarray, near: int) -> int | None:
    """The position closest to ``near`` (not 0) that starts a thread or starts when every earlier
    event of its thread has ended; None when there is none."""
    n = len(starts)
    bounds = np.flatnonzero(segment[1:] != segment[:-1]) + 1  # where each thread starts
    i = int(np.searchsorted(bounds, near, side="right"))
    a = int(bounds[i - 1]) if i else 0
    b = int(bounds[i]) if i < len(bounds) else n
    open_until = np.maximum.accumulate(ends[a:b])  # the latest end so far in near's thread
    inside = a + 1 + np.flatnonzero(starts[a + 1 : b] >= open_until[:-1])
    cuts = np.concatenate(([a, b], inside))
    cuts = cuts[(cuts > 0) & (cuts < n)]
    return int(cuts[np.argmin(np.abs(cuts - near))]) if len(cuts) else None


def _depths(parent: np.ndarray) -> np.ndarray:
    """Number of ancestors of each node (parents come before children), by pointer doubling."""
    depth = (parent >= 0).astype(np.int32)
    anc = parent.copy()
    live = np.flatnonzero(anc >= 0)
    while len(live):
        up = anc[live]
        depth[live] += depth[up]
        anc[live] = anc[up]
        live = live[anc[live] >= 0]
    return depth


def positions(n: int) -> type[np.signedinteger[Any]]:
    """The integer type of row positions among ``n`` rows: 32 bits where they fit (every trace
    that fits in memory), half the memory of NumPy's 64-bit default. The nesting holds a dozen
    arrays of positions at once: on a 530 MB trace (1.5 M events) ``derive``'s peak of live
    memory fell from 395 to 358-368 MiB with them."""
    return np.int32 if n < 2**31 else np.int64


def give_back_freed() -> None:
    """Hand the heap memory that freed NumPy arrays leave back to the system (glibc only).

    NumPy allocates with ``malloc``: glibc serves an array of a few MB from its heap once one
    of that size was freed (its mmap threshold follows the largest freed block), and keeps
    what is freed there. Deriving the frames of a 530 MB trace frees some hundred arrays of
    1.5-12 MB, so the process held 80 MiB of them on top of the frames (``ops``' peak; measured
    with ``malloc_trim``). Called between the steps that make and drop them; a few ms each.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, or None (another C library).

    Looked up among the symbols the interpreter has loaded: ``ctypes.util.find_library`` would
    run ``ldconfig`` in a child process, a fork of this one (whose memory a sampler of the
    process tree then counts twice)."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


def levels(rows: np.ndarray, depth: np.ndarray) -> list[np.ndarray]:
    """``rows`` grouped by ``depth``, deepest first (each group in the order of ``rows``)."""
    if not len(rows):
        return []
    key = -depth[rows]
    if key.min() > np.iinfo(np.int16).min:
        key = key.astype(np.int16)  # numpy sorts 16-bit integers by radix: 2-3x faster
    by_depth = rows[np.argsort(key, kind="stable")]
    return np.split(by_depth, np.flatnonzero(np.diff(depth[by_depth])) + 1)


def rows_of(ids: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Row of each ``keys`` value in ``ids`` (unique event ids), -1 when absent or null (-1)."""
    if not len(ids) or not len(keys):
        return np.full(len(keys), -1, dtype=np.int64)
    if ids.min() >= 0 and ids.max() < 4 * len(ids):  # event ids: positions in the trace
        row_at = np.full(int(ids.max()) + 2, -1, dtype=positions(len(ids)))  # last: not an id
        row_at[ids] = np.arange(len(ids), dtype=row_at.dtype)
        return row_at[np.where((keys >= 0) & (keys < len(row_at)), keys, -1)]
    order = np.argsort(ids, kind="stable")
    pos = np.searchsorted(ids[order], keys)
    pos = np.minimum(pos, len(ids) - 1)
    found = ids[order[pos]] == keys
    return np.where(found & (keys >= 0), order[pos], -1)


def climb(parent: np.ndarray, start: np.ndarray, skip: np.ndarray) -> np.ndarray:
    """From each ``start`` row, follow ``parent`` while the row is in ``skip`` (-1 ends)."""
    out = start.copy()
    while True:
        valid = np.flatnonzero(out >= 0)
        bad = valid[skip[out[valid]]]
        if not len(bad):
            return out
        out[bad] = parent[out[bad]]

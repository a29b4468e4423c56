"""Nesting against PyTorch's own stack walk, on random events.

``EventList._populate_cpu_children`` (torch/autograd/profiler_util.py) sorts each thread's events
by ``(start, -end)`` and keeps a stack: the top is popped while the new event starts at or after
its end or ends after it; what is left on top is the parent. :func:`nesting.nest` computes the same
with array operations, and :func:`nesting.nest_halves` in two halves on two threads.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nprof_report.parse import nesting

# (thread, start, duration): few distinct values, so ties, zero durations, shared ends and
# partial overlaps are common
_EVENTS = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 40), st.integers(0, 15)), min_size=1, max_size=80
)


def _stack_walk(events: list[tuple[int, int, int]]) -> tuple[list[int], list[int], int]:
    """PyTorch's walk: parent index (-1 at the top), depth, and the pops by an event that starts
    before the popped event's end (a partial overlap), for events given in sorted order."""
    parent, depth, overlaps = [-1] * len(events), [0] * len(events), 0
    stack: list[int] = []
    for i, (thread, start, end) in enumerate(events):
        if stack and events[stack[-1]][0] != thread:
            stack = []
        while stack:
            top = stack[-1]
            if start >= events[top][2] or end > events[top][2]:
                overlaps += start < events[top][2]
                stack.pop()
            else:
                parent[i], depth[i] = top, depth[top] + 1
                break
        stack.append(i)
    return parent, depth, overlaps


def _sorted(raw: list[tuple[int, int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    seg = np.array([t for t, _, _ in raw], dtype=np.int64)
    starts = np.array([s for _, s, _ in raw], dtype=np.int64)
    ends = starts + np.array([d for _, _, d in raw], dtype=np.int64)
    order = np.lexsort((-ends, starts, seg))  # stable: ties keep their order, as Python's sort
    return seg[order], starts[order], ends[order]


def _expected(seg: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[list[int], ...]:
    parent, depth, overlaps = _stack_walk(list(zip(seg.tolist(), starts.tolist(), ends.tolist())))
    return parent, depth, [overlaps]


@settings(max_examples=300, deadline=None)
@given(_EVENTS)
def test_nest_is_pytorchs_stack_walk(raw: list[tuple[int, int, int]]) -> None:
    seg, starts, ends = _sorted(raw)
    parent, depth, overlaps = nesting.nest(seg, starts, ends)
    assert (parent.tolist(), depth.tolist(), [overlaps]) == _expected(seg, starts, ends)


@settings(max_examples=300, deadline=None)
@given(_EVENTS)
def test_nest_in_halves_is_one_run(raw: list[tuple[int, int, int]]) -> None:
    seg, starts, ends = _sorted(raw)
    with ThreadPoolExecutor(1) as pool, pytest.MonkeyPatch.context() as mp:
        mp.setattr(nesting, "_HALVES_MIN", 0)
        parent, depth, overlaps = nesting.nest_halves(seg, starts, ends, pool)
    assert (parent.tolist(), depth.tolist(), [overlaps]) == _expected(seg, starts, ends)


def test_root_cut_is_where_the_stack_is_empty() -> None:
    # thread 0: [0, 10) holds [2, 5); [10, 12) starts when everything before it has ended
    seg = np.array([0, 0, 0, 1, 1])
    starts = np.array([0, 2, 10, 0, 1])
    ends = np.array([10, 5, 12, 3, 2])
    assert nesting._root_cut(seg, starts, ends, 1) == 2
    assert nesting._root_cut(seg, starts, ends, 4) == 3  # a thread's first event is a cut too
    assert nesting._root_cut(np.zeros(2), np.array([0, 1]), np.array([5, 2]), 1) is None


@settings(max_examples=300, deadline=None)
@given(_EVENTS, st.lists(st.booleans(), min_size=80, max_size=80))
def test_nest_kept_walks_the_kept_events_alone(
    raw: list[tuple[int, int, int]], drop: list[bool]
) -> None:
    """PyTorch drops filtered names before its walk: the kept events nest as if the others were
    absent, and each other event hangs under the last earlier kept event of its thread that
    contains it (a leaf)."""
    seg, starts, ends = _sorted(raw)
    keep = ~np.array(drop[: len(raw)])
    with ThreadPoolExecutor(1) as pool:
        parent, depth, overlaps = nesting.nest_kept(seg, starts, ends, keep, pool)
    kept = np.flatnonzero(keep)
    k_parent, k_depth, k_overlaps = _expected(seg[kept], starts[kept], ends[kept])
    assert [overlaps] == k_overlaps
    assert parent[kept].tolist() == [kept[p] if p >= 0 else -1 for p in k_parent]
    assert depth[kept].tolist() == k_depth
    for i in np.flatnonzero(~keep):
        inside = [
            j
            for j in kept[kept < i]
            if seg[j] == seg[i] and starts[i] < ends[j] and ends[i] <= ends[j]
        ]
        assert parent[i] == (inside[-1] if inside else -1)
        assert depth[i] == (depth[inside[-1]] + 1 if inside else 0)
        assert i not in parent


def test_give_back_freed_starts_no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Handing freed memory back looks ``malloc_trim`` up without a child process: a fork of
    ``ops``' parent would count as a second copy of it in a process-tree memory sampler."""
    import subprocess

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a process was started")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    nesting._malloc_trim.cache_clear()
    nesting.give_back_freed()

"""Host breakdown, device gaps, timelines and op chains."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nprof_report.errors import InputError
from nprof_report.parse import LoadedSource, Source, load_source, resolve
from nprof_report.parse.frames import load_frames
from nprof_report.report.figures.analyses import analyse
from nprof_report.report.figures.breakdown import (
    GAP_CAUSES,
    Busy,
    device_gaps,
    merge_intervals,
    merged_columns,
    op_context,
)
from tests.conftest import NEURON, NEURON_TREES, PUBLIC, PUBLIC_TRACES


def test_merge_intervals() -> None:
    assert merge_intervals([(5, 7), (0, 2), (1, 3), (7, 9)]) == [(0, 3), (5, 9)]
    assert merge_intervals([]) == []


@pytest.mark.parametrize("key", ["rocm", "triton", "cpu"])
def test_host_breakdown_adds_up_to_the_step(key: str) -> None:
    a = analyse(load_source(resolve(PUBLIC_TRACES[key]).sources[0]))
    parts = ["host_framework_ns", "host_runtime_ns", "host_sync_ns", "host_outside_ns"]
    total = a.steps.select(pl.sum_horizontal(parts)).to_series()
    assert (total == a.steps["dur_ns"]).all()
    with_ops = a.steps.filter(pl.col("top_ops") > 0)
    assert (with_ops["host_framework_ns"] > 0).all()


def test_rocm_launches_are_runtime_time_inside_ops() -> None:
    a = analyse(load_source(resolve(PUBLIC_TRACES["rocm"]).sources[0]))
    step1 = a.steps.filter(pl.col("step") == 1).row(0, named=True)
    assert step1["host_runtime_ns"] > 0  # hipLaunchKernel and friends, nested in ops


def test_device_gaps_cover_the_step_outside_device_work() -> None:
    a = analyse(load_source(resolve(PUBLIC_TRACES["rocm"]).sources[0]))
    assert a.gaps.height > 0
    assert set(a.gaps["cause"].to_list()) <= set(GAP_CAUSES)
    step = a.steps.filter(pl.col("step") == 1).row(0, named=True)
    gap_total = int(a.gaps.filter(pl.col("step") == 1)["dur_ns"].sum())
    # gaps + merged busy time inside the step = step duration
    from nprof_report.parse.frames import load_frames

    frames = load_frames(PUBLIC_TRACES["rocm"])
    s0 = frames.steps.filter(pl.col("step") == 1)["start_ns"][0]
    e0 = s0 + step["dur_ns"]
    busy = merge_intervals(
        [
            (max(s, s0), min(e, e0))
            for s, e in zip(frames.device["start_ns"], frames.device["end_ns"])
            if e > s0 and s < e0
        ]
    )
    assert gap_total + sum(e - s for s, e in busy) == step["dur_ns"]


def test_gap_cause_synchronization_when_host_waits_outside_ops() -> None:
    ops = pl.DataFrame(
        {
            "event_id": [0, 1, 2, 3],
            "cls": ["annotation", "op", "runtime", "runtime"],
            "name": ["ProfilerStep#3", "aten::mul", "launch", "sync"],
            "thread": ["t"] * 4,
            "start_ns": [0, 10, 12, 40],
            "end_ns": [100, 30, 20, 90],
            "dur_ns": [100, 20, 8, 50],
            "self_ns": [30, 12, 8, 50],
            "parent_id": [None, 0, 1, 0],
            "depth": [0, 1, 2, 1],
            "step": [3, 3, 3, 3],
        },
        schema_overrides={
            "parent_id": pl.Int64,
            "depth": pl.Int32,
            "step": pl.Int32,
            **dict.fromkeys(["cls", "name", "thread"], pl.Categorical()),  # as in OPS
        },
    )
    ctx = op_context(ops)
    steps = pl.DataFrame(
        {"step": [3], "start_ns": [0], "end_ns": [100]}, schema_overrides={"step": pl.Int32}
    )
    gaps = device_gaps(ctx, steps, busy=Busy.of([(20, 35), (90, 95)]), copies=[], loads=[])
    assert gaps.select("start_ns", "dur_ns", "cause").rows() == [
        (0, 20, "host dispatch"),
        (35, 55, "synchronization"),
        (95, 5, "host outside ops"),
    ]


def test_neuron_chain_and_timeline() -> None:
    a = analyse(load_source(resolve(NEURON / "eager_naive").sources[0]))
    expected = NEURON_TREES["eager_naive"]
    chain = {c["op"]: c for c in a.chains}
    mean = chain["aten::mean"]
    assert mean["device_us_per_call"] == pytest.approx(
        expected["device_ns_by_op"]["aten::mean"] / 1000 / mean["calls"], abs=1e-3
    )
    assert "Neuron hardware execution" in str(mean["device"])
    lanes = {b["lane"] for b in a.timeline}
    assert {"framework L0", "runtime", "device"} <= lanes
    assert any("CONSTRUCTED" in n for n in a.notes)


# --- the host breakdown is exclusive (issue 27, part 4) ---------------------------------------

HOST_PARTS = ["host_framework_ns", "host_runtime_ns", "host_sync_ns", "host_outside_ns"]


def _all_sources() -> list[Any]:
    """Every public trace and every source of every constructed Neuron tree."""
    paths = sorted(p for p in PUBLIC.iterdir() if p.name != "SOURCES.md")
    trees = sorted({p.parent for p in NEURON.rglob("*") if p.is_file() and p.name.endswith("json")})
    sources = [s for p in paths for s in resolve(p).sources]
    for tree in trees:
        with contextlib.suppress(InputError):
            sources += [s for s in resolve(tree).sources if s.trace is not None]
    return sources


@pytest.mark.parametrize("source", _all_sources(), ids=lambda s: str(s.trace))
def test_every_part_of_every_fixtures_steps_is_a_share_of_the_step(source: Any) -> None:
    a = analyse(load_source(source))
    parts = a.steps.select(HOST_PARTS)
    assert (parts.min_horizontal() >= 0).all(), a.steps
    total = a.steps.select(pl.sum_horizontal(HOST_PARTS)).to_series()
    assert (total == a.steps["dur_ns"]).all(), a.steps


def test_runtime_calls_that_outlast_their_op_are_counted_once() -> None:
    """fixtures/neuron/eager_naive: the privateuse1_runtime calls outlast aten::add and
    aten::rsqrt, which made them; 'outside ops' came out -39 µs when self times were summed."""
    a = analyse(load_source(resolve(NEURON / "eager_naive").sources[0]))
    for row in a.steps.iter_rows(named=True):
        assert row["host_outside_ns"] >= 0
        assert sum(row[p] for p in HOST_PARTS) == row["dur_ns"]
        # what the runtime calls cover is theirs once: 6 calls of 40 µs, less the instants a
        # later op (started after the call) covers
        assert row["host_runtime_ns"] + row["host_sync_ns"] <= 6 * 40_000


def _innermost_oracle(events: list[tuple[int, int, str, bool]], s0: int, e0: int) -> dict[str, int]:
    """Instant by instant (µs): the part of the innermost event covering it, the one started last
    (of two started together, the shorter; of equal ones, the later in file order)."""
    out = dict.fromkeys(("framework", "runtime", "sync", "outside"), 0)
    for t in range(s0, e0):
        covering = [
            (start, -end, k, kind, launch)
            for k, (start, end, kind, launch) in enumerate(events)
            if start <= t < end
        ]
        if not covering:
            out["outside"] += 1
            continue
        *_, kind, launch = max(covering)
        out["framework" if kind != "runtime" else ("runtime" if launch else "sync")] += 1
    return out


_event = st.tuples(
    st.integers(0, 60),  # start, µs into the step
    st.integers(1, 70),  # duration: it may run past the step's end
    st.sampled_from(["cpu_op", "cuda_runtime", "user_annotation", "python_function"]),
)


@settings(max_examples=60, deadline=None)
@given(events=st.lists(_event, min_size=0, max_size=12))
def test_random_overlapping_host_events_split_the_step_exactly(
    events: list[tuple[int, int, str]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Random host events on the step's thread, nested, partially overlapping, equal, running past
    the step: through the whole parse and analysis, each instant of the step goes to the part of
    its innermost event (an oracle over every microsecond), none negative, adding up."""
    step_us = 50
    trace_events: list[dict[str, Any]] = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 1,
            "ts": 1000,
            "dur": step_us,
        },
    ]
    for k, (start, dur, cat) in enumerate(events):
        trace_events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": f"e{k}",
                "pid": 1,
                "tid": 1,
                "ts": 1000 + start,
                "dur": dur,
            }
        )
    # one top-level op, so that the step's thread is this one
    trace_events.append(
        {"ph": "X", "cat": "cpu_op", "name": "anchor", "pid": 1, "tid": 1, "ts": 1000, "dur": 1}
    )
    path = tmp_path_factory.mktemp("bd") / "trace.json"
    path.write_text(json.dumps({"traceEvents": trace_events}))
    frames = load_frames(path)
    a = analyse(LoadedSource(Source("t", path, path.parent), frames))
    ctx = op_context(frames.ops, frames.links)
    launch = dict(zip(ctx["event_id"].to_list(), ctx["launch"].to_list()))
    ops = frames.ops.filter(pl.col("name") != "ProfilerStep#1").sort("event_id")
    oracle = _innermost_oracle(
        [
            ((s - 1_000_000) // 1000, (e - 1_000_000) // 1000, c, launch[i])
            for i, s, e, c in zip(
                ops["event_id"], ops["start_ns"], ops["end_ns"], ops["cls"].cast(pl.String)
            )
            if s < 1_000_000 + step_us * 1000  # events starting after the step are not in it
        ],
        0,
        step_us,
    )
    row = a.steps.row(0, named=True)
    got = {p: row[f"host_{p}_ns"] // 1000 for p in ("framework", "runtime", "sync", "outside")}
    assert got == oracle
    assert sum(row[p] for p in HOST_PARTS) == row["dur_ns"] == step_us * 1000


@given(
    st.lists(
        st.tuples(st.integers(0, 10**6), st.integers(0, 10**4)).map(lambda p: (p[0], p[0] + p[1])),
        max_size=60,
    )
)
def test_merged_columns_is_the_union_merge_intervals_gives(
    intervals: list[tuple[int, int]],
) -> None:
    """The NumPy merge of the device's busy intervals (issue 32) against the reference loop."""
    starts = pl.Series([s for s, _ in intervals], dtype=pl.Int64)
    ends = pl.Series([e for _, e in intervals], dtype=pl.Int64)
    busy = merged_columns(starts, ends)
    assert list(zip(busy.starts.tolist(), busy.ends.tolist())) == merge_intervals(intervals)
    for s0, e0 in intervals[:5]:  # what reaches into a span, by bisection, as a scan finds it
        assert busy.overlapping(s0, e0 + 1) == [
            (s, e) for s, e in merge_intervals(intervals) if e > s0 and s < e0 + 1
        ]

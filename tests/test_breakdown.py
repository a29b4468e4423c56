"""Host breakdown, device gaps, timelines and op chains."""

from __future__ import annotations

import polars as pl
import pytest

from nprof_report.parse import load_source, resolve
from nprof_report.report.figures.analyses import analyse
from nprof_report.report.figures.breakdown import (
    GAP_CAUSES,
    device_gaps,
    merge_intervals,
    op_context,
)
from tests.conftest import NEURON, NEURON_TREES, PUBLIC_TRACES


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
    gaps = device_gaps(ctx, steps, busy=[(20, 35), (90, 95)], copies=[], loads=[])
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

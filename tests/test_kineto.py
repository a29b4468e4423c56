"""Nesting, steps and links on the public CUDA and ROCm traces."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from nprof_report.parse.frames import load_frames
from nprof_report.parse.keyavg import key_averages
from tests.conftest import PUBLIC_TRACES


def _kernels_by_external_id(path: str) -> dict[int, float]:
    """Independent oracle: device durations per External id, straight from the JSON."""
    out: dict[int, float] = {}
    for e in json.loads(Path(path).read_text())["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            ext = e.get("args", {}).get("External id")
            if ext is not None:
                out[ext] = out.get(ext, 0.0) + e["dur"]
    return out


def test_rocm_links_by_external_id_and_correlation() -> None:
    frames = load_frames(PUBLIC_TRACES["rocm"])
    counts = {
        (r["kind"], r["method"]): r["len"]
        for r in frames.links.group_by("kind", "method").len().to_dicts()
    }
    assert counts[("op->runtime", "external_id")] == 20
    assert counts[("runtime->device", "correlation")] == 16
    # every op->device link points at the scope whose External id the device event carries:
    # 16 kernels and copies, and the 2 GPU user annotations on their CPU annotations
    ext = dict(zip(frames.ops["event_id"].to_list(), frames.ops["external_id"].to_list()))
    dev_ext = dict(zip(frames.device["event_id"].to_list(), frames.device["external_id"].to_list()))
    links = frames.links.filter(pl.col("kind") == "op->device")
    assert links.height == 18
    for src, dst in zip(links["src_id"].to_list(), links["dst_id"].to_list()):
        assert ext[src] == dev_ext[dst]


def test_rocm_device_time_matches_kernels_of_each_op() -> None:
    frames = load_frames(PUBLIC_TRACES["rocm"])
    oracle = _kernels_by_external_id(str(PUBLIC_TRACES["rocm"]))
    table = key_averages(frames).filter(pl.col("device_type") == "CPU")
    addmm = table.filter(pl.col("name") == "aten::addmm").row(0, named=True)
    addmm_ext = frames.ops.filter(pl.col("name") == "aten::addmm")["external_id"].to_list()
    assert addmm["self_device_us"] == sum(oracle.get(e, 0.0) for e in addmm_ext)
    assert addmm["self_device_us"] > 0


def test_old_layout_links_runtime_by_enclosing_op() -> None:
    frames = load_frames(PUBLIC_TRACES["cuda2023"])
    methods = frames.links.filter(pl.col("kind") == "op->runtime")["method"].unique().to_list()
    assert methods == ["enclosing"]
    ops = frames.ops.select("event_id", "start_ns", "end_ns", "pid", "tid")
    links = frames.links.filter(pl.col("kind") == "op->runtime")
    joined = links.join(ops, left_on="src_id", right_on="event_id").join(
        ops, left_on="dst_id", right_on="event_id", suffix="_rt"
    )
    assert joined.height == links.height > 300
    assert (joined["start_ns"] <= joined["start_ns_rt"]).all()
    assert (joined["end_ns_rt"] <= joined["end_ns"]).all()
    assert (joined["tid"] == joined["tid_rt"]).all()
    table = key_averages(frames)
    assert table.filter(pl.col("device_type") == "CPU")["device_total_us"].max() > 0


def test_steps_assigned_by_time_even_across_pids() -> None:
    # formats.md 1.4: ProfilerStep#1 sits on another pid than the ops in this trace.
    frames = load_frames(PUBLIC_TRACES["triton"])
    assert frames.steps["step"].to_list() == [1]
    compiled = frames.ops.filter(pl.col("name") == "Torch-Compiled Region: 0/0")
    assert compiled["step"].to_list() == [1]
    assert frames.device["step"].to_list() == [1]


def test_self_time_is_duration_minus_children() -> None:
    frames = load_frames(PUBLIC_TRACES["rocm"])
    ops = frames.ops
    children = ops.group_by("parent_id").agg(pl.col("dur_ns").sum().alias("child"))
    check = ops.join(children, left_on="event_id", right_on="parent_id", how="left").fill_null(0)
    assert (check["self_ns"] == check["dur_ns"] - check["child"]).all()
    assert (check["self_ns"] >= 0).all()

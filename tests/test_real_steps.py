"""Steps for every trace (issue 27, part 1; parse/steps.py, RULES.md §8): a trace without
``ProfilerStep#N`` gets the instances of its repeating top-level user annotation, else its whole
window, as steps; ``--step-annotation`` picks one by hand; the report, the comparisons, ``diff``,
``check``, the cross-rank section and ``ops --by-rank`` work on those steps, and say "one step:
no spread" where one step gives no spread.

The job of ranks is CONSTRUCTED: copies of the public HTA benchmark trace (no steps), one
stretched by 15 % (tests/trace_transforms.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

from nprof_report.cli import cli
from nprof_report.parse import load_source, resolve
from nprof_report.parse.frames import load_frames
from nprof_report.parse.steps import with_steps
from nprof_report.report.build import summarise_inputs
from nprof_report.report.diff.command import check_regression, compare
from nprof_report.report.figures import ONE_STEP, analyse
from nprof_report.report.jobs import Engine
from nprof_report.report.view.model import build_model
from nprof_report.report.view.render import render_html
from tests.conftest import PUBLIC, PUBLIC_TRACES, foreign_lines
from tests.trace_transforms import load, rank_job, stretch, write

SIMPLE_ADD = PUBLIC_TRACES["cuda2023"]  # HTA's benchmark trace: annotations, no ProfilerStep#N
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "cuda_sync"}
EXE = Path(sys.executable).with_name("nprof-report")


def _summary(*paths: Path, **engine: Any) -> dict[str, Any]:
    return summarise_inputs(list(paths), Engine(jobs=1, **engine))[1]


def _top_level_ops(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Independent of the parser: cpu_op events that no other cpu_op of their thread contains
    (of two equal ones, the first in the file contains the second)."""
    ops = [(k, e) for k, e in enumerate(events) if e.get("cat") == "cpu_op" and "dur" in e]
    out = []
    for k, e in ops:
        s, t = e["ts"], e["ts"] + e["dur"]
        inside = any(
            j != k
            and f["tid"] == e["tid"]
            and f["pid"] == e["pid"]
            and f["ts"] <= s
            and t <= f["ts"] + f["dur"]
            and (f["ts"], -f["dur"], j) < (s, -e["dur"], k)
            for j, f in ops
        )
        if not inside:
            out.append(e)
    return out


# --- one trace -------------------------------------------------------------------------------


def test_a_trace_without_steps_is_one_step_with_a_headline() -> None:
    """The HTA benchmark trace: 359 ops and 139 device activities, no ProfilerStep#N, no
    annotation repeating at the top: the headline per iteration is the whole window's, checked
    against the raw JSON."""
    events = load(SIMPLE_ADD)["traceEvents"]
    summary = _summary(SIMPLE_ADD)
    impl = summary["implementations"][0]
    assert impl["step_rule"] == "window"
    head = impl["headline"]
    assert head["steps"] == 1
    tops = _top_level_ops(events)
    assert head["framework_ops_per_step"] == len(tops) > 0
    assert head["dispatch_per_step_us"] == pytest.approx(sum(e["dur"] for e in tops))
    device = [e for e in events if e.get("cat") in DEVICE_CATS]
    assert len(device) == 139
    assert head["device_per_step_us"] == pytest.approx(sum(e["dur"] for e in device))
    timed = [e for e in events if e.get("ph") == "X" and e.get("cat") not in (None, "Trace")]
    window = max(e["ts"] + e["dur"] for e in timed) - min(e["ts"] for e in timed)
    assert head["step_median_us"] == window
    assert any("(step rule: window" in c for c in summary["caveats"])
    model = build_model(summary)
    assert "No step timings" not in model.verdict
    assert any("Step rule" in term for term, _ in model.glossary)
    assert "whole profiled window is one step" in model.sections[0].description


def _annotated_trace(path: Path, *, iterations: int = 4, wrapper: bool = True) -> Path:
    """CONSTRUCTED: a loop of ``iterations`` record_function("iteration") scopes, each holding a
    forward scope (two ops) and PyTorch's Optimizer.step annotation (one op), inside a
    "train" scope that occurs once; Optimizer.zero_grad at the top between iterations, and a
    helper thread whose own annotation repeats but holds no op."""
    events: list[dict[str, Any]] = []

    def x(cat: str, name: str, ts: float, dur: float, tid: int = 1) -> None:
        events.append(
            {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}
        )

    t = 1000.0
    if wrapper:
        x("user_annotation", "train", t, 200.0 * iterations + 10)
    for i in range(iterations):
        t0 = t + 5 + 200 * i
        x("user_annotation", "Optimizer.zero_grad#SGD.zero_grad", t0, 10)
        x("cpu_op", "aten::zero_", t0 + 1, 5)
        x("user_annotation", "iteration", t0 + 20, 150 + 10 * i)
        x("user_annotation", "forward", t0 + 25, 80)
        x("cpu_op", "aten::mm", t0 + 30, 30)
        x("cpu_op", "aten::relu", t0 + 70, 20)
        x("user_annotation", "Optimizer.step#SGD.step", t0 + 110, 30)
        x("cpu_op", "aten::add_", t0 + 115, 10)
        x("user_annotation", "prefetch", t0 + 30, 50, tid=2)
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_the_annotation_that_repeats_at_the_top_is_the_step(tmp_path: Path) -> None:
    trace = _annotated_trace(tmp_path / "loop.json")
    impl = _summary(trace)["implementations"][0]
    assert impl["step_rule"] == "annotation:iteration"
    assert [s["dur_us"] for s in impl["steps"]] == [150.0, 160.0, 170.0, 180.0]
    assert [s["step"] for s in impl["steps"]] == [1, 2, 3, 4]
    assert {s["top_ops"] for s in impl["steps"]} == {3}  # mm, relu, add_: not zero_
    assert impl["headline"]["framework_ops_per_step"] == 3
    # without the wrapper the iterations are at the top themselves
    bare = _annotated_trace(tmp_path / "bare.json", wrapper=False)
    assert _summary(bare)["implementations"][0]["step_rule"] == "annotation:iteration"


def test_pytorchs_own_annotations_are_never_the_step(tmp_path: Path) -> None:
    """Optimizer.step repeats at the top and holds ops, but marks part of an iteration."""
    events = [
        {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}
        for i in range(3)
        for cat, name, ts, dur in (
            ("user_annotation", "Optimizer.step#SGD.step", 100 * i, 30),
            ("cpu_op", "aten::add_", 100 * i + 5, 10),
            ("cpu_op", "aten::mm", 100 * i + 40, 30),
        )
    ]
    trace = tmp_path / "opt.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    assert _summary(trace)["implementations"][0]["step_rule"] == "window"


def test_step_annotation_picks_the_steps_by_hand(tmp_path: Path) -> None:
    trace = _annotated_trace(tmp_path / "loop.json")
    impl = _summary(trace, step_annotation="forward")["implementations"][0]
    assert impl["step_rule"] == "annotation:forward"
    assert [s["dur_us"] for s in impl["steps"]] == [80.0] * 4
    # in a trace with ProfilerStep#N too: the gloo trace's collectives, 5 on each of two threads
    gloo = PUBLIC_TRACES["cpu"]
    frames = with_steps(load_frames(gloo), "gloo:all_reduce")
    assert frames.step_rule == "annotation:gloo:all_reduce"
    assert frames.steps.height == 5
    assert any("picked by --step-annotation" in n for n in frames.notes)


def test_step_annotation_on_the_command_line(tmp_path: Path) -> None:
    trace = _annotated_trace(tmp_path / "loop.json")
    out = tmp_path / "report"
    runner = CliRunner()
    result = runner.invoke(
        cli, ["build", str(trace), "--out", str(out), "--step-annotation", "forward", "--no-cache"]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["implementations"][0]["step_rule"] == "annotation:forward"
    missing = subprocess.run(
        [
            sys.executable,
            "-m",
            "nprof_report",
            "ops",
            str(trace),
            "--no-cache",
            "--step-annotation",
            "nope",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode == 2
    [line] = missing.stderr.splitlines()  # one line naming the file, the problem and a hint
    assert line.startswith(f"nprof-report: error: {trace}: holds no user annotation named 'nope'")
    assert "'iteration' (4×)" in line


def test_profiler_steps_written_as_ops_in_2021_are_steps() -> None:
    """The 2021 layout records ProfilerStep#N as an ``Operator``: they are the steps, and the
    report does not count them as ops (ops still does, as PyTorch does)."""
    loaded = load_source(resolve(PUBLIC / "kineto-cuda-2021-resnet50-tbplugin.json.gz").sources[0])
    assert loaded.frames.step_rule == "ProfilerStep"
    assert loaded.frames.steps["step"].to_list() == [16, 17, 18, 19, 20, 21]
    a = analyse(loaded)
    assert (a.steps["top_ops"] > 100).all()  # not 1: the ops are not nested in the step's op
    assert not a.key_averages.filter(pl.col("name") == "ProfilerStep*").is_empty()


@pytest.mark.capture
def test_a_real_capture_without_a_schedule_finds_its_iterations(tmp_path: Path) -> None:
    """``with torch.profiler.profile(): ...`` around a loop of record_function scopes, on this
    machine's CPU."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    x = torch.randn(32, 32)
    with profile(activities=[ProfilerActivity.CPU]) as prof, record_function("train"):
        for _ in range(3):
            with record_function("iteration"):
                (x @ x).relu().sum()
    trace = tmp_path / "capture.pt.trace.json"
    prof.export_chrome_trace(str(trace))
    impl = _summary(trace)["implementations"][0]
    assert impl["step_rule"] == "annotation:iteration"
    assert impl["headline"]["steps"] == 3
    assert impl["headline"]["framework_ops_per_step"] == 3  # mm, relu, sum


# --- one step: no spread ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stretched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The benchmark trace with every duration and gap 15 % longer (CONSTRUCTED)."""
    path = tmp_path_factory.mktemp("stretched") / "simple-add-slower.json"
    return write(stretch(load(SIMPLE_ADD), 1.15), path)


def test_stretch_makes_every_duration_and_gap_longer(stretched: Path) -> None:
    before = [e for e in load(SIMPLE_ADD)["traceEvents"] if "ts" in e]
    after = [e for e in load(stretched)["traceEvents"] if "ts" in e]
    t0, u0 = before[0]["ts"], after[0]["ts"]
    for b, a in zip(before, after):
        assert a["name"] == b["name"]
        assert a["ts"] - u0 == pytest.approx(1.15 * (b["ts"] - t0), abs=1)
        if "dur" in b:
            assert a["dur"] == pytest.approx(1.15 * b["dur"], abs=1)


def test_one_step_gives_no_noise_verdict(stretched: Path, tmp_path: Path) -> None:
    summary = _summary(stretched, SIMPLE_ADD)  # the baseline is the slower one
    comp = summary["comparisons"][0]
    assert comp["step_spread"] == ONE_STEP
    assert comp["step_exceeds_noise"] is None
    assert comp["step_ratio"] == pytest.approx(1 / 1.15, abs=1e-3)
    rules = {f["rule"] for f in summary["findings"]}
    assert not rules & {"step-time-difference", "step-time-within-noise"}
    model = build_model(summary)
    assert f"{ONE_STEP}, so no noise verdict" in model.verdict
    assert ONE_STEP in render_html(model)
    doc = compare(SIMPLE_ADD, stretched, jobs=1)
    pair = doc["pairs"][0]
    assert ONE_STEP in pair["verdict"]
    assert pair["metrics"]["step"]["spread"] == ONE_STEP
    assert (pair["base_step_rule"], pair["new_step_rule"]) == ("window", "window")
    # one baseline: time is advice (a note), unless --strict-time makes it decide
    for strict in (False, True):
        gate = check_regression(
            stretched,
            [SIMPLE_ADD],
            max_regression_pct=5.0,
            metrics=["step"],
            ops=[],
            jobs=1,
            strict_time=strict,
        )
        lines = gate.failures if strict else gate.notes
        assert [ln for ln in lines if "step time" in ln and ONE_STEP in ln], (gate, strict)


# --- a job of ranks without steps -------------------------------------------------------------


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """8 ranks copied from the benchmark trace; rank 5 stretched by 15 % (CONSTRUCTED)."""
    return rank_job(SIMPLE_ADD, tmp_path_factory.mktemp("job") / "ranks", 8, slow=5)


@pytest.fixture(scope="module")
def job_summary(job: Path) -> dict[str, Any]:
    return _summary(job)


def test_the_stretched_rank_is_named_with_the_parts_of_its_step(
    job_summary: dict[str, Any],
) -> None:
    ranks = job_summary["ranks"]
    assert ranks["step_rules"] == ["window"]
    assert ranks["steps"] == [1]
    assert all(row[0] is not None for row in ranks["step_time_us"])
    [slow] = ranks["stragglers"]
    assert slow["rank"] == 5
    assert slow["slower_pct"] == pytest.approx(15.0, abs=0.1)
    parts = {p["part"]: p for p in slow["parts"]}
    dispatch = parts["host dispatch"]
    assert dispatch["rank_us"] == pytest.approx(1.15 * dispatch["others_us"], rel=1e-3)
    device = parts["device compute"]
    assert device["rank_us"] == pytest.approx(1.15 * device["others_us"], rel=1e-3)
    assert "host dispatch takes" in slow["evidence"]
    assert any(f["rule"] == "straggler-rank" for f in job_summary["findings"])
    rows = {r["rank"]: r for r in ranks["ranks"]}
    assert rows[0]["dispatch_median_us"] and rows[0]["device_median_us"]


def test_the_cross_rank_section_of_one_step_draws_without_warnings(
    job_summary: dict[str, Any],
) -> None:
    """pytest turns every warning into an error here (pyproject's filterwarnings)."""
    model = build_model(job_summary)
    assert model.ranks is not None
    assert "whole profiled window is one step" in model.ranks.intro
    html = render_html(model)
    assert "rank 5 is 15 % slower per step" in html


def test_ops_by_rank_works_on_the_window_steps(job: Path) -> None:
    result = CliRunner().invoke(cli, ["ops", str(job), "--by-rank", "--no-cache"])
    assert result.exit_code == 0, result.output
    assert "steps by the rule window" in result.output
    assert "rank 5 is 15 % slower per step" in result.output


@pytest.mark.slow
def test_ray_local_gives_the_local_pools_summary(job: Path, tmp_path: Path) -> None:
    """``build --ray local`` against the local pool, as a user runs them, each with its own
    cache: the same summary.json."""
    pytest.importorskip("ray")
    env = {**os.environ, "NPROF_CACHE_DIR": str(tmp_path / "cache-local")}
    local = subprocess.run(
        [str(EXE), "build", str(job), "--out", str(tmp_path / "local"), "--jobs", "2"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert local.returncode == 0, local.stderr
    env["NPROF_CACHE_DIR"] = str(tmp_path / "cache-ray")
    on_ray = subprocess.run(
        [
            str(EXE),
            "build",
            str(job),
            "--out",
            str(tmp_path / "ray"),
            "--ray",
            "local",
            "--jobs",
            "2",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert on_ray.returncode == 0, on_ray.stderr
    assert foreign_lines(on_ray.stderr) == []  # Ray started quietly: no token banner
    a = json.loads((tmp_path / "local" / "summary.json").read_text())
    b = json.loads((tmp_path / "ray" / "summary.json").read_text())
    assert a == b
    assert [s["rank"] for s in b["ranks"]["stragglers"]] == [5]


def test_repeated_profiler_step_numbers_are_renumbered_in_time_order(tmp_path: Path) -> None:
    """Three profiler sessions in one file (the public CPU trace thrice, each copy shifted past
    the previous one's end): ``ProfilerStep#N`` numbers repeat, and a step number is a key
    everywhere, so the steps are 1, 2, ... in time order, each op in the one whose interval
    holds its start."""
    doc = load(PUBLIC_TRACES["cpu"])
    timed = [isinstance(e.get("ts"), int | float) for e in doc["traceEvents"]]
    ends = [e["ts"] + e.get("dur", 0) for e, t in zip(doc["traceEvents"], timed) if t]
    starts = [e["ts"] for e, t in zip(doc["traceEvents"], timed) if t]
    shift = max(ends) - min(starts) + 1000
    copies = [
        dict(e, ts=e["ts"] + k * shift) if t else e
        for k in range(3)
        for e, t in zip(doc["traceEvents"], timed)
    ]
    twice = write(dict(doc, traceEvents=copies), tmp_path / "thrice.json")
    annotations = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in copies
        if e.get("cat") == "user_annotation" and str(e.get("name")).startswith("ProfilerStep#")
    )
    assert len(set(annotations)) == len(annotations) >= 3

    frames = load_frames(twice)
    assert frames.steps["step"].to_list() == list(range(1, len(annotations) + 1))
    assert any("ProfilerStep#N annotations carry" in n for n in frames.notes)
    # independent of the parser: the number of the last annotation starting at or before an
    # op's start, when the op starts before that annotation's end
    ops = frames.ops.filter(pl.col("cls") == "op").select("start_ns", "step")
    base_ns = frames.steps["start_ns"][0] - round(annotations[0][0] * 1000)
    for start_ns, step in ops.sample(min(400, ops.height), seed=1).iter_rows():
        us = (start_ns - base_ns) / 1000
        held = [k for k, (s, e) in enumerate(annotations, 1) if s <= us < e]
        assert step == (held[-1] if held else None)
    summary = _summary(twice)
    impl = summary["implementations"][0]
    assert [r["step"] for r in impl["steps"]] == sorted({r["step"] for r in impl["steps"]})
    assert len(impl["steps"]) <= len(annotations)

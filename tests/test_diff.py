"""``diff`` and ``check``: planted differences found exactly, noise passed, real captures compared.

The planted pairs are CONSTRUCTED traces (tests/diff_traces.py); the CPU pairs are real captures.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import random
import re
import statistics
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nprof_report.errors import InputError
from nprof_report.report.diff import stats as diff_stats
from nprof_report.report.diff.check import check, parse_threshold
from nprof_report.report.diff.command import check_regression, compare, diff_report
from nprof_report.report.diff.compare import diff_document
from nprof_report.report.diff.inputs import load_side
from nprof_report.report.diff.render import diff_files
from nprof_report.report.diff.stats import between_runs, difference, differences
from nprof_report.report.publish import publish
from tests.conftest import NEURON, run_cli
from tests.diff_traces import model, write_trace

MM = "## forward ## > aten::linear > aten::mm"


def _path(op: dict[str, Any]) -> str:
    return " > ".join([*op["context"], op["name"]])


def assert_same_pairs(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    """The pairs of two diff documents are the same: their records, and their op tables."""
    assert [{k: v for k, v in p.items() if k != "table"} for p in a] == [
        {k: v for k, v in p.items() if k != "table"} for p in b
    ]
    assert all(p["table"].equals(q["table"]) for p, q in zip(a, b))


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """BASE, and NEW with aten::mm's kernel 10 % slower (under aten::linear only), an op added
    and a kernel renamed; other seeds for the noise."""
    d = tmp_path_factory.mktemp("planted")
    base = write_trace(d / "base.json", model(), seed=1)
    new = write_trace(
        d / "new.json", model(slower={"gemm_128x64": 1.10}, added=True, renamed=True), seed=2
    )
    return {"dir": d, "base": base, "new": new, "doc": compare(base, new)}


def test_planted_differences_are_found_exactly(planted: dict[str, Any]) -> None:
    pair = planted["doc"]["pairs"][0]
    moved = [_path(o) for o in pair["ops"] if o["moved"]]
    assert moved == [MM]
    assert _path(pair["ops"][0]) == MM  # the slowed op comes first
    mm = pair["ops"][0]
    assert mm["impact_metric"] == "device_self_us"
    # the planted amount (10 % of 400 µs) lies in the interval of its difference
    rec = mm["device_self_us"]
    assert rec["low_us"] < 40.0 < rec["high_us"]
    assert 7 < rec["delta_pct"] < 13
    # the bare aten::mm (another context) stays apart and did not move
    bare = next(o for o in pair["ops"] if _path(o) == "## forward ## > aten::mm")
    assert not bare["moved"]
    assert [_path(o) for o in pair["added"]] == ["## forward ## > aten::dropout"]
    assert pair["removed"] == []
    renamed = [o for o in pair["ops"] if o["kernels_changed"]]
    assert [(_path(o), o["kernels_base"], o["kernels_new"]) for o in renamed] == [
        ("## forward ## > aten::relu", ["relu_kernel"], ["relu_kernel_v2"])
    ]
    assert not renamed[0]["moved"]
    assert pair["verdict"].startswith("NEW is ")
    assert "slower per step" in pair["verdict"]
    assert f"of it is {MM}'s device time" in pair["verdict"]


def test_a_further_baseline_is_compared_by_its_medians_alone(planted: dict[str, Any]) -> None:
    """``check`` reads only the medians of its second and later baselines, so their documents
    are made without the bootstrap: the same medians, no interval."""
    base, new = load_side(planted["base"]), load_side(planted["new"])
    full, bare = diff_document(base, new), diff_document(base, new, intervals=False)
    (f,), (b,) = full["pairs"], bare["pairs"]
    for metric, rec in f["metrics"].items():
        assert (b["metrics"][metric]["base_us"], b["metrics"][metric]["new_us"]) == (
            rec["base_us"],
            rec["new_us"],
        )
        assert b["metrics"][metric]["low_us"] is None
    by_path = {_path(o): o for o in b["ops"]}
    for o in f["ops"]:
        for s in ("host_total_us", "device_total_us", "launch_us"):
            if o[s] is not None:
                assert by_path[_path(o)][s]["base_us"] == o[s]["base_us"]


def test_planted_regression_fails_check(planted: dict[str, Any]) -> None:
    doc = planted["doc"]
    strict: dict[str, Any] = {"ops": [], "strict_time": True}
    failures = check([doc], max_regression_pct=5.0, metrics=["step"], **strict)
    assert len(failures) == 1
    assert "step time" in failures[0]
    # by name, both aten::mm rows are checked and only the slowed one fails
    op_failures = check(
        [doc], max_regression_pct=5.0, metrics=["device"], ops=["aten::mm"], strict_time=True
    )
    assert len(op_failures) == 1
    assert MM in op_failures[0]
    assert (
        check([doc], max_regression_pct=5.0, metrics=["device"], ops=[MM], strict_time=True)
        == op_failures
    )
    assert doc["check"]["passed"] is False
    # at 15 % the same regression passes
    assert check([doc], max_regression_pct=15.0, metrics=["step", "device"], **strict) == []


def test_one_baseline_time_is_advice(planted: dict[str, Any]) -> None:
    """With one baseline the noise between runs is unknown: the time regression is advice and
    the gate fails on the added op alone, which it names."""
    doc = planted["doc"]
    assert check([doc], max_regression_pct=5.0, metrics=["step"], ops=[]) == []
    record = doc["check"]
    assert record["passed"] is True
    assert record["exit_basis"] == "structure alone"
    (result,) = record["results"]
    assert result["exceeds_threshold"] is True and result["failed"] is False
    assert any(
        "noise between runs is unknown" in n and "keep 3 baselines" in n for n in record["notes"]
    )
    assert any(n.startswith("time (advice, one baseline") for n in record["notes"])
    failures = check([doc], max_regression_pct=5.0, metrics=None, ops=[])
    assert failures == [
        "base → new: framework ops per step 7 instead of 6 (+1; 0 allowed): added aten::dropout",
        "base → new: runtime calls per step 7 instead of 6 (+1; 0 allowed): "
        "more from aten::dropout",
        "base → new: device activities per step 6 instead of 5 (+1; 0 allowed): "
        "more from aten::dropout",
    ]
    assert doc["pairs"][0]["structure"]["sentence"].startswith(
        "base → new dispatches 7 framework ops per step instead of 6: added aten::dropout; "
    )
    # device activities and runtime calls are counted too: the dropout kernel and its launch
    counted = {c["metric"]: c for c in doc["check"]["structure_results"]}
    assert set(counted) == {"ops", "runtime-calls", "device-activities"}
    assert counted["runtime-calls"]["delta"] == counted["device-activities"]["delta"] == 1
    assert all(c["failed"] for c in counted.values())
    assert check([doc], max_regression_pct=5.0, metrics=None, ops=[], max_count_increase=1) == []
    assert check([doc], max_regression_pct=5.0, metrics=["ops"], ops=["aten::dropout"]) != []
    assert check([doc], max_regression_pct=5.0, metrics=["ops"], ops=["aten::relu"]) == []


@pytest.mark.parametrize("seed", range(5))
def test_pure_noise_passes_at_five_percent(tmp_path: Path, seed: int) -> None:
    base = write_trace(tmp_path / "a.json", model(), seed=10 + seed)
    new = write_trace(tmp_path / "b.json", model(), seed=50 + seed)
    doc = compare(base, new)
    pair = doc["pairs"][0]
    assert [o for o in pair["ops"] if o["moved"] or o["kernels_changed"]] == []
    assert pair["added"] == pair["removed"] == []
    assert (
        check([doc], max_regression_pct=5.0, metrics=["step", "device", "dispatch"], ops=[]) == []
    )


KERNELS = ("gemm_128x64", "relu_kernel", "gemm_small", "ln_kernel", "add_kernel")


def _machine(tmp_path: Path, name: str, speed: float, seed: int) -> Path:
    """A run of the same code on a machine ``speed`` times as slow (every kernel)."""
    return write_trace(tmp_path / name, model(slower={k: speed for k in KERNELS}), seed=seed)


def test_several_baselines_take_the_noise_between_runs(tmp_path: Path) -> None:
    """CONSTRUCTED runs of one code on a machine whose speed changes from run to run (0.96x,
    1.0x, 1.04x: 8 % apart, within the 10 % allowed, so time decides): NEW, the same code in a
    run 1.15x slower, passes against the three; NEW with its step 1.8x as long fails against
    them. Against one baseline the 1.15x run is a time regression (the step-to-step interval
    cannot see a whole-run shift), which fails the gate only with --strict-time."""
    bases = [_machine(tmp_path, f"b{i}.json", f, 20 + i) for i, f in enumerate((0.96, 1.0, 1.04))]
    same = _machine(tmp_path, "same.json", 1.15, 30)
    slow = _machine(tmp_path, "slow.json", 1.8, 31)
    kw: dict[str, Any] = {"max_regression_pct": 10.0, "metrics": ["step"], "ops": []}
    one = check_regression(same, bases[1:2], **kw)
    assert one.failures == []
    assert any("noise between runs is unknown" in n for n in one.notes)
    one_strict = check_regression(same, bases[1:2], **kw, strict_time=True)
    assert len(one_strict.failures) == 1
    three = check_regression(same, bases, **kw)
    assert three.failures == []
    failed = check_regression(slow, bases, **kw, out=tmp_path / "gate")
    assert len(failed.failures) == 1 and "step time" in failed.failures[0]
    record = json.loads((tmp_path / "gate" / "diff.json").read_text())["check"]
    assert record["baselines"] == [str(b) for b in bases]
    assert "prediction interval" in record["noise"]
    assert record["exit_basis"] == "structure and time"
    (result,) = record["results"]
    medians = result["baseline_medians_us"]
    assert len(medians) == 3 and medians[0] < medians[1] < medians[2]
    assert result["failed"] is True and result["low_pct"] > 10.0
    assert result["decides"] is True and result["spread_pct"] <= 10.0


def test_baselines_that_disagree_leave_the_verdict_to_structure(tmp_path: Path) -> None:
    """CONSTRUCTED baselines 0.92x, 1.0x and 1.10x (18 % apart, more than the 5 % allowed):
    time cannot decide on this machine. A run 1.8x as slow passes (stated: the exit code rests
    on the structure alone, and the spread is shown) unless --strict-time; an added op fails
    whatever the time says."""
    bases = [_machine(tmp_path, f"b{i}.json", f, 20 + i) for i, f in enumerate((0.92, 1.0, 1.10))]
    slow = _machine(tmp_path, "slow.json", 1.8, 31)
    kw: dict[str, Any] = {"max_regression_pct": 5.0, "metrics": None, "ops": []}
    gate = check_regression(slow, bases, **kw, out=tmp_path / "gate")
    assert gate.failures == []
    assert any(
        n.startswith("time cannot decide on this machine") and "spread" in n for n in gate.notes
    )
    assert any("rests on the structural metrics alone" in n for n in gate.notes)
    record = json.loads((tmp_path / "gate" / "diff.json").read_text())["check"]
    assert record["exit_basis"] == "structure alone"
    (result,) = record["results"]
    assert result["decides"] is False and result["spread_pct"] > 15
    assert result["exceeds_threshold"] is True and result["failed"] is False
    strict = check_regression(slow, bases, **kw, strict_time=True)
    assert len(strict.failures) == 1 and "step time" in strict.failures[0]
    added = write_trace(tmp_path / "added.json", model(added=True), seed=32)
    worse = check_regression(added, bases, **kw)
    assert [f for f in worse.failures if "framework ops per step" in f]
    assert all("aten::dropout" in f for f in worse.failures)


def test_between_runs_is_the_prediction_interval() -> None:
    """Against Student's t as printed in tables (t 0.975 with 2 degrees of freedom = 4.303):
    medians 9, 10, 11 (mean 10, s 1) give 10 ± 4.303 * sqrt(1 + 1/3)."""
    d = between_runs([9.0, 10.0, 11.0], 12.0)
    half = 4.303 * (4 / 3) ** 0.5
    assert d.base == 10.0 and d.delta == 2.0
    assert d.low == pytest.approx(2.0 - half, abs=1e-3)
    assert d.high == pytest.approx(2.0 + half, abs=1e-3)
    with pytest.raises(ValueError, match="two or more"):
        between_runs([1.0], 1.0)


def test_between_runs_interval_covers_one_more_run() -> None:
    """Coverage: three baseline runs and NEW drawn from one normal distribution of run medians;
    the interval holds zero in about 95 % of 2,000 seeded trials."""
    rng = random.Random(11)
    held = 0
    for _ in range(2000):
        runs = [rng.gauss(100, 10) for _ in range(4)]
        d = between_runs(runs[:3], runs[3])
        assert d.low is not None and d.high is not None
        held += d.low <= 0 <= d.high
    assert 0.935 <= held / 2000 <= 0.965


def test_host_only_traces_compare_host_time(tmp_path: Path) -> None:
    base = write_trace(tmp_path / "a.json", model(device=False), seed=3)
    new = write_trace(tmp_path / "b.json", model(device=False, slower={"ln_kernel": 3.0}), seed=4)
    pair = compare(base, new)["pairs"][0]
    assert [_path(o) for o in pair["ops"] if o["moved"]] == ["## forward ## > aten::layer_norm"]
    assert pair["ops"][0]["impact_metric"] == "host_self_us"
    parts = {p["part"] for p in pair["waterfall"]["parts"]}
    assert "device execution" not in parts
    assert "framework dispatch" in parts


def _waterfall_adds_up(pair: dict[str, Any]) -> None:
    wf = pair["waterfall"]
    assert sum(p["delta_us"] for p in wf["parts"]) == pytest.approx(wf["total_delta_us"], abs=1e-3)
    assert sum(p["base_us"] for p in wf["parts"]) == pytest.approx(wf["base_step_us"], abs=1e-3)
    assert sum(p["new_us"] for p in wf["parts"]) == pytest.approx(wf["new_step_us"], abs=1e-3)
    # the waterfall's total is the step-time difference the verdict states
    assert wf["total_delta_us"] == pytest.approx(pair["metrics"]["step"]["delta_us"], abs=1e-3)


def test_waterfall_adds_up_to_the_step_difference(planted: dict[str, Any]) -> None:
    pair = planted["doc"]["pairs"][0]
    _waterfall_adds_up(pair)
    parts = {p["part"]: p["delta_us"] for p in pair["waterfall"]["parts"]}
    assert max(parts, key=lambda k: abs(parts[k])) == "device execution"


def test_bootstrap_interval_covers_a_zero_difference() -> None:
    """Coverage: samples of one distribution, 12 per side; the 95 % interval holds 0 about 95 %
    of the time (seeded, 300 trials)."""
    rng = random.Random(7)
    held = 0
    for _ in range(300):
        a = [rng.lognormvariate(0, 0.1) for _ in range(12)]
        b = [rng.lognormvariate(0, 0.1) for _ in range(12)]
        d = difference(a, b)
        assert d is not None and d.low is not None and d.high is not None
        held += d.low <= 0 <= d.high
    assert 0.90 <= held / 300 <= 0.995


def test_difference_medians_and_small_samples() -> None:
    d = difference([1.0, 2.0, 3.0, 4.0], [2.0, 3.0, 4.0, 5.0])
    assert d is not None
    assert (d.base, d.new, d.delta) == (2.5, 3.5, 1.0)
    small = difference([1.0, 2.0], [5.0, 6.0, 7.0])
    assert small is not None and small.low is None and small.exceeds_noise is None
    assert difference([], [1.0]) is None


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.floats(-1e6, 1e6), max_size=7),
            st.lists(st.floats(-1e6, 1e6), max_size=7),
        ),
        max_size=12,
    ),
    st.integers(1, 40),
)
def test_many_differences_at_once_are_each_difference(
    pairs: list[tuple[list[float], list[float]]], block: int
) -> None:
    """The batched bootstrap gives each pair's own interval, to the bit, whatever the block."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(diff_stats, "_BLOCK_VALUES", block * diff_stats.RESAMPLES * 7)
        assert differences(pairs) == [difference(b, n) for b, n in pairs]


def test_large_and_mixed_samples_at_once() -> None:
    rng = random.Random(3)
    pairs = [
        ([rng.random() for _ in range(nb)], [rng.random() for _ in range(nn)])
        for nb, nn in [(5, 5), (1200, 5), (0, 4), (5, 5), (2, 9), (30, 31), (5, 5)]
    ]
    assert differences(pairs) == [difference(b, n) for b, n in pairs]


@pytest.mark.pdf
def test_every_number_in_the_pdf_is_in_diff_json(planted: dict[str, Any]) -> None:
    from pypdf import PdfReader

    out = planted["dir"] / "out"
    written = diff_report(planted["base"], planted["new"], out=out)
    assert [p.name for p in written[:3]] == ["diff.html", "diff.pdf", "diff.json"]
    doc = json.loads((out / "diff.json").read_text())
    html = (out / "diff.html").read_text()
    assert "default-src 'none'" in html
    assert not re.search(r"(src|href)=\"(?!data:)", html)  # nothing to fetch: data: URIs only
    assert doc["format"] == "nprof-diff"
    assert doc["format_version"] == 2
    with (out / "tables" / "diff_ops.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(doc["pairs"][0]["ops"])
    mm = next(r for r in rows if f"{r['context']} > {r['name']}" == MM)
    assert (
        float(mm["device_self_us_delta"]) == doc["pairs"][0]["ops"][0]["device_self_us"]["delta_us"]
    )
    assert mm["moved"] == "True"
    text = "\n".join(page.extract_text() for page in PdfReader(out / "diff.pdf").pages)
    assert doc["pairs"][0]["verdict"].split(";")[0].replace("\n", " ") in text.replace("\n", " ")
    _numbers_are_in(text, doc)


@pytest.mark.pdf
def test_the_gate_is_on_page_one(tmp_path: Path) -> None:
    """check --out with three baselines: page 1 says the gate failed, with the rule and the
    baseline runs' medians; every number of the PDF is in diff.json; the results in a CSV."""
    from pypdf import PdfReader

    bases = [_machine(tmp_path, f"b{i}.json", f, 40 + i) for i, f in enumerate((0.99, 1.0, 1.01))]
    slow = _machine(tmp_path, "slow.json", 1.8, 41)
    out = tmp_path / "gate"
    failed = check_regression(
        slow, bases, max_regression_pct=5.0, metrics=["step", "device"], ops=[], out=out
    ).failures
    assert len(failed) == 2
    doc = json.loads((out / "diff.json").read_text())
    pages = PdfReader(out / "diff.pdf").pages
    first = pages[0].extract_text().replace("\n", " ")
    assert "Regression gate: FAILED." in first
    assert "spread between the 3 baseline runs" in first
    medians = doc["check"]["results"][0]["baseline_medians_us"]
    assert ", ".join(f"{m:.3f}" for m in medians) in first
    _numbers_are_in("\n".join(p.extract_text() for p in pages), doc)
    with (out / "tables" / "diff_check.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["failed"] for r in rows] == ["True", "True"]
    assert float(rows[0]["low_pct"]) == doc["check"]["results"][0]["low_pct"]


def _json_numbers(node: Any, strings: list[str]) -> list[float]:
    if isinstance(node, bool) or node is None:
        return []
    if isinstance(node, int | float):
        return [float(node)]
    if isinstance(node, str):
        strings.append(node)
        return []
    items = node.values() if isinstance(node, dict) else node
    return [x for item in items for x in _json_numbers(item, strings)]


def _numbers_are_in(text: str, doc: dict[str, Any]) -> None:
    """Each number printed in ``text`` equals a number of ``doc`` to the digits printed."""
    strings: list[str] = []
    numbers = _json_numbers(doc, strings)
    # text that comes from diff.json's strings (paths, op and kernel names) is not a figure
    for s in sorted(set(strings), key=len, reverse=True):
        if len(s) > 3:
            text = text.replace(s, " ")
    text = re.sub(r"page \d+ / \d+", " ", text)
    found = re.findall(r"(?<![\w./#])([+\-−]?\d+(?:\.(\d+))?)(?![\w/])", text)
    assert len(found) > 30
    for token, decimals in found:
        value = abs(float(token.replace("−", "-")))
        tolerance = 0.5 * 10 ** -len(decimals) + 1e-9
        assert any(abs(abs(n) - value) <= tolerance for n in numbers), token


@pytest.mark.capture
@pytest.mark.pdf
def test_real_cpu_captures_naive_vs_fused(cpu_run: Path, tmp_path: Path) -> None:
    from pypdf import PdfReader

    written = diff_report(cpu_run / "naive", cpu_run / "fused", out=tmp_path / "d")
    doc = json.loads((tmp_path / "d" / "diff.json").read_text())
    (pair,) = doc["pairs"]
    assert (pair["base_label"], pair["new_label"]) == ("naive", "fused")
    assert "aten::rms_norm" in {o["name"] for o in pair["added"]}
    removed = {o["name"] for o in pair["removed"]}
    assert {"aten::mul", "aten::mean", "aten::rsqrt"} <= removed
    _waterfall_adds_up(pair)
    trace = json.loads((cpu_run / "naive" / "trace.json").read_text())
    steps = [e for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
    durations = sorted(e["dur"] for e in steps)
    assert pair["metrics"]["step"]["base_us"] == pytest.approx(
        statistics.median(durations), abs=2e-3
    )
    text = "\n".join(p.extract_text() for p in PdfReader(tmp_path / "d" / "diff.pdf").pages)
    _numbers_are_in(text, doc)
    assert tmp_path / "d" / "diff.pdf" in written


@pytest.mark.capture
def test_stored_summary_baseline_compares_like_the_traces(cpu_report: Path) -> None:
    run = cpu_report.parent
    from_traces = compare(run, run)
    from_summary = compare(cpu_report / "summary.json", run)
    assert [p["label"] for p in from_summary["pairs"]] == ["naive", "fused", "compiled"]
    assert_same_pairs(from_summary["pairs"], from_traces["pairs"])
    for pair in from_summary["pairs"]:
        assert pair["metrics"]["step"]["delta_us"] == 0
        assert not any(o["moved"] for o in pair["ops"])
    assert check([from_summary], max_regression_pct=5, metrics=["step", "dispatch"], ops=[]) == []


def test_stored_diff_json_baseline_is_its_new_side(planted: dict[str, Any], tmp_path: Path) -> None:
    publish(tmp_path, diff_files(planted["doc"], pdf=False), kind="diff")
    stored = tmp_path / "diff.json"
    doc = compare(stored, planted["new"])
    pair = doc["pairs"][0]
    assert pair["metrics"]["step"]["delta_us"] == 0
    assert doc["sides"]["base"]["kind"] == "diff.json"


def test_neuron_trees_compare_with_neuron_device_time(tmp_path: Path) -> None:
    doc = compare(NEURON / "eager_naive", NEURON / "fused")
    (pair,) = doc["pairs"]
    assert pair["metrics"]["device"] is not None
    device_ops = [o for o in [*pair["removed"], *pair["added"]] if o["device_self_us"]]
    assert device_ops, "Neuron execution time attributed to ops"
    assert any(o["kernels"] == ["Neuron hardware execution"] for o in device_ops)
    _waterfall_adds_up(pair)
    assert any("CONSTRUCTED" in c for c in doc["caveats"])


def test_runs_are_paired_by_implementation_name(planted: dict[str, Any], tmp_path: Path) -> None:
    for side in ("a", "b"):
        (tmp_path / side).mkdir()
    for name, path in (("x", planted["base"]), ("y", planted["new"])):
        (tmp_path / "a" / f"{name}.pt.trace.json").write_bytes(path.read_bytes())
    (tmp_path / "b" / "y.pt.trace.json").write_bytes(planted["new"].read_bytes())
    (tmp_path / "b" / "z.pt.trace.json").write_bytes(planted["base"].read_bytes())
    doc = compare(tmp_path / "a", tmp_path / "b")
    assert [p["label"] for p in doc["pairs"]] == ["y.pt.trace.json"]
    assert doc["unpaired"] == ["only in BASE: x.pt.trace.json", "only in NEW: z.pt.trace.json"]


def test_threshold_parsing() -> None:
    assert parse_threshold("5%") == 5.0
    assert parse_threshold(" 2.5 ") == 2.5
    for bad in ("abc", "-1%", "nan"):
        with pytest.raises(ValueError, match="percentage"):
            parse_threshold(bad)


def test_stored_documents_are_checked(tmp_path: Path, planted: dict[str, Any]) -> None:
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"format": "nprof-summary", "format_version": 9}))
    with pytest.raises(InputError, match="version 9"):
        compare(summary, planted["new"])
    summary.write_text(
        json.dumps(
            {"format": "nprof-summary", "format_version": 1, "implementations": [{"label": "x"}]}
        )
    )
    with pytest.raises(InputError, match="no diff_profile"):
        compare(summary, planted["new"])


@pytest.mark.slow
def test_check_exit_codes(planted: dict[str, Any], tmp_path: Path) -> None:
    base, new = planted["base"], planted["new"]
    same = write_trace(tmp_path / "same.json", model(), seed=9)
    ok = run_cli("check", same, "--baseline", base)
    assert ok.returncode == 0, ok.stderr
    notes = ok.stderr.strip().splitlines()
    assert all(line.startswith("nprof-report: note: ") for line in notes)
    assert any("the same work per step as the baseline" in line for line in notes)
    assert any("noise between runs is unknown" in line for line in notes)
    # several baselines: their spread is the noise (two runs: a wide interval)
    two = run_cli("check", same, "--baseline", base, "--baseline", same, "--out", tmp_path / "two")
    assert two.returncode == 0, two.stderr
    record = json.loads((tmp_path / "two" / "diff.json").read_text())["check"]
    assert record["baselines"] == [str(base), str(same)]
    # NEW adds an op: the structural metrics fail it by default, whatever the time
    added = run_cli("check", new, "--baseline", base)
    assert added.returncode == 1
    failed = [x for x in added.stderr.splitlines() if x.startswith("nprof-report: regression: ")]
    assert len(failed) == 3 and "added aten::dropout" in failed[0]
    allowed = run_cli("check", new, "--baseline", base, "--max-count-increase", "1")
    assert allowed.returncode == 0, allowed.stderr
    bad = run_cli(
        "check", new, "--baseline", base, "--metric", "step", "--metric", "device",
        "--strict-time", "--out", tmp_path / "gate",
    )  # fmt: skip
    assert bad.returncode == 1
    lines = [x for x in bad.stderr.strip().splitlines() if "regression: " in x]
    assert len(lines) == 2
    written = json.loads((tmp_path / "gate" / "diff.json").read_text())["check"]
    assert written["passed"] is False
    assert [r["failed"] for r in written["results"]] == [True, True]
    assert str(tmp_path / "gate" / "diff.pdf") in bad.stdout.splitlines()
    # the same time regression with one baseline and no --strict-time: advice, exit 0
    advice = run_cli("check", new, "--baseline", base, "--metric", "step", "--metric", "device")
    assert advice.returncode == 0, advice.stderr
    assert "time (advice, one baseline: the noise between runs is unknown)" in advice.stderr
    op = run_cli(
        "check", new, "--baseline", base, "--op", "aten::mm", "--metric", "device", "--strict-time"
    )
    assert op.returncode == 1
    # only the aten::mm under aten::linear
    assert len([x for x in op.stderr.strip().splitlines() if "regression: " in x]) == 1
    for args, message in (
        ((tmp_path / "missing.json", "--baseline", base), "does not exist"),
        ((new, "--baseline", base, "--op", "aten::nothing"), "--op aten::nothing"),
        ((new, "--baseline", base, "--max-regression", "lots"), "percentage"),
        ((new, "--baseline", base, "--max-count-increase", "-1"), "--max-count-increase"),
        ((new, "--baseline", base, "--metric", "bytes"), "neither run declares it"),
    ):
        r = run_cli("check", *args)
        assert r.returncode == 2, (args, r.stderr)
        assert message in r.stderr.strip().splitlines()[-1]  # after click's usage, if any
    cpu = write_trace(tmp_path / "cpu.json", model(device=False), seed=5)
    r = run_cli("check", cpu, "--baseline", cpu, "--metric", "device")
    assert r.returncode == 2
    assert "no device time per step in BASE" in r.stderr
    r = run_cli("diff", base, tmp_path / "nothing", "--out", tmp_path / "o")
    assert r.returncode == 2
    assert r.stderr.strip() == f"nprof-report: error: {tmp_path / 'nothing'}: does not exist"
    assert not (tmp_path / "o").exists()


@pytest.mark.pdf
def test_a_diff_beside_a_report_leaves_the_report(planted: dict[str, Any], tmp_path: Path) -> None:
    """Each keeps its own record of written files: the diff never takes the report's as stale."""
    from nprof_report.report.build import build_report

    out = tmp_path / "report"
    build_report([planted["base"]], out=out)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    written = diff_report(planted["base"], planted["new"], out=out)
    assert all(p.read_bytes() == data for p, data in before.items())
    assert (out / "diff.json").is_file() and all(p.is_file() for p in written)


def test_large_samples_use_the_median_standard_error() -> None:
    """Above 1000 steps a side: the McKean-Schrader interval, close to the bootstrap's there
    (compared on 1000 steps, the largest sample still bootstrapped), and covering zero for two
    samples of one distribution about 95 % of the time."""
    rng = random.Random(11)
    a = [rng.gauss(100, 5) for _ in range(1000)]
    b = [rng.gauss(100, 5) for _ in range(1000)]
    boot = difference(a, b)
    normal = difference(a + a[:1], b + b[:1])  # 1001 values: past the bootstrap's limit
    assert boot is not None and normal is not None
    assert boot.low is not None and boot.high is not None
    assert normal.low is not None and normal.high is not None
    assert normal.high - normal.low == pytest.approx(boot.high - boot.low, rel=0.25)
    held = 0
    for _ in range(200):
        x = [rng.expovariate(1.0) for _ in range(1500)]
        y = [rng.expovariate(1.0) for _ in range(1500)]
        d = difference(x, y)
        assert d is not None and d.low is not None and d.high is not None
        held += d.low <= 0 <= d.high
    assert 0.90 <= held / 200 <= 0.99


def test_busy_time_within_steps_matches_clipping() -> None:
    from nprof_report.report.figures.breakdown import Busy, merge_intervals
    from nprof_report.report.figures.diff_profile import _busy_within

    rng = random.Random(5)
    intervals = [(s, s + rng.randint(1, 40)) for s in (rng.randint(0, 2000) for _ in range(200))]
    merged = merge_intervals(intervals)
    starts = sorted(rng.randint(0, 2100) for _ in range(60))
    bounds = pl.DataFrame(
        {
            "step": list(range(60)),
            "start_ns": starts,
            "end_ns": [s + rng.randint(0, 300) for s in starts],
        },
        schema={"step": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64},
    )
    expected = [
        sum(max(0, min(e, e0) - max(s, s0)) for s, e in merged)
        for s0, e0 in zip(bounds["start_ns"], bounds["end_ns"])
    ]
    assert _busy_within(Busy.of(intervals), bounds, bounds["step"]) == expected
    assert _busy_within(Busy.of([]), bounds, bounds["step"]) == [0] * 60


def _declaring(side: Any, run: dict[str, Any] | None = None, **declared: float) -> Any:
    """``side`` with its one implementation declaring ``declared`` per call (and ``run``)."""
    impl = dict(side.implementations[0])
    impl["diff_profile"] = {**impl["diff_profile"], "declared": declared}
    return dataclasses.replace(side, implementations=[impl], run=run or side.run)


def test_declared_bytes_and_flops_are_counted(planted: dict[str, Any]) -> None:
    """Where a study declares bytes moved and FLOPs per call (read from the manifest, only where
    present), they are structural metrics: more is a regression, exact, named first."""
    from nprof_report.report.figures.diff_profile import declared_work

    assert declared_work(SimpleNamespace(bytes_moved=4096, flops=2.5e6)) == {
        "bytes_moved": 4096.0,
        "flops": 2.5e6,
    }
    assert declared_work(SimpleNamespace(bytes_moved=True, flops=-1)) == {}
    assert declared_work(None) == {}
    side = load_side(planted["base"])
    doc = diff_document(
        _declaring(side, bytes_moved=1000, flops=10), _declaring(side, bytes_moved=2000, flops=10)
    )
    structure = doc["pairs"][0]["structure"]
    assert structure["sentence"] == "base declares 2000 bytes moved per step instead of 1000."
    assert check([doc], max_regression_pct=5.0, metrics=None, ops=[]) == [
        "base: declared bytes moved per step 2000 instead of 1000 (+1000; 0 allowed)"
    ]
    # declared in the run's workload instead, one figure per implementation name
    run = {"workload": {"flops": {"base": 7}}}
    doc = diff_document(_declaring(side, run), _declaring(side, {"workload": {"flops": 5}}))
    assert doc["pairs"][0]["structure"]["metrics"]["flops"] == {
        "base": 7.0,
        "new": 5.0,
        "delta": -2.0,
    }
    assert check([doc], max_regression_pct=5.0, metrics=None, ops=[]) == []
    assert any("FLOPs per step 5 instead of 7: an improvement" in n for n in doc["check"]["notes"])
    # declared by one side only: a note; asked for by name and declared by neither: exit 2
    doc = diff_document(_declaring(side, bytes_moved=1000), side)
    assert check([doc], max_regression_pct=5.0, metrics=None, ops=[]) == []
    assert any("declared on one side only" in n for n in doc["check"]["notes"])
    with pytest.raises(InputError, match="neither run declares it"):
        check(
            [compare(planted["base"], planted["base"])],
            max_regression_pct=5.0,
            metrics=["flops"],
            ops=[],
        )


def test_counts_of_an_op_path_and_disagreeing_baselines(planted: dict[str, Any]) -> None:
    """--op with a structural metric checks that op's calls (an op only in NEW counts from 0);
    baselines that disagree on a count are said so, and NEW is held to the largest."""
    doc = compare(planted["base"], planted["new"])
    assert (
        check(
            [doc],
            max_regression_pct=5.0,
            metrics=["ops", "device-activities"],
            ops=["aten::dropout"],
        )
        != []
    )
    (ops_result, dev_result) = doc["check"]["structure_results"]
    assert (ops_result["base"], ops_result["new"]) == (0, 1)
    assert dev_result["what"] == "## forward ## > aten::dropout device activities per step"
    with pytest.raises(InputError, match="per call, not per op"):
        check([doc], max_regression_pct=5.0, metrics=["bytes"], ops=["aten::mm"])
    # three baselines: the NEW run itself (with the op), and two without it
    docs = [compare(planted["new"], planted["new"]), doc, compare(planted["base"], planted["new"])]
    assert check(docs, max_regression_pct=5.0, metrics=["ops"], ops=[]) == []
    (result,) = docs[0]["check"]["structure_results"]
    assert result["baseline_counts"] == [7, 6, 6] and result["base"] == 7
    assert any(
        "the baselines disagree on framework ops per step (7, 6, 6)" in n
        for n in docs[0]["check"]["notes"]
    )


def test_the_cli_offers_every_metric() -> None:
    """The CLI names the metrics without importing the diff wing; they are check's."""
    from nprof_report.cli import check_command
    from nprof_report.report.diff.check import METRICS

    (option,) = [p for p in check_command.params if p.name == "metrics"]
    assert tuple(option.type.choices) == METRICS


def test_an_added_op_named_with_the_default_metrics_is_counted(planted: dict[str, Any]) -> None:
    """--op NAME of an op that only NEW has: with the default metrics its calls are counted (and
    fail) and its time, which has nothing to compare with, is said to be left out."""
    doc = compare(planted["base"], planted["new"])
    failures = check([doc], max_regression_pct=5.0, metrics=None, ops=["aten::dropout"])
    assert [f.split(" (")[0] for f in failures] == [
        "base → new: ## forward ## > aten::dropout calls per step 1 instead of 0",
        "base → new: ## forward ## > aten::dropout runtime calls per step 1 instead of 0",
        "base → new: ## forward ## > aten::dropout device activities per step 1 instead of 0",
    ]
    assert any("is in one side only" in n for n in doc["check"]["notes"])
    with pytest.raises(InputError, match="no op of that name in both"):
        check([doc], max_regression_pct=5.0, metrics=["step"], ops=["aten::dropout"])

"""The cross-rank section (report/ranks.py, report/comms.py): real two-rank traces checked against
their raw JSON, a generated job with a planted straggler, ``ops --by-rank`` and ``--keep-going``
on the local pool. The Ray engine's tests are in test_ranks_ray.py."""

from __future__ import annotations

import dataclasses
import gzip
import importlib.util
import json
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

from nprof_report.cli import cli
from nprof_report.errors import InputError
from nprof_report.parse.inputs import Source
from nprof_report.parse.sources import load_source
from nprof_report.report.build import summarise_inputs
from nprof_report.report.figures.comms import comm_per_step, kind_of
from nprof_report.report.jobs import Engine
from nprof_report.report.view.model import build_model
from nprof_report.report.view.render import render_html
from tests.conftest import PUBLIC, ROOT
from tests.summary_shape import assert_conforms

TWO_RANKS = [PUBLIC / f"kineto-cuda-2rank-sampled-rank{r}.json.gz" for r in (0, 1)]
EXE = Path(sys.executable).with_name("nprof-report")


def make_job() -> Any:
    """bench/make_rank_job.py, loaded as a module (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "make_rank_job", ROOT / "bench" / "make_rank_job.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def two_rank_summary(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("two")
    for trace in TWO_RANKS:
        shutil.copy(trace, folder)
    return summarise_inputs([folder], Engine(jobs=1))[1]


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 CONSTRUCTED ranks, rank 2 planted as a straggler (30 ms more per all_reduce kernel)."""
    folder = tmp_path_factory.mktemp("job") / "ranks"
    make_job().make_job(folder, 4, straggler=2, delay_ms=30.0, seed=1)
    return folder


def _raw(path: Path) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    return events


def _nccl_kernel_us_by_step(events: list[dict[str, Any]]) -> dict[int, float]:
    """Independent of the parser: the NCCL kernels' durations, per step of the runtime call that
    launched them (same ``correlation``), from the raw JSON by name."""
    steps = [
        (float(e["ts"]), float(e["ts"]) + float(e["dur"]), int(e["name"].split("#")[1]))
        for e in events
        if e.get("name", "").startswith("ProfilerStep#")
    ]
    launch_ts = {
        e["args"]["correlation"]: float(e["ts"])
        for e in events
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    out: dict[int, float] = defaultdict(float)
    for e in events:
        if e.get("cat") == "kernel" and e["name"].startswith("nccl"):
            ts = launch_ts[e["args"]["correlation"]]
            step = next(n for s, t, n in steps if s <= ts < t)
            out[step] += float(e["dur"])
    return dict(out)


def test_kinds_come_from_the_collective_names() -> None:
    assert kind_of("c10d::allreduce_") == "all_reduce"
    assert kind_of("nccl:all_reduce") == "all_reduce"
    assert kind_of("gloo:all_reduce") == "all_reduce"
    assert kind_of("c10d::_allgather_base_") == "all_gather"
    assert kind_of("nccl:_all_gather_base") == "all_gather"
    assert kind_of("c10d::_reduce_scatter_base_") == "reduce_scatter"
    assert kind_of("c10d::alltoall_base_") == "all_to_all"
    assert kind_of("nccl:all_to_all") == "all_to_all"
    assert kind_of("c10d::broadcast_") == "broadcast"
    assert kind_of("c10d::send") == "p2p"
    assert kind_of("nccl:recv") == "p2p"
    assert kind_of("c10d::barrier") == "barrier"
    assert kind_of("c10d::reduce_") == "reduce"
    assert kind_of("record_param_comms") is None


def test_two_public_ranks_get_a_cross_rank_record(two_rank_summary: dict[str, Any]) -> None:
    record = two_rank_summary["ranks"]
    assert record["rank_from"] == "distributedInfo"
    assert (record["world_size"], record["backend"]) == (128, "nccl")
    assert [r["rank"] for r in record["ranks"]] == [0, 1]
    assert record["comm_source"] == "device"
    assert record["comm_kinds"] == ["all_gather", "all_reduce", "all_to_all"]
    assert record["steps"] == [551, 552]
    for rank, row, durations in zip((0, 1), record["ranks"], record["step_time_us"]):
        events = _raw(TWO_RANKS[rank])
        steps = sorted(
            (int(e["name"].split("#")[1]), float(e["dur"]))
            for e in events
            if e.get("name", "").startswith("ProfilerStep#")
        )
        assert durations == [d for _, d in steps]
        nccl = _nccl_kernel_us_by_step(events)
        # every NCCL kernel of these traces was launched inside a collective: the structural
        # classification finds the same time as the name
        per_step = sorted(nccl.values())
        expected_median = (per_step[0] + per_step[1]) / 2
        assert row["comm_median_us"] == pytest.approx(expected_median, abs=0.01)
        # with two steps a median is a mean, which adds up over the kinds
        assert sum(row["comm_by_kind_us"].values()) == pytest.approx(expected_median, abs=0.01)
    assert record["stragglers"] == []  # 615 vs 619 ms: within 5 %
    # rank 1 computes 38 ms longer per step and spends 32 ms less in all_reduce: rank 0 waits
    [waited] = record["waited_for"]
    assert waited["rank"] == 1
    assert waited["parts"][0]["part"] == "device compute"
    reduce = next(p for p in waited["parts"] if p["part"] == "all_reduce")
    assert reduce["delta_us"] < 0
    finding = next(f for f in two_rank_summary["findings"] if f["rule"] == "rank-waited-for")
    assert "rank 1" in finding["title"]


def test_two_public_ranks_section_and_csv(two_rank_summary: dict[str, Any]) -> None:
    model = build_model(two_rank_summary)
    assert model.ranks is not None
    csvs = {t.csv: t for t in model.ranks.csv_tables}
    assert set(csvs) == {
        "ranks.csv",
        "ranks-comm.csv",
        "ranks-step-times.csv",
        "ranks-key-averages.csv",
    }
    keyavg = csvs["ranks-key-averages.csv"]
    assert keyavg.columns[0] == "rank"
    by_rank = {r: [row for row in keyavg.raw_rows if row[0] == r] for r in (0, 1)}
    for rank in (0, 1):
        impl = two_rank_summary["implementations"][rank]
        assert len(by_rank[rank]) == len(impl["key_averages"])
    html = render_html(model)
    assert '<section id="ranks"' in html
    assert "Ranks of one job" in html and "2 ranks of a job of world size 128" in html
    assert model.ranks.chart.svg.startswith("<svg")


def test_one_trace_or_implementations_get_no_cross_rank_record(tmp_path: Path) -> None:
    _, summary = summarise_inputs([TWO_RANKS[0]], Engine(jobs=1))
    assert "ranks" not in summary
    assert build_model(summary).ranks is None


def test_planted_straggler_is_found_with_its_evidence(job: Path) -> None:
    _, summary = summarise_inputs([job], Engine(jobs=1))
    record = summary["ranks"]
    assert [s["rank"] for s in record["stragglers"]] == [2]
    straggler = record["stragglers"][0]
    assert straggler["parts"][0]["part"] == "all_reduce"  # the part that grew most
    grown = straggler["parts"][0]["delta_us"]
    # 2 all_reduce kernels per step in the copied trace, 30 ms each
    assert grown == pytest.approx(60_000, rel=0.05)
    compute = next(p for p in straggler["parts"] if p["part"] == "device compute")
    assert compute["delta_us"] == pytest.approx(0, abs=1)
    assert "device compute is equal" in straggler["evidence"]
    assert "longer in all_reduce" in straggler["evidence"]
    assert record["waited_for"] == []  # the other ranks are copies of one another
    assert_conforms(summary)  # with a straggler record (tests/summary_shape.py)
    finding = next(f for f in summary["findings"] if f["rule"] == "straggler-rank")
    assert finding["title"].startswith("rank 2 is a straggler")
    assert any("CONSTRUCTED" in c for c in summary["caveats"])


def test_ops_by_rank_table_and_csv(job: Path) -> None:
    runner = CliRunner()
    table = runner.invoke(cli, ["ops", str(job), "--by-rank", "--jobs", "1"])
    assert table.exit_code == 0, table.output
    assert "rank 2 is" in table.output and "slower per step" in table.output
    csv = runner.invoke(cli, ["ops", str(job), "--by-rank", "--format", "csv"])
    assert csv.exit_code == 0, csv.output
    header, *rows = csv.output.strip().splitlines()
    assert header.startswith("rank,steps,step_median_us")
    assert "comm_all_reduce_us" in header
    assert [r.split(",")[0] for r in rows] == ["0", "1", "2", "3"]


def test_ops_by_rank_on_one_trace_is_an_input_error() -> None:
    result = CliRunner().invoke(cli, ["ops", str(TWO_RANKS[0]), "--by-rank"])
    assert isinstance(result.exception, InputError)  # main() turns it into exit 2
    assert "does not hold several ranks of one job" in str(result.exception)


def _with_corrupt_rank(job: Path, folder: Path) -> Path:
    shutil.copytree(job, folder)
    (folder / "rank1.pt.trace.json").write_bytes(b'{"traceEvents": [ {"ph": "X", nonsense')
    return folder / "rank1.pt.trace.json"


def test_corrupt_rank_exits_2_with_one_line_naming_it(job: Path, tmp_path: Path) -> None:
    bad = _with_corrupt_rank(job, tmp_path / "ranks")
    proc = subprocess.run(
        [str(EXE), "ops", str(tmp_path / "ranks"), "--by-rank", "--no-cache"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0], proc.stderr


def test_keep_going_lists_the_corrupt_rank_among_the_caveats(job: Path, tmp_path: Path) -> None:
    bad = _with_corrupt_rank(job, tmp_path / "ranks")
    _, summary = summarise_inputs([tmp_path / "ranks"], Engine(jobs=1, keep_going=True))
    skipped = [c for c in summary["caveats"] if c.startswith("skipped (--keep-going)")]
    assert len(skipped) == 1 and str(bad) in skipped[0]
    assert [r["rank"] for r in summary["ranks"]["ranks"]] == [0, 2, 3]
    assert [s["rank"] for s in summary["ranks"]["stragglers"]] == [2]


def test_parse_and_report_do_not_import_ray() -> None:
    code = (
        "import sys\n"
        "import nprof_report.cli, nprof_report.report.build, nprof_report.report.opsview\n"
        "import nprof_report.report.view.model, nprof_report.report.view.render\n"
        "assert 'ray' not in sys.modules, 'ray imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    importers = [
        p.relative_to(ROOT).as_posix()
        for folder in ("parse", "report", "src")
        for p in (ROOT / folder).rglob("*.py")
        if any(
            line.strip().startswith(("import ray", "from ray"))
            for line in p.read_text().splitlines()
        )
    ]
    assert importers == ["parse/engine_ray.py"]


def test_host_comm_of_a_cpu_only_gloo_rank() -> None:
    """gloo collectives are annotations on two threads at once: counted once, up to the step's
    end; checked against the raw JSON."""
    trace = PUBLIC / "kineto-cpu-only-gloo-rank34.pt.trace.json"
    events = json.loads(trace.read_text())["traceEvents"]
    step = next(e for e in events if e.get("name", "").startswith("ProfilerStep#"))
    s0, s1 = float(step["ts"]), float(step["ts"]) + float(step["dur"])
    inside = sorted(
        (float(e["ts"]), min(float(e["ts"]) + float(e["dur"]), s1))
        for e in events
        if e.get("name") == "gloo:all_reduce" and s0 <= float(e["ts"]) < s1
    )
    covered, reach = 0.0, float("-inf")
    for start, end in inside:
        covered += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    loaded = load_source(Source("rank34", trace, trace.parent), use_cache=False)
    comm = comm_per_step(loaded)
    assert comm["kind"].to_list() == ["all_reduce"]
    assert comm["host_comm_ns"][0] / 1000 == pytest.approx(covered, abs=0.01)
    assert comm["device_comm_ns"][0] == 0


def test_neuron_collective_executions_are_device_comm() -> None:
    """The system trace's ``cc_*`` events (CONSTRUCTED here: two cc_running spans, one inside the
    step and one after it, and an nc_exec_running) count as device comm of their step."""
    trace = PUBLIC / "kineto-cpu-only-gloo-rank34.pt.trace.json"
    loaded = load_source(Source("rank34", trace, trace.parent), use_cache=False)
    step = loaded.frames.steps.row(0, named=True)
    events = pl.DataFrame(
        {
            "name": ["cc_running", "nc_exec_running", "cc_running"],
            "start_ns": [step["start_ns"] + 1000, step["start_ns"] + 2000, step["end_ns"] + 10],
            "dur_ns": [5000, 7000, 3000],
        }
    )
    session = SimpleNamespace(events=events)
    with_neuron = dataclasses.replace(loaded, neuron=[(session, None)])
    comm = comm_per_step(with_neuron)
    collective = comm.filter(pl.col("kind") == "collective")
    assert collective["step"].to_list() == [step["step"]]
    assert collective["device_comm_ns"].to_list() == [5000]


def test_keep_going_lets_the_workers_parse_the_ranks_after_a_bad_one(
    job: Path, tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = _with_corrupt_rank(job, tmp_path / "ranks")
    # the largest file, so the workers start it first: without keep_going the ranks after it
    # would be left to the parent
    bad.write_bytes(b'{"traceEvents": ' + b"x" * 8_000_000)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("parsed in the parent, not in a worker")

    for module in ("cache", "sources"):  # only the spawned workers may parse
        monkeypatch.setattr(f"nprof_report.parse.{module}.load_frames", refuse)
    _, summary = summarise_inputs([tmp_path / "ranks"], Engine(jobs=2, keep_going=True))
    assert [r["rank"] for r in summary["ranks"]["ranks"]] == [0, 2, 3]
    assert any(str(bad) in c for c in summary["caveats"])

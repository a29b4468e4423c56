"""privateuse1_driver rows as device executions (formats.md §9.1), against PyTorch's own algorithm.

The reference feeds the CONSTRUCTED ``device_exec`` trace.json to PyTorch's ``FunctionEvent`` /
``EventList.key_averages()`` the way ``_parse_kineto_results`` (torch/autograd/profiler.py) does,
with ``privateuse1_driver`` typed ``DeviceType.PrivateUse1`` as pytorch/pytorch PR #186433 maps it:
a device event is appended as a kernel to the CPU event whose id is its linked correlation id (the
op's ``External id``), a CPU runtime event linked to an op moves to the op's thread. It reads the
JSON with the standard library and shares no code with the parser.

One input differs from the trace, as parse/keyavg.py documents: a runtime call named after its op
(TorchNeuron names them after the aten op) is fed as ``<name> [privateuse1_runtime]``. Under its own
name PyTorch's ``_remove_dup_nodes`` would take it for the op's same-named only child, drop it and
replace the op's kernels with the call's (none), so the op would show no device time at all.
"""

from __future__ import annotations

import json
import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

from nprof_report.cli import cli
from nprof_report.parse.frames import load_frames
from nprof_report.parse.keyavg import key_averages
from nprof_report.parse.privateuse1 import decide
from tests.conftest import NEURON, NEURON_TREES

DEVICE_TREE = NEURON / "device_exec"
DEVICE_TRACE = NEURON / NEURON_TREES["device_exec"]["session"] / "trace.json"
HOST_TRACE = NEURON / NEURON_TREES["fused"]["session"] / "trace.json"


def pytorch_key_averages(
    path: Path, *, rename: bool = True
) -> dict[tuple[str, str], dict[str, float]]:
    """PyTorch's key_averages over the trace's complete events (see the module docstring);
    ``rename=False`` feeds the runtime calls under their own names."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import EventList, FunctionEvent, _rewrite_name

    doc = json.loads(path.read_text(), parse_float=Decimal)
    complete = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "Trace"]
    op_names = {e["name"] for e in complete if e["cat"] == "cpu_op"}
    t0 = min(int(Decimal(e["ts"]) * 1000) for e in complete)
    events: list[Any] = []
    frontend = []
    linked: dict[int, list[Any]] = {}
    for e in complete:
        args = e.get("args", {})
        start = int(Decimal(e["ts"]) * 1000) - t0
        end = start + int(Decimal(e["dur"]) * 1000)
        is_op = e["cat"] in ("cpu_op", "user_annotation")
        name = e["name"]
        if rename and e["cat"] == "privateuse1_runtime" and name in op_names:
            name = f"{name} [{e['cat']}]"
        fe = FunctionEvent(
            id=args.get("External id", 0) if is_op else args.get("correlation", 0),
            name=_rewrite_name(name=name, with_wildcard=True),
            thread=int(e["tid"]),
            start_us=start / 1000,
            end_us=end / 1000,
            use_device="neuron",
            device_type=DeviceType.PrivateUse1
            if e["cat"] == "privateuse1_driver"
            else DeviceType.CPU,
            is_user_annotation=e["cat"] == "user_annotation",
            stack=[],
            input_shapes=[],
        )
        events.append(fe)
        if is_op:
            frontend.append(fe)
        else:
            linked.setdefault(args["External id"], []).append(fe)
    for fe in frontend:
        for other in linked.get(fe.id, []):
            if other.device_type == DeviceType.PrivateUse1:
                fe.append_kernel(
                    other.name, other.device_index, other.time_range.end - other.time_range.start
                )
            else:
                other.thread = fe.thread
    table = EventList(events, use_device="neuron")
    table._build_tree()
    return {
        (a.key, "CPU" if a.device_type == DeviceType.CPU else "PrivateUse1"): {
            "calls": a.count,
            "self_cpu_us": a.self_cpu_time_total,
            "cpu_total_us": a.cpu_time_total,
            "self_device_us": a.self_device_time_total,
            "device_total_us": a.device_time_total,
        }
        for a in table.key_averages()
    }


def ours(path: Path) -> dict[tuple[str, str], dict[str, float]]:
    """Our ops table, keyed like the reference."""
    cols = ["calls", "self_cpu_us", "cpu_total_us", "self_device_us", "device_total_us"]
    t = key_averages(load_frames(path))
    return {(r["name"], r["device_type"]): {c: r[c] for c in cols} for r in t.to_dicts()}


def test_device_execution_ops_equal_pytorch_key_averages() -> None:
    ref = pytorch_key_averages(DEVICE_TRACE)
    got = ours(DEVICE_TRACE)
    assert set(got) == set(ref)
    assert (
        "aten::mul",
        "PrivateUse1",
    ) in ref  # the driver rows are device rows in the reference too
    assert ref[("aten::mul", "CPU")]["self_device_us"] > 0
    for key, want in ref.items():
        for col, value in want.items():
            assert got[key][col] == pytest.approx(value, abs=1e-6), (key, col)


def test_pytorch_loses_the_op_device_time_when_its_launch_shares_its_name() -> None:
    # why the ops table lists such a launch apart (keyavg.py): PyTorch's _remove_dup_nodes takes
    # it for the op's same-named only child and replaces the op's kernels with its own (none)
    ref = pytorch_key_averages(DEVICE_TRACE, rename=False)
    assert ref[("aten::mul", "CPU")]["self_device_us"] == 0
    assert ref[("ProfilerStep*", "CPU")]["device_total_us"] == 0
    assert ref[("aten::mul", "PrivateUse1")]["self_device_us"] > 0


def test_device_time_equals_the_system_trace_and_is_counted_once() -> None:
    tree = NEURON_TREES["device_exec"]
    result = CliRunner().invoke(cli, ["ops", str(DEVICE_TREE), "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = {(r["name"], r["device_type"]): r for r in json.loads(result.stdout)}
    for op, device_ns in tree["device_ns_by_op"].items():
        # the fixture's device_ns_by_op is the union of the nc_exec_running spans (system trace)
        assert rows[(op, "CPU")]["self_device_us"] == pytest.approx(device_ns / 1000, abs=1e-6)
        assert rows[(op, "PrivateUse1")]["self_device_us"] == pytest.approx(
            device_ns / 1000, abs=1e-6
        )
    total = sum(tree["device_ns_by_op"].values()) / 1000
    assert rows[("ProfilerStep*", "CPU")]["device_total_us"] == pytest.approx(total, abs=1e-6)


def test_system_trace_cross_checks_trace_json_and_reports_the_clock_offset() -> None:
    from nprof_report.parse.inputs import resolve
    from nprof_report.parse.sources import load_source

    (source,) = resolve(DEVICE_TREE).sources
    loaded = load_source(source, use_cache=False)
    assert loaded.neuron_device_ns == {}  # nothing added from the system trace
    check = loaded.neuron[0][1].cross_check
    assert check is not None and check.agree
    tree = NEURON_TREES["device_exec"]
    assert check.ops == len(tree["executions"])
    assert check.system_ns == sum(tree["device_ns_by_op"].values())
    assert check.offset_ns == tree["drv_offset_ns"]
    assert "counted once" in loaded.device_source or "cross-checks" in loaded.device_source
    assert any("they agree" in n for n in loaded.notes)


def test_host_call_reading_is_kept_where_the_trace_says_so() -> None:
    frames = load_frames(HOST_TRACE)
    assert frames.device.height == 0
    assert any("read as host-side driver calls" in n for n in frames.notes)
    t = key_averages(frames)
    assert t.filter(pl.col("name").str.ends_with("[privateuse1_driver]")).height == 1


def _host(rows: list[tuple[str, str, str, int, int, int | None, int | None]]) -> pl.DataFrame:
    return pl.DataFrame(
        rows,
        schema={
            "cls": pl.String,
            "cat": pl.String,
            "tid": pl.String,
            "ts_ns": pl.Int64,
            "dur_ns": pl.Int64,
            "external_id": pl.Int64,
            "correlation": pl.Int64,
        },
        orient="row",
    ).with_columns(pl.lit("1").alias("pid"))


NO_FLOWS = pl.DataFrame(
    schema={
        "ph": pl.String,
        "flow_id": pl.Int64,
        "pid": pl.String,
        "tid": pl.String,
        "ts_ns": pl.Int64,
    }
)


@pytest.mark.parametrize(
    ("driver", "meaning", "why"),
    [
        (("runtime", "privateuse1_driver", "7", 50, 500, 1, None), "device", "run past the end"),
        (("runtime", "privateuse1_driver", "7", 50, 20, 1, None), "host", "inside the op"),
        (("runtime", "privateuse1_driver", "1", 50, 500, 1, None), "host", "runs framework ops"),
        (("runtime", "privateuse1_driver", "7", 50, 500, None, None), "host", "none is linked"),
    ],
)
def test_decision_from_track_links_and_overlap(
    driver: tuple[str, str, str, int, int, int | None, int | None], meaning: str, why: str
) -> None:
    host = _host([("op", "cpu_op", "1", 0, 100, 1, None), driver])
    found = decide(host, NO_FLOWS)
    assert found.meaning == meaning
    assert why in found.evidence


def test_ops_output_states_how_driver_rows_were_read() -> None:
    table = CliRunner().invoke(cli, ["ops", str(DEVICE_TREE), "--no-cache"])
    assert table.exit_code == 0, table.output
    notes = [line for line in table.stdout.splitlines() if line.startswith("Note: ")]
    assert any("read as device executions" in n for n in notes)
    assert any("they agree" in n and "clock offset" in n for n in notes)
    as_json = CliRunner().invoke(cli, ["ops", str(DEVICE_TREE), "--format", "json", "--no-cache"])
    assert "read as device executions" in as_json.stderr
    host = CliRunner().invoke(cli, ["ops", str(NEURON / "fused"), "--no-cache"])
    assert "read as host-side driver calls" in host.stdout


@pytest.mark.pdf
def test_report_states_the_reading_and_the_cross_check(tmp_path: Path) -> None:
    from nprof_report.report.build import build_report

    build_report([DEVICE_TREE], out=tmp_path / "r", use_cache=False)
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    impl = summary["implementations"][0]
    assert impl["device_time_source"].startswith("trace.json privateuse1_driver rows")
    (neuron,) = impl["neuron"]
    check = neuron["trace_json_cross_check"]
    total = sum(NEURON_TREES["device_exec"]["device_ns_by_op"].values()) / 1000
    assert check["agree"] is True
    assert check["trace_json_us"] == pytest.approx(total) == check["system_trace_us"]
    assert check["clock_offset_us"] == pytest.approx(
        NEURON_TREES["device_exec"]["drv_offset_ns"] / 1000
    )
    per_op = {r["name"]: r for r in check["per_op"]}
    for op, ns in NEURON_TREES["device_exec"]["device_ns_by_op"].items():
        assert per_op[op]["trace_json_us"] == pytest.approx(ns / 1000)
        assert per_op[op]["system_trace_us"] == pytest.approx(ns / 1000)
        assert per_op[op]["max_difference_us"] == 0
    assert any("read as device executions" in c for c in summary["caveats"])
    assert any("they agree" in c for c in summary["caveats"])


def test_cross_check_reports_disagreement(tmp_path: Path) -> None:
    from nprof_report.parse.inputs import resolve
    from nprof_report.parse.sources import load_source

    tree = tmp_path / "device_exec"
    shutil.copytree(DEVICE_TREE, tree)
    (trace,) = tree.rglob("trace.json")
    doc = json.loads(trace.read_text())
    for e in doc["traceEvents"]:
        if e.get("cat") == "privateuse1_driver":
            e["dur"] = round(e["dur"] + 5, 3)  # 5 µs longer than the execution it stands for
    trace.write_text(json.dumps(doc))
    (source,) = resolve(tree).sources
    loaded = load_source(source, use_cache=False)
    check = loaded.neuron[0][1].cross_check
    assert check is not None and not check.agree
    assert check.disagreeing == check.ops == len(NEURON_TREES["device_exec"]["executions"])
    assert check.max_diff_ns == 5_000
    assert loaded.neuron_device_ns == {}  # still counted once, from trace.json
    assert any("differ by more than 1 µs" in n for n in loaded.notes)


def test_decision_follows_a_correlation_to_the_launching_op() -> None:
    host = _host(
        [
            ("op", "cpu_op", "1", 0, 100, 1, None),
            ("runtime", "privateuse1_runtime", "1", 10, 20, 1, 9),
            ("runtime", "privateuse1_driver", "7", 50, 500, None, 9),  # no External id
        ]
    )
    assert decide(host, NO_FLOWS).meaning == "device"

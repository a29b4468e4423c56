"""``nprof-report inspect`` and ``--fingerprint``: counts checked against the trace read with
``json`` here (not the parser), exit codes, Explorer's ``SchemaFields`` table, a fingerprint that
holds no name or value of the capture, and a tree rebuilt from a fingerprint."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nprof_report.errors import InputError
from nprof_report.parse import fingerprint_path, inspect_path
from nprof_report.parse.neuron import find_sessions, load_session
from nprof_report.parse.neuron.columns import plan
from nprof_report.report.inspectview import checklist

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = ROOT / "fixtures" / "public"
NEURON = ROOT / "fixtures" / "neuron"
SIMPLE_ADD = PUBLIC / "kineto-cuda-simple-add-benchmark.json"
MAKER = NEURON / "make_neuron_fixtures.py"
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nprof_report", "inspect", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _independent_counts(path: Path) -> tuple[Counter[str], list[str]]:
    """Complete events per category, and every op, kernel and annotation name, read with json."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    names = [e["name"] for e in events if e.get("cat") not in (None, "Trace")]
    return Counter(e.get("cat") for e in events), names


def test_public_2023_cuda_trace_counts_links_and_steps(tmp_path: Path) -> None:
    counts, names = _independent_counts(SIMPLE_ADD)
    # the figures, as the file itself holds them
    assert [counts[c] for c in DEVICE_CATS] == [79, 16, 3, 41]
    fp_file = tmp_path / "fp.json"
    proc = _cli(str(SIMPLE_ADD), "--format", "json", "--fingerprint", str(fp_file))
    assert proc.returncode == 0, proc.stderr
    (source,) = json.loads(proc.stdout)["sources"]
    trace = source["trace"]
    dev = trace["device_activities"]
    assert dev["by_category"] == {c: counts[c] for c in DEVICE_CATS}
    assert (dev["total"], dev["linked"], dev["unlinked"]) == (139, 138, 1)
    assert sum(dev["linked_by"].values()) == 138
    # the one activity without an op is a cuda_sync (its runtime call runs outside every op)
    assert trace["events_by_category"] == {k: v for k, v in counts.items() if k is not None}
    # no ProfilerStep#N and no annotation repeating at the top: the window is one step
    assert trace["steps"] == {
        "count": 1,
        "rule": "window",
        "rule_detail": "the whole profiled window, as one step",
    }
    assert trace["file"]["timestamp_convention"] == "absolute-us"
    assert trace["file"]["schemaVersion"] == 1
    assert source["incomplete"] == []
    assert source["device_time_source"] == "trace.json device activities"
    fp_text = fp_file.read_text(encoding="utf-8")
    fp = json.loads(fp_text)
    cats = fp["sources"][0]["trace"]["categories"]
    assert {c: cats[c]["complete"] for c in counts if c is not None} == {
        c: n for c, n in counts.items() if c is not None
    }
    leaked = sorted({n for n in names if n in fp_text})
    assert leaked == []


def test_the_unlinked_cuda_sync_is_the_one_the_file_links_to_no_op() -> None:
    """Independently: the sync whose runtime call (same correlation) lies inside no cpu_op."""
    doc = json.loads(SIMPLE_ADD.read_text(encoding="utf-8"))
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    ops = [e for e in ev if e.get("cat") in ("cpu_op", "user_annotation")]
    runtime = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime"}

    def enclosed(call: dict[str, Any]) -> bool:
        return any(
            o["tid"] == call["tid"] and o["ts"] <= call["ts"] <= o["ts"] + o["dur"] for o in ops
        )

    free = [
        e
        for e in ev
        if e.get("cat") in DEVICE_CATS
        and not enclosed(runtime.get(e["args"].get("correlation"), {"tid": None, "ts": 0}))
    ]
    assert [e["cat"] for e in free] == ["cuda_sync"]


def test_exit_codes_0_1_2(tmp_path: Path) -> None:
    assert _cli(str(NEURON / "fused")).returncode == 0
    unknown = _cli(str(NEURON / "edge" / "unknown_schema_major"))
    assert unknown.returncode == 1
    assert "INCOMPLETE" in unknown.stdout and "major (8)" in unknown.stdout
    bad = _cli(str(ROOT / "fixtures" / "broken" / "garbage.json"))
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "garbage.json" in bad.stderr
    nowhere = tmp_path / "no-such-folder" / "fp.json"
    unwritable = _cli(str(SIMPLE_ADD), "--fingerprint", str(nowhere))
    assert unwritable.returncode == 2
    assert (
        unwritable.stderr
        == f"nprof-report: error: {nowhere}: cannot be written (No such file or directory)\n"
    )


def test_device_time_not_linked_above_one_percent_is_incomplete(tmp_path: Path) -> None:
    doc = json.loads(SIMPLE_ADD.read_text(encoding="utf-8"))
    # every kernel loses its launch (correlation and the ac2g flows): no op is found for them
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "ac2g"]
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["args"].pop("correlation", None)
            e["args"].pop("External id", None)
    broken = tmp_path / "unlinked.json"
    broken.write_text(json.dumps(doc), encoding="utf-8")
    proc = _cli(str(broken), "--format", "json")
    assert proc.returncode == 1
    (source,) = json.loads(proc.stdout)["sources"]
    assert source["trace"]["device_activities"]["unlinked"] == 80
    assert "linked to no op" in source["incomplete"][0]


def test_neuron_233_tree_schema_driver_rows_and_clock_offset() -> None:
    doc = inspect_path(NEURON / "schema12").document
    (session,) = doc["sources"][0]["neuron"]
    assert session["explorer_schema_version"] == "12.0.1"
    assert session["schema_major_known"] is True
    renamed = {r["column"]: r for r in session["tables"]["SystemProfileEvents"]["read_renamed"]}
    assert renamed["trace_event_source"] == {
        "column": "trace_event_source",
        "read_from": "origin",
        "via": "schema dump",
    }
    assert renamed["start_ts"]["via"] == "alias"
    assert doc["sources"][0]["device_time_source"].startswith("Neuron system trace")
    # the device-execution tree (README: each driver row is the execution, 700 ns later on the
    # trace.json clock than the system trace's nc_exec_running)
    doc = inspect_path(NEURON / "device_exec").document
    (source,) = doc["sources"]
    assert source["device_time_source"].startswith("trace.json privateuse1_driver rows")
    driver = source["trace"]["privateuse1_driver"]
    assert driver["meaning"] == "device"
    assert driver["rows"] == 9
    assert "run past the end of the op" in driver["evidence"]
    (session,) = source["neuron"]
    assert session["clock_offset_us"] == pytest.approx(0.7)
    assert session["chain"]["driver_rows"] == session["chain"]["driver_linked_to_neuron_rt"] == 9
    assert doc["complete"] is True
    text = checklist(doc)
    assert "[ok] clock offset" in text.replace("  ", " ").replace("  ", " ")


def test_neuron_tree_without_system_trace_is_incomplete_and_names_the_command(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "fused"
    shutil.copytree(NEURON / "fused", tree)
    for folder in tree.rglob("explorer"):
        shutil.rmtree(folder)
    proc = _cli(str(tree), "--format", "json")
    assert proc.returncode == 1
    (session,) = json.loads(proc.stdout)["sources"][0]["neuron"]
    (missing,) = session["missing_for_complete_report"]
    assert missing["command"].startswith("neuron-explorer view -d ")
    assert missing["blocks"] is True


def _rename_required_column(tree: Path, with_schema_fields: bool) -> Path:
    """Copy fused, rename SystemProfileEvents.name to a name no alias knows; optionally write
    Explorer's SchemaFields table saying so (CONSTRUCTED, like the tree)."""
    shutil.copytree(NEURON / "fused", tree)
    (events,) = tree.rglob("SystemProfileEvents.parquet")
    pl.read_parquet(events).rename({"name": "evt_label"}).write_parquet(events)
    if with_schema_fields:
        pl.DataFrame(
            {
                "table_name": ["SystemProfileEvents", "SystemProfileEvents"],
                "field_name": ["evt_label", "start_ts"],
                "field_description": [
                    "Event label (renamed from name in this constructed test)",
                    "Start timestamp, epoch ns",
                ],
                "field_type": ["string", "integer"],
            }
        ).write_parquet(events.parent / "SchemaFields.parquet")
    return tree


def test_schema_fields_resolves_a_renamed_required_column(tmp_path: Path) -> None:
    without = _rename_required_column(tmp_path / "without", with_schema_fields=False)
    proc = _cli(str(without), "--format", "json")
    assert proc.returncode == 1
    (session,) = json.loads(proc.stdout)["sources"][0]["neuron"]
    assert session["tables"]["SystemProfileEvents"]["required_missing"] == ["name"]
    with pytest.raises(InputError, match="has no column 'name'"):
        load_session(find_sessions(without)[0])

    described = _rename_required_column(tmp_path / "with", with_schema_fields=True)
    doc = inspect_path(described).document
    (session,) = doc["sources"][0]["neuron"]
    assert session["schema_fields_table"] is True
    table = session["tables"]["SystemProfileEvents"]
    assert table["read_renamed"] == [
        {"column": "name", "read_from": "evt_label", "via": "SchemaFields"}
    ]
    assert doc["complete"] is True
    original = load_session(find_sessions(NEURON / "fused")[0]).events
    read = load_session(find_sessions(described)[0]).events
    assert read["name"].to_list() == original["name"].to_list()


def test_schema_fields_comes_before_aliases_and_the_dump() -> None:
    present = ["id", "name", "start_time", "begin"]
    says = {"SystemProfileEvents": {"begin": "start of the event, renamed from start_ts"}}
    dump = {"SystemProfileEvents": {"start_time": "renamed from start_ts"}}
    assert plan(present, "SystemProfileEvents").renamed[0] == ("start_ts", "start_time", "alias")
    with_dump = plan(present, "SystemProfileEvents", dump=dump)
    assert with_dump.renamed[0] == ("start_ts", "start_time", "alias")
    first = plan(present, "SystemProfileEvents", schema_fields=says, dump=dump)
    assert first.renamed[0] == ("start_ts", "begin", "SchemaFields")
    assert "start_time" not in [r[1] for r in first.renamed]


def _structure(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """What a fingerprint carries of an inspection: the trace's shape and the tables' reading."""
    out = []
    for s in doc["sources"]:
        t = s["trace"]
        trace = None
        if t is not None:
            keys = set(t["file"]["top_level_keys"]) - {"nprof_constructed"}
            trace = {
                "events": t["events"],
                "events_by_category": t["events_by_category"],
                "schemaVersion": t["file"]["schemaVersion"],
                "top_level": t["file"]["top_level"],
                "timestamp_convention": t["file"]["timestamp_convention"],
                "top_level_keys": sorted(keys),
            }
        neuron = [
            {
                "explorer_schema_version": n["explorer_schema_version"],
                "tables": n["tables"],
                "raw_files": n["raw_files"],
                "system_trace": n["system_trace"],
            }
            for n in s["neuron"]
        ]
        out.append({"trace": trace, "neuron": neuron})
    return out


@pytest.mark.parametrize(
    "tree",
    [
        "fused",
        "schema12",
        "device_exec",
        "eager_naive",
        "edge/multi_neff_session",
        "edge/runtime_only",
        "edge/no_device_profile",
    ],
)
def test_a_tree_made_from_a_fingerprint_has_the_same_inspect_structure(
    tree: str, tmp_path: Path
) -> None:
    fp = tmp_path / "fp.json"
    fp.write_text(json.dumps(fingerprint_path(NEURON / tree)), encoding="utf-8")
    out = tmp_path / "rebuilt"
    subprocess.run(
        [sys.executable, str(MAKER), "--from-fingerprint", str(fp), str(out)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    for trace in out.rglob("trace.json"):
        assert "from a capture's fingerprint" in json.loads(trace.read_text())["nprof_constructed"]
    assert (out / "CONSTRUCTED.md").is_file()
    original = _structure(inspect_path(NEURON / tree).document)
    rebuilt = _structure(inspect_path(out).document)
    assert rebuilt == original
    assert original[0]["neuron"][0]["tables"]  # not equal by being empty


# --------------------------------------------------------------------------- nothing leaks

_WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_", min_size=6, max_size=12)


def _secret(word: str) -> str:
    return f"qx{word}"  # never a Kineto key, category or type word


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=st.lists(_WORD, min_size=1, max_size=4, unique=True),
    kernel=_WORD,
    annotation=_WORD,
    path=_WORD,
    host=_WORD,
    value=_WORD,
)
def test_no_name_or_value_reaches_the_fingerprint(
    tmp_path: Path,
    ops: list[str],
    kernel: str,
    annotation: str,
    path: str,
    host: str,
    value: str,
) -> None:
    ops = [_secret(o) for o in ops]
    kernel, annotation, path, host, value = map(_secret, (kernel, annotation, path, host, value))
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": host}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": value}},
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": annotation,
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 1000,
            "args": {"External id": 1},
        },
    ]
    for i, op in enumerate(ops):
        ts = 10 + 100 * i
        events += [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": op,
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": 50,
                "args": {
                    "External id": 10 + i,
                    "Input Dims": [[4, 4]],
                    "Input type": [value],
                    "Call stack": f"/home/{path}/{path}.py(12): {op}",
                },
            },
            {
                "ph": "X",
                "cat": "python_function",
                "name": f"{path}.py(3): {op}",
                "pid": 1,
                "tid": 1,
                "ts": ts + 1,
                "dur": 2,
                "args": {"Python id": i},
            },
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": ts + 5,
                "dur": 5,
                "args": {"External id": 10 + i, "correlation": 100 + i},
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"{kernel}<{op}>",
                "pid": 0,
                "tid": 7,
                "ts": ts + 20,
                "dur": 10,
                "args": {"External id": 10 + i, "correlation": 100 + i, "device": 0},
            },
            {
                "ph": "i",
                "cat": "cpu_instant_event",
                "name": f"{value}{i}",
                "pid": 1,
                "tid": 1,
                "ts": ts + 3,
                "s": "t",
                "args": {"note": value},
            },
        ]
    doc = {
        "schemaVersion": 1,
        "traceName": f"/home/{path}/{host}.pt.trace.json",
        "hostName": host,
        "deviceProperties": [{"id": 0, "name": f"{host} GPU"}],
        "distributedInfo": {"backend": value, "rank": 0, "world_size": 2},
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
        "traceEvents": events,
    }
    folder = tmp_path / _secret(path)
    folder.mkdir(exist_ok=True)
    trace = folder / f"{host}.pt.trace.json"
    trace.write_text(json.dumps(doc), encoding="utf-8")
    text = json.dumps(fingerprint_path(trace))
    for secret in (*ops, kernel, annotation, path, host, value):
        assert secret not in text
    assert "qx" not in text
    # the structure is there: categories, counts and arg keys
    fp = json.loads(text)["sources"][0]["trace"]
    assert fp["categories"]["cpu_op"]["count"] == len(ops)
    assert fp["categories"]["cpu_op"]["args"]["Call stack"] == ["str"]
    assert fp["distributed_keys"] == ["backend", "rank", "world_size"]


def test_neuron_config_recorded_at_capture_is_reported(tmp_path: Path) -> None:
    tree = tmp_path / "fused"
    shutil.copytree(NEURON / "fused", tree)
    record = {
        "format": "nprof-neuron-capture",
        "neuron_config": {
            "passed": {"modes": "[DEVICE, RUNTIME]", "profile_output_dir": str(tree)},
            "dropped": ["correlate_device_time: unexpected keyword argument"],
        },
        "environment": {},
    }
    (tree / "neuron-capture.json").write_text(json.dumps(record), encoding="utf-8")
    (session,) = inspect_path(tree).document["sources"][0]["neuron"]
    assert session["neuron_config"] == {
        "recorded": True,
        "passed": ["modes", "profile_output_dir"],
        "dropped": ["correlate_device_time: unexpected keyword argument"],
    }
    (fp,) = fingerprint_path(tree)["sources"][0]["neuron"]
    assert fp["neuron_config"] == {
        "passed": ["modes", "profile_output_dir"],
        "dropped": ["correlate_device_time"],
    }
    assert str(tmp_path) not in json.dumps(fp)


def test_a_file_too_large_to_decode_twice_keeps_its_kind_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import nprof_report.parse.inspection as inspection

    monkeypatch.setattr(inspection, "TOP_LEVEL_LIMIT", 10)
    gz = PUBLIC / "kineto-cuda-2022-ddp-train-test.json.gz"
    facts = inspection.file_facts(gz)
    assert (facts["gzip"], facts["top_level"], facts["valid_json"]) == (True, "object", None)
    assert facts["top_level_keys"] is None


def test_a_real_cpu_run_steps_versions_and_fingerprint(cpu_run: Path, tmp_path: Path) -> None:
    """A real capture of this machine: every implementation's ProfilerStep#N steps, counted here
    with json, and the run's versions; no op name reaches the fingerprint."""
    inspection = inspect_path(cpu_run)
    doc = inspection.document
    assert doc["run"]["backend"] == "cpu"
    assert doc["run"]["versions"]["torch"]
    assert len(doc["sources"]) == 3  # naive, fused, compiled
    names: set[str] = set()
    for source in doc["sources"]:
        trace_path = Path(source["trace"]["file"]["path"])
        events = json.loads(trace_path.read_text(encoding="utf-8"))["traceEvents"]
        steps = {
            e["name"]
            for e in events
            if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
        }
        assert source["trace"]["steps"]["count"] == len(steps) == 4
        assert source["trace"]["steps"]["rule"] == "ProfilerStep#N"
        assert source["device_time_source"] == "none"
        names |= {e["name"] for e in events if e.get("cat") in ("cpu_op", "user_annotation")}
    assert doc["complete"] is True
    text = json.dumps(fingerprint_path(cpu_run))
    assert json.loads(text)["run"]["versions"]["torch"] == doc["run"]["versions"]["torch"]
    assert sorted(n for n in names if f'"{n}"' in text or n in text) == []

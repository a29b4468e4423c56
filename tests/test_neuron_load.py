"""Neuron session discovery and loaders, against the CONSTRUCTED trees in fixtures/neuron/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from nprof_report.errors import InputError
from nprof_report.parse.neuron import (
    DEVICE_EXECUTION_INFO,
    DEVICE_INSTRUCTION,
    DEVICE_SUMMARY,
    SYSTEM_EVENTS,
    find_sessions,
    load_session,
)
from nprof_report.parse.neuron.device import load_framework_mapping
from nprof_report.parse.neuron.load import (
    check_schema_version,
    dropped_event_warnings,
    load_system_events_parquet,
    load_system_profile_json,
)
from tests.conftest import NEURON, NEURON_EXPECTED, NEURON_TREES


def session_dir(key: str) -> Path:
    return NEURON / NEURON_TREES[key]["session"]


def load(key: str, **kw: Any) -> Any:
    (s,) = find_sessions(session_dir(key))
    return load_session(s, **kw)


# ---------------------------------------------------------------- discovery


def test_find_sessions_whole_fixture_folder_finds_every_constructed_session() -> None:
    found = {s.path.resolve() for s in find_sessions(NEURON)}
    assert found == {session_dir(k).resolve() for k in NEURON_TREES}


@pytest.mark.parametrize("level", [0, 1, 2])
def test_find_sessions_from_any_level_down_to_the_session(level: int) -> None:
    sess = session_dir("fused")
    root = [sess.parents[1], sess.parent, sess][level]
    (s,) = find_sessions(root)
    assert s.path == sess
    assert s.instance_id == NEURON_EXPECTED["instance_id"]
    assert s.process_id == NEURON_TREES["fused"]["pid"]
    assert s.trace_json is not None
    assert s.trace_json.name == "trace.json"
    assert {p.name for p in s.pb_files} == {"ntrace.pb", "trace_info.pb"}


def test_neff_names_give_model_ids() -> None:
    (s,) = find_sessions(session_dir("eager_naive"))
    assert sorted(n.model_id for n in s.neffs) == sorted(NEURON_TREES["eager_naive"]["models"])
    assert all(n.vnc == 0 for n in s.neffs)
    assert len(s.device_profile_dirs) == len(NEURON_TREES["eager_naive"]["models"])
    # split system table: both parts, in part order
    (sysdir,) = s.system_profile_dirs
    parts = [p.name for p in sysdir.files("SystemProfileEvents")]
    assert parts == ["SystemProfileEvents_0.parquet", "SystemProfileEvents_1.parquet"]


def test_inspect_layout_without_timestamp_level_and_instid_ntffs() -> None:
    (s,) = find_sessions(NEURON / "edge" / "runtime_only")
    assert s.instance_id == "i-012590440bb9fd263"
    assert s.process_id == 98399
    assert s.trace_json is None
    (neff,) = s.neffs
    assert neff.vnc is None  # neff_<hash>.neff
    assert sorted((n.model_id, n.instance_idx, n.vnc) for n in s.ntffs) == [
        (neff.model_id, 0, 0),
        (neff.model_id, 0, 1),
    ]
    assert not any(n.is_session for n in s.ntffs)


def test_session_mode_ntff_is_recognised() -> None:
    (s,) = find_sessions(session_dir("multi_neff_session"))
    (ntff,) = s.ntffs
    assert ntff.is_session
    assert (ntff.nc_idx, ntff.session_idx, ntff.model_id) == (0, 0, None)
    assert len(s.neffs) == len(NEURON_TREES["multi_neff_session"]["models"]) == 3


def test_bare_explorer_output_is_its_own_session() -> None:
    explorer = session_dir("fused") / "explorer"
    (s,) = find_sessions(explorer)
    assert s.path == explorer
    assert s.has_processed
    assert not s.neffs
    assert len(s.device_profile_dirs) == 1


def test_find_sessions_rejects_missing_folder_and_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is not a folder"):
        find_sessions(tmp_path / "nope")
    f = tmp_path / "x.txt"
    f.write_text("x")
    with pytest.raises(InputError):
        find_sessions(f)
    assert find_sessions(tmp_path) == []


def test_failure_signs_become_notes(tmp_path: Path) -> None:
    (tmp_path / "ntrace.pb").write_bytes(b"")
    (tmp_path / "123_vnc_0.ntff").write_bytes(b"")
    (s,) = find_sessions(tmp_path)
    text = " ".join(s.notes)
    assert "0-byte NTFF" in text
    assert "without trace_info.pb" in text
    data = load_session(s)
    assert data.events.height == 0
    assert any("was not converted" in w for w in data.warnings)


# ---------------------------------------------------------------- system events


def test_parquet_events_follow_schema_and_documented_fields() -> None:
    d = load("eager_naive")
    ev = d.events
    assert ev.schema == SYSTEM_EVENTS
    assert set(ev["source"].unique()) == {"framework", "neuron_rt", "neuron_hw"}
    hw = ev.filter(pl.col("name") == "nc_exec_running")
    assert hw.height == 2 * len(NEURON_TREES["eager_naive"]["executions"])
    assert hw["model_id"].null_count() == 0
    assert set(hw["pcore_idx"]) == {0, 1}
    # framework rows: " [trace.json]" stripped, original kept
    fw = ev.filter(pl.col("source") == "framework")
    assert fw["name_raw"].str.ends_with(" [trace.json]").all()
    assert not fw["name"].str.contains(r"\[").any()
    # the sequence id of framework driver rows comes out of extra_attributes_json
    seqs = {e["nrt_sequence_id"] for e in NEURON_TREES["eager_naive"]["executions"]}
    assert set(fw["nrt_sequence_id"].drop_nulls()) == seqs
    assert (ev["end_ns"] - ev["start_ns"] == ev["dur_ns"]).all()


def test_split_parquet_equals_the_parts_concatenated() -> None:
    (s,) = find_sessions(session_dir("eager_naive"))
    parts = s.system_profile_dirs[0].files("SystemProfileEvents")
    whole = load_system_events_parquet(parts)
    separately = pl.concat([load_system_events_parquet([p]) for p in parts])
    assert whole.height == separately.height == sum(pl.read_parquet(p).height for p in parts)
    assert whole.sort("event_id").equals(separately.sort("event_id"))


def test_attributes_as_columns_or_in_extra_json_load_the_same(tmp_path: Path) -> None:
    rows = {
        "id": [1, 2],
        "name": ["nc_exec_running", "nc_exec_running"],
        "start_ts": [10, 10],
        "end_ts": [20, 20],
        "duration_ns": [10, 10],
        "trace_event_source": ["neuron_hw", "neuron_hw"],
        "flow_id": [["7"], ["7"]],
    }
    a = pl.DataFrame({**rows, "extra_attributes_json": ['{"model_id":"55","exec_id":3}'] * 2})
    b = pl.DataFrame({**rows, "model_id": ["55", "55"], "exec_id": [3, 3]})
    a.write_parquet(tmp_path / "a.parquet")
    b.write_parquet(tmp_path / "b.parquet")
    la = load_system_events_parquet([tmp_path / "a.parquet"])
    lb = load_system_events_parquet([tmp_path / "b.parquet"])
    cols = ["model_id", "exec_id", "flow_ids"]
    assert la.select(cols).equals(lb.select(cols))
    assert la["model_id"].to_list() == ["55", "55"]


def test_unreadable_parquet_is_an_input_error(tmp_path: Path) -> None:
    bad = tmp_path / "SystemProfileEvents.parquet"
    bad.write_bytes(b"not parquet")
    with pytest.raises(InputError, match=r"SystemProfileEvents\.parquet"):
        load_system_events_parquet([bad])
    pl.DataFrame({"x": [1]}).write_parquet(tmp_path / "other.parquet")
    with pytest.raises(InputError, match="SystemProfileEvents has no column 'name'"):
        load_system_events_parquet([tmp_path / "other.parquet"])


def test_legacy_json_loads_the_same_events_as_parquet() -> None:
    par = load("fused").events
    leg = load("legacy_fused").events
    cols = ["name", "source", "start_ns", "dur_ns", "model_id", "exec_id", "flow_ids", "nc_idx"]
    assert leg.height == par.height
    assert (
        leg.select(cols).sort("start_ns", "name").equals(par.select(cols).sort("start_ns", "name"))
    )
    assert set(leg["process_id"]) == {NEURON_TREES["legacy_fused"]["pid"]}


def test_legacy_variant_trace_events_args_and_microseconds() -> None:
    # dropped_events writes 'trace_events', attributes under 'args', timestamp_unit "us"
    d = load("dropped_events")
    hw = d.events.filter(pl.col("name") == "nc_exec_running").sort("start_ns")
    exp = NEURON_TREES["dropped_events"]["executions"]
    assert hw["start_ns"].min() == min(e["start_ns"] for e in exp)  # exact ns through µs text
    assert hw.group_by("flow_ids").agg(pl.col("end_ns").max())["end_ns"].to_list() == [
        e["end_ns"] for e in exp
    ]
    assert set(hw["model_id"]) == {e["model_id"] for e in exp}


@pytest.mark.parametrize(
    ("doc", "match"),
    [
        ({"events": []}, "no 'trace_event'"),
        ({"trace_event": {"a": 1}}, "not a list"),
        ("x", "not a system_profile"),
        (
            {"trace_event": [{"name": "a", "timestamp": 1, "timestamp_unit": "fortnight"}]},
            "unknown timestamp_unit",
        ),
    ],
)
def test_bad_legacy_json_is_an_input_error(tmp_path: Path, doc: Any, match: str) -> None:
    p = tmp_path / "system_profile.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=match):
        load_system_profile_json(p)


def test_legacy_json_bare_list_and_invalid_json(tmp_path: Path) -> None:
    p = tmp_path / "system_profile.json"
    p.write_text(json.dumps([{"name": "nrt_load", "timestamp": 5, "duration": 2}]))
    ev = load_system_profile_json(p)
    assert ev.select("name", "source", "start_ns", "end_ns").row(0) == (
        "nrt_load",
        "neuron_rt",
        5,
        7,
    )
    p.write_text("{")
    with pytest.raises(InputError, match="not valid JSON"):
        load_system_profile_json(p)


# ---------------------------------------------------------------- schema version, dropped events


def test_schema_version_known_and_unknown_major() -> None:
    assert load("fused").schema_version == "7.4.0"
    assert not any("unknown major" in w for w in load("fused").warnings)
    # an unknown major is read by the columns its tables have, with a warning (formats.md §9.2)
    d = load("unknown_schema_major")
    assert d.schema_version == "8.0.0"
    assert any("unknown major 8" in w and "--show-profile-schema" in w for w in d.warnings)
    assert d.events.height == load("two_pcores").events.height
    assert check_schema_version("7.9.1", Path("x")) is None
    assert "not semver" in (check_schema_version("v-seven", Path("x")) or "")


def test_dropped_events_warning_from_legacy_export() -> None:
    d = load("dropped_events")
    assert any("dropped due to full ring buffer" in w for w in d.warnings)
    assert not any("dropp" in w for w in load("fused").warnings)


def test_dropped_events_warning_from_parquet_warning_table_and_heuristic(tmp_path: Path) -> None:
    d = load("fused")
    w = tmp_path / "Warning.parquet"
    pl.DataFrame(
        {"message": ["System profile events were dropped due to full ring buffer"]}
    ).write_parquet(w)
    (s,) = find_sessions(tmp_path)
    assert dropped_event_warnings(d.events, (), s.system_profile_dirs) == [
        f"{w}: System profile events were dropped due to full ring buffer"
    ]
    n_nc0 = d.events.filter(pl.col("nc_idx") == 0).height
    heur = dropped_event_warnings(d.events, max_events_per_nc=n_nc0)
    assert len(heur) == 1
    assert "NC 0" in heur[0]
    assert dropped_event_warnings(d.events, max_events_per_nc=n_nc0 + 1) == []


# ---------------------------------------------------------------- device tables


def test_device_tables_model_mode() -> None:
    d = load("eager_naive")
    assert d.summary.schema == DEVICE_SUMMARY
    assert d.instruction.schema == DEVICE_INSTRUCTION
    assert d.execution_info.schema == DEVICE_EXECUTION_INFO
    models = NEURON_TREES["eager_naive"]["models"]
    got = dict(d.summary.select("model_id", "total_time_ns").iter_rows())
    assert got == {m: v["summary_total_time_ns"] for m, v in models.items()}
    assert set(d.instruction["engine"]) == {"vector", "scalar", "sync"}  # "Scalar" lower-cased
    assert set(d.instruction["model_id"]) == set(models)
    assert set(d.execution_info["model_id"]) == set(models)


def test_legacy_device_json_matches_parquet_device_tables() -> None:
    par = load("fused")
    leg = load("legacy_fused")
    cols = [
        "model_id",
        "total_time_ns",
        "vector_engine_active_time_percent",
        "mfu_estimated_percent",
    ]
    assert leg.summary.select(cols).equals(par.summary.select(cols))
    icols = ["start_dev_ns", "dur_ns", "engine", "opcode"]
    assert leg.instruction.select(icols).equals(par.instruction.select(icols))


def test_session_profile_execution_info_names_several_neffs() -> None:
    d = load("multi_neff_session")
    exp = NEURON_TREES["multi_neff_session"]
    assert d.execution_info.height == len(exp["executions"])
    assert d.execution_info["model_id"].to_list() == [e["model_id"] for e in exp["executions"]]
    assert d.summary["model_id"].to_list() == [None]  # one profile for several NEFFs


def test_framework_mapping_loader() -> None:
    d = load("framework_mapping")
    exp = NEURON_TREES["framework_mapping"]["executions"]
    assert d.framework_mapping["nrt_sequence_id"].to_list() == [e["nrt_sequence_id"] for e in exp]
    assert d.framework_mapping["seq_nr"].to_list() == [e["seq_nr"] for e in exp]


def test_framework_mapping_bad_file(tmp_path: Path) -> None:
    p = tmp_path / "framework_mapping_x.json"
    p.write_text(json.dumps({"version": 1}))
    with pytest.raises(InputError, match="no 'data' list"):
        load_framework_mapping(p)

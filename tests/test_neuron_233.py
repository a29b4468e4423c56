"""Neuron SDK 2.33/2.34 layouts (formats.md §9), against the CONSTRUCTED trees in fixtures/neuron/.

schema12/: Explorer schema 12.0.1-style tables with renamed and retyped columns and a schema dump;
edge/pid_folder_trace/: the framework trace in <instance>_pid_<pid>/; edge/renamed_legacy/: a
legacy JSON export under another name; edge/warmup_env/: a model-mode capture with
NEURON_RT_INSPECT_DEVICE_PROFILE_NUM_WARMUP=2 recorded beside it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from nprof_report.cli import cli
from nprof_report.errors import InputError
from nprof_report.parse.inputs import resolve
from nprof_report.parse.neuron import correlate, find_sessions, load_session
from nprof_report.parse.neuron.columns import (
    SCHEMA_DUMP_NAMES,
    TABLES,
    read_schema_dump,
)
from nprof_report.parse.neuron.columns import (
    resolve as resolve_columns,
)
from tests.conftest import NEURON, NEURON_TREES


def session_dir(key: str) -> Path:
    return NEURON / NEURON_TREES[key]["session"]


def ops_device_us(folder: Path) -> dict[str, float]:
    result = CliRunner().invoke(cli, ["ops", str(folder), "--format", "json", "--no-cache"])
    assert result.exit_code == 0, result.output
    return {r["name"]: r["self_device_us"] for r in json.loads(result.stdout)}


def expected_us(key: str) -> dict[str, float]:
    return {op: ns / 1000 for op, ns in NEURON_TREES[key]["device_ns_by_op"].items()}


# ---------------------------------------------------------------- schema 12.x


def test_schema12_tree_reads_renamed_and_retyped_columns() -> None:
    (s,) = find_sessions(session_dir("schema12"))
    d = load_session(s)
    assert d.schema_version == "12.0.1"
    assert not any("unknown major" in w for w in d.warnings)  # 12 is a major the table maps
    renamed = next(w for w in d.warnings if "SystemProfileEvents (schema 12.0.1)" in w)
    assert "start_ts from start_time (alias)" in renamed
    assert "trace_event_source from origin (schema dump)" in renamed
    assert d.events.filter(pl.col("source").is_null()).height == 0
    assert set(d.events["source"]) == {"neuron_rt", "neuron_hw", "framework"}
    hw = d.events.filter(pl.col("name") == "nc_exec_running")
    assert hw["flow_ids"].list.len().min() == 1 and hw["start_ns"].min() > 10**18
    # the 12.x tree holds the same executions as it was built with
    links = correlate(d)
    assert sorted(links.executions["dur_ns"]) == sorted(
        e["dur_ns"] for e in NEURON_TREES["schema12"]["executions"]
    )


def test_schema12_ops_give_the_device_time_it_was_built_with() -> None:
    got = ops_device_us(NEURON / "schema12")
    for op, us in expected_us("schema12").items():
        assert got[op] == pytest.approx(us, abs=1e-6)


@pytest.mark.pdf
def test_schema12_tree_builds_a_report(tmp_path: Path) -> None:
    from nprof_report.report.build import build_report

    build_report([NEURON / "schema12"], out=tmp_path / "r", use_cache=False)
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    impl = summary["implementations"][0]
    assert impl["device_time_source"].startswith("Neuron system trace")
    assert any("read with renamed columns" in c for c in summary["caveats"])


def test_without_the_dump_the_unaliased_rename_stays_unread(tmp_path: Path) -> None:
    tree = tmp_path / "schema12"
    shutil.copytree(NEURON / "schema12", tree)
    (tree / SCHEMA_DUMP_NAMES[0]).unlink()
    (s,) = find_sessions(tree)
    d = load_session(s)
    renamed = next(w for w in d.warnings if "SystemProfileEvents" in w)
    assert "origin" not in renamed
    # the source is then inferred from event names (§5), and the ops still get device time
    assert d.events.filter(pl.col("name") == "nc_exec_running")["source"].unique().to_list() == [
        "neuron_hw"
    ]


def test_missing_required_column_names_table_column_version_and_the_schema_command(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "schema12"
    shutil.copytree(NEURON / "schema12", tree)
    (table,) = tree.rglob("SystemProfileEvents.parquet")
    pl.read_parquet(table).drop("start_time").write_parquet(table)
    (s,) = find_sessions(tree)
    with pytest.raises(InputError) as err:
        load_session(s)
    text = str(err.value)
    assert str(table) in text
    for part in (
        "SystemProfileEvents",
        "'start_ts'",
        "12.0.1",
        "neuron-explorer view --show-profile-schema",
    ):
        assert part in text
    result = CliRunner().invoke(cli, ["ops", str(tree), "--no-cache"])
    assert isinstance(result.exception, InputError)  # main() maps it to exit code 2
    assert "has no column 'start_ts'" in str(result.exception)


def test_schema_dump_reader_and_rename_marker(tmp_path: Path) -> None:
    dump = read_schema_dump(NEURON / "schema12" / SCHEMA_DUMP_NAMES[0])
    assert dump["SystemProfileEvents"]["origin"].startswith("string Trace event source")
    assert "duration" in dump["Instruction"]
    # a description that names the old column resolves it even without a matching hint
    df = pl.DataFrame({"nm": ["x"], "t0": [5], "pidx": [1]})
    fields = {"SystemProfileEvents": {"nm": "renamed from name", "t0": "int64 was start_ts"}}
    out, notes = resolve_columns(
        df, "SystemProfileEvents", path=tmp_path, version="13.0.0", dump=fields
    )
    assert {"name", "start_ts"} <= set(out.columns)
    assert "schema dump" in notes[0]


def test_mapping_table_names_each_column_once() -> None:
    # within a table, a name (7.x or alias) stands for one column only: otherwise which column an
    # Explorer field is read as would depend on the order of the table
    for table, columns in TABLES.items():
        spellings = [n for c in columns for n in (c.name, *c.aliases)]
        clashes = {n for n in spellings if spellings.count(n) > 1}
        assert not clashes, (table, clashes)
        assert any(c.required for c in columns) == (table == "SystemProfileEvents")


# ---------------------------------------------------------------- files


def test_framework_trace_in_the_pid_folder_is_found_and_used() -> None:
    (s,) = find_sessions(session_dir("pid_folder_trace"))
    assert s.trace_json is not None
    assert s.trace_json.name == "neuron_framework_trace_rank_0.json"
    assert s.trace_json.parent == session_dir("pid_folder_trace").parent
    (source,) = resolve(NEURON / "edge" / "pid_folder_trace").sources
    assert source.trace == s.trace_json
    got = ops_device_us(NEURON / "edge" / "pid_folder_trace")
    for op, us in expected_us("pid_folder_trace").items():
        assert got[op] == pytest.approx(us, abs=1e-6)


def test_legacy_json_export_is_found_by_content() -> None:
    (s,) = find_sessions(session_dir("renamed_legacy"))
    assert [p.name for p in s.system_profile_json] == ["fused-system-export.json"]
    got = ops_device_us(NEURON / "edge" / "renamed_legacy")
    for op, us in expected_us("renamed_legacy").items():
        assert got[op] == pytest.approx(us, abs=1e-6)


def test_num_warmup_marks_the_execution_the_model_profile_recorded() -> None:
    (s,) = find_sessions(session_dir("warmup_env"))
    links = correlate(load_session(s))
    files = links.exec_files.join(links.executions.select("exec_key", "start_ns"), on="exec_key")
    nth = files.sort("start_ns").with_columns(pl.int_range(pl.len()).over("model_id").alias("n"))
    profiled = nth.filter(pl.col("profiled"))
    assert profiled["n"].to_list() == [2, 2]  # NUM_WARMUP=2: the third execution of each model
    assert profiled["model_id"].n_unique() == 2

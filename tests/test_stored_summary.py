"""summary.json version 2 (issue 32): the document, its bulk in Parquet beside it.

Written and read back, a summary is the one the report was made from, every list whole; the
document stays small whatever the trace; a table that is missing or changed is an input error
naming its file; version-1 documents are still read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest

from nprof_report.report.build import build_report, summarise_inputs
from nprof_report.report.figures import (
    DOCUMENT_TEXT_CHARS,
    TEXT_CHARS,
    Summary,
    json_pieces,
    read_summary,
    store_summary,
)
from nprof_report.report.jobs import Engine
from tests.conftest import NEURON, PUBLIC, PUBLIC_TRACES, SUMMARY_INPUTS, run_cli


def _as_json(summary: Summary | dict[str, Any], limit: int = DOCUMENT_TEXT_CHARS) -> Any:
    """As JSON with texts cut as the document cuts them (a table's texts, cut at TEXT_CHARS, are
    cut again as their whole would be)."""
    return orjson.loads(b"".join(json_pieces(summary, text_limit=limit)))


def _write(summary: Summary, folder: Path) -> Path:
    document, files = store_summary(summary)
    folder.mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    path = folder / "summary.json"
    path.write_bytes(b"".join(json_pieces(document, text_limit=DOCUMENT_TEXT_CHARS)))
    return path


@pytest.mark.parametrize("inputs", SUMMARY_INPUTS.values(), ids=SUMMARY_INPUTS.keys())
def test_a_summary_read_back_is_the_one_in_memory(inputs: list[Path], tmp_path: Path) -> None:
    _, summary = summarise_inputs(inputs, Engine(jobs=1))
    path = _write(summary, tmp_path)
    document = json.loads(path.read_text())
    assert document["format_version"] == 2
    # the lists are in the tables, not the document
    impl = document["implementations"][0]
    assert impl["steps"]["table"] == "steps"
    assert impl["diff_profile"]["ops"] == {
        "table": "op_series",
        "rows": len(summary["implementations"][0]["diff_profile"]["ops"]),  # type: ignore[index]
    }
    assert {t["name"] for t in document["tables"]} >= {"steps", "op_series", "key_averages"}
    for table in document["tables"]:
        assert pl.read_parquet(tmp_path / table["path"]).height == table["rows"]
    restored = read_summary(path)
    assert _as_json(restored) == _as_json(summary)
    # the tables keep texts to TEXT_CHARS, as the keys diff and check align are cut
    for whole, back in zip(summary["implementations"], restored["implementations"]):
        assert _as_json({"k": whole["key_averages"]}, TEXT_CHARS) == {"k": back["key_averages"]}


def test_ranks_and_neuron_steps_go_to_their_tables(tmp_path: Path) -> None:
    _, ranks = summarise_inputs(
        [
            PUBLIC / "kineto-cuda-2rank-sampled-rank0.json.gz",
            PUBLIC / "kineto-cuda-2rank-sampled-rank1.json.gz",
        ],
        Engine(jobs=1),
    )
    assert "ranks" in ranks
    doc = json.loads(_write(ranks, tmp_path / "r").read_text())
    assert doc["ranks"]["step_time_us"]["table"] == "rank_step_times"
    times = pl.read_parquet(tmp_path / "r" / "data" / "rank_step_times.parquet")
    assert times["step_time_us"].to_list() == ranks["ranks"]["step_time_us"]
    _, neuron = summarise_inputs([NEURON / "fused"], Engine(jobs=1))
    doc = json.loads(_write(neuron, tmp_path / "n").read_text())
    assert doc["implementations"][0]["neuron"][0]["steps"]["table"] == "neuron_steps"


def test_the_document_keeps_the_rows_the_report_shows(tmp_path: Path) -> None:
    _, summary = summarise_inputs([PUBLIC_TRACES["cuda2023"]], Engine(jobs=1))
    doc = json.loads(_write(summary, tmp_path).read_text())
    impl, whole = doc["implementations"][0], summary["implementations"][0]
    assert impl["key_averages"]["shown"] == _as_json({"k": list(whole["key_averages"][:25])})["k"]
    # the top ops the report ranks first: most dispatch time per step
    shown = impl["top_ops"]["shown"]
    ranked = sorted(
        whole["top_ops"],
        key=lambda r: (r["calls_per_step"] or 0) * (r["dispatch_median_us"] or 0),
        reverse=True,
    )
    assert len(shown) == min(25, len(ranked))
    assert {r["name"] for r in shown} == {r["name"] for r in ranked[:25]}


@pytest.mark.pdf
def test_a_damaged_or_missing_table_is_one_line_naming_it(tmp_path: Path) -> None:
    trace = PUBLIC_TRACES["cuda2023"]
    out = tmp_path / "base"
    build_report([trace], out=out, use_cache=False)
    assert run_cli("check", str(trace), "--baseline", str(out / "summary.json")).returncode in (
        0,
        1,
    )
    table = out / "data" / "op_series.parquet"
    data = bytearray(table.read_bytes())
    data[len(data) // 2] ^= 0xFF
    table.write_bytes(bytes(data))
    damaged = run_cli("check", str(trace), "--baseline", str(out / "summary.json"))
    assert damaged.returncode == 2
    lines = damaged.stderr.strip().splitlines()
    assert len(lines) == 1 and "op_series.parquet" in lines[0] and "sha256" in lines[0], lines
    table.unlink()
    missing = run_cli("diff", str(out / "summary.json"), str(trace), "--out", str(tmp_path / "d"))
    assert missing.returncode == 2
    lines = missing.stderr.strip().splitlines()
    assert len(lines) == 1 and "op_series.parquet" in lines[0], lines

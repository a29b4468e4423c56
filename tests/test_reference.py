"""`ops --format json` against PyTorch's own key_averages() fed with the same events.

The reference (:mod:`tests.torch_reference`) runs the installed torch's
``profile._parse_kineto_results``, ``EventList._build_tree`` and ``EventList.key_averages`` on
a trace file's events; it reads the JSON itself and shares no code with the parser. Every row
must agree on every field, to the nanosecond.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nprof_report.cli import cli
from tests.conftest import PUBLIC
from tests.torch_reference import ENCLOSURE, EXTERNAL_ID, Row, reference_key_averages

pytest.importorskip("torch")

_FIELDS = ("self_cpu", "cpu_total", "self_device", "device_total")
# the layouts that lost PyTorch's link (every runtime call's External id is its own correlation
# id): there the reference links a launch to the innermost enclosing scope, as the parser does
LOST_LINK = {
    "kineto-cuda-2022-ddp-train-test.json.gz",
    "kineto-cuda-2023-cupti-profiler.json.gz",
    "kineto-cuda-2rank-sampled-rank0.json.gz",
    "kineto-cuda-2rank-sampled-rank1.json.gz",
    "kineto-cuda-simple-add-benchmark.json",
}
TRACES = sorted(p for p in PUBLIC.iterdir() if p.name.endswith((".json", ".json.gz")))


def _ops_json(path: Path) -> dict[tuple[str, str, bool], dict[str, int]]:
    result = CliRunner().invoke(cli, ["ops", str(path), "--format", "json", "--quiet"])
    assert result.exit_code == 0, result.output
    rows: dict[tuple[str, str, bool], dict[str, int]] = {}
    for r in json.loads(result.stdout):
        key = (r["name"], r["device_type"], r["is_user_annotation"])
        assert key not in rows, key
        rows[key] = {"calls": r["calls"]} | {f: round(r[f"{f}_us"] * 1000) for f in _FIELDS}
    return rows


def _as_dict(row: Row) -> dict[str, int]:
    return {"calls": row.calls} | {f: getattr(row, f"{f}_ns") for f in _FIELDS}


def assert_matches_reference(path: Path) -> str:
    """Every row of ``ops`` equals PyTorch's; returns the link rule the reference used."""
    reference, rule = reference_key_averages(path)
    ours = _ops_json(path)
    assert set(ours) == set(reference)
    wrong = {
        key: (expected, ours[key])
        for key, row in reference.items()
        if (expected := _as_dict(row)) != ours[key]
    }
    assert not wrong, (
        f"{len(wrong)} of {len(reference)} rows differ, e.g. {next(iter(wrong.items()))}"
    )
    return rule


@pytest.mark.parametrize("path", TRACES, ids=[p.name for p in TRACES])
def test_public_trace_equals_pytorch_key_averages(path: Path) -> None:
    rule = assert_matches_reference(path)
    assert rule == (ENCLOSURE if path.name in LOST_LINK else EXTERNAL_ID)


@pytest.mark.capture
def test_captured_cpu_traces_equal_pytorch_key_averages(cpu_run: Path) -> None:
    traces = sorted(cpu_run.glob("*/trace.json"))
    assert len(traces) == 3
    for trace in traces:
        assert assert_matches_reference(trace) == EXTERNAL_ID

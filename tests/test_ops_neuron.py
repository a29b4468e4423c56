"""`nprof-report ops` on the constructed Neuron trees fills device time from the Neuron system trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nprof_report.cli import cli
from tests.conftest import NEURON, NEURON_TREES


@pytest.mark.parametrize("tree", ["eager_naive", "fused", "compiled"])
def test_ops_device_time_equals_what_the_fixture_was_built_with(tree: str) -> None:
    session = NEURON / NEURON_TREES[tree]["session"]
    # any folder from the tree down to the session folder
    for folder in (NEURON / tree, session):
        result = CliRunner().invoke(cli, ["ops", str(folder), "--format", "json"])
        assert result.exit_code == 0, result.output
        rows = {r["name"]: r for r in json.loads(result.stdout)}
        for op, device_ns in NEURON_TREES[tree]["device_ns_by_op"].items():
            assert rows[op]["self_device_us"] == pytest.approx(device_ns / 1000, abs=1e-6), op
        step = rows["ProfilerStep*"]
        assert step["device_total_us"] == pytest.approx(
            sum(NEURON_TREES[tree]["device_ns_by_op"].values()) / 1000, abs=1e-6
        )
        # runtime and driver calls keep rows of their own, with no device time
        runtime = [r for n, r in rows.items() if n.endswith("[privateuse1_driver]")]
        assert runtime and all(r["self_device_us"] == 0 for r in runtime)


@pytest.mark.pdf
def test_raw_tree_without_tool_builds_from_trace_json_and_says_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from nprof_report.parse import neuron_convert
    from nprof_report.report.build import build_report

    tree = tmp_path / "fused"
    shutil.copytree(NEURON / "fused", tree)
    for explorer in tree.rglob("explorer"):
        shutil.rmtree(explorer)  # raw .pb files only, as NeuronProfiler leaves them
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    monkeypatch.setattr(neuron_convert, "FALLBACK_TOOL_DIRS", ())
    build_report([tree], out=tmp_path / "r")
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    impl = summary["implementations"][0]
    assert impl["headline"]["framework_ops_per_step"] == 1  # trace.json still reported
    assert impl["device_time_source"].startswith("none")
    assert any("neuron-explorer view" in c and "not on PATH" in c for c in summary["caveats"])

"""`ops --format json` must equal prof.key_averages() of the live profiler, for every implementation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nprof_report.cli import cli

pytestmark = pytest.mark.capture


def _live_profile(name: str, trace: Path, active: int) -> dict[str, dict[str, float]]:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    from nprof_report.capture.rmsnorm import STUDY
    from nprof_report.capture.session import prepare

    (impl,) = [i for i in STUDY.implementations if i.name == name]
    fn = prepare(impl, None)
    x, w = STUDY.make_inputs((4, 512), torch.bfloat16, "cpu")
    for _ in range(3):
        fn(x, w)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=2, warmup=1, active=active, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(trace)),
        record_shapes=True,
    ) as prof:
        for _ in range(3 + active):
            fn(x, w)
            prof.step()
    del torch
    return {
        e.key: {
            "calls": e.count,
            "self_cpu_us": e.self_cpu_time_total,
            "cpu_total_us": e.cpu_time_total,
            "self_device_us": e.self_device_time_total,
            "device_total_us": e.device_time_total,
        }
        for e in prof.key_averages()
    }


@pytest.mark.parametrize("name", ["naive", "fused", "compiled"])
def test_ops_json_equals_live_key_averages(name: str, tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    live = _live_profile(name, trace, active=3)
    result = CliRunner().invoke(cli, ["ops", str(trace), "--format", "json"])
    assert result.exit_code == 0, result.output
    ours = {row["name"]: row for row in json.loads(result.stdout)}
    assert set(ours) == set(live)
    assert "ProfilerStep*" in ours
    for key, expected in live.items():
        row = ours[key]
        assert row["calls"] == expected["calls"], key
        for field in ("self_cpu_us", "cpu_total_us", "self_device_us", "device_total_us"):
            assert row[field] == pytest.approx(expected[field], abs=1e-3), (key, field)

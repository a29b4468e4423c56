"""Rule-based findings read the summary and quote their evidence."""

from __future__ import annotations

from typing import Any

from nprof_report.report.figures.findings import find


def _impl(label: str, **headline: Any) -> dict[str, Any]:
    return {
        "label": label,
        "headline": headline,
        "has_device_activities": True,
        "step_time_us": None,
        "steps": [],
        "gaps": {"by_cause": []},
    }


def test_rules_fire_with_evidence_and_rank_by_severity() -> None:
    summary = {
        "run": {"backend": "neuron"},
        "implementations": [
            _impl("naive", device_per_op_us=5.0, dispatch_per_op_us=40.0),
            {**_impl("fused"), "has_device_activities": False},
        ],
        "comparisons": [
            {
                "label": "fused",
                "baseline": "naive",
                "ops_per_step_delta": -5.0,
                "step_exceeds_noise": True,
                "step_delta_us": -20.0,
                "step_ratio": 0.5,
                "unprofiled_exceeds_noise": False,
                "unprofiled_delta_us": -1.0,
                "unprofiled_ratio": 0.9,
            },
        ],
    }
    findings = find(summary)
    rules = [f["rule"] for f in findings]
    assert rules[:2] == ["dispatch-bound", "empty-device-time"]  # high first
    assert "step-time-difference" in rules and "unprofiled-difference" not in rules
    assert "fusion-removed-dispatches" in rules
    dispatch = findings[0]
    assert "5.0 us < dispatch per op 40.0 us" in dispatch["evidence"]
    step = next(f for f in findings if f["rule"] == "step-time-difference")
    assert "faster" in step["title"] and "-20.0 us" in step["evidence"]

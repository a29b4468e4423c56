"""summary.json against its declared shape (``report/summary_types.py``), the declarations against
what their rows are copied from, and the report's column specs against the records they read."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from nprof_report.bundle import FileEntry, Manifest, NumericalCheck
from nprof_report.parse.keyavg import KEY_AVERAGES
from nprof_report.parse.neuron import StepFigures
from nprof_report.report.build import summarise_inputs
from nprof_report.report.figures import summary_types as st
from nprof_report.report.figures.analyses import STEP_COLUMNS
from nprof_report.report.jobs import Engine
from nprof_report.report.view import columns
from nprof_report.report.view.tables import Col
from tests.conftest import SUMMARY_INPUTS
from tests.summary_shape import assert_conforms, problems


def _keys(typed_dict: Any) -> set[str]:
    return set(typed_dict.__annotations__)


def _us(name: str) -> str:
    return name[:-3] + "_us" if name.endswith("_ns") else name


@pytest.mark.parametrize("inputs", SUMMARY_INPUTS.values(), ids=SUMMARY_INPUTS.keys())
def test_summaries_have_exactly_the_declared_keys_and_types(inputs: list[Path]) -> None:
    _, summary = summarise_inputs(inputs, Engine(jobs=1))
    assert_conforms(summary)
    assert summary["implementations"] and summary["comparisons"]


def test_the_checker_finds_a_missing_key_an_extra_key_and_a_wrong_type() -> None:
    comparison = {"baseline": "a", "label": "b", "step_ratio": None, "step_exceeds_noise": True}
    assert problems(comparison, st.Comparison) == []  # a metric's keys are optional
    assert problems({**comparison, "step_delta": 1.0}, st.Comparison) == [
        "summary: Comparison has no key 'step_delta'"
    ]
    assert problems({"label": "b", "step_ratio": 1}, st.Comparison) == [
        "summary: Comparison lacks 'baseline'"
    ]
    assert problems({**comparison, "step_exceeds_noise": "yes"}, st.Comparison) == [
        "summary.step_exceeds_noise: 'yes' is not bool"
    ]
    finding = {"severity": "low", "rule": "r", "title": "t", "evidence": "e"}
    assert problems(finding, st.Finding) == [
        "summary.severity: 'low' not in ('high', 'medium', 'info')"
    ]


def test_copied_rows_are_declared_as_their_sources_name_them() -> None:
    assert _keys(st.StepRow) == {_us(c) for c in STEP_COLUMNS.names()}
    assert _keys(st.KeyAverageRow) == set(KEY_AVERAGES.names())
    assert _keys(st.RunRecord) == {f.name for f in dataclasses.fields(Manifest)} - {
        "implementations"
    }
    assert _keys(st.FileRecord) == {f.name for f in dataclasses.fields(FileEntry)}
    assert _keys(st.CheckRecord) == {"label", "size", "size_label"} | {
        f.name for f in dataclasses.fields(NumericalCheck)
    }
    assert _keys(st.NeuronStep) == {
        _us(f.name) for f in dataclasses.fields(StepFigures) if f.name not in ("start_ns", "end_ns")
    }


@pytest.mark.parametrize(
    ("cols", "record"),
    [
        (columns.HEADLINE_COLUMNS[1:], st.Headline),
        (columns.COMPARISON_COLUMNS, st.Comparison),
        (columns.FILES_COLUMNS, st.FileRecord),
        (columns.TOP_OPS_COLUMNS, st.TopOpRow),
        (columns.STEPS_COLUMNS, st.StepRow),
        (columns.KEY_AVERAGES_COLUMNS, st.KeyAverageRow),
        (columns.CHAINS_COLUMNS, st.Chain),
        (columns.GAP_CAUSES_COLUMNS, st.GapCause),
        (columns.LARGEST_GAPS_COLUMNS, st.GapRecord),
        (columns.NEURON_STEPS_COLUMNS, st.NeuronStep),
        (columns.RANKS_COLUMNS, st.RankRow),
        (columns.ROOFLINE_COLUMNS, st.RooflineRecord),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_every_column_reads_a_key_of_its_record(cols: list[Col], record: Any) -> None:
    assert {c.key for c in cols} <= _keys(record)

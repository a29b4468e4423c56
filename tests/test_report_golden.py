"""Golden outline of the report built from the constructed Neuron trees, and every number traced to summary.json.

The Neuron fixtures are deterministic, so the report's structure (headings, table headers, row
counts) is compared with a checked-in golden file; set NPROF_UPDATE_GOLDEN=1 to rewrite it after a
reviewed change.
"""

from __future__ import annotations

import bisect
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest
import tinyhtml5

from nprof_report.report.build import build_report
from nprof_report.report.figures import read_summary
from tests.conftest import NEURON, NEURON_TREES

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "neuron-report-outline.txt"
NS = "{http://www.w3.org/1999/xhtml}"

pytestmark = pytest.mark.pdf


@pytest.fixture(scope="module")
def neuron_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("neuron") / "report"
    build_report([NEURON / "eager_naive", NEURON / "fused", NEURON / "compiled"], out=out)
    return out


def _text(el: Any) -> str:
    return " ".join("".join(el.itertext()).split())


def outline(html: str) -> str:
    """Headings, table titles, column headers and row counts, in document order."""
    lines = []
    for el in tinyhtml5.parse(html).iter():
        tag = el.tag.replace(NS, "") if isinstance(el.tag, str) else ""
        if tag in ("h1", "h2", "h4"):
            lines.append(f"{tag}: {_text(el)}")
        elif tag == "table":
            head = [_text(th) for th in el.iter(f"{NS}th")]
            rows = len(next(iter(el.iter(f"{NS}tbody"))).findall(f"{NS}tr"))
            lines.append(f"  table[{rows} rows]: {' | '.join(head)}")
        elif tag == "figcaption":
            lines.append(f"  figure: {_text(el).split('.')[0]}")
    return "\n".join(lines) + "\n"


def test_report_outline_matches_golden(neuron_report: Path) -> None:
    got = outline((neuron_report / "report.html").read_text())
    if os.environ.get("NPROF_UPDATE_GOLDEN") or not GOLDEN.exists():
        GOLDEN.write_text(got)
    assert got == GOLDEN.read_text()


def _summary_numbers(node: Any, out: list[float]) -> list[float]:
    if isinstance(node, bool):
        return out
    if isinstance(node, (int, float)):
        out.append(float(node))
    elif isinstance(node, dict):
        for v in node.values():
            _summary_numbers(v, out)
    elif isinstance(node, list):
        for v in node:
            _summary_numbers(v, out)
    return out


_NUMBER = re.compile(r"^[+−-]?(\d+(?:\.\d+)?)(us|ms|s|%|×)?$")


def _cell_values(html: str) -> list[tuple[str, float]]:
    """Numeric table cells as (text, value in the summary's unit: µs, %, ratio or count)."""
    values = []
    for td in tinyhtml5.parse(html).iter(f"{NS}td"):
        text = _text(td)
        m = _NUMBER.match(text)
        if not m:
            continue
        value = float(m.group(1))
        scale = {"ms": 1e3, "s": 1e6}.get(m.group(2) or "", 1.0)
        values.append((text, value * scale))
    return values


def _found(value: float, numbers: list[float], text: str) -> bool:
    """``value`` (the cell, in the summary's unit) is one of ``numbers`` as the cell rounds it:
    to 3 decimals, or to the 6 significant digits ``:g`` keeps (a ratio of 1058.0999 shows as
    1058.1, an overhead of 165415.3 % as 165415 %)."""
    scale = {"ms": 1e3, "s": 1e6}.get(re.sub(r"[\d.+−-]", "", text), 1.0)
    shown = abs(value) / scale
    six_digits = 0.5 * 10 ** (math.floor(math.log10(shown)) - 5) if shown else 0.0
    tolerance = max(0.0005, six_digits) * scale + 1e-9
    i = bisect.bisect_left(numbers, value - tolerance)
    return i < len(numbers) and numbers[i] <= value + tolerance


def _check_numbers(report: Path) -> int:
    summary = read_summary(report / "summary.json")
    numbers = sorted({abs(x) for x in _summary_numbers(summary, [])})
    cells = _cell_values((report / "report.html").read_text())
    missing = [text for text, v in cells if not _found(v, numbers, text)]
    assert missing == []
    return len(cells)


def test_every_number_in_the_neuron_report_is_in_summary(neuron_report: Path) -> None:
    assert _check_numbers(neuron_report) > 100


@pytest.mark.capture
def test_every_number_in_the_cpu_report_is_in_summary(cpu_report: Path) -> None:
    assert _check_numbers(cpu_report) > 100


def test_neuron_report_reads_as_a_write_up(neuron_report: Path) -> None:
    from pypdf import PdfReader

    text = " ".join(p.extract_text() for p in PdfReader(neuron_report / "report.pdf").pages)
    flat = " ".join(text.split())
    for needle in (
        "Verdict",
        "Headline figures",
        "Difference from the baseline",
        "Findings",
        "Neuron system trace per step",
        "Heaviest ops",
        "Device idle gaps",
        "CONSTRUCTED trace, not a capture",
        "Glossary",
        "Provenance",
    ):
        assert needle in flat, needle


def test_neuron_report_figures_equal_what_the_fixtures_were_built_with(neuron_report: Path) -> None:
    expected = NEURON_TREES
    summary = read_summary(neuron_report / "summary.json")
    for impl, tree in zip(summary["implementations"], ("eager_naive", "fused", "compiled")):
        want = expected[tree]
        assert impl["label"] == tree
        # per-op device time, as the key_averages table of the report shows it
        self_device = {r["name"]: r["self_device_us"] for r in impl["key_averages"]}
        for op, ns in want["device_ns_by_op"].items():
            assert self_device[op] == pytest.approx(ns / 1000, abs=1e-6), (tree, op)
        calls_by_op = {r["name"]: r["calls"] for r in impl["top_ops"]}
        assert sum(calls_by_op.values()) == impl["headline"]["framework_ops_per_step"] * len(
            want["steps"]
        )
        neuron_steps = impl["neuron"][0]["steps"]
        assert len(neuron_steps) == len(want["steps"])
        for got, built in zip(neuron_steps, want["steps"]):
            for key in (
                "submissions",
                "executions",
                "model_switches",
                "copyin_count",
                "copyout_count",
                "loads",
            ):
                assert got[key] == built[key], (tree, key)
            for key in ("host_blocked", "device_busy", "device_idle", "copyin"):
                assert got[f"{key}_us"] == pytest.approx(built[f"{key}_ns"] / 1000), (tree, key)
        # device time per step = busy time the fixture built
        for step_row, built in zip(impl["steps"], want["steps"]):
            assert step_row["device_us"] == pytest.approx(built["device_busy_ns"] / 1000)

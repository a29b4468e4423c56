"""Names from a trace are data wherever they land: CSV cells are no formulas, bidi overrides show."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nprof_report.report.view.safetext import csv_cell, csv_row, show_bidi

# OWASP's CSV injection examples start with these; a cell that does is read as a formula
HOSTILE = ['=HYPERLINK("http://x","y")', "+1+2", "-2+3", "@SUM(A1)", "\tTAB", "\rCR"]
RLO = "aten::mm\u202egnp.exe"


def test_csv_cell_quotes_formulas_and_leaves_numbers() -> None:
    assert [csv_cell(v) for v in HOSTILE] == ["'" + v for v in HOSTILE]
    assert csv_row(["aten::add", -3.5, None, 7, "a=b"]) == ["aten::add", -3.5, None, 7, "a=b"]


def test_bidi_controls_are_written_out() -> None:
    assert show_bidi(RLO) == "aten::mm⟨U+202E⟩gnp.exe"
    assert show_bidi("\u2066x\u2069\u200f") == "⟨U+2066⟩x⟨U+2069⟩⟨U+200F⟩"
    assert show_bidi("aten::add_ → ×") == "aten::add_ → ×"


def _trace(path: Path, names: list[str]) -> Path:
    events: list[dict[str, Any]] = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 0.0, "dur": 20.0 * len(names) + 10}
    ]  # fmt: skip
    for i, name in enumerate(names):
        events.append(
            {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": 5.0 + 20 * i,
             "dur": 10.0, "args": {"External id": i + 1}}
        )  # fmt: skip
    path.write_text(json.dumps({"traceEvents": events, "baseTimeNanoseconds": 0}))
    return path


def test_ops_csv_is_no_formula(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.json", HOSTILE[:4])  # parse writes control characters out
    out = subprocess.run(
        [sys.executable, "-m", "nprof_report", "ops", str(trace), "--format", "csv", "--no-cache"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    names = {r["name"] for r in rows}
    assert {"'" + v for v in HOSTILE[:4]} <= names
    assert not any(n.startswith(("=", "+", "-", "@", "\t", "\r")) for n in names)
    assert all(float(r["self_cpu_us"]) >= 0 for r in rows)  # numbers stay numbers


@pytest.mark.pdf
def test_report_shows_bidi_overrides_and_writes_no_formula(tmp_path: Path) -> None:
    from nprof_report.report.build import build_report

    build_report([_trace(tmp_path / "t.json", [RLO, *HOSTILE[:4]])], out=tmp_path / "out")
    html = (tmp_path / "out" / "report.html").read_text()
    assert "\u202e" not in html
    assert "aten::mm⟨U+202E⟩gnp.exe" in html
    with (tmp_path / "out" / "tables" / "t-key-averages.csv").open(newline="") as fh:
        names = {row[0] for row in csv.reader(fh)}
    assert {"'" + v for v in HOSTILE[:4]} <= names
    assert RLO in names  # the CSV keeps the name as the trace has it


def test_interrupted_is_one_line(tmp_path: Path) -> None:
    """Ctrl-C during a command: ``nprof-report: interrupted`` and nothing before it."""
    code = (
        "import sys\n"
        "from nprof_report.report import opsview\n"
        "def interrupted(*args, **kwargs):\n"
        "    raise KeyboardInterrupt\n"
        "opsview.render_ops = interrupted\n"
        "from nprof_report.cli import main\n"
        "sys.argv = ['nprof-report', 'ops', sys.argv[1]]\n"
        "main()\n"
    )
    trace = _trace(tmp_path / "t.json", ["aten::add"])
    proc = subprocess.run(
        [sys.executable, "-c", code, str(trace)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 130
    assert proc.stderr == "nprof-report: interrupted\n"

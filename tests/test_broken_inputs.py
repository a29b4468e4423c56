"""Every input in the corpus of broken and hostile files gets its one-line error or recovery note."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nprof_report.report.build import build_report

BROKEN = Path(__file__).resolve().parents[1] / "fixtures" / "broken"
CASES = json.loads((BROKEN / "cases.json").read_text())


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nprof_report", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c["kind"] == "error"))
def test_bad_file_is_one_line_exit_2(name: str) -> None:
    path = BROKEN / name
    for command in (
        ["ops", str(path)],
        ["build", str(path), "--out", "/nonexistent-never-written"],
    ):
        proc = _run(*command)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        assert str(path) in lines[0]
        assert CASES[name]["expect"] in lines[0]
        assert "Traceback" not in proc.stderr
    assert not Path("/nonexistent-never-written").exists()


@pytest.mark.pdf
@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c["kind"] == "recovered"))
def test_damaged_file_is_recovered_with_a_caveat(name: str, tmp_path: Path) -> None:
    build_report([BROKEN / name], out=tmp_path / "r")
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    if CASES[name]["expect"]:
        assert any(CASES[name]["expect"] in c for c in summary["caveats"]), summary["caveats"]
    html = (tmp_path / "r" / "report.html").read_text()
    # the report's own images are charts inlined as data: URIs; any other <img> was injected
    markup = re.sub(
        r'<img src="data:image/svg\+xml;base64,[A-Za-z0-9+/=]+" alt="[^"<>]*">', "", html
    )
    assert (
        "<script" not in markup
        and "<img" not in markup
        and "49" not in html.split("{{ 7*7 }}")[0][-5:]
    )
    if CASES[name]["expect"]:
        assert CASES[name]["expect"].split(";")[0] in html  # the caveat reaches the report


def test_missing_path_and_empty_folder(tmp_path: Path) -> None:
    proc = _run("build", str(tmp_path / "nope"))
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    (tmp_path / "empty").mkdir()
    proc = _run("ops", str(tmp_path / "empty"))
    assert proc.returncode == 2 and "empty folder" in proc.stderr


def test_broken_manifest_is_named(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text("{not json")
    proc = _run("build", str(run))
    assert proc.returncode == 2
    assert f"{run / 'manifest.json'}" in proc.stderr and "not valid JSON" in proc.stderr
    (run / "manifest.json").write_text(json.dumps({"format": "nprof-run", "format_version": 99}))
    proc = _run("ops", str(run))
    assert proc.returncode == 2 and "format_version 99" in proc.stderr


def test_debug_shows_the_traceback() -> None:
    proc = _run("--debug", "ops", str(BROKEN / "empty.json"))
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr

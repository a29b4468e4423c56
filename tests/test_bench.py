"""The benchmark runs end to end at a small size (no timing targets here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_bench_small(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            str(_REPO / "bench" / "run_bench.py"),
            "--mb",
            "2",
            "--repeats",
            "1",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = (out / "bench.md").read_text()
    result = json.loads((out / "bench.json").read_text())
    stages = ["orjson", "read_trace", "read_trace_stream", "stream_work", "split_work", "ops"]
    assert [r["stage"] for r in result["rows"]] == stages
    for stage in stages:
        assert f"| {stage} |" in table
    for row in result["rows"]:
        if "skipped" in row:
            assert row["stage"] == "ops"  # only the CLI may be missing
            continue
        keys = ("time_s", "peak_rss_mib", "largest_process_mib", "time_vs_orjson", "rss_vs_json")
        for key in (*keys, "rss_vs_orjson"):
            assert isinstance(row[key], (int, float)) and row[key] > 0, (row["stage"], key)
    assert result["rows"][0]["time_vs_orjson"] == 1.0
    for row in result["rows"]:  # a whole tree holds at least its largest process
        if "skipped" not in row:
            assert row["peak_rss_mib"] >= row["largest_process_mib"]


def test_layouts_change_only_whitespace(tmp_path: Path) -> None:
    sys.path.insert(0, str(_REPO / "bench"))
    try:
        from make_large_trace import LAYOUTS, write_trace
    finally:
        sys.path.remove(str(_REPO / "bench"))
    docs = {}
    for layout in LAYOUTS:
        path = tmp_path / f"{layout}.json"
        write_trace(path, 0.3, ["cuda", "cpu"], layout=layout)
        docs[layout] = json.loads(path.read_bytes())
        lines = path.read_bytes().count(b"\n")
        assert (lines <= 1) == (layout == "compact")
    events = {k: d.pop("traceEvents") for k, d in docs.items()}
    n = min(len(e) for e in events.values())
    assert n > 500
    assert events["kineto"][:n] == events["compact"][:n] == events["indented"][:n]
    for d in docs.values():
        d.pop("traceName")
    assert docs["kineto"] == docs["compact"] == docs["indented"]


def test_the_reader_floor_reads_every_event(tmp_path: Path) -> None:
    """``bench/reader_floor.py`` is a floor only if it reads the whole events array (its rows are
    counted here against ``json``), on every layout, its last block up to the array's end; the
    20 MB file is cut into three blocks."""
    sys.path.insert(0, str(_REPO / "bench"))
    try:
        from make_large_trace import LAYOUTS, write_trace
    finally:
        sys.path.remove(str(_REPO / "bench"))
    for layout, mb in [*((layout, 0.5) for layout in LAYOUTS), ("compact", 20)]:
        path = tmp_path / f"{layout}-{mb}.json"
        write_trace(path, mb, ["cuda", "cpu"], layout=layout)
        expected = len(json.loads(path.read_bytes())["traceEvents"])
        proc = subprocess.run(
            [sys.executable, str(_REPO / "bench" / "reader_floor.py"), str(path), "--workers", "2"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        rows = [int(line.split()[2]) for line in proc.stdout.splitlines()]
        assert len(rows) == 2 and sum(rows) == expected, (layout, rows, expected)

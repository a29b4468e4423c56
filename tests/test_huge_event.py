"""One huge event, and a long run of whitespace: read in linear time and bounded memory.

The cases are those of ``bench/bench_huge_event.py`` (which measures the issue's sizes: a 50 MB
name, 40 MB of ``args``, 512 MB of spaces) at a few megabytes: each ``ops`` must stay within
4 x the JSON text (+ 16 MiB) above what ``ops`` takes on the trace they are made from, measured
in the same test, and the run of spaces within a constant. Names stay whole in ``ops`` (json, csv) and
in the report's CSV tables; report.html and summary.json hold them cut (``TEXT_CHARS``).
"""

from __future__ import annotations

import csv
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

from nprof_report.cli import cli
from nprof_report.parse.read import stream
from nprof_report.parse.read.stream import read_trace_stream
from nprof_report.report.figures import TEXT_CHARS, cut_text, read_summary
from nprof_report.report.figures.records import FrameRecords, cut_column, json_pieces

_BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(_BENCH))
import bench_huge_event as huge  # noqa: E402
from run_bench import _ops_command, measure  # noqa: E402

MIB = 1 << 20


@pytest.fixture(scope="module")
def base() -> dict[str, Any]:
    return json.loads(huge.BASE.read_text())


def _ops_peak(trace: Path) -> tuple[float, float]:
    """Seconds and peak RSS (MiB, the process tree) of ``ops`` on ``trace``."""
    cmd = [*_ops_command(), "ops", str(trace), "--format", "json", "--no-cache"]
    wall, rss, _, rc, tail = measure(cmd, 120)
    assert rc == 0, tail
    return wall, rss / 1024


@pytest.mark.slow
def test_huge_events_are_read_within_the_file(tmp_path: Path, base: dict[str, Any]) -> None:
    name = huge.make_name(tmp_path / "name.json", base, 8 * MIB)
    args = huge.make_args(tmp_path / "args.json", base, 1_000_000)  # 8 MB of Input Dims
    spaces = huge.make_spaces(tmp_path / "spaces.json.gz", base, 128 * MIB)
    _, floor = _ops_peak(huge.BASE)
    # a long name is held about four times at the peak: twice in Polars' categories, as the
    # decoded text, and as the text written out (before: 170 MiB for the name, 470 for the args,
    # 1,003 for the spaces, against 104 MiB for the trace they were made from)
    for trace, allowed in (
        (name, 4 * name.stat().st_size / MIB + 16),
        (args, 4 * args.stat().st_size / MIB + 16),
        (spaces, 48.0),  # 128 MB of spaces: a constant, whatever the length
    ):
        wall, peak = _ops_peak(trace)
        assert wall < 10
        assert peak <= floor + allowed, (trace.name, peak, floor)


def test_a_long_element_is_scanned_once(tmp_path: Path, base: dict[str, Any]) -> None:
    """With a small window, an 8 MB name and 8 MB of args are scanned about once each (the
    token scan looked at a long string again for every window: quadratic) and the buffer grows
    in place (it was copied for every window)."""
    scanned = 0
    block = stream._Scan._block

    def counted(self: stream._Scan, a: Any) -> None:
        nonlocal scanned
        scanned += len(a)
        block(self, a)

    for trace in (
        huge.make_name(tmp_path / "name.json", base, 8 * MIB),
        huge.make_args(tmp_path / "args.json", base, 1_000_000),
    ):
        scanned = 0
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(stream._Scan, "_block", counted)
            events = read_trace_stream(trace, work_only=True, chunk_bytes=64 << 10).events
        assert scanned < 1.5 * trace.stat().st_size
        assert events.height == read_trace_stream(huge.BASE, work_only=True).events.height + 1


def test_names_whole_in_ops_and_csv_cut_in_the_report(tmp_path: Path, base: dict[str, Any]) -> None:
    trace = huge.make_name(tmp_path / "t.json", base, 100_000)
    whole = "aten::huge_" + "x" * 100_000
    runner = CliRunner()
    got = runner.invoke(cli, ["ops", str(trace), "--format", "json", "--quiet"])
    assert got.exit_code == 0, got.output
    assert whole in {r["name"] for r in json.loads(got.stdout)}
    got = runner.invoke(cli, ["ops", str(trace), "--format", "csv", "--quiet"])
    assert whole in {r["name"] for r in csv.DictReader(got.stdout.splitlines())}

    out = tmp_path / "report"
    got = runner.invoke(cli, ["build", str(trace), "--out", str(out)])
    assert got.exit_code == 0, got.output
    cut = cut_text(whole)
    assert len(cut) == TEXT_CHARS
    digest = hashlib.sha256(whole.encode()).hexdigest()
    assert cut.endswith(f"… [{len(whole):,} characters, sha256 {digest}]")
    assert whole not in (out / "summary.json").read_text()
    for table in (out / "data").glob("*.parquet"):  # its tables cut texts as it does
        frame = pl.read_parquet(table)
        texts = [frame[c] for c, t in frame.schema.items() if t == pl.String]
        texts += [frame[c].explode() for c, t in frame.schema.items() if t == pl.List(pl.String)]
        assert all((t.str.len_chars().max() or 0) <= TEXT_CHARS for t in texts), table
    impl = read_summary(out / "summary.json")["implementations"][0]
    assert cut in {r["name"] for r in impl["key_averages"]}
    assert cut in {r["name"] for r in impl["top_ops"]}
    assert cut in set(impl["diff_profile"]["ops"]["name"].to_list())
    html = (out / "report.html").read_text()
    assert whole not in html and digest in html  # the shortened cell's tooltip: the cut name
    tables = {p.name: p.read_text() for p in (out / "tables").glob("*.csv")}
    assert whole in tables["t-top-ops.csv"] and whole in tables["t-key-averages.csv"]


def test_cut_text_keeps_short_texts_and_tells_long_ones_apart() -> None:
    assert cut_text("aten::mm") == "aten::mm"
    assert cut_text("x" * TEXT_CHARS) == "x" * TEXT_CHARS
    a, b = "y" * TEXT_CHARS + "a", "y" * TEXT_CHARS + "b"
    assert cut_text(a) != cut_text(b) and cut_text(a) == cut_text("y" * TEXT_CHARS + "a")
    assert len(cut_text("é" * (TEXT_CHARS + 1))) == TEXT_CHARS
    digest = hashlib.sha256(b"z" * 200).hexdigest()
    assert cut_text("z" * 200, 100) == "z" * 9 + f"… [200 characters, sha256 {digest}]"


@pytest.mark.parametrize("dtype", [pl.String, pl.Categorical])
def test_cut_column_cuts_each_long_value(dtype: pl.DataType) -> None:
    long_a, long_b = "a" * 5000, "bé" * 3000  # the sha256 of its UTF-8, made a piece at a time
    column = pl.Series("name", ["s", long_a, None, long_b, long_a], dtype=dtype)
    cut = cut_column(column, 4096)
    assert cut is not None and cut.dtype == pl.String
    assert cut.to_list() == [
        "s",
        cut_text(long_a, 4096),
        None,
        cut_text(long_b, 4096),
        cut_text(long_a, 4096),
    ]
    assert cut_column(pl.Series("name", ["s", None], dtype=dtype), 4096) is None


def test_json_pieces_cuts_every_long_string_only_when_asked() -> None:
    long = "n" * (TEXT_CHARS + 1)
    frame = pl.DataFrame({"name": [long, "b"], "v": [1.0, 2.0]})
    doc = {"rows": FrameRecords(frame), "chains": [{"op": long}], "labels": [long], long: 1}
    whole = json.loads(b"".join(json_pieces(doc)))
    assert whole["rows"][0]["name"] == long and whole["chains"][0]["op"] == long
    cut = json.loads(b"".join(json_pieces(doc, text_limit=TEXT_CHARS)))
    assert cut == {
        "rows": [{"name": cut_text(long), "v": 1.0}, {"name": "b", "v": 2.0}],
        "chains": [{"op": cut_text(long)}],
        "labels": [cut_text(long)],
        cut_text(long): 1,
    }
    short = {"rows": FrameRecords(frame.tail(1)), "x": ["a"]}
    assert b"".join(json_pieces(short, text_limit=10)) == b"".join(json_pieces(short))

"""``diff`` and ``check`` on columns (issue 32): the op series as a frame, the bootstrap across
ops at once, ``diff.json`` version 2 with its bulk in Parquet, and the documents of version 1
still read as baselines.

The traces are CONSTRUCTED (tests/diff_traces.py, bench/make_name_trace.py).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from nprof_report.report.diff.check import check
from nprof_report.report.diff.command import compare
from nprof_report.report.diff.inputs import load_side
from nprof_report.report.diff.render import diff_files
from nprof_report.report.diff.stats import MAX_BOOTSTRAP_STEPS, difference, row_differences
from nprof_report.report.figures import OP_SERIES_SCHEMA
from nprof_report.report.publish import publish
from tests.conftest import run_cli
from tests.diff_traces import model, write_trace
from tests.test_diff import assert_same_pairs

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "summary-v1-e9b1ca6.json"
"""A summary.json of version 1 made by nprof-report at commit e9b1ca6 from the trace
``write_trace(Path("base.json"), model(), seed=1)`` (summary-v1-e9b1ca6.txt)."""


def _same_sides(a: Any, b: Any) -> None:
    for x, y in zip(a.implementations, b.implementations, strict=True):
        assert x["diff_profile"]["ops"].equals(y["diff_profile"]["ops"])
        assert {k: v for k, v in x["diff_profile"].items() if k != "ops"} == {
            k: v for k, v in y["diff_profile"].items() if k != "ops"
        }
        assert x["steps"] == y["steps"]
        assert x["headline"] == y["headline"]


def test_a_version_1_summary_is_the_baseline_its_trace_is(tmp_path: Path) -> None:
    """The op series stored as records at e9b1ca6 read into the frame that the trace gives
    today, and the stored summary compares and checks exactly like the trace."""
    base = write_trace(tmp_path / "base.json", model(), seed=1)
    new = write_trace(
        tmp_path / "new.json", model(slower={"gemm_128x64": 1.10}, added=True), seed=2
    )
    stored = tmp_path / "stored" / "summary.json"
    stored.parent.mkdir()
    shutil.copy(GOLDEN, stored)
    assert json.loads(stored.read_text())["format_version"] == 1
    side = load_side(stored)
    assert side.implementations[0]["diff_profile"]["ops"].schema == OP_SERIES_SCHEMA
    _same_sides(side, load_side(base))
    from_trace, from_summary = compare(base, new), compare(stored, new)
    assert_same_pairs(from_summary["pairs"], from_trace["pairs"])
    kw: dict[str, Any] = {"max_regression_pct": 5.0, "metrics": None, "ops": []}
    failures = check([from_trace], **kw)
    assert failures and failures == check([from_summary], **kw)
    assert "added aten::dropout" in failures[0]
    assert run_cli("check", new, "--baseline", stored).returncode == 1
    assert run_cli("check", base, "--baseline", stored).returncode == 0


def _rows(draw: Any, rows: int, steps: int) -> np.ndarray:
    pool = st.one_of(
        st.sampled_from([0.0, -0.0, 1.5, 2.0, 1e6]),
        st.floats(-1e6, 1e6, allow_nan=False),
        st.just(float("nan")),  # a step without a value (launch latency)
    )
    return np.array([[draw(pool) for _ in range(steps)] for _ in range(rows)]).reshape(rows, steps)


@settings(max_examples=60, deadline=None)
@given(st.data(), st.integers(0, 12), st.integers(0, 9), st.integers(0, 9))
def test_the_bootstrap_across_ops_is_each_ops_bootstrap(
    data: Any, rows: int, nb: int, nn: int
) -> None:
    """Medians and intervals of every row at once equal stats.difference of each row's values
    (NaN left out), to the bit: repeated rows, ties, -0.0, steps without a value, too few."""
    base = _rows(data.draw, rows, nb)
    new = _rows(data.draw, rows, nn)
    if rows > 1 and data.draw(st.booleans()):  # rows that repeat
        base[-1], new[-1] = base[0], new[0]
    got = row_differences(base, new)
    for r in range(rows):
        d = difference([v for v in base[r] if v == v], [v for v in new[r] if v == v])
        have = [got.base[r], got.new[r], got.low[r], got.high[r]]
        if d is None:
            assert np.isnan(have[0]) or np.isnan(have[1])
            continue
        want = [d.base, d.new, d.low, d.high]
        for w, h in zip(want, have):
            assert (w is None and np.isnan(h)) or w == h, (r, want, have)


def test_large_samples_across_ops_are_each_ops() -> None:
    """Above MAX_BOOTSTRAP_STEPS values a side: the McKean-Schrader interval of each row."""
    rng = np.random.default_rng(4)
    steps = MAX_BOOTSTRAP_STEPS + 5
    base, new = rng.normal(100, 5, (3, steps)), rng.normal(101, 5, (3, steps))
    base[1, 7] = np.nan
    got = row_differences(base, new)
    for r in range(3):
        d = difference([v for v in base[r] if v == v], list(new[r]))
        assert d is not None
        assert [got.base[r], got.new[r], got.low[r], got.high[r]] == [d.base, d.new, d.low, d.high]


def _name_trace(path: Path, names: int) -> Path:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from make_name_trace import write
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return write(path, names, 0)  # type: ignore[no-any-return]


def test_diff_json_version_2_is_small_and_its_parquet_holds_every_op(tmp_path: Path) -> None:
    """20,000 op paths against 19,990 of them: diff.json stays small (the pages' rows), the
    Parquet tables it lists hold every op and both sides' series, written and recorded like
    the other files; the stored document is NEW's side again."""
    base = _name_trace(tmp_path / "base.json", 20_000)
    new = _name_trace(tmp_path / "new.json", 19_990)
    doc = compare(base, new)
    out = tmp_path / "out"
    publish(out, diff_files(doc, pdf=False), kind="diff")
    stored = json.loads((out / "diff.json").read_text())
    assert stored["format_version"] == 2
    assert (out / "diff.json").stat().st_size <= 10_000_000
    (pair,) = stored["pairs"]
    assert pair["counts"] == {
        "aligned": 19_990,
        "moved": 0,
        "added": 0,
        "removed": 10,
        "kernels_changed": 0,
    }
    assert len(pair["ops"]) == 40 and len(pair["removed"]) == 10
    assert pair["table"] == {"table": "ops", "rows": 20_000}
    record = json.loads((out / ".nprof-diff.json").read_text())["files"]
    for entry in stored["tables"]:
        data = (out / entry["path"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"] == record[entry["path"]]
        assert len(data) == entry["bytes"]
        frame = pl.read_parquet(out / entry["path"])
        assert frame.height == entry["rows"] and frame.columns == entry["columns"]
        assert frame.columns[:2] == ["scope", "implementation"]
    ops = pl.read_parquet(out / "data" / "diff_ops.parquet")
    assert ops["status"].value_counts().sort("status").rows() == [
        ("aligned", 19_990),
        ("removed", 10),
    ]
    assert ops.filter(pl.col("status") == "aligned")["calls_delta"].to_list() == [0.0] * 19_990
    series = pl.read_parquet(out / "data" / "diff_op_series.parquet")["scope"].value_counts()
    assert sorted(series.rows()) == [
        ("sides.base.implementations", 20_000),
        ("sides.new.implementations", 19_990),
    ]
    # the CSV still holds every aligned op
    assert (out / "tables" / "diff_ops.csv").read_text().count("\n") == 19_991
    _same_sides(load_side(out / "diff.json"), load_side(new))


def test_a_missing_or_damaged_table_of_a_baseline_is_bad_input(tmp_path: Path) -> None:
    base = write_trace(tmp_path / "base.json", model(), seed=1)
    out = tmp_path / "out"
    assert run_cli("diff", base, base, "--out", out).returncode == 0
    table = out / "data" / "diff_op_series.parquet"
    data = bytearray(table.read_bytes())
    assert run_cli("check", base, "--baseline", out / "diff.json").returncode == 0
    data[len(data) // 2] ^= 0xFF
    table.write_bytes(bytes(data))
    damaged = run_cli("check", base, "--baseline", out / "diff.json")
    assert damaged.returncode == 2
    assert damaged.stderr.splitlines() == [
        f"nprof-report: error: {table}: is not the file diff.json lists (its sha256 differs)"
    ]
    table.unlink()
    missing = run_cli("check", base, "--baseline", out / "diff.json")
    assert missing.returncode == 2
    (line,) = missing.stderr.splitlines()
    assert line.startswith(f"nprof-report: error: {table}: cannot be read")


def test_a_version_1_diff_json_is_still_a_baseline(tmp_path: Path) -> None:
    """A diff.json as version 1 wrote it (its NEW side's records whole, op series as records)
    stands for its NEW side as version 2 does."""
    base = write_trace(tmp_path / "base.json", model(), seed=1)
    new = write_trace(tmp_path / "new.json", model(added=True), seed=2)
    out = tmp_path / "v2"
    publish(out, diff_files(compare(base, new), pdf=False), kind="diff")
    side = load_side(out / "diff.json")
    v1 = json.loads((out / "diff.json").read_text())
    v1["format_version"] = 1
    del v1["tables"]
    v1["sides"]["new"]["implementations"] = [
        {**i, "diff_profile": {**i["diff_profile"], "ops": i["diff_profile"]["ops"].to_dicts()}}
        for i in side.implementations
    ]
    stored = tmp_path / "v1" / "diff.json"
    stored.parent.mkdir()
    stored.write_text(json.dumps(v1))
    _same_sides(load_side(stored), load_side(new))
    assert run_cli("check", new, "--baseline", stored).returncode == 0
    assert run_cli("check", new, "--baseline", base).returncode == 1

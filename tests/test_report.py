"""The report: data model, HTML structure and escaping, PDF text, and the HTML in headless Chromium."""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tinyhtml5

from nprof_report.report.build import build_report
from nprof_report.report.figures import read_summary
from nprof_report.report.view.model import build_model
from nprof_report.textout import format_time_us
from tests.conftest import PUBLIC_TRACES
from tests.summary_shape import assert_conforms

HTML_NS = "{http://www.w3.org/1999/xhtml}"


def _summary(report: Path) -> dict[str, Any]:
    return read_summary(report / "summary.json")


def _tables(html: str) -> list[Any]:
    return list(tinyhtml5.parse(html).iter(f"{HTML_NS}table"))


@pytest.mark.capture
def test_summary_holds_every_headline_figure(cpu_report: Path) -> None:
    summary = _summary(cpu_report)
    assert summary["format"] == "nprof-summary" and summary["format_version"] == 2
    labels = [i["label"] for i in summary["implementations"]]
    assert labels == ["naive", "fused", "compiled"]
    naive, fused, compiled = summary["implementations"]
    assert naive["headline"]["framework_ops_per_step"] == 6  # mul, mean, add, rsqrt, mul, mul
    assert fused["headline"]["framework_ops_per_step"] == 1  # aten::rms_norm
    assert compiled["headline"]["framework_ops_per_step"] == 2  # Dynamo cache lookup + region
    for impl in summary["implementations"]:
        h = impl["headline"]
        assert h["steps"] == 4
        assert h["step_median_us"] > 0 and h["unprofiled_median_us"] > 0
        assert h["profiler_overhead_us"] == pytest.approx(
            h["step_median_us"] - h["unprofiled_median_us"], abs=1e-2
        )
        assert h["dispatch_per_step_us"] <= h["step_median_us"] * 1.5
    assert [c["label"] for c in summary["comparisons"]] == ["fused", "compiled"]
    assert summary["run"]["run_id"] == cpu_report.parent.name
    assert_conforms(summary)  # with a manifest's run record (tests/summary_shape.py)


@pytest.mark.capture
def test_model_formats_what_the_summary_holds(cpu_report: Path) -> None:
    summary = _summary(cpu_report)
    model = build_model(summary)
    assert model.run_id == cpu_report.parent.name
    first = [cell.text for cell in model.headline.rows[0]]
    assert first[0] == "naive"
    assert first[1] == format_time_us(summary["implementations"][0]["headline"]["step_median_us"])
    assert len(model.sections) == 3
    assert all(c.svg.startswith("<svg") for c in model.charts)


@pytest.mark.capture
def test_html_structure(cpu_report: Path) -> None:
    html = (cpu_report / "report.html").read_text()
    doc = tinyhtml5.parse(html)
    ids = {e.get("id") for e in doc.iter() if e.get("id")}
    assert {
        "summary",
        "contents",
        "findings",
        "charts",
        "caveats",
        "provenance",
        "glossary",
        "impl-naive",
        "impl-fused",
        "impl-compiled",
    } <= ids
    headline = _tables(html)[0]
    body_rows = next(iter(headline.iter(f"{HTML_NS}tbody"))).findall(f"{HTML_NS}tr")
    assert len(body_rows) == 3
    assert "{{" not in html and "{%" not in html
    assert "<script" not in html.lower()
    charts = [
        base64.b64decode(src.removeprefix("data:image/svg+xml;base64,")).decode()
        for img in doc.iter(f"{HTML_NS}img")
        if (src := img.get("src", "")).startswith("data:image/svg+xml;base64,")
    ]
    assert len(charts) >= 3 and all(c.startswith("<svg") for c in charts)
    for text in (html, *charts):
        assert "http://" not in text.replace("http://www.w3.org", "") and "https://" not in text


@pytest.mark.capture
@pytest.mark.pdf
def test_pdf_text_carries_the_figures(cpu_report: Path) -> None:
    from pypdf import PdfReader

    reader = PdfReader(cpu_report / "report.pdf")
    text = "\n".join(page.extract_text() for page in reader.pages)
    flat = "".join(text.split())  # cells may wrap; compare without whitespace
    summary = _summary(cpu_report)
    assert summary["run"]["run_id"] in reader.pages[1].extract_text()  # running header
    assert f"page 1 / {len(reader.pages)}" in text
    for impl in summary["implementations"]:
        assert format_time_us(impl["headline"]["step_median_us"]) in flat
        assert format_time_us(impl["headline"]["unprofiled_median_us"]) in flat
    for heading in ("Verdict", "Findings", "Provenance", "Glossary", "Caveats"):
        assert heading in text


def _hostile_trace(path: Path) -> Path:
    evil = ["<script>alert(1)</script>", 'aten::"quoted" & <b>bold</b>', "it's"]
    events: list[dict[str, Any]] = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#3",
            "pid": 1,
            "tid": 1,
            "ts": 0.0,
            "dur": 100.0,
        }
    ]
    for i, name in enumerate(evil):
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": name,
                "pid": 1,
                "tid": 1,
                "ts": 10.0 + 20 * i,
                "dur": 10.0,
                "args": {"External id": i + 1},
            }
        )
    path.write_text(json.dumps({"traceEvents": events, "baseTimeNanoseconds": 0}))
    return path


@pytest.mark.pdf
def test_names_from_the_trace_are_escaped(tmp_path: Path) -> None:
    trace = _hostile_trace(tmp_path / "evil<x>.json")
    build_report([trace], out=tmp_path / "out")
    html = (tmp_path / "out" / "report.html").read_text()
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<b>bold</b>" not in html
    assert "&lt;b&gt;bold&lt;/b&gt;" in html


@pytest.mark.pdf
def test_pdf_reads_data_uris_and_fetches_nothing_else(tmp_path: Path) -> None:
    from nprof_report.report.view.pdf import render_pdf

    secret = tmp_path / "secret.svg"
    secret.write_text('<svg xmlns="http://www.w3.org/2000/svg" width="9" height="9"/>')
    # an Exception, so the CLI reports it as an internal error (WeasyPrint's is a BaseException)
    with pytest.raises(RuntimeError, match="outside resource"):
        render_pdf(f'<img src="{secret.as_uri()}">')
    svg = base64.b64encode(secret.read_bytes()).decode()
    assert render_pdf(f'<img src="data:image/svg+xml;base64,{svg}">').startswith(b"%PDF")


@pytest.mark.pdf
def test_failed_build_keeps_previous_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nprof_report.report import build as build_module

    out = tmp_path / "out"
    build_report([PUBLIC_TRACES["rocm"]], out=out)
    before = (out / "report.pdf").read_bytes()

    def broken(html: str) -> Callable[[], bytes]:
        def pdf() -> bytes:
            raise RuntimeError("disk full")

        return pdf

    monkeypatch.setattr(build_module, "start_pdf", broken)
    with pytest.raises(RuntimeError):
        build_report([PUBLIC_TRACES["triton"]], out=out)
    assert (out / "report.pdf").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging folder left behind


@pytest.mark.pdf
def test_public_traces_side_by_side(tmp_path: Path) -> None:
    paths = build_report([PUBLIC_TRACES["rocm"], PUBLIC_TRACES["triton"]], out=tmp_path / "o")
    summary = read_summary(tmp_path / "o" / "summary.json")
    assert [i["label"] for i in summary["implementations"]] == [
        "kineto-rocm-mi250-minitoy-train",
        "kineto-cuda-triton-compiled-example",
    ]
    rocm = summary["implementations"][0]["headline"]
    assert rocm["device_per_step_us"] > 0
    assert tmp_path / "o" / "report.pdf" in paths


@pytest.mark.capture
@pytest.mark.browser
def test_html_renders_in_chromium_without_errors_or_network(
    cpu_report: Path, tmp_path: Path
) -> None:
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("Debian's chromium package is not installed (scripts/test.sh installs it)")
    from playwright.sync_api import sync_playwright

    html = cpu_report / "report.html"
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=chromium,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        page = browser.new_page()
        console: list[str] = []
        requests: list[str] = []
        page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
        page.on("request", lambda r: requests.append(r.url))
        page.goto(html.as_uri())
        page.wait_for_load_state("load")
        shot = tmp_path / "report.png"
        page.screenshot(path=str(shot), full_page=True)
        title = page.title()
        charts = page.eval_on_selector_all(
            ".chart img", "imgs => imgs.filter(i => i.complete && i.naturalWidth > 0).length"
        )
        browser.close()
    assert console == []
    assert requests == [html.as_uri()]
    assert title.startswith("RMSNorm study")
    assert charts >= 3  # every chart's SVG decoded and drawn
    assert shot.stat().st_size > 10_000


def test_gap_causes_and_largest_gaps_tie_in_a_stated_order() -> None:
    """Equal totals (86 µs of host dispatch and of synchronization in fixtures/neuron/edge) came
    out in either order from one build to the next; now by cause, and equal gaps by start."""
    import polars as pl

    from nprof_report.report.figures.summary import _gaps_record

    rows = {
        "step": [1, 1, 1, 2],
        "start_ns": [100, 300, 500, 900],
        "dur_ns": [40_000, 86_000, 40_000, 86_000],
        "cause": ["synchronization", "host dispatch", "synchronization", "host dispatch"],
    }
    records = []
    for order in ([0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1]):
        gaps = pl.DataFrame({k: [v[i] for i in order] for k, v in rows.items()})
        analysis = type("A", (), {"gaps": gaps, "step_start_ns": {1: 0, 2: 800}})()
        record = dict(_gaps_record(analysis, largest=3))  # type: ignore[arg-type]
        assert sorted(record.pop("durations_us")) == [40.0, 40.0, 86.0, 86.0]  # in gaps' order
        records.append(record)
    assert records[0] == records[1] == records[2]
    assert [c["cause"] for c in records[0]["by_cause"]] == ["host dispatch", "synchronization"]
    assert [(g["offset_us"], g["dur_us"]) for g in records[0]["largest"]] == [
        (0.3, 86.0), (0.1, 86.0), (0.1, 40.0)
    ]  # fmt: skip

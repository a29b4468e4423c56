"""The roofline: declared bytes and FLOPs against the device's peaks, per implementation and size.

The CPU path is a real capture of the built-in RMSNorm study at two float32 sizes; its figures are
checked against the manifest the capture wrote (un-profiled medians, the measured peak) and the
bytes RMSNorm must move, (2·N·D + D) × 4. The Trainium path is CONSTRUCTED: the stand-in
torch_neuronx capture of tests/test_capture_neuron.py on a host whose DMI data names a Trn1 or Trn2
instance; it checks the published figures it is reported against, not Trainium timings.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import pypdf
import pytest

from nprof_report.bundle import read_manifest
from nprof_report.capture import hardware
from nprof_report.capture.rmsnorm import STUDY as RMSNORM
from nprof_report.capture.study import Implementation, Study, StudyError
from nprof_report.errors import InputError
from nprof_report.report.build import build_report, summarise_inputs
from nprof_report.report.figures import read_summary
from nprof_report.report.figures.peaks import gpu_peak, neuron_peak
from nprof_report.report.figures.roofline import NO_WORK, PeakOverride
from nprof_report.report.jobs import Engine
from tests.summary_shape import assert_conforms

SIZES = ((2, 256), (4, 512))


def _rmsnorm_bytes(size: tuple[int, ...], itemsize: int) -> int:
    n, d = math.prod(size[:-1]), size[-1]
    return (2 * n * d + d) * itemsize


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from nprof_report.capture.session import CaptureOptions, run_capture

    out = tmp_path_factory.mktemp("runs")
    return run_capture(
        CaptureOptions(
            out=out, backend="cpu", sizes=SIZES, dtype="float32", active=3, timing_seconds=0.1
        )
    )


@pytest.fixture(scope="module")
def sweep_report(sweep_run: Path) -> Path:
    build_report([sweep_run])
    return sweep_run / "report"


@pytest.mark.capture
def test_a_cpu_sweep_has_a_roofline_record_per_implementation_and_size(
    sweep_run: Path, sweep_report: Path
) -> None:
    manifest = read_manifest(sweep_run)
    measured = manifest.hardware["measured"]
    assert measured["bandwidth_gbps"] > 0 and "triad" in measured["bandwidth_method"]
    assert measured["gflops"] > 0 and "matmul" in measured["gflops_method"]
    summary = read_summary(sweep_report / "summary.json")
    assert_conforms(summary)
    records = {(r["label"], tuple(r["size"])): r for r in summary["roofline"]}
    timed = {(i.name, tuple(i.size or ())): i for i in manifest.implementations}
    assert set(records) == set(timed) and len(records) == 3 * len(SIZES)
    for key, r in records.items():
        unprofiled = timed[key].unprofiled
        assert unprofiled is not None
        expected_bytes = _rmsnorm_bytes(key[1], 4)
        assert r["bytes"] == expected_bytes and r["flops"] == 4 * math.prod(key[1])
        # CPU traces carry no device time: the time per call is the un-profiled median
        assert r["time_source"] == "unprofiled"
        assert r["time_us"] == pytest.approx(unprofiled.median_us, abs=1e-3)
        achieved = expected_bytes / (unprofiled.median_us * 1e-6) / 1e9
        assert r["achieved_gbps"] == pytest.approx(achieved, rel=0.01)
        assert r["peak_gbps"] == measured["bandwidth_gbps"] and r["peak_source"] == "measured"
        assert r["achieved_gbps"] <= 1.1 * measured["bandwidth_gbps"]
        assert r["pct_of_peak_bw"] == pytest.approx(100 * achieved / r["peak_gbps"], rel=0.01)
        assert r["bound"] == "memory"  # 0.5 FLOP/byte, far below any CPU's ridge
    assert summary["roofline_basis"]["peak_kind"] == "measured"
    with (sweep_report / "tables" / "roofline.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(records) and float(rows[0]["Bytes"]) == _rmsnorm_bytes(SIZES[0], 4)


@pytest.mark.capture
@pytest.mark.pdf
def test_the_roofline_chart_table_and_sentence_are_in_the_html_and_pdf(sweep_report: Path) -> None:
    html = (sweep_report / "report.html").read_text()
    assert '<section id="roofline">' in html and 'alt="Roofline"' in html
    assert "Achieved against peak, per implementation and size" in html
    text = " ".join(p.extract_text() for p in pypdf.PdfReader(sweep_report / "report.pdf").pages)
    text = " ".join(text.split())
    assert "How close to the hardware limit" in text and "Roofline. Achieved GFLOP/s" in text
    verdict = text[text.index("Verdict.") : text.index("Headline figures")]
    assert f"Roofline at {SIZES[-1][0]}×{SIZES[-1][1]}: the closest to the hardware limit" in (
        verdict
    )


@pytest.mark.capture
def test_peak_overrides_replace_the_measured_figures(sweep_run: Path) -> None:
    _, summary = summarise_inputs([sweep_run], Engine(jobs=1), PeakOverride(gbps=1000.0))
    basis = summary["roofline_basis"]
    assert basis is not None and basis["peak_gbps"] == 1000.0
    assert basis["peak_kind"] == "command line and measured"
    assert basis["peak_gflops"] == read_manifest(sweep_run).hardware["measured"]["gflops"]
    for r in summary["roofline"]:
        assert r["pct_of_peak_bw"] == pytest.approx(r["achieved_gbps"] / 10, rel=1e-3)
    _, both = summarise_inputs([sweep_run], Engine(jobs=1), PeakOverride(1000.0, 50.0))
    basis = both["roofline_basis"]
    assert basis is not None and basis["peak_kind"] == "command line"
    assert (
        basis["peak_source"] == "--peak-gbps 1000 (command line); --peak-gflops 50 (command line)"
    )


@pytest.mark.capture
def test_without_declared_work_there_is_no_roofline_and_the_report_says_why(
    sweep_run: Path, tmp_path: Path
) -> None:
    manifest = json.loads((sweep_run / "manifest.json").read_text())
    del manifest["workload"]["work"]  # as a study without bytes_moved / flops records it
    (sweep_run / "manifest.json").write_text(json.dumps(manifest))
    try:
        out = tmp_path / "report"
        build_report([sweep_run], out=out)
    finally:
        manifest["workload"]["work"] = [
            {"size": list(s), "bytes": _rmsnorm_bytes(s, 4), "flops": 4 * math.prod(s)}
            for s in SIZES
        ]
        (sweep_run / "manifest.json").write_text(json.dumps(manifest))
    summary = read_summary(out / "summary.json")
    assert summary["roofline"] == [] and summary["roofline_basis"]["note"] == NO_WORK
    html = (out / "report.html").read_text()
    assert "declares no bytes_moved or flops" in html and 'alt="Roofline"' not in html
    assert not (out / "tables" / "roofline.csv").exists()


def test_studies_declare_their_work_and_bad_declarations_are_refused() -> None:
    assert RMSNORM.work((64, 4096), "bfloat16") == {
        "bytes": (2 * 64 * 4096 + 4096) * 2,
        "flops": 4 * 64 * 4096,
    }
    plain = Study("s", [Implementation("a", "a", abs)], make_inputs=lambda *a: (1,))
    assert plain.work((4,), "float32") is None
    with pytest.raises(StudyError, match="bytes_moved is not callable"):
        Study("s", [Implementation("a", "a", abs)], make_inputs=lambda *a: (1,), bytes_moved=3)
    negative = Study(
        "s", [Implementation("a", "a", abs)], make_inputs=lambda *a: (1,), flops=lambda s, d: -1
    )
    with pytest.raises(StudyError, match=r"flops\(\(4,\), 'float32'\) returned -1"):
        negative.work((4,), "float32")


@pytest.mark.capture
def test_a_study_whose_work_count_raises_stops_the_capture_before_anything_is_written(
    tmp_path: Path,
) -> None:
    from nprof_report.capture.session import CaptureOptions, run_capture

    def broken(size: tuple[int, ...], dtype: str) -> int:
        raise ValueError("no formula yet")

    study = Study(
        "s",
        [Implementation("a", "a", lambda x: x)],
        make_inputs=lambda size, dtype, device: (1,),
        bytes_moved=broken,
    )
    with pytest.raises(InputError, match="declared work: ValueError: no formula yet"):
        run_capture(CaptureOptions(out=tmp_path / "runs", backend="cpu"), study=study)
    assert not (tmp_path / "runs").exists()


def test_published_peaks_per_device_as_pytorch_sees_it() -> None:
    trn1 = neuron_peak("trn1.32xlarge", None)
    assert trn1 is not None and trn1.bandwidth_gbps == 410 and trn1.gflops("bfloat16") == 95_000
    trn2 = neuron_peak("trn2.48xlarge", None)  # default LNC=2: a quarter of the chip
    assert trn2 is not None and trn2.bandwidth_gbps == 725 and trn2.gflops("float32") == 45_250
    assert "÷ 4" in trn2.source and "LNC=2" in trn2.device
    trn2_lnc1 = neuron_peak("trn2.48xlarge", 1)
    assert trn2_lnc1 is not None and trn2_lnc1.bandwidth_gbps == 362.5
    assert neuron_peak("trn1.32xlarge", 3) is None and neuron_peak("m5.large", None) is None
    h200 = gpu_peak("NVIDIA H200")
    assert h200 is not None and h200.bandwidth_gbps == 4800
    assert gpu_peak("NVIDIA H100 PCIe") is None  # not the SXM part the table lists
    a100 = gpu_peak("NVIDIA A100-SXM4-80GB")
    assert a100 is not None and a100.bandwidth_gbps == 2039 and a100.gflops("float64") is None


def _neuron_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, instance: str, lnc: str | None
) -> Path:
    """CONSTRUCTED: the stand-in Neuron capture on a host whose DMI product name is ``instance``."""
    from tests.test_capture_neuron import _capture, _fake_explorer

    product = tmp_path / "product_name"
    product.write_text(instance + "\n")
    monkeypatch.setattr(hardware, "DMI_PRODUCT_NAME", product)
    if lnc is None:
        monkeypatch.delenv(hardware.LNC_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(hardware.LNC_VARIABLE, lnc)
    _fake_explorer(tmp_path, monkeypatch)
    run, _ = _capture(tmp_path, monkeypatch)
    return run


@pytest.mark.capture
@pytest.mark.parametrize(
    ("instance", "lnc", "peak_gbps", "peak_gflops"),
    [
        ("trn1.32xlarge", None, 820 / 2, 190_000 / 2),
        ("trn2.48xlarge", None, 2900 / 4, 667_000 / 4),
        ("trn2.48xlarge", "1", 2900 / 8, 667_000 / 8),
    ],
    ids=["constructed-trn1", "constructed-trn2-lnc2", "constructed-trn2-lnc1"],
)
def test_a_constructed_trainium_run_reports_against_the_published_figures(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    instance: str,
    lnc: str | None,
    peak_gbps: float,
    peak_gflops: float,
) -> None:
    run = _neuron_run(tmp_path, monkeypatch, instance, lnc)
    manifest = read_manifest(run)
    assert manifest.hardware["instance_type"] == instance
    assert manifest.hardware["logical_nc_config"] == (int(lnc) if lnc else None)
    _, summary = summarise_inputs([run], Engine(jobs=1))
    assert_conforms(summary)
    basis = summary["roofline_basis"]
    assert basis is not None and basis["peak_kind"] == "published"
    assert basis["peak_gbps"] == peak_gbps and basis["peak_gflops"] == peak_gflops
    assert "AWS Neuron docs" in (basis["peak_source"] or "") and instance in (basis["device"] or "")
    (record,) = summary["roofline"]  # the stand-in capture runs naive at the study's 4×512
    assert record["bytes"] == _rmsnorm_bytes((4, 512), 2)  # bfloat16
    unprofiled = manifest.implementations[0].unprofiled
    assert unprofiled is not None
    assert record["time_us"] == pytest.approx(unprofiled.median_us, abs=1e-3)
    assert record["pct_of_peak_bw"] == pytest.approx(
        100 * record["bytes"] / (unprofiled.median_us * 1e3) / peak_gbps, rel=0.01
    )


@pytest.mark.capture
def test_an_unknown_instance_gets_no_percentage_and_a_caveat_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _neuron_run(tmp_path, monkeypatch, "trn9.metal", None)
    _, summary = summarise_inputs([run], Engine(jobs=1))
    (record,) = summary["roofline"]
    assert record["pct_of_peak_bw"] is None and record["achieved_gbps"] is not None
    assert any("No published or measured peak for trn9.metal" in c for c in summary["caveats"])


def _record(label: str, pct: float, time_us: float) -> dict[str, Any]:
    return {
        "label": label,
        "size": [64, 4096],
        "size_label": "64×4096",
        "bytes": 2_113_536,
        "flops": 1_048_576,
        "intensity": 0.496,
        "time_us": time_us,
        "time_source": "device",
        "achieved_gbps": pct * 4.1,
        "achieved_gflops": 1.0,
        "peak_gbps": 410.0,
        "peak_gflops": 95_000.0,
        "peak_source": "published",
        "pct_of_peak_bw": pct,
        "pct_of_peak_flops": 0.001,
        "bound": "memory",
        "above_peak": pct > 100,
    }


def test_findings_name_the_gap_and_never_use_a_point_above_the_peak() -> None:
    from nprof_report.report.figures.roofline import roofline_findings

    naive, fused = _record("naive", 14.0, 50.0), _record("fused", 71.0, 10.0)
    (finding,) = roofline_findings([naive, fused])
    assert finding["rule"] == "roofline-gap"
    assert (
        finding["title"]
        == "naive reaches 14 % of the peak bandwidth at 64×4096, against fused's 71 %"
    )
    assert "5× the time" in finding["evidence"]
    above = _record("fused", 130.0, 5.0)
    assert roofline_findings([naive, above]) == []


@pytest.mark.parametrize(
    ("trace", "device", "peak_gbps"),
    [
        ("kineto-cuda-b200-eager.json.gz", "NVIDIA B200", 8000),
        ("kineto-cuda-h100-bert-small-inference.json.gz", "NVIDIA H100 SXM", 3350),
        ("kineto-cuda-2022-ddp-train-test.json.gz", "NVIDIA V100 SXM2", 900),
        ("kineto-cuda-2023-cupti-profiler.json.gz", None, None),  # A100-PG509-200: not listed
    ],
)
def test_gpu_peaks_are_matched_on_the_public_traces_device_properties_name(
    trace: str, device: str | None, peak_gbps: float | None
) -> None:
    from nprof_report.bundle import Manifest
    from nprof_report.report.figures.roofline import resolve_peak
    from nprof_report.report.jobs import analyse_inputs
    from tests.conftest import PUBLIC

    analyses = analyse_inputs([PUBLIC / trace], Engine(jobs=1)).analyses
    manifest = Manifest(  # CONSTRUCTED: the manifest a CUDA capture of this device would write
        run_id="r",
        created_utc="",
        command=[],
        backend="cuda",
        device="",
        host={},
        versions={},
        workload={"dtype": "bfloat16"},
        schedule={},
        profiler={},
        environment={},
    )
    basis = resolve_peak(manifest, analyses, PeakOverride())
    assert basis["peak_gbps"] == peak_gbps
    if device is None:
        assert basis["note"] and "A100-PG509-200" in basis["note"]
    else:
        assert basis["device"] == device and basis["peak_kind"] == "published"


def test_page_one_names_the_closest_the_most_wasteful_and_what_is_above_the_peak() -> None:
    from nprof_report.report.view.rooflineview import sentences

    records = [
        _record("naive", 14.0, 50.0),
        _record("fused", 71.0, 10.0),
        _record("compiled", 130.0, 5.0),
        {**_record("fused", 99.0, 1.0), "size": [4, 512], "size_label": "4×512"},
    ]
    basis: Any = {"peak_kind": "published", "device": "trn1.32xlarge", "peak_gbps": 410.0}
    assert sentences(records, basis) == [
        "Roofline at 64×4096: the closest to the hardware limit is fused, at 71 % of the peak "
        "memory bandwidth (410 GB/s, published); naive wastes the most bandwidth, at 14 % for "
        "the same declared bytes; compiled is above the peak, a caveat rather than a result."
    ]


@pytest.mark.capture
@pytest.mark.pdf
def test_build_takes_peak_overrides_on_the_command_line(sweep_run: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from nprof_report.cli import cli

    out = tmp_path / "rep"
    result = CliRunner().invoke(
        cli, ["build", str(sweep_run), "--out", str(out), "--peak-gflops", "50"]
    )
    assert result.exit_code == 0, result.output
    basis = read_summary(out / "summary.json")["roofline_basis"]
    assert basis["peak_gflops"] == 50 and "--peak-gflops 50 (command line)" in basis["peak_source"]
    refused = CliRunner().invoke(cli, ["build", str(sweep_run), "--peak-gbps", "0"])
    assert refused.exit_code == 2 and "--peak-gbps" in refused.output


def test_a_failed_peak_measurement_is_recorded_and_the_capture_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_memory(*_: Any) -> dict[str, Any]:
        raise MemoryError("192 MiB")

    monkeypatch.setattr(hardware, "measure_cpu_peak", no_memory)
    assert hardware.hardware_record("cpu") == {
        "measured": None,
        "error": "peak not measured: MemoryError: 192 MiB",
    }

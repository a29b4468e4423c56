"""The command line: capture -> build round trip, ops, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from nprof_report.bundle import read_manifest, sha256_file
from nprof_report.cli import cli
from tests.conftest import PUBLIC, PUBLIC_TRACES


@pytest.mark.capture
def test_capture_writes_a_complete_run(cpu_run: Path) -> None:
    manifest = read_manifest(cpu_run)
    assert manifest.format_version == 1 and manifest.format_minor == 2
    assert manifest.backend == "cpu"
    assert manifest.schedule == {"wait": 2, "warmup": 1, "active": 4, "repeat": 1}
    assert manifest.workload["shape"] == [4, 512]
    assert manifest.workload["dtype"] == "bfloat16"
    assert manifest.workload["sizes"] == [[4, 512]] and manifest.workload["name"] == "RMSNorm"
    assert manifest.versions["torch"].startswith("2.")
    assert [i.name for i in manifest.implementations] == ["naive", "fused", "compiled"]
    for impl in manifest.implementations:
        assert impl.status == "ok", impl.error
        assert impl.unprofiled is not None and impl.unprofiled.median_us > 0
        assert (cpu_run / impl.trace).is_file()  # type: ignore[operator]
        assert impl.size == [4, 512] and impl.check is not None
        assert impl.check.status == ("reference" if impl.name == "naive" else "pass")
    assert {f.path for f in manifest.files} == {
        f"{n}/trace.json" for n in ("naive", "fused", "compiled")
    }
    for entry in manifest.files:
        assert sha256_file(cpu_run / entry.path) == entry.sha256


@pytest.mark.capture
def test_capture_cli_prints_run_folder_last_and_never_reuses_it(tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "nprof_report",
        "capture",
        "--backend",
        "cpu",
        "--impl",
        "fused",
        "--active",
        "2",
        "--out",
        str(tmp_path),
    ]
    first = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300)
    second = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300)
    run1 = Path(first.stdout.strip().splitlines()[-1])
    run2 = Path(second.stdout.strip().splitlines()[-1])
    assert run1 != run2
    assert (run1 / "manifest.json").is_file() and (run2 / "manifest.json").is_file()
    assert [p.name for p in sorted(tmp_path.iterdir())] == sorted([run1.name, run2.name])


@pytest.mark.capture
@pytest.mark.pdf
def test_build_writes_report_files_and_prints_them(cpu_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "rep"
    result = CliRunner().invoke(cli, ["build", str(cpu_run), "--out", str(out)])
    assert result.exit_code == 0, result.output
    printed = result.output.strip().splitlines()
    for name in ("report.html", "report.pdf", "summary.json"):
        assert str(out / name) in printed
        assert (out / name).stat().st_size > 0
    assert any(p.endswith(".csv") for p in printed)


def test_ops_json_attributes_device_time_on_public_cuda_and_rocm() -> None:
    for key in ("rocm", "triton", "cuda2023"):
        result = CliRunner().invoke(cli, ["ops", str(PUBLIC_TRACES[key]), "--format", "json"])
        assert result.exit_code == 0, result.output
        rows = json.loads(result.stdout)
        assert {
            "name",
            "calls",
            "self_cpu_us",
            "cpu_total_us",
            "self_device_us",
            "device_total_us",
        } <= set(rows[0])
        cpu_rows = [r for r in rows if r["device_type"] == "CPU"]
        assert max(r["self_device_us"] for r in cpu_rows) > 0, key


def test_ops_triton_kernel_time_goes_to_its_launching_op() -> None:
    result = CliRunner().invoke(cli, ["ops", str(PUBLIC_TRACES["triton"]), "--format", "json"])
    rows = {(r["name"], r["device_type"]): r for r in json.loads(result.stdout)}
    kernel = rows[("triton_poi_fused_add_cos_sin_0", "CUDA")]
    launcher = rows[("triton_poi_fused_add_cos_sin_0", "CPU")]
    region = rows[("Torch-Compiled Region: 0/0", "CPU")]
    assert launcher["self_device_us"] == kernel["device_total_us"] > 0
    assert region["device_total_us"] == kernel["device_total_us"]
    assert region["self_device_us"] == 0


@pytest.mark.parametrize("fmt", ["table", "csv"])
def test_ops_other_formats(fmt: str) -> None:
    result = CliRunner().invoke(cli, ["ops", str(PUBLIC_TRACES["rocm"]), "--format", fmt])
    assert result.exit_code == 0
    assert "aten::addmm" in result.output


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        (lambda d: d / "missing.json", "does not exist"),
        (lambda d: (d / "empty").mkdir() or d / "empty", "empty folder"),
        (lambda d: _write(d / "e.json", ""), "is empty"),
        (lambda d: _write(d / "x.json", '{"a": [1, 2]}'), "not a trace"),
        (lambda d: _write(d / "t.json", '{"traceEvents": [{"ph": "X",'), "not valid JSON"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path: Path, setup: object, expected: str) -> None:
    path = setup(tmp_path)  # type: ignore[operator]
    proc = subprocess.run(
        [sys.executable, "-m", "nprof_report", "ops", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert str(path) in lines[0] and expected in lines[0]
    assert "Traceback" not in proc.stderr


def test_build_without_runs_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "nprof_report", "build"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "nprof-runs" in proc.stderr and "nprof-report capture" in proc.stderr


def test_parse_and_build_modules_do_not_import_torch() -> None:
    code = (
        "import sys, nprof_report.cli, nprof_report.report.build, nprof_report.report.opsview;"
        "import nprof_report.report.view.model, nprof_report.report.view.render;"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_ops_prints_caveats_on_stderr_unless_quiet() -> None:
    unknown = PUBLIC.parent / "broken" / "unknown-category.json"
    graphs = PUBLIC / "kineto-cuda-vllm-decode-cudagraph.json.gz"
    for path, caveat in (
        (unknown, "unknown categories counted as CPU work, as PyTorch does: quantum_op (1 event)"),
        (graphs, "421 of 434 device activities have no link to a framework op"),
    ):
        result = CliRunner().invoke(cli, ["ops", str(path), "--format", "json"])
        assert result.exit_code == 0, result.output
        assert caveat in result.stderr
        assert caveat not in result.stdout
        json.loads(result.stdout)
        quiet = CliRunner().invoke(cli, ["ops", str(path), "--format", "json", "--quiet"])
        assert quiet.exit_code == 0 and quiet.stderr == ""
        assert quiet.stdout == result.stdout

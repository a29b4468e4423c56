"""A failing or interrupted implementation keeps what was captured and says so in the manifest."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from nprof_report.bundle import read_manifest, verify_checksums

pytestmark = pytest.mark.capture


def _options(out: Path) -> Any:
    from nprof_report.capture.session import CaptureOptions

    return CaptureOptions(out=out, backend="cpu", active=2, timing_seconds=0.05)


def _rmsnorm_with_fused(fn: Any) -> Any:
    """The built-in study with ``fused`` replaced by ``fn``."""
    from nprof_report.capture.rmsnorm import STUDY
    from nprof_report.capture.study import Implementation

    impls = [
        Implementation(i.name, i.description, fn) if i.name == "fused" else i
        for i in STUDY.implementations
    ]
    return replace(STUDY, implementations=impls)


def test_failed_implementation_is_recorded_and_the_others_run(tmp_path: Path) -> None:
    from nprof_report.capture import session

    def flaky(*args: Any) -> Any:
        raise RuntimeError("NEFF compilation failed")

    run = session.run_capture(_options(tmp_path), study=_rmsnorm_with_fused(flaky))
    manifest = read_manifest(run)
    statuses = [(i.name, i.status) for i in manifest.implementations]
    assert statuses == [("naive", "ok"), ("fused", "failed"), ("compiled", "ok")]
    failed = manifest.implementations[1]
    assert failed.error == "RuntimeError: NEFF compilation failed"
    assert (run / "naive" / "trace.json").is_file()
    assert verify_checksums(run, manifest) == []


def test_interrupt_keeps_bundles_and_marks_the_rest(tmp_path: Path) -> None:
    from nprof_report.capture import session

    def interrupted(*args: Any) -> Any:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        session.run_capture(_options(tmp_path), study=_rmsnorm_with_fused(interrupted))
    (run,) = tmp_path.iterdir()
    manifest = read_manifest(run)
    assert [(i.name, i.status) for i in manifest.implementations] == [
        ("naive", "ok"),
        ("fused", "interrupted"),
        ("compiled", "not run"),
    ]
    assert (run / "naive" / "trace.json").is_file()
    assert [f.path for f in manifest.files] == ["naive/trace.json"]


def test_build_warns_when_a_file_no_longer_matches(tmp_path: Path, cpu_run: Path) -> None:
    import shutil

    from nprof_report.report.build import build_report

    copy = tmp_path / cpu_run.name
    shutil.copytree(cpu_run, copy, ignore=shutil.ignore_patterns("report"))
    trace = copy / "fused" / "trace.json"
    trace.write_text(trace.read_text().replace('"ph"', ' "ph"', 1))
    build_report([copy], out=tmp_path / "r")
    import json

    caveats = json.loads((tmp_path / "r" / "summary.json").read_text())["caveats"]
    assert any("fused/trace.json no longer matches" in c for c in caveats)

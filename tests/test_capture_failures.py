"""A failing or interrupted implementation keeps what was captured and says so in the manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nprof_report.bundle import read_manifest, verify_checksums

pytestmark = pytest.mark.capture


def _options(out: Path) -> Any:
    from nprof_report.capture.session import CaptureOptions

    return CaptureOptions(
        out=out,
        backend="cpu",
        active=2,
        timing_seconds=0.05,
        implementations=("naive", "fused", "compiled"),
    )


def test_failed_implementation_is_recorded_and_the_others_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nprof_report.capture import session

    real = session.make_function

    def flaky(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "fused":
            raise RuntimeError("NEFF compilation failed")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(session, "make_function", flaky)
    run = session.run_capture(_options(tmp_path))
    manifest = read_manifest(run)
    statuses = [(i.name, i.status) for i in manifest.implementations]
    assert statuses == [("naive", "ok"), ("fused", "failed"), ("compiled", "ok")]
    failed = manifest.implementations[1]
    assert failed.error == "RuntimeError: NEFF compilation failed"
    assert (run / "naive" / "trace.json").is_file()
    assert verify_checksums(run, manifest) == []


def test_interrupt_keeps_bundles_and_marks_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nprof_report.capture import session

    real = session.make_function

    def interrupted(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "fused":
            raise KeyboardInterrupt
        return real(name, *args, **kwargs)

    monkeypatch.setattr(session, "make_function", interrupted)
    with pytest.raises(KeyboardInterrupt):
        session.run_capture(_options(tmp_path))
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

"""Shared fixtures: public traces, and one real CPU capture per test session."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = ROOT / "fixtures" / "public"

# constructed Neuron trees and what they were built with (fixtures/neuron/make_neuron_fixtures.py)
NEURON = ROOT / "fixtures" / "neuron"
NEURON_EXPECTED: dict[str, Any] = json.loads((NEURON / "expected.json").read_text())
NEURON_TREES: dict[str, Any] = NEURON_EXPECTED["trees"]

PUBLIC_TRACES = {
    "cpu": PUBLIC / "kineto-cpu-only-gloo-rank34.pt.trace.json",
    "rocm": PUBLIC / "kineto-rocm-mi250-minitoy-train.json",
    "triton": PUBLIC / "kineto-cuda-triton-compiled-example.json",
    "cuda2023": PUBLIC / "kineto-cuda-simple-add-benchmark.json",
}


@pytest.fixture(scope="session", autouse=True)
def _inductor_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """One Inductor cache for the whole session: only the first torch.compile is cold."""
    os.environ.setdefault(
        "TORCHINDUCTOR_CACHE_DIR", str(Path(os.environ.get("TMPDIR", "/tmp")) / "nprof-inductor")
    )


@pytest.fixture(scope="session", autouse=True)
def _frames_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Parsed-frame cache entries of loose traces go to a session folder, never ~/.cache."""
    os.environ.setdefault("NPROF_CACHE_DIR", str(tmp_path_factory.mktemp("frames-cache")))


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A frames cache of the test's own (``NPROF_CACHE_DIR``), switched on."""
    root = tmp_path / "cache"
    monkeypatch.setenv("NPROF_CACHE_DIR", str(root))
    monkeypatch.delenv("NPROF_NO_CACHE", raising=False)
    return root


@pytest.fixture(scope="session")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `nprof-report capture` run on this machine's CPU (4 active steps)."""
    from nprof_report.capture.session import CaptureOptions, run_capture

    out = tmp_path_factory.mktemp("runs")
    return run_capture(CaptureOptions(out=out, backend="cpu", active=4, timing_seconds=0.1))


@pytest.fixture(scope="session")
def cpu_report(cpu_run: Path) -> Path:
    """The report built from :func:`cpu_run`."""
    from nprof_report.report.build import build_report

    build_report([cpu_run])
    return cpu_run / "report"

"""Shared fixtures: public traces, and one real CPU capture per test session."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
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

SUMMARY_INPUTS = {
    "public-cuda-rocm": [PUBLIC_TRACES["rocm"], PUBLIC_TRACES["triton"], PUBLIC_TRACES["cuda2023"]],
    "public-two-ranks": [
        PUBLIC / "kineto-cuda-2rank-sampled-rank0.json.gz",
        PUBLIC / "kineto-cuda-2rank-sampled-rank1.json.gz",
    ],
    "neuron": [NEURON / "device_exec", NEURON / "eager_naive", NEURON / "fused"],
}
"""Inputs whose summaries cover every kind of record: several implementations on CUDA and
ROCm, two ranks of one job, Neuron trees (CONSTRUCTED)."""


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


def run_cli(*args: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m nprof_report ARGS`` in a process of its own, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "nprof_report", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# --- only our lines on stderr (issue 27, part 5) -------------------------------------------------

# what nprof-report itself writes on stderr: its own lines, Click's usage errors, the progress of
# `capture` (rich: a bar or a count and a time), and blank lines between them
OUR_LINE = re.compile(
    r"^(?:nprof-report: |Usage: |Try '.* --help' for help\.$|Error: |\s*$)"
    r"|━|\d+/\d+ (?:\d+:)?\d+:\d\d\s*$"
)
STDERR_LOG = os.environ.get("NPROF_STDERR_LOG")  # also append every run's stderr to this file


def _is_cli(args: Any) -> bool:
    """Whether a subprocess command line runs nprof-report (the script or ``-m nprof_report``)."""
    argv = [str(a) for a in args] if isinstance(args, list | tuple) else [str(args)]
    if not argv:
        return False
    if Path(argv[0]).name == "nprof-report":
        return True
    return any(a == "-m" and b == "nprof_report" for a, b in itertools.pairwise(argv))


def foreign_lines(stderr: str) -> list[str]:
    """The lines of ``stderr`` that nprof-report did not write."""
    return [line for line in stderr.splitlines() if not OUR_LINE.search(line)]


@pytest.fixture(autouse=True)
def _only_our_lines_on_stderr(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every CLI run of the test (``CliRunner.invoke`` of the CLI, a subprocess running
    ``nprof-report``) leaves on stderr only lines nprof-report wrote; ``--debug`` runs show
    library output raw by design and are left out."""
    import subprocess

    from click.testing import CliRunner

    runs: list[tuple[list[str], str]] = []
    real_invoke, real_run = CliRunner.invoke, subprocess.run

    def invoke(self: CliRunner, cli: Any, args: Any = None, *a: Any, **kw: Any) -> Any:
        result = real_invoke(self, cli, args, *a, **kw)
        argv = [str(x) for x in (args or [])] if not isinstance(args, str) else args.split()
        if getattr(cli, "name", None) == "cli" and "--debug" not in argv:
            runs.append((["nprof-report", *argv], result.stderr))
        return result

    def run(args: Any, *a: Any, **kw: Any) -> Any:
        if not _is_cli(args) or "--debug" in [str(x) for x in args]:
            return real_run(args, *a, **kw)
        shown = not kw.get("capture_output") and kw.get("stderr") is None
        if shown:  # captured here, and shown as it would have been
            kw["stderr"] = subprocess.PIPE
        proc = real_run(args, *a, **kw)
        err = proc.stderr or ""
        err = err.decode(errors="replace") if isinstance(err, bytes) else err
        if shown:
            sys.stderr.write(err)
        runs.append(([str(x) for x in args], err))
        return proc

    monkeypatch.setattr(CliRunner, "invoke", invoke)
    monkeypatch.setattr(subprocess, "run", run)
    yield
    if STDERR_LOG:
        with open(STDERR_LOG, "a", encoding="utf-8", errors="backslashreplace") as log:
            for argv, err in runs:
                log.write(f"$ {' '.join(argv)}\n{err}")
    bad = [(argv, line) for argv, err in runs for line in foreign_lines(err)]
    if bad:
        pytest.fail(
            "lines on stderr that nprof-report did not write:\n"
            + "\n".join(f"  {' '.join(argv)}: {line}" for argv, line in bad[:20]),
            pytrace=False,
        )

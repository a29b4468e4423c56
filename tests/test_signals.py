"""SIGTERM is handled like Ctrl-C, and what a killed ``ops`` leaves in $TMPDIR is removed by the
next command (by pid liveness)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 70 MB trace: large enough for the split decode (64 MB), whose workers write pieces."""
    path = tmp_path_factory.mktemp("big") / "big.json"
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "make_large_trace.py"), str(path), "--mb", "70"],
        check=True,
        capture_output=True,
    )
    return path


def _start(trace: Path, tmpdir: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "TMPDIR": str(tmpdir), "NPROF_NO_CACHE": "1", "NPROF_DECODE_WORKERS": "2"}
    return subprocess.Popen(
        [sys.executable, "-m", "nprof_report", "ops", str(trace), "--format", "json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _wait_for_pieces(tmpdir: Path, proc: subprocess.Popen[str]) -> list[Path]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        found = list(tmpdir.glob("nprof-split-p*"))
        if found and any(f.iterdir() for f in found):
            return found
        time.sleep(0.05)
    pytest.fail("the split never wrote its pieces")


@pytest.mark.slow
def test_sigterm_is_handled_like_ctrl_c(big_trace: Path, tmp_path: Path) -> None:
    proc = _start(big_trace, tmp_path)
    _wait_for_pieces(tmp_path, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert err.splitlines() == ["nprof-report: terminated"]
    time.sleep(0.5)  # the workers end when their pipes close
    assert not list(tmp_path.glob("nprof-split-*"))


@pytest.mark.slow
def test_leftovers_of_a_killed_ops_are_removed_by_the_next(big_trace: Path, tmp_path: Path) -> None:
    proc = _start(big_trace, tmp_path)
    left = _wait_for_pieces(tmp_path, proc)
    proc.kill()
    proc.communicate(timeout=30)
    time.sleep(0.5)
    assert all(p.exists() for p in left)  # SIGKILL: nothing could clean up
    again = _start(big_trace, tmp_path)
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert not any(p.exists() for p in left)
    assert not list(tmp_path.glob("nprof-split-*"))

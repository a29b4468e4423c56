"""Special files, traces changed while they are read, pathological whitespace: exit 2 or a
correct result, never a hang, unbounded memory or a poisoned cache."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nprof_report.errors import InputError
from nprof_report.parse import frames as frames_mod
from nprof_report.parse import load_frames
from nprof_report.parse.cache import cached_frames, location
from nprof_report.parse.inputs import Source

from .conftest import PUBLIC_TRACES

EVENT = b'{"ph":"X","name":"aten::add","ts":1,"dur":2,"pid":1,"tid":1,"cat":"cpu_op"}'


def _ops(path: Path | str, timeout: float = 60, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "nprof_report",
            "ops",
            os.fsdecode(path),
            "--format",
            "json",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "NPROF_NO_CACHE": "1"},
    )


def _one_line_error(proc: subprocess.CompletedProcess[str], path: Path, text: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert str(path) in lines[0]
    assert text in lines[0]


def test_a_symlink_to_dev_zero_is_refused(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    trace.symlink_to("/dev/zero")
    _one_line_error(_ops(trace, timeout=30), trace, "not a regular file (a device)")


def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    os.mkfifo(trace)
    _one_line_error(_ops(trace, timeout=30), trace, "not a regular file (a FIFO)")


def test_a_fifo_with_the_cache_on_is_refused(tmp_path: Path, cache_dir: Path) -> None:
    trace = tmp_path / "trace.json"
    os.mkfifo(trace)
    with pytest.raises(InputError, match="not a regular file"):
        cached_frames(Source("t", trace, tmp_path), work_only=True)


def test_a_symlink_loop_is_one_line(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    trace.symlink_to(trace)
    _one_line_error(_ops(trace, timeout=30), trace, "Too many levels of symbolic links")


def test_a_path_that_is_not_utf8(tmp_path: Path) -> None:
    folder = Path(os.fsdecode(bytes(tmp_path) + b"/r\xe9sultats"))
    folder.mkdir()
    trace = Path(shutil.copy(PUBLIC_TRACES["cpu"], folder / "trace.json"))
    proc = _ops(trace)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)


def _replacing(monkeypatch: pytest.MonkeyPatch, trace: Path, other: Path) -> None:
    """Replace ``trace`` by ``other`` right after its rows are read (as a writer that renames a
    new version into place would), before the parse is done with it."""
    real = frames_mod.read

    def read_then_swap(path: Path, **kw: bool) -> object:
        rows = real(path, **kw)
        os.replace(shutil.copy(other, trace.with_name("new.tmp")), trace)
        return rows

    monkeypatch.setattr(frames_mod, "read", read_then_swap)


def test_a_trace_replaced_while_it_is_parsed_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = Path(shutil.copy(PUBLIC_TRACES["cpu"], tmp_path / "trace.json"))
    _replacing(monkeypatch, trace, PUBLIC_TRACES["rocm"])
    with pytest.raises(InputError, match="changed while it was read"):
        load_frames(trace, work_only=True)


def test_a_trace_written_to_while_it_is_parsed_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = Path(shutil.copy(PUBLIC_TRACES["cpu"], tmp_path / "trace.json"))
    real = frames_mod.read

    def read_then_append(path: Path, **kw: bool) -> object:
        rows = real(path, **kw)
        with trace.open("ab") as fh:
            fh.write(b" ")
        return rows

    monkeypatch.setattr(frames_mod, "read", read_then_append)
    with pytest.raises(InputError, match="changed while it was read"):
        load_frames(trace, work_only=True)


def test_a_swap_mid_parse_never_reaches_the_cache(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = Path(shutil.copy(PUBLIC_TRACES["cpu"], tmp_path / "trace.json"))
    source = Source("t", trace, tmp_path)
    _replacing(monkeypatch, trace, PUBLIC_TRACES["rocm"])
    with pytest.raises(InputError, match="changed while it was read"):
        cached_frames(source, work_only=True)
    monkeypatch.undo()
    where = location(source)
    assert where is not None
    assert not (where[0] / "entry.json").exists()
    # the trace now holds the other version: parsed as that, never served as the old one
    got = cached_frames(source, work_only=True)
    assert got.ops.equals(load_frames(PUBLIC_TRACES["rocm"], work_only=True).ops)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("layout", "expect"),
    [("leading", "is empty"), ("before-trace", None), ("before-array", None)],
)
def test_64_mb_of_whitespace_costs_linear_time(tmp_path: Path, layout: str, expect: str) -> None:
    """64 MB of spaces took 60 s before (a quadratic skip); linear now: well under 20 s."""
    ws = b" " * (64 << 20)
    body = {
        "leading": ws,
        "before-trace": ws + b'{"traceEvents": [' + EVENT + b"]}",
        "before-array": b'{"traceEvents":' + ws + b"[" + EVENT + b"]}",
    }[layout]
    trace = tmp_path / "ws.json"
    trace.write_bytes(body)
    started = time.monotonic()
    proc = _ops(trace, timeout=60)
    took = time.monotonic() - started
    if expect:
        _one_line_error(proc, trace, expect)
    else:
        assert proc.returncode == 0, proc.stderr
        assert [r["name"] for r in json.loads(proc.stdout)] == ["aten::add"]
    assert took < 20, f"{took:.1f} s"


def test_stdout_on_a_full_device_is_one_line() -> None:
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "nprof_report", "ops", str(PUBLIC_TRACES["cpu"])],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            env={**os.environ, "NPROF_NO_CACHE": "1"},
        )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "nprof-report: error: standard output: No space left on device"
    ]

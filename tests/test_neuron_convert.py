"""neuron-explorer conversion (parse/neuron/convert.py) with a FAKE ``neuron-explorer`` on PATH.

The fake records its argv, then writes the fused fixture's system tables where the real tool puts
them (formats.md §3.1: ``<data-path>/profiles/global/<display-name>@latest/``). Inputs are copies
of the CONSTRUCTED fixture trees with the processed tables deleted (raw ``.pb`` placeholders kept);
the committed fixtures are never written.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from nprof_report.errors import InputError
from nprof_report.parse.neuron import convert as neuron_convert
from nprof_report.parse.neuron import find_sessions, load_session
from nprof_report.parse.neuron.convert import (
    FAILED_LOG_NAME,
    LOG_NAME,
    OUTPUT_DIR_NAME,
    ConversionResult,
    convert_session,
    convert_tree,
)
from nprof_report.parse.neuron.files import PARTIAL_DIR_PREFIX, NeuronSession

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "neuron"
FUSED_SYSTEM = next((FIX / "fused").rglob("fused_system@latest"))

FAKE = f"""#!{sys.executable}
import json, os, shutil, subprocess, sys, time
from pathlib import Path

argv = sys.argv
with open(os.environ["FAKE_NX_ARGV"], "a") as fh:
    fh.write(json.dumps(argv) + "\\n")
mode = os.environ.get("FAKE_NX_MODE", "ok")
data = Path(argv[argv.index("--data-path") + 1])
name = argv[argv.index("--display-name") + 1]
out = data / "profiles" / "global" / (name + "@latest")
out.mkdir(parents=True)
print("fake neuron-explorer: ingesting", argv[argv.index("-d") + 1], flush=True)
if mode == "empty":
    sys.exit(0)
# Half-written output first: a failure after this point must not leave it behind.
(out / "SystemProfileEvents.parquet").write_bytes(b"PAR1 half")
if mode == "fail":
    print("error: cannot decode ntrace.pb", file=sys.stderr, flush=True)
    sys.exit(3)
if mode == "sleep":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    Path(os.environ["FAKE_NX_PIDS"]).write_text(f"{{os.getpid()}} {{child.pid}}")
    time.sleep(60)
for f in Path({str(FUSED_SYSTEM)!r}).iterdir():
    shutil.copyfile(f, out / f.name)
print("done", flush=True)
"""


def _copy_raw(tree: str, dst: Path) -> Path:
    """Copy ``fixtures/neuron/<tree>`` to ``dst/<tree>`` without its processed tables."""
    target = dst / tree
    shutil.copytree(FIX / tree, target)
    for d in list(target.rglob("explorer")):
        shutil.rmtree(d)
    return target


def _session(root: Path) -> NeuronSession:
    (s,) = find_sessions(root)
    return s


def _calls(tmp_path: Path) -> list[list[str]]:
    f = tmp_path / "argv.txt"
    if not f.exists():
        return []
    return [json.loads(line) for line in f.read_text().splitlines()]


def _leftovers(sdir: Path) -> list[str]:
    return sorted(
        p.name
        for p in sdir.iterdir()
        if p.name.startswith(PARTIAL_DIR_PREFIX) or p.name == OUTPUT_DIR_NAME
    )


def _no_tool_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(neuron_convert, "FALLBACK_TOOL_DIRS", ())


@pytest.fixture
def fake_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake ``neuron-explorer`` first on PATH; FAKE_NX_MODE picks ok/fail/sleep/empty."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "neuron-explorer"
    exe.write_text(FAKE)
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_NX_ARGV", str(tmp_path / "argv.txt"))
    monkeypatch.setenv("FAKE_NX_PIDS", str(tmp_path / "pids.txt"))
    monkeypatch.setattr(neuron_convert, "FALLBACK_TOOL_DIRS", ())
    return exe


@pytest.fixture
def raw_fused(tmp_path: Path) -> Path:
    """A raw copy of fixtures/neuron/fused: trace.json, .pb placeholders, NEFF; no tables."""
    root = _copy_raw("fused", tmp_path / "runs")
    s = _session(root)
    assert not s.has_processed
    assert s.pb("ntrace.pb") is not None
    assert s.pb("trace_info.pb") is not None
    return s.path


# ---------------------------------------------------------------- conversion


def test_runs_the_documented_command_and_tables_are_found_afterwards(
    fake_tool: Path, raw_fused: Path, tmp_path: Path
) -> None:
    res = convert_session(_session(raw_fused))

    assert res.status == "converted", res.message
    assert res.ok
    (argv,) = _calls(tmp_path)
    assert argv == list(res.command)
    # formats.md §3.1: view -d <session> --output-format parquet --ingest-only --data-path D
    # --display-name N (plus --disable-ui); D is the partial folder inside the session.
    data_path = Path(argv[8])
    assert argv == [
        str(fake_tool),
        "view",
        "-d",
        str(raw_fused),
        "--output-format",
        "parquet",
        "--ingest-only",
        "--data-path",
        str(data_path),
        "--display-name",
        raw_fused.name,
        "--disable-ui",
    ]
    assert data_path.parent == raw_fused
    assert data_path.name.startswith(PARTIAL_DIR_PREFIX)
    assert not data_path.exists()

    dest = raw_fused / OUTPUT_DIR_NAME
    assert res.output_dir == dest
    assert _leftovers(raw_fused) == [OUTPUT_DIR_NAME]
    assert res.log == dest / LOG_NAME
    log = res.log.read_text()
    assert "fake neuron-explorer: ingesting" in log
    assert "--ingest-only" in log.splitlines()[0]
    assert not (raw_fused / FAILED_LOG_NAME).exists()
    assert "converted" in res.message
    assert "\n" not in res.message

    s = _session(raw_fused.parents[1])
    assert s.path == raw_fused
    assert s.has_processed
    (pdir,) = s.system_profile_dirs
    assert pdir.path == dest / "profiles" / "global" / f"{raw_fused.name}@latest"
    assert pdir.files("SystemProfileEvents")
    data = load_session(s)
    assert data.events.height > 0


def test_copied_bundle_builds_without_the_tool(
    fake_tool: Path, raw_fused: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert convert_session(_session(raw_fused)).status == "converted"
    copy = tmp_path / "copied-bundle"
    shutil.copytree(raw_fused.parents[1], copy)
    _no_tool_path(tmp_path, monkeypatch)

    (res,) = convert_tree(copy)
    assert res.status == "already-processed"
    assert res.command == ()
    s = _session(copy)
    assert s.has_processed
    assert copy in s.system_profile_dirs[0].path.parents
    assert len(_calls(tmp_path)) == 1


def test_already_processed_is_not_run_again(
    fake_tool: Path, raw_fused: Path, tmp_path: Path
) -> None:
    assert convert_session(_session(raw_fused)).status == "converted"
    before = (raw_fused / OUTPUT_DIR_NAME / LOG_NAME).stat().st_mtime_ns

    res = convert_session(_session(raw_fused))
    assert res.status == "already-processed"
    assert res.ok
    assert len(_calls(tmp_path)) == 1
    assert (raw_fused / OUTPUT_DIR_NAME / LOG_NAME).stat().st_mtime_ns == before


def test_committed_processed_fixture_is_not_run(fake_tool: Path, tmp_path: Path) -> None:
    root = tmp_path / "fused"
    shutil.copytree(FIX / "fused", root)
    (res,) = convert_tree(root)
    assert res.status == "already-processed"
    assert _calls(tmp_path) == []


def test_explicit_tool_path_is_used_when_not_on_path(
    fake_tool: Path, raw_fused: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_tool_path(tmp_path, monkeypatch)
    res = convert_session(_session(raw_fused), tool=str(fake_tool))
    assert res.status == "converted", res.message
    assert _calls(tmp_path)[0][0] == str(fake_tool)


def test_tool_missing_names_the_command(
    raw_fused: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_tool_path(tmp_path, monkeypatch)
    res = convert_session(_session(raw_fused), label="fused")

    assert res.status == "tool-missing"
    assert not res.ok
    assert res.output_dir is None
    assert res.message.startswith("fused: ntrace.pb not converted: neuron-explorer is not on PATH")
    assert f"`neuron-explorer view -d {raw_fused} --output-format parquet" in res.message
    assert f"--data-path {raw_fused / OUTPUT_DIR_NAME}" in res.message
    assert res.message.endswith("on a Neuron host, then build again")
    assert res.command[:4] == ("neuron-explorer", "view", "-d", str(raw_fused))
    assert _leftovers(raw_fused) == []


def test_explicit_tool_that_does_not_exist_is_tool_missing(raw_fused: Path, tmp_path: Path) -> None:
    res = convert_session(_session(raw_fused), tool=str(tmp_path / "nope" / "neuron-explorer"))
    assert res.status == "tool-missing"
    assert "was not found" in res.message


def test_nonzero_exit_fails_and_leaves_no_partial_output(
    fake_tool: Path, raw_fused: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NX_MODE", "fail")
    res = convert_session(_session(raw_fused))

    assert res.status == "failed"
    assert res.returncode == 3
    assert res.output_dir is None
    assert "exited with status 3" in res.message
    assert "cannot decode ntrace.pb" in res.message
    assert "\n" not in res.message
    assert _leftovers(raw_fused) == []
    assert res.log == raw_fused / FAILED_LOG_NAME
    assert "cannot decode ntrace.pb" in res.log.read_text()
    assert not _session(raw_fused).has_processed


def test_timeout_kills_the_tool_and_leaves_no_partial_output(
    fake_tool: Path, raw_fused: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NX_MODE", "sleep")
    t0 = time.monotonic()
    res = convert_session(_session(raw_fused), timeout_s=1.5)

    assert time.monotonic() - t0 < 20
    assert res.status == "failed"
    assert res.returncode is None
    assert "timed out after 1.5 s" in res.message
    assert _leftovers(raw_fused) == []
    assert not _session(raw_fused).has_processed
    # The tool and the helper it started (same process group) are gone.
    for pid in map(int, (tmp_path / "pids.txt").read_text().split()):
        assert not _alive(pid)


def test_exit_zero_without_tables_fails(
    fake_tool: Path, raw_fused: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NX_MODE", "empty")
    res = convert_session(_session(raw_fused))
    assert res.status == "failed"
    assert res.returncode == 0
    assert "wrote no SystemProfileEvents" in res.message
    assert _leftovers(raw_fused) == []


def test_retry_after_failure_converts_and_drops_the_failed_log(
    fake_tool: Path, raw_fused: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NX_MODE", "fail")
    assert convert_session(_session(raw_fused)).status == "failed"
    assert (raw_fused / FAILED_LOG_NAME).exists()
    monkeypatch.setenv("FAKE_NX_MODE", "ok")
    assert convert_session(_session(raw_fused)).status == "converted"
    assert not (raw_fused / FAILED_LOG_NAME).exists()


def test_partial_folder_from_a_killed_run_is_ignored_and_cleaned(
    fake_tool: Path, raw_fused: Path
) -> None:
    stale = raw_fused / f"{PARTIAL_DIR_PREFIX}abc123"
    table_dir = stale / "profiles" / "global" / "x@latest"
    table_dir.mkdir(parents=True)
    shutil.copyfile(
        FUSED_SYSTEM / "SystemProfileEvents.parquet", table_dir / "SystemProfileEvents.parquet"
    )
    s = _session(raw_fused)
    assert not s.has_processed
    old = time.time() - 7200
    os.utime(stale, (old, old))

    assert convert_session(s).status == "converted"
    assert _leftovers(raw_fused) == [OUTPUT_DIR_NAME]


def test_an_existing_output_folder_without_tables_is_replaced(
    fake_tool: Path, raw_fused: Path
) -> None:
    (raw_fused / OUTPUT_DIR_NAME).mkdir()
    (raw_fused / OUTPUT_DIR_NAME / "junk.txt").write_text("x")
    res = convert_session(_session(raw_fused))
    assert res.status == "converted", res.message
    assert not (raw_fused / OUTPUT_DIR_NAME / "junk.txt").exists()
    assert _leftovers(raw_fused) == [OUTPUT_DIR_NAME]


# ---------------------------------------------------------------- nothing to convert


def test_session_without_ntrace_is_no_raw_files(
    fake_tool: Path, raw_fused: Path, tmp_path: Path
) -> None:
    (raw_fused / "ntrace.pb").unlink()
    (raw_fused / "trace_info.pb").unlink()
    res = convert_session(_session(raw_fused))  # still a session: the NEFF is there
    assert res.status == "no-raw-files"
    assert "no ntrace.pb" in res.message
    assert _calls(tmp_path) == []


def test_ntrace_without_trace_info_is_not_run(
    fake_tool: Path, raw_fused: Path, tmp_path: Path
) -> None:
    (raw_fused / "trace_info.pb").unlink()
    res = convert_session(_session(raw_fused))
    assert res.status == "no-raw-files"
    assert "trace_info.pb is missing" in res.message
    assert _calls(tmp_path) == []


# ---------------------------------------------------------------- trees


def test_convert_tree_over_several_sessions(fake_tool: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _copy_raw("fused", runs)
    _copy_raw("eager_naive", runs)
    shutil.copytree(FIX / "compiled", runs / "compiled")

    results = convert_tree(runs)
    by_label = {r.message.split(":")[0]: r for r in results}
    assert [r.status for r in results] == ["already-processed", "converted", "converted"]
    assert all(isinstance(r, ConversionResult) for r in results)
    assert any(k.startswith("runs/fused/i-0123456789abcdef0_pid_") for k in by_label)
    assert len(_calls(tmp_path)) == 2
    assert all(s.has_processed for s in find_sessions(runs))


def test_convert_tree_of_a_file_raises(tmp_path: Path) -> None:
    f = tmp_path / "x.txt"
    f.write_text("")
    with pytest.raises(InputError):
        convert_tree(f)


def test_fake_tables_are_readable(fake_tool: Path, raw_fused: Path) -> None:
    res = convert_session(_session(raw_fused))
    assert res.output_dir is not None
    (f,) = res.output_dir.rglob("SystemProfileEvents.parquet")
    assert pl.read_parquet(f).height > 0


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie awaiting its reaper counts as ended)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return False
        except OSError:  # pragma: no cover - no /proc
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return False
            return True
        if state in ("Z", "X"):
            return False
        time.sleep(0.05)
    return True

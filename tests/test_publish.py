"""``build --out``: the report goes into a folder without touching anything else there."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from nprof_report.cli import cli
from nprof_report.errors import InputError
from nprof_report.report import publish as publish_mod
from nprof_report.report.publish import RECORD_NAME, Streamed, publish

from .conftest import PUBLIC_TRACES

REPORT_RECORD = RECORD_NAME.format(kind="report")

REPORT_FILES = {"report.html", "report.pdf", "summary.json"}


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def _build(*args: str) -> None:
    result = CliRunner().invoke(cli, ["build", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output


@pytest.mark.pdf
def test_out_dot_keeps_everything_else(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reported case: `mkdir p && cd p && echo keep > main.py && build RUN --out .`."""
    project = tmp_path / "p"
    (project / "pkg").mkdir(parents=True)
    (project / "main.py").write_text("keep\n")
    (project / "pkg" / "mod.py").write_text("x = 1\n")
    (project / ".git").mkdir()
    (project / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    trace = project / "trace.json"
    shutil.copy(PUBLIC_TRACES["cpu"], trace)
    before = _tree(project)
    monkeypatch.chdir(project)

    _build(str(trace), "--out", ".")

    after = _tree(project)
    assert {k: v for k, v in after.items() if k in before} == before
    written = set(after) - set(before)
    assert written >= REPORT_FILES
    assert all(
        w in REPORT_FILES or w == REPORT_RECORD or w.startswith(("tables/", "data/"))
        for w in written
    ), written


@pytest.mark.pdf
def test_out_run_folder_keeps_manifest_and_traces(cpu_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(cpu_run, run, ignore=shutil.ignore_patterns("report", ".nprof-cache"))
    before = _tree(run)
    _build(str(run), "--out", str(run))
    after = _tree(run)
    assert {k: v for k, v in after.items() if k in before} == before
    assert (run / "manifest.json").is_file()
    assert set(after) >= REPORT_FILES


def test_only_its_own_files_are_replaced(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "tables").mkdir()
    (out / "tables" / "my-own.csv").write_text("a,b\n")
    publish(out, {"report.html": b"old", "tables/a.csv": b"1", "tables/gone.csv": b"2"})
    (out / "tables" / "edited.csv").write_text("kept")

    publish(out, {"report.html": b"new", "tables/a.csv": b"3"})

    assert (out / "report.html").read_bytes() == b"new"
    assert (out / "tables" / "a.csv").read_bytes() == b"3"
    assert not (out / "tables" / "gone.csv").exists()  # the previous report's, unchanged
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "tables" / "my-own.csv").read_text() == "a,b\n"
    assert (out / "tables" / "edited.csv").read_text() == "kept"


def test_stale_file_edited_by_the_user_is_kept(tmp_path: Path) -> None:
    out = tmp_path / "out"
    publish(out, {"report.html": b"1", "tables/old.csv": b"x"})
    (out / "tables" / "old.csv").write_text("the user's notes now")
    publish(out, {"report.html": b"2"})
    assert (out / "tables" / "old.csv").read_text() == "the user's notes now"


def test_a_hand_edited_record_never_reaches_outside(tmp_path: Path) -> None:
    out = tmp_path / "out"
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"v")
    publish(out, {"report.html": b"1"})
    digest = publish_mod._sha256_of(victim)
    (out / REPORT_RECORD).write_text(
        '{"format": "nprof-report-files", "format_version": 1,'
        f' "files": {{"../victim.txt": "{digest}", "{victim}": "{digest}"}}}}'
    )
    publish(out, {"report.html": b"2"})
    assert victim.read_bytes() == b"v"


def test_interrupted_between_renames_leaves_whole_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kill between two renames: each file is the old or the new one, complete; no temp left."""
    out = tmp_path / "out"
    old = {"report.html": b"old html", "report.pdf": b"old pdf", "summary.json": b"{}"}
    publish(out, old)
    new = {"report.html": b"new html", "report.pdf": b"new pdf", "summary.json": b"[]"}
    real_replace = os.replace
    calls = []

    def replace_then_die(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        calls.append(dst)
        if len(calls) == 2:
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(publish_mod.os, "replace", replace_then_die)
    with pytest.raises(KeyboardInterrupt):
        publish(out, new)
    monkeypatch.setattr(publish_mod.os, "replace", real_replace)
    for name in old:
        assert (out / name).read_bytes() in (old[name], new[name])
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_leftovers_of_dead_processes_are_removed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    publish(out, {"report.html": b"1", "tables/a.csv": b"1"})
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead_pid = int(dead.stdout)
    stale = [
        out / f".report.pdf.nprof-{dead_pid}.tmp",
        out / "tables" / f".a.csv.nprof-{dead_pid}.tmp",
    ]
    live = out / f".report.pdf.nprof-{os.getppid()}.tmp"  # a running process
    for p in [*stale, live]:
        p.write_bytes(b"partial")
    publish(out, {"report.html": b"2"})
    assert not any(p.exists() for p in stale)
    assert live.exists()


def test_concurrent_build_waits_then_gives_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(publish_mod, "LOCK_WAIT_S", 0.3)
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another build is writing
        with pytest.raises(InputError, match="another nprof-report build"):
            publish(out, {"report.html": b"x"})
    finally:
        os.close(fd)
    assert not (out / "report.html").exists()
    publish(out, {"report.html": b"x"})  # the lock is gone with its holder
    assert (out / "report.html").read_bytes() == b"x"


def test_concurrent_builds_serialize(tmp_path: Path) -> None:
    """Two processes publishing into one folder at once both succeed, one after the other."""
    out = tmp_path / "out"
    script = (
        "import sys; from pathlib import Path; from nprof_report.report.publish import publish\n"
        "tag = sys.argv[1].encode()\n"
        "for _ in range(30):\n"
        "    publish(Path(sys.argv[2]), {'report.html': tag * 50000, 'tables/t.csv': tag})\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, tag, str(out)], stderr=subprocess.PIPE)
        for tag in ("a", "b")
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    html = (out / "report.html").read_bytes()
    assert html in (b"a" * 50000, b"b" * 50000)
    assert not [p for p in out.rglob("*.tmp")]


def test_out_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="exists and is not a folder"):
        publish(tmp_path / "f", {"report.html": b"x"})
    assert (tmp_path / "f").read_text() == "x"


def test_a_folder_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "report.pdf").mkdir()
    (tmp_path / "report.pdf" / "keep").write_text("x")
    with pytest.raises(InputError, match="in the way"):
        publish(tmp_path, {"report.html": b"x", "report.pdf": b"y"})
    assert (tmp_path / "report.pdf" / "keep").read_text() == "x"
    assert not (tmp_path / "report.html").exists()


@contextlib.contextmanager
def _tmpfs(where: Path, options: str) -> Iterator[Path]:
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.decode().strip()}); needs root")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_full_disk_names_the_file(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "small", "size=256k") as out:
        with pytest.raises(InputError) as info:
            publish(out, {"report.html": b"<p>" * 10, "report.pdf": b"x" * (1 << 20)})
        assert str(out) in str(info.value)
        assert "No space left on device" in str(info.value)
        assert not [p for p in out.iterdir() if p.name != REPORT_RECORD]


def test_read_only_folder_names_it(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "ro", "ro,size=64k") as out:
        with pytest.raises(InputError) as info:
            publish(out, {"report.html": b"x"})
        assert str(out) in str(info.value)
        assert "Read-only file system" in str(info.value)


def test_a_diff_beside_a_report_leaves_the_report(tmp_path: Path) -> None:
    """Each kind of output keeps its own record: neither takes the other's files as stale."""
    publish(tmp_path, {"report.html": b"r", "tables/a.csv": b"a"})
    publish(tmp_path, {"diff.html": b"d", "tables/diff-ops.csv": b"o"}, kind="diff")
    publish(tmp_path, {"diff.html": b"d2"}, kind="diff")
    assert (tmp_path / "report.html").read_bytes() == b"r"
    assert (tmp_path / "tables" / "a.csv").read_bytes() == b"a"
    assert not (tmp_path / "tables" / "diff-ops.csv").exists()


def test_a_content_given_as_a_function_is_written_last_and_its_failure_changes_nothing(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    publish(out, {"a.txt": b"1", "b.pdf": b"2"})
    before = _tree(out)
    seen: list[list[str]] = []

    def pdf() -> bytes:  # by the time it is asked for, the other file waits as a temporary one
        seen.append(sorted(p.name for p in out.iterdir()))
        return b"new pdf"

    paths = publish(out, {"b.pdf": pdf, "a.txt": b"new text"})
    assert [p.name for p in paths] == ["b.pdf", "a.txt"]  # in the order given
    assert any(name.startswith(".a.txt.nprof-") for name in seen[0])
    assert (out / "b.pdf").read_bytes() == b"new pdf"
    assert (out / "a.txt").read_bytes() == b"new text"

    publish(out, {"a.txt": b"1", "b.pdf": b"2"})

    def failed() -> bytes:
        raise RuntimeError("the PDF worker ended without a PDF")

    with pytest.raises(RuntimeError):
        publish(out, {"b.pdf": failed, "a.txt": b"other"})
    assert _tree(out) == before  # and no temporary file left
    assert sorted(p.name for p in out.iterdir()) == sorted(before)


def test_a_streamed_content_is_written_in_pieces_and_its_failure_changes_nothing(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    publish(out, {"summary.json": b"old", "tables/t.csv": b"old csv"})
    before = _tree(out)
    record = (out / REPORT_RECORD).read_bytes()

    def pieces() -> Iterator[bytes]:
        yield b"a,b\n"
        yield b"1,2\n"

    publish(out, {"summary.json": b"new", "tables/t.csv": Streamed(pieces)})
    assert (out / "tables" / "t.csv").read_bytes() == b"a,b\n1,2\n"
    # the record holds the sha256 of what was streamed, so the next build knows the file
    assert hashlib.sha256(b"a,b\n1,2\n").hexdigest() in (out / REPORT_RECORD).read_text()

    publish(out, {"summary.json": b"old", "tables/t.csv": b"old csv"})
    assert _tree(out) == before and (out / REPORT_RECORD).read_bytes() == record

    def broken() -> Iterator[bytes]:
        yield b"a,b\n"
        raise RuntimeError("a record that cannot be made")

    with pytest.raises(RuntimeError):
        publish(out, {"summary.json": b"new", "tables/t.csv": Streamed(broken)})
    assert _tree(out) == before  # the half-written CSV and the new summary went nowhere
    assert sorted(p.name for p in (out / "tables").iterdir()) == ["t.csv"]

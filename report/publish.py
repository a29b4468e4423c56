"""Putting a report's files into a folder that may hold other things.

``build --out DIR`` may point at a run folder, a project checkout or ``.``: the report must go in
without touching anything else there. So the report is never written as a folder that replaces
DIR; instead each of its own files (``report.html``, ``report.pdf``, ``summary.json``,
``tables/*.csv``) is written to a temporary file beside its destination, flushed to disk, and
renamed over it (``os.replace``, atomic on POSIX): at every instant each file is either the
previous report's or the new one's, complete. All of the new files are complete before the first
rename, so the renames follow each other within microseconds.

``.nprof-report.json`` in DIR records the files the last build wrote and their sha256 (``diff``
keeps ``.nprof-diff.json``). The next
build removes a file of the previous report that it does not write again (a table that is gone)
only when the record lists it and its content is still what was written; anything else in DIR,
recorded or not, is never removed.

Builds of the same DIR take an exclusive ``flock`` on the folder itself (no lock file is left
behind), so they write one after another; a build that waited :data:`LOCK_WAIT_S` for another
ends with exit 2. Temporary files carry the writer's pid; those of dead processes are removed by
the next build of that folder.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import orjson

from nprof_report.bundle import sha256_file
from nprof_report.errors import InputError
from nprof_report.procs import pid_alive

RECORD_NAME = ".nprof-{kind}.json"
RECORD_FORMAT = "nprof-report-files"
RECORD_VERSION = 1
LOCK_WAIT_S = 120.0
_TMP = re.compile(r"^\..+\.nprof-(\d+)\.tmp$")


@dataclass(frozen=True)
class Streamed:
    """A file's content written in pieces as they are made (``summary.json`` of a trace of
    100,000 op names is 185 MB: never held whole)."""

    pieces: Callable[[], Iterable[bytes]]


Content = bytes | Streamed | Callable[[], bytes]
"""A file's content: its bytes, its pieces, or a function that returns its bytes."""


def publish(out: Path, files: Mapping[str, Content], *, kind: str = "report") -> list[Path]:
    """Write ``files`` (path relative to ``out`` -> content) into ``out``; return their paths.

    Only the named files are created or replaced; stale files of the previous output of the same
    ``kind`` are removed as the module docstring says. Each kind keeps its own record
    (``.nprof-<kind>.json``), so a diff written beside a report never takes the report's files
    for its own stale ones. A content may be a function that returns it (the PDF, made by
    another process meanwhile): those are called, and written, after the others; or
    :class:`Streamed`, written a piece at a time. One that raises leaves every file as it was.
    """
    record_name = RECORD_NAME.format(kind=kind)
    out = out.absolute()
    _check_names(files, record_name)
    try:
        if out.exists() and not out.is_dir():
            raise InputError(out, "exists and is not a folder")
        out.mkdir(parents=True, exist_ok=True)
        with _locked(out):
            _remove_dead_leftovers(out)
            previous = _read_record(out / record_name)
            temps: list[tuple[Path, Path]] = []
            record: dict[str, str] = {}
            try:
                for rel in sorted(files, key=lambda rel: callable(files[rel])):
                    content = files[rel]
                    dest = out / rel
                    dest.parent.mkdir(exist_ok=True)
                    if dest.is_dir() or (dest.is_symlink() and not dest.exists()):
                        raise InputError(dest, "is in the way of the report (not a regular file)")
                    try:
                        tmp, record[rel] = _write_temp(dest, _pieces(content))
                        temps.append((tmp, dest))
                    except OSError as exc:  # named by the user's path, not the temporary one
                        raise InputError(dest, f"cannot write the report: {_reason(exc)}") from exc
                for tmp, dest in temps:
                    os.replace(tmp, dest)
                temps = []
            finally:
                for tmp, _ in temps:
                    with contextlib.suppress(OSError):
                        tmp.unlink()
            record = {rel: record[rel] for rel in files}
            _remove_stale(out, previous, record, record_name)
            _write_record(out / record_name, record)
    except OSError as exc:
        raise InputError(exc.filename or out, f"cannot write the report: {_reason(exc)}") from exc
    return [out / rel for rel in files]


def _check_names(files: Mapping[str, object], record_name: str) -> None:
    for rel in files:
        parts = Path(rel).parts
        if not parts or Path(rel).is_absolute() or ".." in parts or rel == record_name:
            raise ValueError(f"not a report file name: {rel!r}")


def _reason(exc: OSError) -> str:
    return exc.strerror or errno.errorcode.get(exc.errno or 0, str(exc))


@contextlib.contextmanager
def _locked(out: Path) -> Iterator[None]:
    """Hold an exclusive flock on the folder ``out`` while the block runs."""
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise InputError(
                        out,
                        f"another nprof-report build has been writing here for over "
                        f"{LOCK_WAIT_S:.0f} s",
                        "wait for it to end, or build into another --out folder",
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # releases the lock


def _pieces(content: Content) -> Iterable[bytes]:
    if isinstance(content, Streamed):
        return content.pieces()
    return [content() if callable(content) else content]


def _write_temp(dest: Path, pieces: Iterable[bytes]) -> tuple[Path, str]:
    """Write ``pieces`` to a new temporary file beside ``dest``, flushed to disk; the file and
    the sha256 of what was written."""
    tmp = dest.with_name(f".{dest.name}.nprof-{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:  # left by a process of ours that had this pid
        tmp.unlink()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb", closefd=False) as fh:
            for piece in pieces:
                digest.update(piece)
                fh.write(piece)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    os.close(fd)
    # the report's files are readable by others, as files a user writes are (umask permitting)
    os.chmod(tmp, 0o666 & ~_umask())
    return tmp, digest.hexdigest()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _remove_dead_leftovers(out: Path) -> None:
    """Remove temporary files of builds that were killed (their pid no longer runs)."""
    for folder in (out, out / "tables"):
        with contextlib.suppress(OSError):
            for entry in os.scandir(folder):
                m = _TMP.match(entry.name)
                if m and entry.is_file(follow_symlinks=False) and not pid_alive(int(m[1])):
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)


def _read_record(path: Path) -> dict[str, str]:
    """The files the previous build recorded, or nothing if the record is missing or not ours."""
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT:
        return {}
    files = data.get("files")
    if not isinstance(files, dict):
        return {}
    return {k: v for k, v in files.items() if isinstance(k, str) and isinstance(v, str)}


def _sha256_of(path: Path) -> str | None:
    """The sha256 of a regular file that is not a link; None for anything else or unreadable."""
    try:
        if not path.is_file() or path.is_symlink():
            return None
        return sha256_file(path)
    except OSError:
        return None


def _remove_stale(
    out: Path, previous: dict[str, str], current: dict[str, str], record_name: str
) -> None:
    """Remove the previous report's files that this one does not have, if still unchanged."""
    for rel, digest in previous.items():
        if rel in current:
            continue
        try:
            _check_names({rel: b""}, record_name)
        except ValueError:
            continue  # a record edited by hand never points outside the folder
        path = out / rel
        if _sha256_of(path) == digest:
            with contextlib.suppress(OSError):
                path.unlink()


def _write_record(dest: Path, files: dict[str, str]) -> None:
    record = {"format": RECORD_FORMAT, "format_version": RECORD_VERSION, "files": files}
    tmp, _ = _write_temp(dest, [orjson.dumps(record, option=orjson.OPT_INDENT_2) + b"\n"])
    os.replace(tmp, dest)

"""Opening a trace file: its size and compression sniffed once, every OS and gzip error worded.

:func:`open_trace` is the one place a trace file is opened for reading. It tells a folder, a
missing file and an unreadable one apart (:class:`~nprof_report.errors.InputError` naming the
file), and whether the file is gzip by its magic number, never by its name. :class:`TraceFile`
reads the whole (decompressed) file; :class:`TraceStream` reads it in pieces, for the streaming
loader and the split workers. A gzip stream cut short or corrupt reads as the same error
wherever it is met. This module imports nothing heavy: the CLI sniffs traces through it before
Polars is imported (:mod:`.workerpool`).
"""

from __future__ import annotations

import gzip
import os
import stat
import zlib
from pathlib import Path
from types import TracebackType
from typing import IO

from nprof_report.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"
_HEAD = 4096


def unreadable(path: Path, exc: OSError) -> InputError:
    """The error for an OS error met while reading ``path``."""
    return InputError(path, f"cannot be read ({exc.strerror})")


def gzip_damaged(path: Path) -> InputError:
    """The error for gzip data that is cut short or corrupt."""
    return InputError(path, "gzip data is cut short or corrupt", "copy the file again")


Identity = tuple[int, int, int, int]  # (device, inode, size, mtime_ns)


def identity(st: os.stat_result) -> Identity:
    """What tells one version of a file from another: a file replaced (another inode) or
    written to (another size or mtime) between two readings is not the one first read."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def changed(path: Path) -> InputError:
    """The error for a trace replaced or written to while it was read."""
    return InputError(
        path, "changed while it was read", "run again once whatever writes it has finished"
    )


class TraceFile:
    """An open trace file: ``size`` on disk, ``gzip`` (by magic number) and ``identity`` (as
    opened), read from the start; reads never go past the size the file had when opened.

    A context manager; :func:`open_trace` opens one.
    """

    def __init__(self, path: Path, raw: IO[bytes]) -> None:
        self.path = path
        self.raw = raw
        try:
            st = os.fstat(raw.fileno())
            self.size = st.st_size
            self.identity = identity(st)
            self.gzip = raw.read(2) == GZIP_MAGIC
            raw.seek(0)
        except OSError as exc:
            raw.close()
            raise unreadable(path, exc) from exc

    def __enter__(self) -> TraceFile:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self.raw.close()

    def read_all(self) -> bytes:
        """The whole file, decompressed when it is gzip."""
        try:
            data = self.raw.read(self.size)
        except OSError as exc:
            raise unreadable(self.path, exc) from exc
        if not self.gzip:
            return data
        try:
            return gzip.decompress(data)
        except (EOFError, OSError, zlib.error) as exc:
            raise gzip_damaged(self.path) from exc

    def stated_size(self) -> int:
        """The decompressed size a gzip file's trailer states (ISIZE: modulo 4 GiB, of the last
        member); the size on disk for a plain file or one too short to hold a trailer."""
        if not self.gzip or self.size < 18:
            return self.size
        try:
            self.raw.seek(self.size - 4)
            stated = int.from_bytes(self.raw.read(4), "little")
            self.raw.seek(0)
        except OSError as exc:
            raise unreadable(self.path, exc) from exc
        return stated


def open_trace(path: Path) -> TraceFile:
    """Open ``path`` for reading; an :class:`~nprof_report.errors.InputError` naming the file
    when it is a folder, does not exist, cannot be read or is not a regular file.

    Only regular files are read: a FIFO would block forever and ``/dev/zero`` never ends. The
    file is opened without blocking (a FIFO's open waits for a writer otherwise), checked, then
    read as usual.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except IsADirectoryError as exc:
        raise InputError(path, "is a folder, expected a trace file") from exc
    except FileNotFoundError as exc:
        raise InputError(path, "does not exist") from exc
    except OSError as exc:
        raise unreadable(path, exc) from exc
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise InputError(path, "is a folder, expected a trace file")
        if not stat.S_ISREG(mode):
            raise not_a_file(path, mode)
        os.set_blocking(fd, True)
    except OSError as exc:
        os.close(fd)
        raise unreadable(path, exc) from exc
    except InputError:
        os.close(fd)
        raise
    return TraceFile(path, os.fdopen(fd, "rb"))


def not_a_file(path: Path, mode: int) -> InputError:
    """The error for a FIFO, device or socket given as a trace."""
    if stat.S_ISFIFO(mode):
        kind = "a FIFO"
    elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        kind = "a device"
    elif stat.S_ISSOCK(mode):
        kind = "a socket"
    else:
        kind = "a special file"
    return InputError(path, f"is not a regular file ({kind}); only files are read")


def snapshot(path: Path) -> Identity:
    """The identity of the file at ``path`` now, or a worded error."""
    try:
        return identity(os.stat(path))
    except OSError as exc:
        raise unreadable(path, exc) from exc


class TraceStream:
    """Decompressed bytes of a trace, read in pieces.

    ``span`` = (start, end, tail) reads the bytes ``[start, end)`` of a plain file (``end`` None:
    to its end), followed by ``tail`` -- a part of the events array read as an array of its own
    (:mod:`.split`). ``stream``: read this (decompressed) stream instead of the file, which then
    only names it.
    """

    def __init__(
        self,
        path: Path,
        span: tuple[int, int | None, bytes] | None = None,
        stream: IO[bytes] | None = None,
    ) -> None:
        self.path = path
        self.left: int | None = None  # bytes of the span still to read
        self.tail = b""
        raw, gz = stream, False
        if raw is None:
            file = open_trace(path)
            raw, gz = file.raw, file.gzip
            if not gz and span is None:
                self.left = file.size  # never past the size the file had when it was opened
        self._raw = raw
        self._fh: IO[bytes] | gzip.GzipFile = raw
        if gz:
            self._fh = gzip.GzipFile(fileobj=raw, mode="rb")
        if span is not None:
            start, end, self.tail = span
            raw.seek(start)
            self.left = None if end is None else end - start
        self.eof = False
        self.total = 0
        self.head = b""  # first 4 KiB, for read_trace's binary-file check

    def read(self, n: int) -> bytes:
        if self.eof:
            return b""
        if self.left is not None:
            n = min(n, self.left)
        try:
            data = self._fh.read(n) if n else b""
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise gzip_damaged(self.path) from exc
        except OSError as exc:
            if self._fh is not self._raw:
                raise gzip_damaged(self.path) from exc
            raise unreadable(self.path, exc) from exc
        if self.left is not None:
            self.left -= len(data)
        if not data:
            data, self.tail = self.tail, b""
            self.eof = not data
        if len(self.head) < _HEAD:
            self.head += data[: _HEAD - len(self.head)]
        self.total += len(data)
        return data

    def close(self) -> None:
        self._fh.close()
        self._raw.close()

"""Decode one large trace on several cores: its ``traceEvents`` array cut into blocks.

Tokenising JSON is the floor of every loader (about 6 s per GB on one core here), so a large
trace is decoded by several processes at once -- threads would share one interpreter lock.
:func:`read_work_parts` returns what the sequential reading gives
(:func:`~.stream.read_trace_stream` with ``work_only``, then
:func:`~nprof_report.parse.parts.parts_of`: the same parts, event ids, notes, metadata):

1. The parent finds the array (the top-level keys before it are kept, as the streaming loader
   does) and cuts the rest at ``} , {`` boundaries into blocks of at most 8 MB, smaller towards
   the end so that the workers finish together.
2. Worker processes (``python -m nprof_report.parse.read.split``) take the blocks one at a time: each
   is read as an array of its own (the block plus ``]``; the last: up to the array's own ``]``,
   whose offset the worker reports) with the streaming loader's own reader, its rows are taken
   apart (:func:`~nprof_report.parse.parts.split_rows`) and its pieces written as Arrow IPC, so
   the parent never holds the rows themselves. A worker answers each block with its counters
   on its stdout, which is also its request for the next: a worker on a core that something
   else is using takes fewer blocks (with two fixed halves, the other core idled until the
   slower half was done). The workers share the CPUs out (``POLARS_MAX_THREADS``;
   :func:`~.workerpool.worker_env` says why).
3. The parent decodes the top-level keys after the array, shifts the event ids of each block
   by the events before it (and times by the trace's base time), and puts the pieces together.

A plain file's blocks are read by the workers from the file. A gzip stream cannot be entered in
the middle, so the parent decompresses a ``.json.gz`` (zlib-ng) and writes each block into the
stdin of the worker that asks for it, while the others decode: decompressing overlaps decoding,
and no decompressed copy is written to disk (writing one cost 0.2-2 s of kernel time here).

A cut inside a string leaves a block whose last element does not decode, and any damage leaves
a note; either way (or when a worker fails) the file is read again by the sequential loader,
which words the error or recovers exactly as it always does.

Memory: every worker holds one block's text and rows, then their pieces; for a gzip file the
parent holds the block it sends and the text read ahead for the next; then the pieces of all
blocks.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import selectors
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import polars as pl
from zlib_ng import gzip_ng, zlib_ng

from nprof_report.errors import InputError
from nprof_report.parse.parts import FRAMES, Pieces, TraceRows, batches, merge, parts_of, pieces_of
from nprof_report.parse.read.columns import Columns, Fallback
from nprof_report.parse.read.polars_json import BOUNDARY
from nprof_report.parse.read.reference import describe, latest_complete
from nprof_report.parse.read.rows import counter_notes
from nprof_report.parse.read.source import open_trace
from nprof_report.parse.read.stream import Reader, read_trace_stream
from nprof_report.parse.read.workerpool import (
    MIN_SPLIT_BYTES,
    default_workers,
    spawn,
    stop,
    worth_splitting,
)
from nprof_report.procs import pid_alive

__all__ = ["read_work_parts"]

# 8 MB (one reading window): with 32 MB blocks the two workers and the parent held 378-381 MiB
# while decoding a 530 MB single-line trace (above the bound ``ops`` is held to: 0.75x the file),
# with 16 MB 352-361 MiB. A gzip block is held twice, in the parent's buffer and in the worker it
# is sent to: there ``ops`` peaked at 398-407 MiB with 16 MB blocks, 361-364 with 8 MB (the plain
# file: 360 and 361, at its derive; CPU time the same within the noise of a busy machine)
_BLOCK_MAX = 8 << 20
_SEARCH = 1 << 20  # how far past a block's nominal end a boundary is looked for
_GUNZIP_READ = 4 << 20
_GROW_LIMIT = 2 * (_BLOCK_MAX + _SEARCH + _GUNZIP_READ)  # the gzip buffer grows once at most
# zlib-ng's stub types its error as an instance
_GUNZIP_ERRORS = (OSError, EOFError, cast("type[Exception]", zlib_ng.error))
_OWNER = re.compile(r"nprof-split-p(\d+)-")  # the pid in a pieces folder's name


@dataclass(frozen=True)
class _Block:
    """Elements of the events array from offset ``start`` of the (decompressed) text to ``end``
    (None: the last block, up to the array's own ``]`` and beyond); ``data``: their text, sent to
    the worker (None: the worker reads the plain file)."""

    start: int
    end: int | None
    data: bytes | memoryview | None = None


def read_work_parts(
    path: Path,
    *,
    workers: int | None = None,
    chunk_bytes: int = 8 << 20,
    min_bytes: int = MIN_SPLIT_BYTES,
) -> TraceRows:
    """Metadata, notes and parts of the work rows of ``path``, decoded by ``workers`` processes
    (``events`` None).

    Files smaller than ``min_bytes`` (gzip: smaller than ``min_bytes`` / 20, or stating a
    decompressed size below ``min_bytes``) and ``workers=1`` are read sequentially, as is any file
    the split cannot read cleanly.
    """
    path = Path(path)
    workers = default_workers() if workers is None else workers
    try:
        with open_trace(path) as file:
            size, gz, stated = file.size, file.gzip, file.stated_size()
    except InputError:
        size, gz, stated = 0, False, 0  # let the sequential loader word the error
    if workers >= 2 and worth_splitting(size, gz, min_bytes):
        try:
            if gz:
                got = _read_gzip(path, size, stated, workers, chunk_bytes, min_bytes)
            else:
                got = _read_plain(path, size, workers, chunk_bytes)
            if got is not None:
                return got
        except (Fallback, InputError):
            pass  # the sequential loader reads it again and words what is wrong
    trace = read_trace_stream(path, work_only=True, chunk_bytes=chunk_bytes)
    meta, notes, rows = trace.meta, trace.notes, batches(trace.events)
    del trace  # the batches hold the only reference to the rows: parts_of lets them go
    return TraceRows(meta, notes, parts_of(rows, path.name), None)


def _pieces_dir() -> tempfile.TemporaryDirectory[str]:
    """The folder the workers write their pieces into (``$TMPDIR/nprof-split-p<pid>-*``),
    after removing those of processes that were killed (SIGKILL leaves them: 26-32 MB each)."""
    root = Path(tempfile.gettempdir())
    with contextlib.suppress(OSError):
        for entry in root.glob("nprof-split-p*-*"):
            owner = _OWNER.match(entry.name)
            if owner and entry.is_dir() and not pid_alive(int(owner[1])):
                shutil.rmtree(entry, ignore_errors=True)
    return tempfile.TemporaryDirectory(prefix=f"nprof-split-p{os.getpid()}-")


def _block_bytes(left: int, workers: int, chunk_bytes: int) -> int:
    """The next block's size: a share of what is left, so the last blocks are small."""
    return max(chunk_bytes, min(_BLOCK_MAX, left // (2 * workers)))


def _read_plain(path: Path, size: int, workers: int, chunk_bytes: int) -> TraceRows | None:
    head = Reader(path, chunk_bytes, Columns(True))
    try:
        prefix, array_format = head.find_array()
    finally:
        head.src.close()
    with path.open("rb") as fh, _pieces_dir() as tmp:
        blocks = _file_blocks(fh, head.offset, size, workers, chunk_bytes)
        ran = _run(path, blocks, workers, chunk_bytes, tmp)
        if ran is None:
            return None
        results, _ = ran
        doc = _document(path, results[-1]["close"], prefix, array_format, chunk_bytes)
        return _assemble(path, doc, results, tmp)


def _file_blocks(
    fh: IO[bytes], pos: int, size: int, workers: int, chunk_bytes: int
) -> Iterator[_Block]:
    """Blocks of a plain file whose array's elements start at ``pos``."""
    while True:
        at = pos + _block_bytes(size - pos, workers, chunk_bytes)
        found = None
        while found is None and at < size:
            fh.seek(at)
            window = fh.read(_SEARCH + 64)  # overlapping: a separator across two windows
            found = BOUNDARY.search(window)
            if found is None:
                at += _SEARCH  # inside an element longer than the search
        if found is None:
            yield _Block(pos, None)
            return
        yield _Block(pos, at + found.start() + 1)
        pos = at + found.end() - 1


def _read_gzip(
    path: Path, size: int, stated: int, workers: int, chunk_bytes: int, min_bytes: int
) -> TraceRows | None:
    """Decompress a gzip file as a stream and send its blocks to the workers.

    zlib-ng's gzip module decompresses 2.5-3x faster than the standard library's (the same
    format and bytes). The trailer's size (``stated``, modulo 4 GiB) sizes the blocks.
    """
    left = stated
    while left < size:  # a trace is larger than its compressed file
        left += 1 << 32
    if left < min_bytes:
        return None
    try:
        with (
            gzip_ng.open(path, "rb") as stream,  # type: ignore[no-untyped-call]
            _pieces_dir() as tmp,
        ):
            head = Reader(path, chunk_bytes, Columns(True), stream=stream)
            prefix, array_format = head.find_array()
            blocks = _stream_blocks(head, stream, left, workers, chunk_bytes)
            ran = _run(path, blocks, workers, chunk_bytes, tmp)
            if ran is None:
                return None
            results, last = ran
            close = results[-1]["close"] - last.start
            doc = _document(path, close, prefix, array_format, chunk_bytes, last.data)
            return _assemble(path, doc, results, tmp)
    except _GUNZIP_ERRORS:
        return None  # damaged: the sequential loader reads the gzip itself and words it


def _stream_blocks(
    rd: Reader, stream: IO[bytes], size: int, workers: int, chunk_bytes: int
) -> Iterator[_Block]:
    """Blocks of ``stream``, whose array ``rd`` has just found (``size``: a guess).

    The text goes through one buffer, read into and sent from in place: a block is a view of it,
    valid until the next block is asked for (the last block is a copy). Block-sized objects made
    and freed one after another stayed resident in the parent (glibc's heap: 26 MB more at the
    peak on a 530 MB trace here).
    """
    buf = bytearray(max(len(rd.buf), _BLOCK_MAX) + _SEARCH + _GUNZIP_READ)
    filled = len(rd.buf)
    buf[:filled] = rd.buf
    pos = rd.offset  # of buf[0] in the stream
    eof = False
    while True:
        want = _block_bytes(size - pos, workers, chunk_bytes)
        need = want + _SEARCH
        while True:
            while not eof and filled < need:
                if len(buf) - filled < _GUNZIP_READ:  # an element longer than the buffer
                    if len(buf) >= _GROW_LIMIT:
                        # an element, or a run of whitespace, this long: the sequential loader
                        # reads it in memory linear in the element (constant in whitespace)
                        raise Fallback
                    buf = buf[:filled] + bytes(len(buf))
                with memoryview(buf) as view:
                    got = stream.readinto(view[filled : filled + _GUNZIP_READ])  # type: ignore[attr-defined]
                filled += got
                eof = not got
            found = BOUNDARY.search(buf, want, filled)
            if found is not None or eof:
                break
            need = filled + _SEARCH  # inside an element longer than the search: read on
        if found is None:
            yield _Block(pos, None, bytes(memoryview(buf)[:filled]))
            return
        end, nxt = found.start() + 1, found.end() - 1
        yield _Block(pos, pos + end, memoryview(buf)[:end])
        buf[: filled - nxt] = buf[nxt:filled]  # the same length: allowed while a view exists
        filled -= nxt
        pos += nxt


def _run(
    path: Path, blocks: Iterator[_Block], workers: int, chunk_bytes: int, tmp: str
) -> tuple[list[dict[str, Any]], _Block] | None:
    """Decode ``blocks`` with ``workers`` processes, each block to the first that asks.

    Returns every block's counters in block order and the last block; None when a worker
    failed or a block did not decode cleanly.
    """
    procs = spawn(workers)
    results: dict[int, dict[str, Any]] = {}
    count = 0
    last: _Block | None = None  # only the last block's text is kept: the document's end
    # the block the next worker to ask gets, made ready (a gzip block: decompressed) while the
    # workers decode, not while the one that asked waits
    ready = next(blocks, None)

    def feed(proc: subprocess.Popen[bytes]) -> bool:
        """Send the next block to ``proc``; False (and its stdin closed) when none is left."""
        nonlocal count, last, ready
        stdin = cast("IO[bytes]", proc.stdin)
        block = ready
        if block is None:
            stdin.close()
            return False
        size = -1 if block.data is None else len(block.data)
        job = {"path": str(path), "chunk": chunk_bytes, "tmp": tmp, "block": count}
        job |= {"start": block.start, "end": block.end, "data": size}
        stdin.write(json.dumps(job).encode() + b"\n")
        if block.data is not None:
            stdin.write(block.data)
        stdin.flush()
        last = block
        count += 1
        ready = next(blocks, None)  # the text sent is no longer needed: its buffer is free
        return True

    try:
        with selectors.DefaultSelector() as sel:
            for proc in procs:
                if feed(proc):
                    sel.register(cast("IO[bytes]", proc.stdout), selectors.EVENT_READ, proc)
            busy = len(sel.get_map())
            while busy:
                for key, _ in sel.select():
                    result = _answer(cast("IO[bytes]", key.fileobj).readline())
                    if result is None:
                        return None
                    results[result["block"]] = result
                    if not feed(key.data):
                        sel.unregister(key.fileobj)
                        busy -= 1
        if any(proc.wait() for proc in procs):
            return None
    except BrokenPipeError:  # a worker died while it was sent a block
        return None
    finally:
        for proc in procs:
            stop(proc)
    assert last is not None  # both block iterators yield at least one block
    return [results[i] for i in range(count)], last


def _answer(line: bytes) -> dict[str, Any] | None:
    """A worker's counters for a block; None when it failed, died (no line) or said something
    else."""
    try:
        result = json.loads(line)
    except ValueError:
        return None
    return result if isinstance(result, dict) and result.get("ok") is True else None


def _assemble(
    path: Path, doc: dict[str, object], results: list[dict[str, Any]], tmp: str
) -> TraceRows:
    """Metadata, notes and parts from the blocks' counters and pieces.

    Each frame's pieces are read in one query: ``read_ipc`` file by file cost 4 ms a file
    (0.35 s for the 84 files of a 530 MB trace, against 0.06 s).
    """
    import numpy as np  # here, not at the top: the workers import this module and need no NumPy

    notes = counter_notes(path, sum(r["bad"] for r in results), sum(r["negative"] for r in results))
    latest = [r["latest_x"] for r in results if r["latest_x"] is not None]
    escaped = sum(r["escaped"] for r in results)
    trace_meta = describe(path, doc, notes, escaped, max(latest) if latest else None)
    # as assemble() does to the events: event ids in file order, the base time added
    before = np.cumsum([0] + [r["events"] for r in results[:-1]])
    times = pl.col("ts_ns") + (trace_meta.base_time_ns or 0)
    frames = {}
    for name in FRAMES:
        files = [pl.scan_ipc(_outputs(tmp, i)[name]) for i in range(len(results))]
        frame = pl.concat(files).collect()
        if "event_id" in frame.columns:
            offsets = np.repeat(before, [r["rows"][name] for r in results])
            frame = frame.with_columns(pl.col("event_id") + pl.Series(offsets, dtype=pl.Int64))
        frames[name] = frame.with_columns(times)
    categories = sorted({c for r in results for c in r["categories"]})
    parts = merge([Pieces(**frames, categories=categories)], path.name)
    return TraceRows(trace_meta, notes, parts, None)


def _outputs(tmp: str, block: int) -> dict[str, str]:
    """Where a worker writes a block's pieces (Arrow IPC)."""
    return {name: f"{tmp}/block{block}.{name}.arrow" for name in FRAMES}


def _document(
    path: Path,
    close: int,
    prefix: bytes | None,
    array_format: bool,
    chunk_bytes: int,
    data: bytes | memoryview | None = None,
) -> dict[str, object]:
    """The top-level keys around the array, whose ``]`` is at offset ``close`` of the file (or of
    ``data``, the last block's text of a gzip file).

    Raises ``Fallback`` when what follows the array is not clean: the sequential loader then
    words the damage or recovers, as it does for any file.
    """
    stream = None if data is None else io.BytesIO(data)
    rd = Reader(path, chunk_bytes, Columns(True), (close, None, b""), stream)
    rd.prefix_is_array = array_format
    try:
        rd.more()
        return rd.finish(prefix, 0)
    finally:
        rd.src.close()


class _Sent(io.RawIOBase):
    """A block sent on stdin, read as a file (what ``_Reader`` reads) from the worker's buffer.

    Each worker keeps one buffer for the blocks it is sent: reading each (then up to 33 MB) into a new
    ``bytes`` object had the kernel fault in and zero fresh pages every time, 113,000 faults (a
    fifth of them all) for the blocks of a 530 MB ``.json.gz``.
    """

    def __init__(self, text: memoryview) -> None:
        super().__init__()
        self._text = text
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self._text)}[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        end = len(self._text) if size is None or size < 0 else self._pos + size
        data = bytes(self._text[self._pos : end])
        self._pos += len(data)
        return data


def _receive(stdin: IO[bytes], buf: bytearray, size: int) -> tuple[bytearray, memoryview | None]:
    """The next ``size`` bytes of ``stdin``, read into ``buf`` or, when it is too small, into a
    new buffer (returned; the old one may still be viewed); None when stdin ends first."""
    if len(buf) < size:
        buf = bytearray(size)
    view = memoryview(buf)[:size]
    got = 0
    while got < size:
        n = stdin.readinto(view[got:])  # type: ignore[attr-defined]
        if not n:
            return buf, None
        got += n
    return buf, view


def _decode_block(job: dict[str, Any], sent: memoryview | None) -> dict[str, Any]:
    """Decode one block (``job`` as :func:`_run` sends it: ``sent`` is its text, None to read
    it from the file); write its pieces; its counters."""
    path, chunk_bytes, tmp = Path(job["path"]), job["chunk"], job["tmp"]
    start, end, last = job["start"], job["end"], job["end"] is None
    tail = b"" if last else b"]"
    cols = Columns(True)
    if sent is None:
        rd = Reader(path, chunk_bytes, cols, (start, end, tail))
    else:
        rd = Reader(path, chunk_bytes, cols, (0, None, tail), cast("IO[bytes]", _Sent(sent)))
    try:
        close = rd.events()
        if close is not None and (rd.notes or (not last and rd.buf[close + 1 :].strip())):
            close = None  # damaged, or more than the block's own array
    except Exception:  # any failure sends the parent to the sequential loader
        close = None
    finally:
        rd.src.close()
    if close is None:
        return {"block": job["block"], "ok": False}
    rows = [cols.frame()]
    top = latest_complete(rows[0])
    cols.frames.clear()  # the list holds the only reference: pieces_of lets the rows go
    pieces = pieces_of(rows)
    frames = pieces.frames()
    out = _outputs(tmp, job["block"])
    for name, frame in frames.items():
        frame.write_ipc(out[name], compression="uncompressed")
    return {
        "block": job["block"],
        "ok": True,
        "events": cols.index,
        "bad": cols.bad,
        "negative": cols.negative,
        "escaped": cols.escaped,
        "categories": pieces.categories,
        "rows": {name: frame.height for name, frame in frames.items()},
        "latest_x": top,
        "close": start + rd.at(close),  # rd.at counts from the span's start
    }


def _worker() -> int:
    """Decode the blocks sent on stdin (a JSON line, then as many bytes as its ``data`` says);
    answer each with a JSON line of counters; 3 after a block that did not decode cleanly."""
    jobs, answers = sys.stdin.buffer, sys.stdout
    buf = bytearray()
    while line := jobs.readline():
        job = json.loads(line)
        sent = None
        if job["data"] >= 0:
            buf, sent = _receive(jobs, buf, job["data"])
            if sent is None:
                return 3  # the parent stopped sending mid-block
        result = _decode_block(job, sent)
        answers.write(json.dumps(result) + "\n")
        answers.flush()
        if not result["ok"]:
            return 3
    return 0


if __name__ == "__main__":
    code = _worker()
    sys.stdout.flush()
    # everything is written: skip the interpreter's teardown (freeing Polars' memory), which the
    # parent would otherwise wait for before it can put the pieces together
    os._exit(code)

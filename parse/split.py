"""Decode one large plain trace on several cores: its ``traceEvents`` array cut into parts.

Tokenising JSON is the floor of every loader (about 6 s per GB on one core here), so a large
trace is decoded by several processes at once -- threads would share one interpreter lock.
:func:`read_work_parts` returns what the sequential reading gives
(:func:`~nprof_report.parse.stream.read_trace_stream` with ``work_only``, then
:func:`~nprof_report.parse.parts.parts_of`: the same parts, event ids, notes, metadata):

1. The parent finds the array (the top-level keys before it are kept, as the streaming loader
   does) and cuts the rest of the file at ``} , {`` boundaries into equal shares.
2. Each part goes to a worker process (``python -m nprof_report.parse.split``), which reads its
   byte range as an array of its own (the range plus ``]``; the last part: up to the array's own
   ``]``, whose offset it reports) with the streaming loader's own reader, takes its rows apart
   (:func:`~nprof_report.parse.parts.split_rows`) and writes the pieces as Arrow IPC with its
   counters, so the parent never holds the rows themselves. The workers share the CPUs out
   (``POLARS_MAX_THREADS``): one single-threaded worker per CPU finished 0.5 s sooner on a 530 MB
   trace here than the parent and one worker each decoding on every CPU, whose thread pools then
   fought over the cores.
3. The parent decodes the top-level keys after the array, shifts the event ids of each part
   by the events before it (and times by the trace's base time), and puts the pieces together.

A cut inside a string leaves a part whose last element does not decode, and any damage leaves
a note; either way (or when a worker fails) the file is read again by the sequential loader,
which words the error or recovers exactly as it always does. A gzip stream cannot be entered in
the middle, so a large ``.json.gz`` is first decompressed, as a stream, into a temporary plain file
beside the system's other temporary files (removed at the end), and that file is split; when it
cannot be written (no space), the gzip file is read sequentially.

Memory: every worker holds its part's rows (compact: Categorical text, Int64 times), then their
pieces, and one read window; the parent then holds the pieces of all parts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import cast

import polars as pl
from zlib_ng import gzip_ng, zlib_ng

from nprof_report.errors import InputError
from nprof_report.parse.load import TraceMeta, describe, latest_complete
from nprof_report.parse.ndjson import BOUNDARY
from nprof_report.parse.parts import FRAMES, Parts, Pieces, batches, merge, parts_of, pieces_of
from nprof_report.parse.stream import (
    _Columns,
    _Fallback,
    _Reader,
    counter_notes,
    read_trace_stream,
)

__all__ = ["read_work_parts"]

# below this the worker's start-up (about 0.5 s) is not paid back
MIN_SPLIT_BYTES = 64 << 20
_SEARCH = 1 << 20
_GZIP_RATIO = 20  # a trace compresses about 10-20x: smaller .gz files are not worth decompressing
_GUNZIP_BLOCK = 4 << 20
# zlib-ng's stub types its error as an instance
_GUNZIP_ERRORS = (OSError, EOFError, cast("type[Exception]", zlib_ng.error))
_WORKER = [sys.executable, "-m", __name__]
DECODE_WORKERS_ENV = "NPROF_DECODE_WORKERS"
_GLIBC_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(64 << 20)}


_Read = tuple[TraceMeta, list[str], Parts]  # what read_work_parts returns


def default_workers() -> int:
    """Processes to decode with: :data:`DECODE_WORKERS_ENV`, else the CPUs this process may use."""
    env = os.environ.get(DECODE_WORKERS_ENV)
    if env and env.isdigit():
        return max(1, int(env))
    return _cpus()


def _cpus() -> int:
    """The CPUs this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def read_work_parts(
    path: Path,
    *,
    workers: int | None = None,
    chunk_bytes: int = 8 << 20,
    min_bytes: int = MIN_SPLIT_BYTES,
) -> _Read:
    """Metadata, notes and parts of the work rows of ``path``, decoded by ``workers`` processes.

    Files smaller than ``min_bytes`` (gzip: smaller than ``min_bytes`` / 20) and ``workers=1``
    are read sequentially, as is any file the split cannot read cleanly.
    """
    path = Path(path)
    workers = default_workers() if workers is None else workers
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            gz = fh.read(2) == b"\x1f\x8b"
    except OSError:
        size, gz = 0, False  # let the sequential loader word the error
    if workers >= 2 and size >= (min_bytes // _GZIP_RATIO if gz else min_bytes):
        try:
            if gz:
                got = _read_gzip(path, workers, chunk_bytes, min_bytes)
            else:
                got = _read_parts(path, path, size, workers, chunk_bytes)
            if got is not None:
                return got
        except (_Fallback, InputError):
            pass  # the sequential loader reads it again and words what is wrong
    trace = read_trace_stream(path, work_only=True, chunk_bytes=chunk_bytes)
    meta, notes, rows = trace.meta, trace.notes, batches(trace.events)
    del trace  # the batches hold the only reference to the rows: parts_of lets them go
    return meta, notes, parts_of(rows, path.name)


def _read_gzip(path: Path, workers: int, chunk_bytes: int, min_bytes: int) -> _Read | None:
    """Decompress into a temporary file and split that; None when it is small or cannot be.

    zlib-ng's gzip module decompresses the stream 2.5-3x faster than the standard library's
    (530 MB of JSON: 0.8-1.2 s instead of 3.0-3.3 s here), the same format and bytes.
    """
    with tempfile.TemporaryDirectory(prefix="nprof-gunzip-") as tmp:
        plain = Path(tmp) / path.name.removesuffix(".gz")
        try:
            with gzip_ng.open(path, "rb") as src, plain.open("wb") as dst:  # type: ignore[no-untyped-call]
                shutil.copyfileobj(src, dst, _GUNZIP_BLOCK)
        except _GUNZIP_ERRORS:
            return None  # damaged, or no space: the sequential loader reads the gzip itself
        size = plain.stat().st_size
        if size < min_bytes:
            return None
        return _read_parts(path, plain, size, workers, chunk_bytes)


def _cuts(path: Path, start: int, size: int, parts: int) -> list[tuple[int, int]]:
    """(end of a part, start of the next) at the first boundary after each equal share."""
    cuts: list[tuple[int, int]] = []
    with path.open("rb") as fh:
        for i in range(1, parts):
            share = int((size - start) * i / parts)
            at = max(start + share, cuts[-1][1] if cuts else start)
            fh.seek(at)
            window = fh.read(_SEARCH)
            m = BOUNDARY.search(window)
            if m is None:
                break
            cuts.append((at + m.start() + 1, at + m.end() - 1))
    return cuts


def _worker_env(workers: int) -> dict[str, str]:
    """The workers' environment: CPUs shared out, and glibc's allocator told to keep memory.

    Each worker decodes one piece after another, allocating and freeing the same sizes; by
    default glibc hands each 8 MB buffer back to the kernel and faults it in again, which cost a
    tenth of the time here. A fixed mmap threshold (32 MiB) and a trim threshold of 64 MiB keep
    those buffers in the heap; measured on a 530 MB trace: 0.6 s less per worker, same peak.
    Values already set by the user win.
    """
    env = dict(os.environ)
    env.setdefault("POLARS_MAX_THREADS", str(max(1, _cpus() // workers)))
    for key, value in _GLIBC_MALLOC.items():
        env.setdefault(key, value)
    return env


def _read_parts(path: Path, plain: Path, size: int, workers: int, chunk_bytes: int) -> _Read | None:
    """Split the uncompressed ``plain`` (``path`` itself, or its decompressed copy)."""
    head = _Reader(plain, chunk_bytes, _Columns(True))
    try:
        prefix, array_format = head.find_array()
    finally:
        head.src.close()
    start = head.offset
    cuts = _cuts(plain, start, size, workers)
    if not cuts:
        return None
    spans = list(zip([start] + [nxt for _, nxt in cuts], [str(end) for end, _ in cuts] + [""]))
    env = _worker_env(len(spans))
    with tempfile.TemporaryDirectory(prefix="nprof-split-") as tmp:
        procs = [
            subprocess.Popen(
                [*_WORKER, str(plain), str(a), b, str(chunk_bytes), tmp, str(i)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
            )
            for i, (a, b) in enumerate(spans)
        ]
        try:
            codes = [p.wait() for p in procs]
        except BaseException:
            for p in procs:
                p.kill()
            raise
        if any(codes):
            return None
        metas = [json.loads(Path(_outputs(tmp, i)["meta"]).read_text()) for i in range(len(spans))]
        doc = _document(plain, metas[-1]["close"], prefix, array_format, chunk_bytes)
        notes = counter_notes(path, sum(m["bad"] for m in metas), sum(m["negative"] for m in metas))
        latest = [m["latest_x"] for m in metas if m["latest_x"] is not None]
        escaped = sum(m["escaped"] for m in metas)
        trace_meta = describe(path, doc, notes, escaped, max(latest) if latest else None)
        pieces, offset = [], 0
        for i, meta in enumerate(metas):
            # as assemble() does to the events: event ids in file order, the base time added
            ids = pl.col("event_id") + offset
            times = pl.col("ts_ns") + (trace_meta.base_time_ns or 0)
            frames = {k: pl.read_ipc(f) for k, f in _outputs(tmp, i).items() if k != "meta"}
            pieces.append(
                Pieces(
                    host=frames["host"].with_columns(ids, times),
                    device=frames["device"].with_columns(ids, times),
                    flows=frames["flows"].with_columns(times),
                    step_rows=frames["step_rows"].with_columns(times),
                    categories=meta["categories"],
                )
            )
            offset += meta["events"]
    return trace_meta, notes, merge(pieces, path.name)


def _outputs(tmp: str, part: int) -> dict[str, str]:
    """Where a worker writes its pieces (Arrow IPC) and its counters (JSON)."""
    files = {name: f"{tmp}/part{part}.{name}.arrow" for name in FRAMES}
    return {**files, "meta": f"{tmp}/part{part}.json"}


def _document(
    path: Path, close: int, prefix: bytes | None, array_format: bool, chunk_bytes: int
) -> dict[str, object]:
    """The top-level keys around the array, whose ``]`` is at offset ``close``.

    Raises ``_Fallback`` when what follows the array is not clean: the sequential loader then
    words the damage or recovers, as it does for any file.
    """
    rd = _Reader(path, chunk_bytes, _Columns(True), (close, None, b""))
    rd.prefix_is_array = array_format
    try:
        rd.more()
        return rd.finish(prefix, 0)
    finally:
        rd.src.close()


def _worker(argv: list[str]) -> int:
    """Decode ``[start, end)`` of ``path`` as an array (``end`` empty: up to the array's own
    ``]``); write its pieces and counters into the folder ``tmp`` as part ``part``; 3 if not
    clean."""
    path, start, end_arg, chunk, tmp, part = argv
    end = int(end_arg) if end_arg else None
    cols = _Columns(True)
    rd = _Reader(Path(path), int(chunk), cols, (int(start), end, b"" if end is None else b"]"))
    try:
        close = rd.events()
        if close is not None and (rd.notes or (end is not None and rd.buf[close + 1 :].strip())):
            close = None  # damaged, or more than the part's own array
    except Exception:  # any failure sends the parent to the sequential loader
        close = None
    finally:
        rd.src.close()
    if close is None:
        return 3
    rows = cols.frame()
    top = latest_complete(rows)
    cuts = batches(rows)
    cols.frames.clear()
    del rows  # the batches hold the only references: pieces_of lets them go
    pieces = pieces_of(cuts)
    out = _outputs(tmp, int(part))
    for name, frame in pieces.frames().items():
        frame.write_ipc(out[name], compression="uncompressed")
    counters = {
        "events": cols.index,
        "bad": cols.bad,
        "negative": cols.negative,
        "escaped": cols.escaped,
        "categories": pieces.categories,
        "latest_x": top,
        "close": int(start) + rd.offset + close,  # rd.offset counts from the span's start
    }
    Path(out["meta"]).write_text(json.dumps(counters))
    return 0


if __name__ == "__main__":
    raise SystemExit(_worker(sys.argv[1:]))

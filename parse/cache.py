"""Parquet cache of parsed frames, so a second ``ops`` or ``build`` of a trace skips the parse.

Where. A trace of a run bundle (``source.implementation`` set) is cached inside the bundle, in
``<bundle>/.nprof-cache/``, so the cache travels with the run. Any other trace is cached under the
user cache dir, ``$XDG_CACHE_HOME`` (or ``~/.cache``) ``/nprof-report/frames/``: nothing is ever
written beside a user's own trace. ``NPROF_CACHE_DIR`` puts every entry in that folder instead;
``NPROF_NO_CACHE=1`` (the CLI's ``--no-cache``) turns the cache off.

Slot and key. Each trace has one slot, a folder named after the trace's path (relative to its
bundle, absolute elsewhere). The slot's ``entry.json`` records the key the entry was written for:
the trace's sha256, :data:`CACHE_FORMAT`, the nprof_report version, a fingerprint of the parse
package's source (a changed parser never reads frames an older one made) and ``work_only``. An
entry is used only when its key matches; otherwise the trace is parsed and the slot replaced. A
full entry (``work_only=False``) also serves a ``work_only`` request: its events are left unread
(``events`` None, as the loader does); a work-only entry never serves a full one.

Entry. Every DataFrame field of :class:`TraceFrames` is a Parquet file; ``entry.json`` holds the key,
the :class:`TraceMeta` fields but ``path`` (set again to the trace's current path on load), the other
fields (``notes``) and each frame's row count, dtypes and sha256, all checked on load (a flipped byte
or a frame file copied from another entry is a miss, not a wrong number). Only regular files are
read. An entry is written into a ``.tmp-*`` folder and renamed into place, so a killed process never
leaves a half-written entry that is read later (temporary folders are removed by the next write:
at once when the pid in their name no longer runs, otherwise after an hour). Anything unreadable
is a miss, and a failed write is ignored: the cache never turns a parse into an error.

Bound. Outside bundles (the user cache dir or ``NPROF_CACHE_DIR``), each write evicts the least
recently used entries (``entry.json``'s mtime, touched on every hit) until at most
:data:`MAX_ENTRIES` entries and :data:`MAX_BYTES` bytes remain; the entry just written is kept even
when it alone is larger. A bundle's cache holds one entry per trace of the bundle and is not evicted.

Not cached: frames holding a name longer than :data:`MAX_NAME_CHARS` (one op with a name of
megabytes); writing their entry would take more memory than parsing them again.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import re
import shutil
import stat
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields
from functools import cache
from pathlib import Path
from typing import Any

import polars as pl

from nprof_report import __version__
from nprof_report.parse.frames import load_frames
from nprof_report.parse.inputs import Source
from nprof_report.parse.read.source import TraceFile, changed, open_trace, snapshot
from nprof_report.parse.schema import TraceFrames, TraceMeta
from nprof_report.procs import pid_alive

CACHE_FORMAT = 2  # 2: each frame file's sha256 in entry.json
MAX_NAME_CHARS = 1 << 20
"""Frames holding a longer name are not cached: Parquet's writer holds three copies of each
text while it writes, more memory than the parse that made them (and it is bounded by the file)."""
ENV_DIR = "NPROF_CACHE_DIR"
ENV_OFF = "NPROF_NO_CACHE"
BUNDLE_DIR = ".nprof-cache"
MAX_ENTRIES = 64
MAX_BYTES = 4 << 30
STALE_TMP_S = 3600.0
ENTRY_FILE = "entry.json"
# the pid in a temporary folder's name: ``.tmp-<slot>-p<pid>-<random>``, ``.old-<slot>-p<pid>-``
_OWNER = re.compile(r"-p(\d+)-[a-z0-9_]*$")

# sha256 of trace files by (resolved path, device, inode, size, mtime_ns): one hash per file and
# process; the parallel parse hands the parent's digests to its workers through this dict.
DIGESTS: dict[tuple[str, int, int, int, int], str] = {}


def enabled(use_cache: bool = True) -> bool:
    """Whether to use the cache: ``use_cache`` and ``NPROF_NO_CACHE`` unset (or ``0``)."""
    return use_cache and os.environ.get(ENV_OFF, "").strip() in ("", "0")


def trace_digest(path: Path) -> str:
    """sha256 of ``path``, memoised per (path, device, inode, size, mtime_ns).

    Only a regular file is hashed, and only up to the size it had when it was opened (as the
    readers read it): a FIFO or a device is refused as the parser refuses it.
    """
    with open_trace(path) as file:
        key = (str(path.resolve()), *file.identity)
        if key not in DIGESTS:
            DIGESTS[key] = sha256_of(file)
    return DIGESTS[key]


def sha256_of(file: TraceFile) -> str:
    """Hex sha256 of an open trace file's bytes, up to the size it had when it was opened."""
    digest = hashlib.sha256()
    left = file.size
    while left > 0 and (block := file.raw.read(min(1 << 20, left))):
        digest.update(block)
        left -= len(block)
    return digest.hexdigest()


@cache
def parser_fingerprint() -> str:
    """sha256 over the source of the parse package, so entries die with the parser that made them."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parent
    for file in sorted(root.rglob("*.py")):  # the readers live in sub-packages
        digest.update(file.relative_to(root).as_posix().encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()


def location(source: Source) -> tuple[Path, bool] | None:
    """(slot folder, evictable) for ``source``'s trace, or None when there is nowhere to cache."""
    if source.trace is None:
        return None
    trace = source.trace.resolve()
    override = os.environ.get(ENV_DIR)
    if override:
        return Path(override) / _slot_name(trace), True
    if source.implementation is not None:
        try:
            rel = trace.relative_to(source.folder.resolve())
        except ValueError:  # a manifest pointing outside its bundle: cache it as a loose trace
            pass
        else:
            return source.folder / BUNDLE_DIR / _slot_name(rel), False
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    try:
        base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    except RuntimeError:  # no home directory
        return None
    return base / "nprof-report" / "frames" / _slot_name(trace), True


def _slot_name(path: Path) -> str:
    readable = re.sub(r"[^A-Za-z0-9._-]", "_", path.name).lstrip(".")[:60]
    # os.fsencode: a path that is not valid UTF-8 (surrogate-escaped by Python) is hashed as the
    # bytes it is on disk
    return f"{readable}-{hashlib.sha256(os.fsencode(path)).hexdigest()[:16]}"


def _key(trace: Path, work_only: bool) -> dict[str, Any]:
    return {
        "sha256": trace_digest(trace),
        "format": CACHE_FORMAT,
        "nprof_report": __version__,
        "parser": parser_fingerprint(),
        "work_only": work_only,
    }


def _serves(stored: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """A full entry serves both requests; a work-only entry serves only work-only ones."""
    same = all(stored.get(k) == v for k, v in wanted.items() if k != "work_only")
    return same and (stored.get("work_only") is False or wanted["work_only"] is True)


def cached_frames(source: Source, *, work_only: bool) -> TraceFrames:
    """``load_frames(source.trace, work_only=...)``, read from the cache when it holds them.

    The entry written is keyed by the sha256 of exactly the bytes parsed: the trace must be the
    same file (inode, size, mtime) before the parse and the hash and after both, or the command
    ends with an error saying it changed.
    """
    if source.trace is None:
        raise ValueError("a source without trace.json has no frames")
    trace = source.trace
    where = location(source)
    if where is None:
        return load_frames(trace, work_only=work_only)
    with open_trace(trace) as file:  # a missing, unreadable or special file is worded here
        before = file.identity
    slot, evictable = where
    key: dict[str, Any] | None
    if (slot / ENTRY_FILE).exists():
        key = _key(trace, work_only)
        frames = _read(slot, key, trace)
        if frames is not None:
            return frames
        frames = load_frames(trace, work_only=work_only)
    else:
        # nothing to serve: hash while parsing (sha256 of a 530 MB trace: 0.84 s, which kept the
        # decode workers waiting when it came first); hashlib and file reads release the GIL
        with ThreadPoolExecutor(1) as pool:
            hashing = pool.submit(_key, trace, work_only)
            try:
                frames = load_frames(trace, work_only=work_only)
            finally:
                key = hashing.result() if hashing.exception() is None else None
        if key is None:  # the trace went away: the parse said so, or nothing keys the entry
            return frames
    if snapshot(trace) != before:
        raise changed(trace)
    if _longest_name(frames) <= MAX_NAME_CHARS:
        _write(slot, key, frames, evictable)
    return frames


def _longest_name(frames: TraceFrames) -> int:
    """The longest op or device activity name of ``frames`` (from the categories: no text made)."""
    lengths = [f["name"].cat.len_chars().max() for f in (frames.ops, frames.device) if f.height]
    return max((n for n in lengths if isinstance(n, int)), default=0)


def is_cached(source: Source, *, work_only: bool) -> bool:
    """Whether the cache holds an entry that serves this request (its key only; files unread)."""
    where = location(source)
    if where is None or source.trace is None:
        return False
    try:
        record = json.loads(_read_regular(where[0] / ENTRY_FILE))
        return _serves(record["key"], _key(source.trace, work_only))
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _read(slot: Path, key: dict[str, Any], trace: Path) -> TraceFrames | None:
    """The entry's frames when it serves ``key``; None for a miss or anything unreadable."""
    try:
        record = json.loads(_read_regular(slot / ENTRY_FILE))
        if not _serves(record["key"], key):
            return None
        narrow = key["work_only"] and not record["key"]["work_only"]
        values: dict[str, Any] = dict(record["values"])
        values["meta"] = TraceMeta(path=trace, **record["meta"])
        for name, spec in record["frames"].items():
            if narrow and name == "events":
                values[name] = None
                continue
            data = _read_regular(slot / _frame_file(name))
            if hashlib.sha256(data).hexdigest() != spec["sha256"]:
                return None  # damaged or swapped: Parquet's own checks miss many flipped bytes
            df = pl.read_parquet(io.BytesIO(data))
            del data
            if _dtypes(df) != spec["dtypes"] or df.height != spec["rows"]:
                return None
            values[name] = df
        frames = TraceFrames(**values)
    except Exception:  # any damage (bad JSON, truncated Parquet, changed fields) is a miss
        return None
    with contextlib.suppress(OSError):
        os.utime(slot / ENTRY_FILE)  # last use, for eviction
    return frames


def _read_regular(path: Path) -> bytes:
    """The bytes of ``path`` if it is a regular file (a FIFO or device would block or never end);
    at most the size it had when opened."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read(st.st_size)
    finally:
        os.close(fd)


def _frame_file(name: str) -> str:
    """Not ``<Table>.parquet``, which Neuron session discovery would take for an Explorer table."""
    return f"frame-{name}.parquet"


def _dtypes(df: pl.DataFrame) -> dict[str, str]:
    return {name: str(dtype) for name, dtype in df.schema.items()}


def _write(slot: Path, key: dict[str, Any], frames: TraceFrames, evictable: bool) -> None:
    """Write the entry into a temporary folder, then rename it into place; failures are ignored."""
    staging: Path | None = None
    try:
        slot.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale(slot.parent)
        staging = Path(
            tempfile.mkdtemp(prefix=f".tmp-{slot.name}-p{os.getpid()}-", dir=slot.parent)
        )
        record: dict[str, Any] = {"key": key, "frames": {}, "values": {}, "meta": {}}
        for f in fields(TraceFrames):
            value = getattr(frames, f.name)
            if f.name == "meta":
                record["meta"] = {
                    m.name: getattr(value, m.name) for m in fields(TraceMeta) if m.name != "path"
                }
            elif isinstance(value, pl.DataFrame):
                buffer = io.BytesIO()
                value.write_parquet(buffer, compression="lz4", statistics=False)
                (staging / _frame_file(f.name)).write_bytes(buffer.getvalue())
                record["frames"][f.name] = {
                    "rows": value.height,
                    "dtypes": _dtypes(value),
                    "sha256": hashlib.sha256(buffer.getbuffer()).hexdigest(),
                }
            else:
                record["values"][f.name] = value
        (staging / ENTRY_FILE).write_text(json.dumps(record), encoding="utf-8")
        _move_into_place(staging, slot)
        if evictable:
            evict(slot.parent, keep=slot, max_entries=MAX_ENTRIES, max_bytes=MAX_BYTES)
    except Exception:  # disk full, read-only folder, a value JSON cannot hold: no entry
        pass
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


def _move_into_place(staging: Path, slot: Path) -> None:
    """Replace ``slot`` by ``staging``; when another process got there first, keep its entry."""
    if slot.exists():
        old = slot.with_name(f".old-{slot.name}-p{os.getpid()}-")
        try:
            slot.rename(old)
        except OSError:
            pass
        else:
            shutil.rmtree(old, ignore_errors=True)
    with contextlib.suppress(OSError):
        staging.rename(slot)


def _remove_stale(root: Path) -> None:
    """Remove temporary folders that a killed process left behind: those of a pid that no
    longer runs at once, any other after an hour (a pid may be reused)."""
    cutoff = time.time() - STALE_TMP_S
    for d in root.iterdir():
        if not d.name.startswith((".tmp-", ".old-")):
            continue
        owner = _OWNER.search(d.name)
        try:
            stale = (owner is not None and not pid_alive(int(owner[1]))) or (
                d.stat().st_mtime < cutoff
            )
        except OSError:  # removed meanwhile by another process
            continue
        if stale:
            shutil.rmtree(d, ignore_errors=True)


def _usage(entry: Path) -> tuple[float, int] | None:
    """(last use, bytes) of an entry; None when it vanished meanwhile."""
    try:
        files = [f for f in entry.iterdir() if f.is_file()]
        used = next((f.stat().st_mtime for f in files if f.name == ENTRY_FILE), 0.0)
        return used, sum(f.stat().st_size for f in files)
    except OSError:
        return None


def evict(
    root: Path, *, keep: Path, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES
) -> None:
    """Delete the least recently used entries of ``root`` beyond the bound, never ``keep``."""
    entries = []
    for d in root.iterdir():
        usage = None if d.name.startswith(".") or not d.is_dir() else _usage(d)
        if usage is not None:
            entries.append((d == keep, *usage, d))
    entries.sort(key=lambda e: (e[0], e[1]), reverse=True)  # kept first, then the latest used
    total = 0
    for count, (kept, _, size, d) in enumerate(entries, start=1):
        total += size
        if not kept and (count > max_entries or total > max_bytes):
            shutil.rmtree(d, ignore_errors=True)  # and every older one, as the sums only grow

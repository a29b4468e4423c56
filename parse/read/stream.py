"""Chunked, bounded-memory loader for large Kineto ``trace.json`` files.

:func:`read_trace_stream` returns the same :class:`~nprof_report.parse.schema.Trace` as the
reference loader (:func:`~.reference.read_trace`) -- the same ``EVENTS`` frame (columns, dtypes,
values, row order), the same metadata and the same recovery notes -- but never holds the whole
document or its Python objects in memory. It reads the file (:class:`~.source.TraceStream`: plain,
gzip by magic number, single-line or pretty-printed, object or bare Chrome JSON Array Format) in
windows of ``chunk_bytes``:

1. A small tokenizer finds the top-level ``"traceEvents"`` array. Every other top-level key, before
   or after the array, is kept as text and decoded at the end as a *skeleton* document (the array
   replaced by ``[]``), so metadata follows exactly the reference loader's rules.
2. Each window is cut after the last ``}`` ``,`` ``{`` boundary (any whitespace between). A cut
   that falls inside a string always yields invalid JSON, so decoding the piece validates the cut;
   on failure the previous boundary is tried, and when none works the window grows (an event
   larger than the window).
3. Each piece is decoded into columns by :class:`~.columns.Columns`.

Damage: a ``traceEvents`` array cut short (or garbage after its last complete event) keeps the
complete events and adds the reference loader's note; the top-level keys are then dropped, as the
reference loader does. Anything else that is not a clean trace (not JSON, binary, not UTF-8, no
``traceEvents`` list, gzip damage ...) is handed to the reference loader itself, which raises the
``InputError`` -- so errors are word-for-word identical, at the cost of the reference loader's
memory on such (broken) files only.
"""

from __future__ import annotations

import codecs
import json
import mmap
import re
from pathlib import Path
from typing import IO, Any

import msgspec
import orjson

from nprof_report.errors import InputError
from nprof_report.parse.read.columns import Columns, Fallback, check_utf8
from nprof_report.parse.read.polars_json import BOUNDARY
from nprof_report.parse.read.reference import assemble, read_trace
from nprof_report.parse.read.rows import counter_notes, orjson_int
from nprof_report.parse.read.source import TraceStream, open_trace
from nprof_report.parse.schema import WORK_EVENTS, WORK_ROWS, Trace

__all__ = ["Reader", "read_trace_stream"]

# top-level tokens: complete strings, a lone quote (string not finished yet), structure
_TOK = re.compile(rb'"(?:[^"\\]|\\.)*"|["{}\[\]:]', re.S)
_WS = b" \t\r\n"
_MAX_CUT_TRIES = 4
_TAIL_WINDOW = 1 << 16
_RECOVER_LIMIT = 64 << 20  # a damaged element bigger than this ends the recovery


_NOT_WS = re.compile(rb"[^ \t\r\n]")


def _skip_ws(buf: bytes, pos: int) -> int:
    """The first position from ``pos`` that is not JSON whitespace (``len(buf)``: none)."""
    m = _NOT_WS.search(buf, pos)
    return len(buf) if m is None else m.start()


class _Scan:
    """Exact, incremental token scan of the array body (used when the quick cut fails)."""

    def __init__(self) -> None:
        self.pos = 0
        self.depth = 0
        self.last_sep: int | None = None  # a depth-0 comma: the end of a whole element
        self.close: int | None = None  # the "]" that closes the array

    def run(self, buf: bytes) -> None:
        for m in _TOK.finditer(buf, self.pos):
            tok = m.group()
            c = tok[0]
            if c == 0x22:  # '"'
                if len(tok) == 1:  # a string not finished in this buffer
                    self.pos = m.start()
                    return
                continue
            if c in (0x7B, 0x5B):  # { [
                self.depth += 1
            elif c in (0x7D, 0x5D):  # } ]
                self.depth -= 1
                if self.depth < 0:
                    if c == 0x5D:
                        self.close = m.start()
                    else:
                        self.depth = 0  # stray "}": leave it to the decoder to reject
                    self.pos = m.end()
                    return
            elif c == 0x2C and self.depth == 0:  # ,
                self.last_sep = m.start()
        self.pos = len(buf)


class Reader:
    """Finds the events array of a trace and hands :class:`~.columns.Columns` its pieces.

    ``span`` and ``stream`` as :class:`~.source.TraceStream` takes them (the split workers read
    a block of the array as an array of its own).
    """

    def __init__(
        self,
        path: Path,
        chunk_bytes: int,
        cols: Columns,
        span: tuple[int, int | None, bytes] | None = None,
        stream: IO[bytes] | None = None,
    ) -> None:
        self.path = path
        self.src = TraceStream(path, span, stream)
        self.chunk = max(64, chunk_bytes)
        self.cols = cols
        self.buf = b""
        self.offset = 0  # absolute offset of buf[0] in the decompressed stream
        self.lead_ws = False
        self.notes: list[str] = []

    def more(self) -> bool:
        data = self.src.read(self.chunk)
        if data:
            self.buf += data
        return bool(data)

    def drop(self, k: int) -> None:
        self.buf = self.buf[k:]
        self.offset += k

    # -- top level ---------------------------------------------------------------------------
    def find_array(self) -> tuple[bytes | None, bool]:
        """Consume up to just after the events' ``[``; return (text before it, array format)."""
        lead = 0  # whitespace is dropped as it is read: linear time, however much of it
        while True:
            pos = _skip_ws(self.buf, 0)
            if pos < len(self.buf):
                break
            lead += len(self.buf)
            self.drop(len(self.buf))
            if not self.more():
                raise Fallback  # empty file: read_trace words it
        self.lead_ws = lead + pos > 0
        first = self.buf[pos : pos + 1]
        if first == b"[":
            self.drop(pos + 1)
            return None, True
        if first != b"{":
            raise Fallback
        depth = 0
        last_str: bytes | None = None
        scan = pos
        while True:
            m = _TOK.search(self.buf, scan)
            if m is None or m.group() == b'"':
                if not self.more():
                    raise Fallback
                continue
            tok = m.group()
            scan = m.end()
            if tok[0:1] == b'"':
                last_str = tok if depth == 1 else None
            elif tok in (b"{", b"["):
                depth += 1
            elif tok in (b"}", b"]"):
                depth -= 1
                if depth == 0:
                    raise Fallback  # the object closed without a traceEvents array
            elif tok == b":" and depth == 1 and last_str == b'"traceEvents"':
                vpos = scan
                while True:
                    vpos = _skip_ws(self.buf, vpos)
                    if vpos < len(self.buf):
                        break
                    if not self.more():
                        raise Fallback
                if self.buf[vpos : vpos + 1] != b"[":
                    raise Fallback  # not a list: read_trace's "not a trace"
                prefix = self.buf[:vpos]
                if prefix.count(b'"traceEvents"') != 1:
                    raise Fallback  # ambiguous for read_trace's truncation recovery
                self.drop(vpos + 1)
                return prefix, False

    # -- the array -----------------------------------------------------------------------------
    def events(self) -> int | None:
        """Decode the array's elements; return the offset in ``buf`` of its ``]`` (None: damaged,
        and the recovery has run)."""
        scan: _Scan | None = None
        while True:
            while len(self.buf) < self.chunk and self.more():
                pass
            if scan is None and self._quick_cut():
                continue
            scan = scan or _Scan()
            scan.run(self.buf)
            if scan.close is not None:
                body = self.buf[: scan.close]
                if body.strip(_WS):
                    try:
                        self.cols.add_piece(body)
                    except msgspec.DecodeError:
                        self._recover()
                        return None
                return scan.close
            if scan.last_sep is not None and scan.last_sep > 0:
                try:
                    self.cols.add_piece(self.buf[: scan.last_sep])
                except msgspec.DecodeError:
                    self._recover()
                    return None
                self.drop(scan.last_sep + 1)
                scan = None
                continue
            if not self.more():  # cut short inside the last element
                self._recover()
                return None

    def _quick_cut(self) -> bool:
        """Decode up to the last ``}`` ``,`` ``{`` boundary that works (a few tries)."""
        buf = self.buf
        window = _TAIL_WINDOW
        tried = 0
        while True:
            lo = max(0, len(buf) - window)
            matches = list(BOUNDARY.finditer(buf, lo))
            if matches or lo == 0:
                break
            window *= 8
        for m in reversed(matches):
            try:
                self.cols.add_piece(buf[: m.start() + 1])
            except msgspec.DecodeError:
                tried += 1
                if tried >= _MAX_CUT_TRIES:
                    return False
                continue
            self.drop(m.end() - 1)
            return True
        return False

    # -- damage ----------------------------------------------------------------------------------
    def _recover(self) -> None:
        """read_trace's recovery (stdlib ``raw_decode`` of one element after another) from the
        start of ``buf``, streamed; then count and check the rest of the file."""
        if b"\x00" in self.src.head:
            raise Fallback
        if self.prefix_is_array and self.lead_ws:
            raise Fallback  # read_trace's recovery does not find the array then
        udec = codecs.getincrementaldecoder("utf-8")()

        def feed(data: bytes, final: bool = False) -> str:
            try:
                return str(udec.decode(data, final))
            except UnicodeDecodeError as exc:
                raise Fallback from exc

        text = feed(self.buf, self.src.eof)
        base = self.offset
        self.buf = b""
        decoder = json.JSONDecoder(parse_int=orjson_int)
        pos = 0
        batch: list[Any] = []
        while True:
            while pos < len(text) and text[pos] in " \t\r\n,":
                pos += 1
            if pos > self.chunk:  # forget what has been decoded
                base += len(text[:pos].encode("utf-8"))
                text, pos = text[pos:], 0
            try:
                obj, end = decoder.raw_decode(text, pos)
                complete = end < len(text) or self.src.eof
            except (json.JSONDecodeError, RecursionError):
                obj, complete = None, False
                if self.src.eof or len(text) - pos > _RECOVER_LIMIT:
                    break
            if not complete:  # maybe only cut by the buffer: read on and try again
                data = self.src.read(self.chunk)
                text += feed(data, not data)
                continue
            batch.append(obj)
            pos = end
            if len(batch) >= 20000:
                self.cols.add_events(batch)
                batch = []
        if batch:
            self.cols.add_events(batch)
        used = base + len(text[:pos].encode("utf-8"))
        while True:
            data = self.src.read(self.chunk)
            feed(data, not data)
            if not data:
                break
        if not self.cols.index:
            raise Fallback  # nothing recovered: read_trace's "not valid JSON"
        self.note_cut(used)

    def note_cut(self, used: int) -> None:
        total = self.src.total
        lost = total - used
        self.notes.append(
            f"{self.path.name}: traceEvents array is cut short; read {self.cols.index} complete "
            f"events, lost the last {lost} bytes ({100 * lost / total:.1f}% of the file)"
        )

    prefix_is_array = False

    def finish(self, prefix: bytes | None, close: int) -> dict[str, Any]:
        """Decode the document around the array (``close`` indexes its ``]`` in ``buf``)."""
        while self.more():
            pass
        rest = self.buf[close + 1 :]
        skeleton = b"[]" + rest if prefix is None else prefix + b"[]" + rest
        try:
            doc = orjson.loads(skeleton)
        except orjson.JSONDecodeError as exc:
            # read_trace: the whole-document decode fails -> its checks, then all the events
            if "recursion" in str(exc).lower() or b"\x00" in self.src.head:
                raise Fallback from exc
            check_utf8(skeleton)
            if not self.cols.index:
                raise Fallback from exc  # nothing to recover: read_trace's "not valid JSON"
            self.note_cut(self.offset + close)
            return {}
        if prefix is None:
            return {}
        if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
            raise Fallback
        return doc


def read_trace_stream(path: Path, *, work_only: bool = False, chunk_bytes: int = 8 << 20) -> Trace:
    """Load a Kineto trace like :func:`read_trace`, decoding it in bounded memory.

    ``work_only=True`` keeps only the rows that ops, device activities, steps and links are made
    of (``schema.WORK_ROWS``, with their ``event_id``), in ``WORK_EVENTS`` columns; notes and metadata
    still describe the whole file. That is what every analysis but the Neuron link needs, in a
    fraction of the memory and time. ``chunk_bytes`` is the read window; a single event larger
    than it grows the window.
    """
    path = Path(path)
    try:
        trace = _read(path, work_only, chunk_bytes)
        if any("cut short" in n for n in trace.notes) and _has_nonstandard_numbers(path):
            raise Fallback  # the reference loader reads NaN/Infinity instead of stopping there
        return trace
    except RecursionError as exc:
        raise InputError(path, "JSON is nested too deeply to be a trace") from exc
    except Fallback:
        trace = read_trace(path)
        if not work_only:
            return trace
        events = trace.events.filter(WORK_ROWS).select(WORK_EVENTS.names())
        return Trace(trace.meta, events, trace.notes)


_NONSTANDARD = re.compile(rb"(?<![A-Za-z\"])(?:NaN|-?Infinity)(?![A-Za-z\"])|\d[eE][+-]?\d{3,}")


def _has_nonstandard_numbers(path: Path) -> bool:
    """NaN, Infinity or an out-of-range exponent anywhere in the (uncompressed) file."""
    with open_trace(path) as trace:
        if trace.gzip:
            return bool(_NONSTANDARD.search(trace.read_all()))
        if trace.size == 0:
            return False
        with mmap.mmap(trace.raw.fileno(), 0, access=mmap.ACCESS_READ) as view:
            return _NONSTANDARD.search(view) is not None


def _read(path: Path, work_only: bool, chunk_bytes: int) -> Trace:
    cols = Columns(work_only)
    rd = Reader(path, chunk_bytes, cols)
    try:
        prefix, array_format = rd.find_array()
        rd.prefix_is_array = array_format
        close = rd.events()
        doc = {} if close is None else rd.finish(prefix, close)
    finally:
        rd.src.close()
    notes = rd.notes + counter_notes(path, cols.bad, cols.negative)
    return assemble(path, doc, cols.frame(), notes, cols.escaped)

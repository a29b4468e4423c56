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
   on failure the previous boundary is tried, and when none works an exact token scan
   (:class:`_Scan`, vectorised, resumable inside a string) finds the end of the elements while
   the window grows: an element of any size is read in linear time and memory (the buffer grows
   in place and gives up its front in place; a piece longer than two windows is let go of before
   it is decoded).
3. Each piece is decoded into columns by :class:`~.columns.Columns`.

Whitespace: a window that is all whitespace, read outside any string once the buffer holds a
window, is kept as one space (:meth:`Reader.more`), so a run of any length between two events
(or anywhere between tokens) is skipped in constant memory at the speed of reading it; the
offsets the notes and the split use count the bytes left out (:meth:`Reader.at`).

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
from functools import cache
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import msgspec
import orjson

from nprof_report.errors import InputError
from nprof_report.parse.read.columns import Columns, Fallback, Piece, check_utf8
from nprof_report.parse.read.polars_json import BOUNDARY
from nprof_report.parse.read.reference import assemble, read_trace
from nprof_report.parse.read.rows import counter_notes, orjson_int
from nprof_report.parse.read.source import TraceStream, open_trace
from nprof_report.parse.schema import WORK_EVENTS, WORK_ROWS, Trace

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Reader", "read_trace_stream"]

_WS = b" \t\r\n"
_MAX_CUT_TRIES = 4
_TAIL_WINDOW = 1 << 16
_RECOVER_LIMIT = 64 << 20  # a damaged element bigger than this ends the recovery


_NOT_WS = re.compile(rb"[^ \t\r\n]")
_SCAN_BLOCK = 1 << 20  # bytes :class:`_Scan` looks at in one go
_SCAN_SMALL = 64 << 10  # less than this is scanned token by token
# a whole string, or an opening quote whose string the buffer does not finish; structure
_TOKEN = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"|["{}\[\],]', re.S)
# the top level's tokens outside strings; the text of a string, up to its closing quote (or a
# backslash that ends the buffer), without backtracking
_TOP = re.compile(rb'["{}\[\]:]')
_STRING_BODY = re.compile(rb'[^"\\]*+(?:\\.[^"\\]*+)*+', re.S)


def _skip_ws(buf: bytes | bytearray, pos: int) -> int:
    """The first position from ``pos`` that is not JSON whitespace (``len(buf)``: none)."""
    m = _NOT_WS.search(buf, pos)
    return len(buf) if m is None else m.start()


def _string_end(buf: bytes | bytearray, pos: int) -> int:
    """Where the string whose text starts at ``pos`` (just after its opening quote) ends: the
    offset of its closing quote, else ``-1 - k`` where ``k`` is where to look again once more
    text has come (the end of ``buf``, or a backslash that ends it)."""
    end = _STRING_BODY.match(buf, pos).end()  # type: ignore[union-attr]  # always matches
    return end if end < len(buf) and buf[end] == 0x22 else -1 - end


@cache
def _delta() -> np.ndarray:
    """The change of nesting depth at each byte value (outside strings)."""
    import numpy as np

    delta = np.zeros(256, np.int8)
    delta[[ord("{"), ord("[")]] = 1
    delta[[ord("}"), ord("]")]] = -1
    return delta


class _Scan:
    """Exact, incremental token scan of the array body (used when the quick cut fails).

    Resumable anywhere, inside a string too, and vectorised (NumPy, a block at a time): each
    byte is looked at once, at array speed, however long or deeply nested the element -- a
    token-by-token loop in Python took 13 s for one event with 40 MB of ``args``. NumPy is
    imported when a scan first runs: the decode workers, which rarely scan, start without it.
    """

    def __init__(self, *, stop_at_close: bool = True) -> None:
        self.stop = stop_at_close  # False: only follow the strings, to the end of the buffer
        self.pos = 0
        self.depth = 0
        self.in_string = False
        self.backslashes = 0  # how many backslashes end what has been scanned (in a string)
        self.last_sep: int | None = None  # a depth-0 comma: the end of a whole element
        self.close: int | None = None  # the "]" that closes the array

    def run(self, buf: bytes | bytearray) -> None:
        if self.stop and not self.in_string and len(buf) - self.pos <= _SCAN_SMALL:
            self._tokens(buf)  # the end of a piece, mostly: no NumPy (a decode worker's memory)
            return
        import numpy as np

        while self.pos < len(buf) and self.close is None:
            end = min(len(buf), self.pos + _SCAN_BLOCK)
            block = np.frombuffer(buf, np.uint8, end - self.pos, self.pos)
            try:
                self._block(block)
            finally:
                del block  # the view holds buf's buffer: it could not grow while it lives

    def _tokens(self, buf: bytes | bytearray) -> None:
        """The scan token by token (a string not finished yet is looked at again next time)."""
        for m in _TOKEN.finditer(buf, self.pos):
            c = buf[m.start()]
            if c == 0x22:  # '"'
                if m.end() - m.start() == 1:  # a string not finished in this buffer
                    self.pos = m.start()
                    return
            elif c in (0x7B, 0x5B):  # { [
                self.depth += 1
            elif c in (0x7D, 0x5D):  # } ]
                self.depth -= 1
                if self.depth < 0 and self.stop:
                    if c == 0x5D:
                        self.close = m.start()
                        self.pos = m.end()
                        return
                    self.depth = 0  # a stray "}": left to the decoder to reject
            elif self.depth == 0:  # ,
                self.last_sep = m.start()
        self.pos = len(buf)

    def _block(self, a: np.ndarray) -> None:
        import numpy as np

        n = len(a)
        quotes = np.flatnonzero(a == 0x22)
        slashes = np.flatnonzero(a == 0x5C)
        if self.in_string and not len(quotes):  # the middle of a long string: nothing to see
            if len(slashes) and slashes[-1] == n - 1:
                self.backslashes = int(_runs(slashes, self.backslashes)[-1])
            else:
                self.backslashes = 0
            self.pos += n
            return
        if self.backslashes % 2 and len(quotes) and quotes[0] == 0:
            quotes = quotes[1:]  # escaped by the backslashes that ended the last block
        if len(slashes) and len(quotes):  # a quote after an odd run of backslashes is text
            run = _runs(slashes, self.backslashes)
            k = np.searchsorted(slashes, quotes) - 1
            before = np.where(k >= 0, slashes[np.maximum(k, 0)], -2)
            odd = (before == quotes - 1) & (run[np.maximum(k, 0)] % 2 == 1)
            quotes = quotes[~odd]
        if len(slashes) and slashes[-1] == n - 1:
            self.backslashes = int(_runs(slashes, self.backslashes)[-1])
        else:
            self.backslashes = 0
        toggles = np.zeros(n, np.int8)
        toggles[quotes] = 1
        inside = (np.cumsum(toggles, dtype=np.int32) + self.in_string) % 2 == 1
        self.in_string = bool(inside[-1])
        if not self.stop:
            self.pos += n
            return
        delta = _delta()[a]
        delta[inside] = 0
        depth = self.depth + np.cumsum(delta, dtype=np.int64)
        below = np.flatnonzero(depth < 0)
        if len(below):
            at = int(below[0])
            if a[at] == 0x5D:  # ]
                self.close = self.pos + at
            else:  # a stray "}": left to the decoder to reject
                depth[at:] -= depth[at]
            upto = at + 1
        else:
            upto = n
        seps = np.flatnonzero((a[:upto] == 0x2C) & ~inside[:upto] & (depth[:upto] == 0))
        if len(seps):
            self.last_sep = self.pos + int(seps[-1])
        self.depth = int(depth[upto - 1])
        self.pos += upto


def _runs(slashes: np.ndarray, carried: int) -> np.ndarray:
    """For each backslash position, the length of the run of backslashes it ends (the first run
    continues ``carried`` backslashes when it starts the block)."""
    import numpy as np

    fresh = np.ones(len(slashes), dtype=bool)
    fresh[1:] = slashes[1:] != slashes[:-1] + 1
    starts = np.flatnonzero(fresh)
    run = np.arange(len(slashes)) - np.repeat(starts, np.diff(np.append(starts, len(slashes)))) + 1
    if slashes[0] == 0:
        run[: (starts[1] if len(starts) > 1 else len(slashes))] += carried
    return run


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
        # grows in place (amortised) and gives up its front in place: an element of any size
        # is read in linear time, never copied once per window
        self.buf = bytearray()
        self.offset = 0  # absolute offset of buf[0] in the decompressed stream
        self.gaps: list[tuple[int, int]] = []  # (where in buf, bytes of whitespace left out)
        self.quotes = _Scan(stop_at_close=False)  # strings in buf, for more()'s whitespace rule
        self.lead_ws = False
        self.notes: list[str] = []

    def more(self) -> bool:
        """Append the next window; False at the end.

        A window that is all whitespace, met when the buffer holds a window already and
        outside any string, is whitespace between tokens: it is kept as one space (the bytes
        left out are counted in :attr:`gaps`), so that a run of any length is skipped in
        constant memory, at the speed of reading it.
        """
        data = self.src.read(self.chunk)
        if not data:
            return False
        if len(self.buf) >= self.chunk and not _NOT_WS.search(data) and not self._in_string():
            self.gaps.append((len(self.buf), len(data) - 1))
            data = b" "
        self.buf += data
        return True

    def _in_string(self) -> bool:
        """Whether the end of ``buf`` lies inside a string (``buf`` starts outside one)."""
        self.quotes.run(self.buf)
        return self.quotes.in_string

    def drop(self, k: int) -> None:
        """Forget the first ``k`` bytes of ``buf`` (``k`` lies outside any string)."""
        del self.buf[:k]
        self.offset += k + sum(n for at, n in self.gaps if at < k)
        self.gaps = [(at - k, n) for at, n in self.gaps if at >= k]
        q = self.quotes
        if q.pos >= k and not q.in_string:
            q.pos -= k
        else:
            self.quotes = _Scan(stop_at_close=False)

    def at(self, i: int) -> int:
        """The offset in the decompressed stream of ``buf[i]``."""
        return self.offset + i + sum(n for at, n in self.gaps if at < i)

    def piece(self, end: int, *, brackets: bool = False) -> bytes:
        """``buf[:end]`` as bytes (one copy), in ``[`` ``]`` with ``brackets``."""
        with memoryview(self.buf) as view:
            return b"".join((b"[", view[:end], b"]")) if brackets else bytes(view[:end])

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
            m = _TOP.search(self.buf, scan)
            if m is None:
                if not self.more():
                    raise Fallback
                continue
            c = self.buf[m.start()]
            scan = m.end()
            if c == 0x22:  # a string: a key or a value, however long, read once
                end = _string_end(self.buf, scan)
                while end < 0:
                    if not self.more():
                        raise Fallback
                    end = _string_end(self.buf, -1 - end)
                key = end - m.start() < 64 and depth == 1
                last_str = bytes(self.buf[m.start() : end + 1]) if key else None
                scan = end + 1
            elif c in (0x7B, 0x5B):  # { [
                depth += 1
            elif c in (0x7D, 0x5D):  # } ]
                depth -= 1
                if depth == 0:
                    raise Fallback  # the object closed without a traceEvents array
            elif depth == 1 and last_str == b'"traceEvents"':  # :
                vpos = scan
                while True:
                    vpos = _skip_ws(self.buf, vpos)
                    if vpos < len(self.buf):
                        break
                    if not self.more():
                        raise Fallback
                if self.buf[vpos : vpos + 1] != b"[":
                    raise Fallback  # not a list: read_trace's "not a trace"
                prefix = bytes(self.buf[:vpos])
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
                if _skip_ws(self.buf, 0) >= scan.close:
                    return scan.close
                if not self._add(scan.close, scan.close):
                    self._recover()
                    return None
                return 0
            if scan.last_sep is not None and scan.last_sep > 0:
                if not self._add(scan.last_sep, scan.last_sep + 1):
                    self._recover()
                    return None
                scan = None
                continue
            if not self.more():  # cut short inside the last element
                self._recover()
                return None

    def _quick_cut(self) -> bool:
        """Decode up to the last ``}`` ``,`` ``{`` boundary that works (a few tries)."""
        buf = self.buf
        window = _TAIL_WINDOW
        while True:
            lo = max(0, len(buf) - window)
            matches = list(BOUNDARY.finditer(buf, lo))
            if matches or lo == 0:
                break
            window *= 8
        for m in reversed(matches[-_MAX_CUT_TRIES:]):
            if self._add(m.start() + 1, m.end() - 1):
                return True
        return False

    def _add(self, end: int, forget: int) -> bool:
        """Decode ``buf[:end]`` as a piece and forget ``buf[:forget]``; False, with nothing
        forgotten, when the piece does not decode.

        A piece longer than two windows (an element of any size) is forgotten first: the
        buffer gives its memory back before the piece is decoded, and takes the text back in
        the rare case it does not decode."""
        if end <= 2 * self.chunk:
            piece = Piece(self.piece(end))
            try:
                self.cols.add_piece(piece)
            except msgspec.DecodeError:
                return False
            self.drop(forget)
            return True
        # made in brackets: the msgspec decode takes it (Polars' readers do not, at this size)
        piece = Piece(self.piece(end, brackets=True), bracketed=True)
        kept = (bytes(self.buf[end:forget]), self.offset, self.gaps)
        self.drop(forget)
        try:
            self.cols.add_piece(piece)
        except msgspec.DecodeError:
            assert piece.text is not None  # kept when it does not decode
            between, self.offset, self.gaps = kept
            self.buf[0:0] = between
            with memoryview(piece.text) as view:
                self.buf[0:0] = view[1:-1]
            self.quotes = _Scan(stop_at_close=False)
            return False
        return True

    # -- damage ----------------------------------------------------------------------------------
    def _recover(self) -> None:
        """read_trace's recovery (stdlib ``raw_decode`` of one element after another) from the
        start of ``buf``, streamed; then count and check the rest of the file."""
        if b"\x00" in self.src.head:
            raise Fallback
        if self.prefix_is_array and self.lead_ws:
            raise Fallback  # read_trace's recovery does not find the array then
        udec = codecs.getincrementaldecoder("utf-8")()

        def feed(data: bytes | bytearray, final: bool = False) -> str:
            try:
                return str(udec.decode(data, final))
            except UnicodeDecodeError as exc:
                raise Fallback from exc

        text = feed(self.buf, self.src.eof)
        base = self.offset
        gaps, self.gaps = self.gaps, []
        self.buf = bytearray()
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
        used += sum(n for at, n in gaps if at < used - self.offset)  # whitespace left out
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
            self.note_cut(self.at(close))
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

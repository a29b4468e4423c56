"""The report's HTML into PDF with WeasyPrint, in this process or in a worker started early.

Importing WeasyPrint and readying its fonts take about 0.8 s, a quarter of a small report's
build, and need nothing from the trace. So ``build`` calls :func:`prestart` before it imports
anything heavy: a worker process (``python -m nprof_report.report.view.pdf``) imports WeasyPrint and
lays out a small page with the report's stylesheet (fontconfig, Pango's font map and cffi's
types are set up at the first layout), on the second core, while this process parses, analyses
and draws the charts. :func:`start_pdf` then hands the HTML to that worker through its stdin
and reads the PDF back from its stdout in a thread, while this process writes ``summary.json``
and the CSV tables (a second on a trace of 100,000 op names); without a worker (none started, or
it could not start, or it ended before it was given the HTML) the PDF is laid out here, as
before. The worker writes nothing to disk: the PDF is published by :mod:`.publish` in this
process, as every other file.

An error inside the worker comes back as a :class:`RuntimeError` (an internal error of the
CLI, like any failure of WeasyPrint on the report's own HTML). The worker ignores Ctrl-C, which
the parent handles; a worker left unused is killed when the parent exits, and one whose parent
died reads the end of its stdin and ends.

The worker runs without Python's cyclic garbage collector: it makes one PDF and ends, and the
collector walked WeasyPrint's growing tree of boxes again and again, 0.1-0.2 s of a small
report's 1.6 s of layout and drawing (4 MiB more at its peak, for a 12-page report).

Everything here but :func:`layout_pdf`'s import of WeasyPrint is light: the module is imported
by the CLI before Polars.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import functools
import gc
import io
import logging
import os
import re
import signal
import struct
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import IO, Any

from nprof_report.procs import stop

__all__ = [
    "import_weasyprint",
    "layout_pdf",
    "prestart",
    "render_pdf",
    "start_pdf",
    "starts_early",
]

_WORKER = [sys.executable, "-m", "nprof_report.report.view.pdf"]
_LENGTH = struct.Struct("<Q")
_READY, _OK, _FAILED = b"R", b"P", b"E"  # WeasyPrint imported; a PDF follows; an error follows
_started: list[subprocess.Popen[bytes]] = []  # waiting for their HTML (one at most)
_busy: list[subprocess.Popen[bytes]] = []  # given their HTML, PDF not read yet

# The user-agent stylesheet's rules for the pseudo-elements of footnotes and notes match every
# element, so the cascade made five styles per element (3,000 for a small report) for what only
# an element with `float: footnote` or `position: note()` shows; the report's stylesheets use
# neither (tests/test_pdf_worker.py checks). Without those rules: 0.1 s less of a 1 s layout,
# and the same PDF, byte for byte.
_NOTE_RULES = re.compile(r"^::(?:footnote|note)-[a-z]+ \{[^}]*\}\n", re.MULTILINE)


def layout_pdf(html: str) -> Any:
    """Lay the HTML out in pages (a ``weasyprint.Document``), in this process.

    Only ``data:`` URIs (the charts) are read; fetching anything else stops the build, so nothing
    loads from anywhere. Separate from drawing (``write_pdf``) so that ``bench/bench_build.py``
    can time layout and drawing apart.
    """
    weasyprint = import_weasyprint()
    logging.getLogger("weasyprint").setLevel(logging.ERROR)
    logging.getLogger("fontTools").setLevel(logging.ERROR)
    fetcher = weasyprint.URLFetcher(allowed_protocols={"data"}, fail_on_errors=True)
    try:
        return _html_class()(string=html, url_fetcher=fetcher).render()
    except weasyprint.urls.FatalURLFetchingError as exc:
        # a BaseException, which would pass the CLI's handlers: the report's own HTML asked for
        # something that is not in it, a defect of ours and not of the user's input
        raise RuntimeError(f"the report's HTML refers to an outside resource ({exc})") from exc


def import_weasyprint() -> Any:
    """``import weasyprint``, its libraries looked up in ldconfig's cache alone.

    WeasyPrint tries each of its seven libraries under several names (those of Windows, macOS and
    Linux), and cffi asks ``ctypes.util.find_library`` about each name that does not load as it
    is; on Linux that runs ldconfig, then gcc and ld where ldconfig does not know the name: 22
    lookups, about 40 processes, 0.25 s of the 0.55 s the import took. A name ldconfig does not
    know is passed over for the next one (the last Linux name of each library is its file's, which
    loads without a lookup, as from ``LD_LIBRARY_PATH``); should a library still not load,
    WeasyPrint is imported again with the usual lookups.
    """
    import ctypes.util

    ldconfig = getattr(ctypes.util, "_findSoname_ldconfig", None)  # Linux only
    if ldconfig is not None and "weasyprint" not in sys.modules:
        find_library = ctypes.util.find_library
        ctypes.util.find_library = ldconfig
        try:  # (WeasyPrint prints a banner on stdout before it gives up on a library)
            with contextlib.redirect_stdout(io.StringIO()):
                import weasyprint
        except OSError:  # the usual lookups find what ldconfig does not: import it again
            for name in [m for m in sys.modules if m.partition(".")[0] == "weasyprint"]:
                del sys.modules[name]
        finally:
            ctypes.util.find_library = find_library
    import weasyprint

    return weasyprint


@functools.cache
def _html_class() -> Any:
    """``weasyprint.HTML`` with the user-agent stylesheet less :data:`_NOTE_RULES`; the plain
    class where this WeasyPrint keeps its stylesheet elsewhere or words those rules otherwise."""
    import weasyprint
    from weasyprint import html as ua

    full, full_sheet = getattr(ua, "UA", None), getattr(ua, "UA_STYLESHEET", None)
    counter_style = getattr(ua, "UA_COUNTER_STYLE", None)
    if not isinstance(full, str) or full_sheet is None or counter_style is None:
        return weasyprint.HTML
    rules = _NOTE_RULES.sub("", full)
    if rules == full:
        return weasyprint.HTML
    sheet = weasyprint.CSS(string=rules, counter_style=counter_style)

    class ReportHTML(weasyprint.HTML):  # type: ignore[misc]
        # as WeasyPrint's own tests swap in a lighter stylesheet
        def _ua_stylesheets(self, forms: bool = False) -> list[Any]:
            return [sheet if s is full_sheet else s for s in super()._ua_stylesheets(forms)]

    return ReportHTML


def _pdf_here(html: str) -> bytes:
    pdf: bytes = layout_pdf(html).write_pdf()
    return pdf


def prestart() -> None:
    """Start the PDF worker now, unless one waits already (it then serves the next
    :func:`start_pdf`); if it cannot be started, the PDF is made in this process."""
    if _started and _started[0].poll() is None:
        return
    while _started:
        stop(_started.pop())
    with contextlib.suppress(OSError):
        _started.append(subprocess.Popen(_WORKER, stdin=subprocess.PIPE, stdout=subprocess.PIPE))


EARLY_MAX_BYTES = 64 << 20
"""Inputs up to this size start the worker before they are parsed (about 0.8 s of a small
report's build saved); larger ones once they are analysed, so that the worker (58 MB waiting,
150 MB at work) does not add to the parse's peak memory (issue 32: ``build`` within 1.25x of
``ops``' peak)."""


def starts_early(paths: list[Path]) -> bool:
    """Whether the worker for a report of ``paths`` starts before they are parsed: when the
    files under them hold at most :data:`EARLY_MAX_BYTES` (counted until it is exceeded)."""
    total = 0
    for path in paths:
        files = (
            (Path(root) / name for root, _, names in os.walk(path) for name in names)
            if path.is_dir()
            else [path]
        )
        for file in files:
            with contextlib.suppress(OSError):
                total += file.stat().st_size
            if total > EARLY_MAX_BYTES:
                return False
    return True


def render_pdf(html: str) -> bytes:
    """The PDF of ``html``: from the worker :func:`prestart` started, else made here."""
    return start_pdf(html)()


def start_pdf(html: str) -> Callable[[], bytes]:
    """Hand ``html`` to the worker :func:`prestart` started and return what waits for its PDF,
    so that this process can write its other files meanwhile; without a worker, what makes the
    PDF here when called."""
    proc = _started.pop() if _started else None
    if proc is not None and proc.poll() is not None:  # it ended before it was needed
        stop(proc)
        proc = None
    if proc is None:
        return lambda: _pdf_here(html)
    _busy.append(proc)
    outcome: list[bytes | BaseException] = []

    def exchange() -> None:
        try:
            outcome.append(_exchange(proc, html))
        except BaseException as exc:  # handed to the caller by result()
            outcome.append(exc)
        finally:
            _busy.remove(proc)

    # a daemon: a Ctrl-C in the caller ends the process without waiting for the PDF
    thread = threading.Thread(target=exchange, name="pdf-worker", daemon=True)
    thread.start()

    def result() -> bytes:
        thread.join()
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return outcome[0]

    return result


def _exchange(proc: subprocess.Popen[bytes], html: str) -> bytes:
    """Send ``html`` to the worker ``proc``, read back its PDF or its error."""
    assert proc.stdin is not None and proc.stdout is not None
    try:
        data = html.encode("utf-8")
        try:
            if proc.stdout.read(1) != _READY:
                raise BrokenPipeError
            proc.stdin.write(_LENGTH.pack(len(data)) + data)
            proc.stdin.close()
        except (BrokenPipeError, ValueError):  # it ended before it had the HTML (it could
            stop(proc)  # not import WeasyPrint, it was killed): the error, if any, shows here
            return _pdf_here(html)
        try:
            status, payload = proc.stdout.read(1), _read_block(proc.stdout)
        except (OSError, ValueError):  # its pipe closed under the read: stopped at exit
            status, payload = b"", None
        if payload is None:  # it ended: let its exit status say how
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
    finally:
        stop(proc)
    if status == _OK and payload is not None:
        return payload
    if status == _FAILED and payload is not None:
        first, _, worker_traceback = payload.decode("utf-8", "replace").partition("\n")
        exc = RuntimeError(first)
        if hasattr(exc, "add_note"):  # Python 3.11: --debug shows where in the worker
            exc.add_note(f"in the PDF worker:\n{worker_traceback}")
        raise exc
    raise RuntimeError(f"the PDF worker ended without a PDF (exit status {proc.returncode})")


def _read_block(stream: IO[bytes]) -> bytes | None:
    """A length-prefixed block, or None when the stream ends first."""
    head = stream.read(_LENGTH.size)
    if len(head) != _LENGTH.size:
        return None
    (size,) = _LENGTH.unpack(head)
    data = stream.read(size)
    return data if len(data) == size else None


def _release() -> None:
    """Stop the workers: the one waiting unused, and any still making a PDF (at exit)."""
    while _started:
        stop(_started.pop())
    for proc in list(_busy):
        stop(proc)


atexit.register(_release)


def _warm_up() -> None:
    """Lay out and draw a small page in the report's stylesheet and fonts, with a chart's kind of
    SVG: what WeasyPrint sets up once per process is then ready when the report's HTML comes."""
    css = resources.files("nprof_report.templates").joinpath("css/report.css").read_text("utf-8")
    svg = base64.b64encode(
        b'<svg xmlns="http://www.w3.org/2000/svg" width="20" height="10">'
        b'<path d="M 0 0 L 9 9" style="stroke: #000"/>'
        b'<text x="1" y="8" style="font-family: DejaVu Sans; font-size: 8px">ms</text></svg>'
    ).decode("ascii")
    page = (
        f"<html><head><style>{css}</style></head><body><h1>a</h1><p>b <code>c</code> "
        "<strong>d</strong></p><table><thead><tr><th>e</th></tr></thead><tbody><tr><td>1</td>"
        f'</tr></tbody></table><img src="data:image/svg+xml;base64,{svg}"></body></html>'
    )
    _pdf_here(page)


def _serve() -> int:
    """The worker: warm up, read one HTML document from stdin, write its PDF (or the error) to
    stdout. Stray output of the libraries goes to stderr, never into the PDF's pipe."""
    gc.disable()  # one PDF, then the process ends (see the module's docstring)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    with contextlib.suppress(Exception):  # a failure shows again, reported, on the real page
        _warm_up()
    out.write(_READY)
    out.flush()
    html = _read_block(sys.stdin.buffer)
    if html is None:  # the parent did not need a PDF, or ended
        return 0
    try:
        result = _OK + _block(_pdf_here(html.decode("utf-8")))
    except Exception as exc:
        first = str(exc) if type(exc) is RuntimeError else f"{type(exc).__name__}: {exc}"
        text = f"{first}\n{traceback.format_exc()}"
        result = _FAILED + _block(text.encode("utf-8", "replace"))
    with contextlib.suppress(BrokenPipeError):
        out.write(result)
        out.flush()
    return 0


def _block(data: bytes) -> bytes:
    return _LENGTH.pack(len(data)) + data


if __name__ == "__main__":
    from nprof_report.quiet import in_worker

    with in_worker():  # the libraries' warnings as the command's notes
        code = _serve()
    raise SystemExit(code)

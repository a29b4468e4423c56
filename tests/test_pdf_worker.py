"""The PDF made in the worker process ``build`` starts early is the PDF made in this process,
its errors come back as they would here, and no worker outlives its use; the user-agent
stylesheet trimmed of the rules for footnotes and notes makes the PDF WeasyPrint's own makes."""

from __future__ import annotations

import base64
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from nprof_report.report.view import pdf
from tests.conftest import NEURON, ROOT

SVG = '<svg xmlns="http://www.w3.org/2000/svg" width="9" height="9"><path d="M0 0 L9 9"/></svg>'
HTML = (
    "<html><body><h1>Title</h1><p>Some text.</p><table><tr><td>a</td><td>1.5</td></tr></table>"
    f'<img src="data:image/svg+xml;base64,{base64.b64encode(SVG.encode()).decode()}">'
    "</body></html>"
)


def _worker() -> subprocess.Popen[bytes]:
    pdf.prestart()
    assert len(pdf._started) == 1
    return pdf._started[0]


def _ready_worker() -> subprocess.Popen[bytes]:
    """A worker that has imported WeasyPrint and said so (its byte is left unread)."""
    proc = _worker()
    assert proc.stdout is not None
    assert select.select([proc.stdout], [], [], 60)[0], "the worker never became ready"
    return proc


@pytest.mark.pdf
def test_worker_pdf_is_the_pdf_made_here() -> None:
    here = pdf.render_pdf(HTML)  # no worker started: laid out in this process
    proc = _worker()
    assert pdf.render_pdf(HTML) == here
    assert proc.returncode is not None
    assert pdf._started == []


@pytest.mark.pdf
def test_worker_reports_an_outside_resource_as_an_internal_error(tmp_path: Path) -> None:
    secret = tmp_path / "secret.svg"
    secret.write_text(SVG)
    _worker()
    with pytest.raises(RuntimeError, match=r"^the report's HTML refers to an outside resource"):
        pdf.render_pdf(f'<img src="{secret.as_uri()}">')
    assert pdf._started == []


@pytest.mark.pdf
def test_a_worker_gone_before_the_html_leaves_the_pdf_to_this_process() -> None:
    proc = _worker()
    proc.kill()
    proc.wait()
    assert pdf.render_pdf(HTML).startswith(b"%PDF")


@pytest.mark.pdf
def test_a_worker_that_cannot_start_leaves_the_pdf_to_this_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # as when the worker's interpreter cannot import WeasyPrint: it ends before it is ready
    monkeypatch.setattr(pdf, "_WORKER", [sys.executable, "-c", "import time; time.sleep(0.5)"])
    _worker()
    assert pdf.render_pdf(HTML) == pdf._pdf_here(HTML)


@pytest.mark.pdf
def test_an_unused_worker_is_kept_for_the_next_pdf_and_stopped_at_exit() -> None:
    proc = _worker()
    pdf.prestart()  # one waits already
    assert pdf._started == [proc]
    pdf._release()  # what the exit handler does
    assert proc.poll() is not None
    assert pdf._started == []


@pytest.mark.pdf
def test_a_worker_that_dies_on_the_html_is_an_internal_error() -> None:
    proc = _ready_worker()
    os.kill(proc.pid, signal.SIGSTOP)  # stopped until it has the HTML, then killed
    try:
        with pytest.raises(RuntimeError, match=r"ended without a PDF \(exit status -9\)"):
            _kill_after_write(proc)
    finally:
        pdf._release()


def _kill_after_write(proc: subprocess.Popen[bytes]) -> bytes:
    """Render through ``proc``, which is killed half a second after it was sent the HTML."""
    timer = threading.Timer(0.5, proc.kill)
    timer.start()
    try:
        return pdf.render_pdf(HTML)
    finally:
        timer.cancel()


@pytest.mark.pdf
def test_the_pdf_is_made_while_the_caller_goes_on_and_errors_come_when_it_is_asked_for(
    tmp_path: Path,
) -> None:
    secret = tmp_path / "secret.svg"
    secret.write_text(SVG)
    proc = _worker()
    result = pdf.start_pdf(f'<img src="{secret.as_uri()}">')  # returns before the layout
    assert pdf._busy == [proc] or proc.poll() is not None
    with pytest.raises(RuntimeError, match="outside resource"):
        result()
    assert pdf._busy == [] and proc.poll() is not None


@pytest.mark.pdf
def test_a_worker_busy_at_exit_is_stopped() -> None:
    proc = _ready_worker()
    os.kill(proc.pid, signal.SIGSTOP)  # never answers
    result = pdf.start_pdf(HTML)
    deadline = time.monotonic() + 30
    while not proc.stdin.closed and time.monotonic() < deadline:  # type: ignore[union-attr]
        time.sleep(0.01)  # until the HTML is sent and the PDF awaited
    pdf._release()  # what the exit handler does
    assert proc.poll() is not None
    with pytest.raises(RuntimeError, match="ended without a PDF"):
        result()


def test_the_report_stylesheets_use_no_footnotes_or_notes() -> None:
    """What the trimmed user-agent stylesheet (:data:`pdf._NOTE_RULES`) relies on."""
    for css in (ROOT / "templates" / "css").glob("*.css"):
        text = css.read_text()
        assert "footnote" not in text and "note(" not in text, css


@pytest.mark.pdf
def test_the_trimmed_user_agent_stylesheet_makes_the_pdf_weasyprint_makes() -> None:
    import weasyprint

    from nprof_report.report.build import summarise_inputs
    from nprof_report.report.jobs import Engine
    from nprof_report.report.view.model import build_model
    from nprof_report.report.view.render import render_html

    _, summary = summarise_inputs([NEURON / "eager_naive", NEURON / "fused"], Engine(jobs=1))
    html = render_html(build_model(summary))
    assert pdf._html_class() is not weasyprint.HTML  # this WeasyPrint's stylesheet was trimmed
    fetcher = weasyprint.URLFetcher(allowed_protocols={"data"})
    assert (
        pdf._pdf_here(html)
        == weasyprint.HTML(string=html, url_fetcher=fetcher).render().write_pdf()
    )


@pytest.mark.pdf
def test_weasyprint_imports_when_ldconfig_knows_none_of_its_libraries() -> None:
    """The libraries then load under the names of their files (LD_LIBRARY_PATH's case), and
    ``find_library`` is ctypes' own again afterwards."""
    code = f"""
import ctypes.util
original = ctypes.util.find_library
ctypes.util._findSoname_ldconfig = lambda name: None
from nprof_report.report.view import pdf
assert pdf.render_pdf({HTML!r}).startswith(b"%PDF")
assert ctypes.util.find_library is original
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.pdf
def test_weasyprint_imports_again_with_the_usual_lookups_when_a_library_did_not_load() -> None:
    # in the first import, no library loads (as where only gcc or ld could find one): WeasyPrint
    # gives up, its banner is not shown, and it is imported again with ctypes' own find_library
    code = f"""
import ctypes.util, cffi
ctypes.util._findSoname_ldconfig = lambda name: None
dlopen = cffi.FFI.dlopen
def failing_while_ldconfig_looks_up(self, name, flags=0):
    if ctypes.util.find_library is ctypes.util._findSoname_ldconfig:
        raise OSError("not here")
    return dlopen(self, name, flags)
cffi.FFI.dlopen = failing_while_ldconfig_looks_up
from nprof_report.report.view import pdf
assert pdf.render_pdf({HTML!r}).startswith(b"%PDF")
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout == ""

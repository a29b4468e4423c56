"""The report model into HTML (Jinja2, autoescaped) and PDF (WeasyPrint, from the same HTML)."""

from __future__ import annotations

import logging
from functools import lru_cache
from importlib import resources
from typing import Any

import jinja2
import markupsafe

from nprof_report.report.model import ReportModel
from nprof_report.report.safetext import show_bidi


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """One cached environment; autoescape is on for every template, undefined names fail, and
    every text placed shows its bidirectional formatting characters (:func:`_visible`)."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader("nprof_report.templates", "."),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_visible,
    )


def _visible(value: Any) -> Any:
    """A value placed in the HTML: text from a trace with U+202E and its kin written out; markup
    the templates marked safe (the stylesheet) as it is."""
    if isinstance(value, str) and not isinstance(value, markupsafe.Markup):
        return show_bidi(value)
    return value


def render_html(model: ReportModel) -> str:
    """Self-contained HTML: inline CSS and SVG, no script, nothing fetched."""
    css = resources.files("nprof_report.templates").joinpath("css/report.css").read_text("utf-8")
    return environment().get_template("report.html.j2").render(m=model, css=css)


def layout_pdf(html: str) -> Any:
    """Lay the HTML out in pages (a ``weasyprint.Document``).

    Only ``data:`` URIs (the charts) are read; fetching anything else stops the build, so nothing
    loads from anywhere. Separate from :func:`render_pdf` so that ``bench/bench_build.py`` can
    time layout and drawing apart.
    """
    import weasyprint

    logging.getLogger("weasyprint").setLevel(logging.ERROR)
    logging.getLogger("fontTools").setLevel(logging.ERROR)
    fetcher = weasyprint.URLFetcher(allowed_protocols={"data"}, fail_on_errors=True)
    try:
        return weasyprint.HTML(string=html, url_fetcher=fetcher).render()
    except weasyprint.urls.FatalURLFetchingError as exc:
        # a BaseException, which would pass the CLI's handlers: the report's own HTML asked for
        # something that is not in it, a defect of ours and not of the user's input
        raise RuntimeError(f"the report's HTML refers to an outside resource ({exc})") from exc


def render_pdf(html: str) -> bytes:
    """Print the HTML with WeasyPrint."""
    pdf: bytes = layout_pdf(html).write_pdf()
    return pdf

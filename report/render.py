"""The report model into HTML (Jinja2, autoescaped) and PDF (WeasyPrint, from the same HTML)."""

from __future__ import annotations

import logging
from functools import lru_cache
from importlib import resources

import jinja2

from nprof_report.report.model import ReportModel


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """One cached environment; autoescape is on for every template, undefined names fail."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader("nprof_report.templates", "."),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_html(model: ReportModel) -> str:
    """Self-contained HTML: inline CSS and SVG, no script, nothing fetched."""
    css = resources.files("nprof_report.templates").joinpath("css/report.css").read_text("utf-8")
    return environment().get_template("report.html.j2").render(m=model, css=css)


def render_pdf(html: str) -> bytes:
    """Print the HTML with WeasyPrint; its fetches are refused so nothing loads from anywhere."""
    import weasyprint

    def no_fetch(url: str, *args: object, **kwargs: object) -> dict[str, object]:
        raise ValueError(f"refusing to fetch {url!r}: the report is self-contained")

    logging.getLogger("weasyprint").setLevel(logging.ERROR)
    logging.getLogger("fontTools").setLevel(logging.ERROR)
    document = weasyprint.HTML(string=html, url_fetcher=no_fetch)
    pdf: bytes = document.write_pdf()
    return pdf

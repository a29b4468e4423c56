"""The report model into HTML (Jinja2, autoescaped); :mod:`.pdf` prints the same HTML."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

import jinja2
import markupsafe

from nprof_report.report.view.model import ReportModel
from nprof_report.report.view.safetext import show_bidi


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

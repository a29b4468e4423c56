"""``nprof-report build``: inputs to report.html, report.pdf, summary.json and CSV tables.

The report's files are put into the output folder one by one, each replaced atomically, and
nothing else in that folder is touched (:mod:`nprof_report.report.publish`): a failed build
leaves the previous report as it was.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from nprof_report.parse import Inputs, newest_run
from nprof_report.report.figures import (
    DOCUMENT_TEXT_CHARS,
    PeakOverride,
    Summary,
    json_pieces,
    store_summary,
    summarise,
)
from nprof_report.report.jobs import Engine, analyse_inputs
from nprof_report.report.publish import Content, Streamed, publish
from nprof_report.report.view import prestart as prestart_pdf
from nprof_report.report.view import start_pdf, starts_early
from nprof_report.runtime import collector_paused

if TYPE_CHECKING:
    from nprof_report.report.view import ReportModel, Table

DEFAULT_RUNS = Path("nprof-runs")


def _tables(model: ReportModel) -> list[Table]:
    tables = [*model.page_tables, *(t for s in model.sections for t in s.tables)]
    if model.files:
        tables.append(model.files)
    if model.sweep:
        tables += model.sweep.tables
    if model.roofline:
        tables += model.roofline.tables
    if model.ranks:
        tables += model.ranks.csv_tables
    if model.backends:
        tables += model.backends.tables
    return tables


def build_report(
    paths: list[Path],
    *,
    out: Path | None = None,
    jobs: int | None = None,
    use_cache: bool = True,
    ray: str | None = None,
    keep_going: bool = False,
    peaks: PeakOverride | None = None,
    allow_mixed: bool = False,
    step_annotation: str | None = None,
) -> list[Path]:
    """Build the report for ``paths`` (default: the newest run) and return the files written.

    ``jobs``, ``use_cache``, ``ray``, ``keep_going`` and ``step_annotation`` as in
    :class:`~.jobs.Engine`; ``peaks`` overrides the device's peaks in the roofline;
    ``allow_mixed``: runs of different studies each get a section instead of an error.
    """
    if not paths:
        paths = [newest_run(DEFAULT_RUNS)]
    early = starts_early(paths)
    if early:
        prestart_pdf()  # WeasyPrint readies itself on the other core while the traces are analysed
        _import_view()
    engine = Engine(
        jobs=jobs,
        use_cache=use_cache,
        ray=ray,
        keep_going=keep_going,
        step_annotation=step_annotation,
    )
    # the summary, model and HTML are millions of small objects for a trace of 100,000 distinct
    # ops, hardly any in a cycle: the collector took 1.5-2 s of 9 s walking them
    with collector_paused():
        resolved, summary = summarise_inputs(paths, engine, peaks, allow_mixed=allow_mixed)
        if not early:
            prestart_pdf()  # now that the frames are let go: not on top of the parse's peak
        build_model, render_html = _import_view()
        model = build_model(summary)
        html = render_html(model)
    pdf = start_pdf(html)
    # while the worker makes the PDF: summary.json and the CSVs made, and written first
    data = _data_files(summary, _tables(model))

    if out is None:
        single_run = resolved[0].run_dir if len(resolved) == 1 else None
        out = single_run / "report" if single_run else Path("nprof-report")
    return publish(out, _report_files(html, pdf, data))


def _import_view() -> tuple[Callable[[Summary], ReportModel], Callable[[ReportModel], str]]:
    """The view's ``build_model`` and ``render_html``, imported on first call (matplotlib and
    Jinja2 with them: 0.3 s, 30 MiB). Small inputs import them before the analysis, while the
    PDF worker starts on the other core; large ones after it, so that those 30 MiB are not held
    at the analysis' peak (``build`` within 1.25x ``ops``' peak on a 530 MB trace, issue 32).
    The imports make hardly any garbage: frozen out of the collector's later passes."""
    with collector_paused(freeze=True):
        from nprof_report.report.view import build_model, render_html
    return build_model, render_html


def summarise_inputs(
    paths: list[Path],
    engine: Engine,
    peaks: PeakOverride | None = None,
    *,
    allow_mixed: bool = False,
) -> tuple[list[Inputs], Summary]:
    """The inputs ``paths`` resolve to, and their ``summary.json`` document."""
    a = analyse_inputs(paths, engine, allow_mixed=allow_mixed)
    ranks = a.ranks if len(a.runs) < 2 else None
    return a.resolved, summarise(
        a.analyses, a.manifest, a.caveats, ranks=ranks, runs=a.runs, peaks=peaks
    )


_CSV_PIECE = 1 << 20


def _csv_pieces(table: Table) -> Iterator[bytes]:
    """The table's CSV file in pieces of about :data:`_CSV_PIECE` characters; a longer cell (a
    name of any length: it is whole in the CSV) written in pieces of its own."""
    buf = io.StringIO(newline="")
    writer = csv.writer(buf)
    writer.writerow(table.columns)
    for row in table.raw_rows:
        big = [i for i, v in enumerate(row) if isinstance(v, str) and len(v) > _CSV_PIECE]
        if not big:
            writer.writerow(row)
        else:  # the row with a mark for each long cell, the cells put in as the writer would
            mark = f"\x00nprof-cell-{id(row)}-"
            writer.writerow([f"{mark}{i}" if i in big else v for i, v in enumerate(row)])
            text = buf.getvalue()
            buf.seek(0)
            buf.truncate()
            for i in big:
                before, text = text.split(f"{mark}{i}", 1)
                yield before.encode("utf-8")
                yield from _csv_cell_pieces(row[i])
            buf.write(text)
        if buf.tell() > _CSV_PIECE:
            yield buf.getvalue().encode("utf-8")
            buf.seek(0)
            buf.truncate()
    yield buf.getvalue().encode("utf-8")


def _csv_cell_pieces(text: str) -> Iterator[bytes]:
    """A text cell as ``csv.writer`` writes it (the excel dialect: quoted, its quotes doubled,
    when it holds a comma, a quote or a line break), a piece at a time."""
    quoted = any(c in text for c in ',"\r\n')
    if quoted:
        yield b'"'
    for at in range(0, len(text), _CSV_PIECE):
        part = text[at : at + _CSV_PIECE]
        yield (part.replace('"', '""') if quoted else part).encode("utf-8")
    if quoted:
        yield b'"'


def _data_files(summary: Summary, tables: list[Table]) -> dict[str, Content]:
    """``summary.json``, its Parquet tables and the CSV tables, by path relative to the output
    folder; the document and the CSVs written a piece at a time as they are made."""
    document, bulk = store_summary(summary)
    files: dict[str, Content] = {
        "summary.json": Streamed(lambda: json_pieces(document, text_limit=DOCUMENT_TEXT_CHARS)),
        **bulk,
    }
    for table in sorted(tables, key=lambda t: t.csv):
        files[f"tables/{table.csv}"] = Streamed(partial(_csv_pieces, table))
    return files


def _report_files(
    html: str, pdf: bytes | Callable[[], bytes], data: dict[str, Content]
) -> dict[str, Content]:
    """The report's own files, by path relative to the output folder, in the order printed
    (``pdf``: the PDF, or what waits for it)."""
    return {"report.html": html.encode("utf-8"), "report.pdf": pdf, **data}

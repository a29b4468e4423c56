"""``nprof-report build``: inputs to report.html, report.pdf, summary.json and CSV tables.

The files are written into a temporary folder beside the destination and moved into place only
when all of them are complete, so a failed build leaves the previous report as it was.
"""

from __future__ import annotations

import csv
import os
import shutil
import tempfile
from pathlib import Path

import orjson

from nprof_report.errors import InputError
from nprof_report.parse import (
    Inputs,
    Source,
    convert_tree,
    load_sources,
    neuron_root,
    newest_run,
    resolve,
)
from nprof_report.report.analyses import analyse
from nprof_report.report.model import ReportModel, Table, build_model
from nprof_report.report.render import render_html, render_pdf
from nprof_report.report.summary import build_summary

DEFAULT_RUNS = Path("nprof-runs")


def _tables(model: ReportModel) -> list[Table]:
    tables = [model.headline, model.comparisons, *(t for s in model.sections for t in s.tables)]
    if model.files:
        tables.append(model.files)
    return tables


def build_report(
    paths: list[Path],
    *,
    out: Path | None = None,
    jobs: int | None = None,
    use_cache: bool = True,
) -> list[Path]:
    """Build the report for ``paths`` (default: the newest run) and return the files written.

    ``jobs`` and ``use_cache`` as in :func:`~nprof_report.parse.load_sources`.
    """
    if not paths:
        paths = [newest_run(DEFAULT_RUNS)]
    resolved: list[Inputs] = [resolve(p) for p in paths]
    sources = [s for r in resolved for s in r.sources if s.trace is not None]
    if not sources:
        raise InputError(paths[0], "holds no trace.json to report on")
    labels = [s.label for s in sources]
    if len(set(labels)) != len(labels):  # the same implementation from several runs
        sources = [
            type(s)(
                f"{r.run_dir.name if r.run_dir else s.folder.name}/{s.label}",
                s.trace,
                s.folder,
                s.implementation,
            )
            for r in resolved
            for s in r.sources
            if s.trace is not None
        ]
    manifests = [r.manifest for r in resolved if r.manifest is not None]
    manifest = manifests[0] if len(resolved) == 1 and manifests else None
    caveats = [n for r in resolved for n in r.notes]
    caveats += convert_neuron_traces(sources)
    loading = load_sources(sources, jobs=jobs, use_cache=use_cache)
    analyses = [analyse(loaded) for loaded in loading]
    summary = build_summary(analyses, manifest, caveats)
    model = build_model(summary)
    html = render_html(model)
    pdf = render_pdf(html)

    if out is None:
        single_run = resolved[0].run_dir if len(resolved) == 1 else None
        out = single_run / "report" if single_run else Path("nprof-report")
    return _write_atomically(out, html, pdf, summary, _tables(model))


def convert_neuron_traces(sources: list[Source]) -> list[str]:
    """Convert raw Neuron traces with neuron-explorer where still needed; say what is missing.

    The tables are written inside the bundle, so a copied bundle builds without Neuron tools.
    """
    messages = []
    for root in dict.fromkeys(r for r in map(neuron_root, sources) if r is not None):
        messages += [
            c.message for c in convert_tree(root) if c.status in ("tool-missing", "failed")
        ]
    return messages


def _write_csv(path: Path, table: Table) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(table.columns)
        writer.writerows(table.raw_rows)


def _write_atomically(
    out: Path, html: str, pdf: bytes, summary: dict[str, object], tables: list[Table]
) -> list[Path]:
    out = out.absolute()
    if out.exists() and not out.is_dir():
        raise InputError(out, "exists and is not a folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        (staging / "report.html").write_text(html, encoding="utf-8")
        (staging / "report.pdf").write_bytes(pdf)
        (staging / "summary.json").write_bytes(
            orjson.dumps(summary, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
        )
        csv_dir = staging / "tables"
        csv_dir.mkdir()
        for table in tables:
            _write_csv(csv_dir / table.csv, table)
        os.chmod(staging, 0o755)
        old = None
        if out.exists():
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            out.rename(old)
        staging.rename(out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    written = [out / "report.html", out / "report.pdf", out / "summary.json"]
    written += sorted((out / "tables").glob("*.csv"))
    return written

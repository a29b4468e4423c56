"""Implementations that did not run at some size, from the run's manifest: ``failures[]`` and
their findings.

Capture records an implementation that raised at one size as ``failed`` there, with the error
(:mod:`nprof_report.capture.session`), and goes on with the others; a capture cut short marks
the one running ``interrupted`` and the rest ``not run``. A record here names the sizes where it
did not run, the first line of the first error and the sizes where it ran, so that page 1 and
the findings can say it where the reader looks.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from nprof_report.bundle import Implementation, Manifest, elements, size_label
from nprof_report.report.figures.summary_types import FailureRecord, Finding

_LINE_NOTE = re.compile(r"\s\(line \d+\)$")
"""What capture appends to an error raised in the study's file: ``(line 12)``."""


def first_line(error: str | None) -> str | None:
    """The first line of an error, with the study file's line number capture appended to its
    last line (``RuntimeError: supports rows up to 1024 wide (line 19)``)."""
    if not error:
        return None
    lines = error.strip().splitlines() or [""]
    head = lines[0].strip()
    note = _LINE_NOTE.search(lines[-1]) if len(lines) > 1 else None
    return head + note.group(0) if note else head


def _size(impl: Implementation) -> str:
    return size_label(impl.size) if impl.size else ""


def failures(
    manifest: Manifest | None,
    label: Callable[[str], str] = str,
    run: str | None = None,
) -> list[FailureRecord]:
    """One record per implementation that did not run at some size (``label``: how the report
    names an implementation), in the manifest's order."""
    if manifest is None:
        return []
    by_name: dict[str, list[Implementation]] = {}
    for impl in manifest.implementations:
        by_name.setdefault(impl.name, []).append(impl)
    out: list[FailureRecord] = []
    for name, rows in by_name.items():
        rows = sorted(rows, key=lambda i: elements(i.size) if i.size else 0)
        bad = [i for i in rows if i.status != "ok"]
        if not bad:
            continue
        status = next((i.status for i in bad if i.status == "failed"), bad[0].status)
        error = next((i.error for i in bad if i.error), None)
        out.append(
            {
                "label": label(name),
                "implementation": name,
                "run": run,
                "status": status,
                "sizes": [_size(i) for i in bad],
                "error": first_line(error),
                "ran_at": [_size(i) for i in rows if i.status == "ok"],
            }
        )
    return out


def where(record: FailureRecord) -> str:
    """``at 16×256``, ``at 8×128, 16×256`` or ``at the captured size``."""
    sizes = [s for s in record["sizes"] if s]
    return "at " + (", ".join(sizes) if sizes else "the captured size")


def failure_sentence(record: FailureRecord) -> str:
    """``narrow_only FAILED at 16×256 (RuntimeError: …); it ran up to 8×128``."""
    what = {"failed": "FAILED", "interrupted": "was INTERRUPTED", "not run": "was NOT RUN"}.get(
        record["status"], record["status"].upper()
    )
    text = f"{record['label']} {what} {where(record)}"
    if record["error"]:
        text += f" ({record['error']})"
    ran = [s for s in record["ran_at"] if s]
    if len(ran) == 1:
        text += f"; it ran only at {ran[0]}"
    elif ran:
        text += f"; it ran at {', '.join(ran)} (its figures stop at {ran[-1]})"
    elif not record["ran_at"]:
        text += "; it has no figures at all"
    return text


def failure_findings(records: list[FailureRecord]) -> list[Finding]:
    """A high finding per implementation that raised; medium for one interrupted or not run."""
    out: list[Finding] = []
    for r in records:
        evidence = f"capture recorded status {r['status']!r} {where(r)}"
        evidence += f": {r['error']}" if r["error"] else " (no error recorded)"
        evidence += (
            f"; it ran at {', '.join(s for s in r['ran_at'] if s) or 'the captured size'}"
            if r["ran_at"]
            else "; it ran at no size"
        )
        out.append(
            {
                "severity": "high" if r["status"] == "failed" else "medium",
                "rule": "implementation-failed",
                "title": failure_sentence(r),
                "evidence": evidence + " (manifest.json; the full error is among the caveats)",
            }
        )
    return out

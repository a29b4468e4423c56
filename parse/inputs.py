"""Resolve what the user passed -- a run folder, one bundle, a Neuron tree or a trace file -- into sources.

A *source* is one profile to analyse (one implementation of a run, or one trace file). Run
folders are recognised by their ``manifest.json``; any other folder is searched for trace files by
pattern, never by fixed paths, because Neuron trees put ``trace.json`` several levels down
(``<instance>_pid_<pid>/<timestamp>/trace.json``).
"""

from __future__ import annotations

import stat
from dataclasses import dataclass, field
from pathlib import Path

from nprof_report.bundle import (
    MANIFEST_NAME,
    Implementation,
    Manifest,
    read_manifest,
    verify_checksums,
)
from nprof_report.errors import InputError
from nprof_report.parse.read.source import not_a_file, unreadable

TRACE_PATTERNS = (
    "*trace.json",
    "*trace.json.gz",
    "*.pt.trace.json",
    "*.pt.trace.json.gz",
    "pytorch_trace.json",
    "neuron_framework_trace_rank_*.json",  # in <instance-id>_pid_<pid>/ (formats.md §9.6)
    # one trace per rank, named after it (neuron_framework_trace_rank_3.json, rank-3.json.gz)
    "*rank*.json",
    "*rank*.json.gz",
)
NEURON_PATTERNS = (
    "ntrace.pb",
    "*.ntff",
    "*.neff",
    "SystemProfileEvents*.parquet",
    "system_profile.json",
)


@dataclass(frozen=True)
class Source:
    """One profile: its label, its Kineto trace (if any) and where Neuron files may be."""

    label: str
    trace: Path | None
    folder: Path
    implementation: Implementation | None = None


@dataclass(frozen=True)
class Inputs:
    """Everything the user passed, resolved."""

    sources: list[Source]
    manifest: Manifest | None = None
    run_dir: Path | None = None
    notes: list[str] = field(default_factory=list)


def _label_of(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".json", ".pt.trace", ".trace"):
        name = name.removesuffix(suffix)
    return name or path.name


def _find(folder: Path, patterns: tuple[str, ...]) -> list[Path]:
    found = {p for pattern in patterns for p in folder.rglob(pattern) if p.is_file()}
    return sorted(p for p in found if "report" not in p.relative_to(folder).parts[:1])


def resolve(path: Path) -> Inputs:
    """Resolve one path given on the command line."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise InputError(path, "does not exist") from None
    except OSError as exc:  # a symlink loop, a folder that cannot be entered
        raise unreadable(path, exc) from exc
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise not_a_file(path, mode)
    if stat.S_ISREG(mode):
        if path.name == MANIFEST_NAME:
            return resolve(path.parent)
        return Inputs([Source(_label_of(path), path, path.parent)])
    if (path / MANIFEST_NAME).is_file():
        return _resolve_run(path)
    if (path.parent / MANIFEST_NAME).is_file():  # one bundle of a run
        run = _resolve_run(path.parent)
        picked = [s for s in run.sources if s.folder == path]
        if picked:
            return Inputs(picked, run.manifest, run.run_dir, run.notes)
    traces = _find(path, TRACE_PATTERNS)
    if traces:
        multiple = len(traces) > 1
        return Inputs(
            [
                Source(
                    t.relative_to(path).as_posix() if multiple else path.name or _label_of(t),
                    t,
                    t.parent,
                )
                for t in traces
            ]
        )
    if _find(path, NEURON_PATTERNS):
        return Inputs([Source(path.name, None, path)])
    if not any(path.iterdir()):
        raise InputError(path, "is an empty folder")
    raise InputError(
        path,
        "holds no trace.json, run manifest or Neuron profile",
        "pass a run folder from `nprof-report capture`, a bundle or a trace file",
    )


def _resolve_run(run_dir: Path) -> Inputs:
    manifest = read_manifest(run_dir)
    notes = [f"{run_dir.name}: {p}" for p in verify_checksums(run_dir, manifest)]
    sources = []
    for impl in manifest.implementations:
        if impl.status != "ok" or not impl.trace:
            notes.append(
                f"{run_dir.name}: implementation {impl.name} {impl.status}"
                + (f": {impl.error}" if impl.error else "")
            )
            continue
        trace = run_dir / impl.trace
        folder = run_dir / (impl.bundle or impl.name)
        sources.append(Source(impl.name, trace, folder, impl))
    if not sources:
        raise InputError(run_dir, "run holds no successfully captured implementation")
    return Inputs(sources, manifest, run_dir, notes)


def newest_run(parent: Path) -> Path:
    """The newest run folder (with a manifest) under ``parent``."""
    if not parent.is_dir():
        raise InputError(
            parent, "does not exist", "run `nprof-report capture` first or pass a PATH"
        )
    runs = [p for p in parent.iterdir() if (p / MANIFEST_NAME).is_file()]
    if not runs:
        raise InputError(parent, "holds no run folder", "run `nprof-report capture` first")
    return max(runs, key=lambda p: ((p / MANIFEST_NAME).stat().st_mtime, p.name))

"""The run folder and its ``manifest.json``: the contract between capture and the other stages.

A capture writes one *run folder*::

    nprof-runs/<run-id>/
      manifest.json          written last (temp file + rename); rewritten if an implementation fails
      naive/trace.json       one *bundle* per implementation: torch.profiler's Kineto trace,
      fused/trace.json       byte for byte, and on Neuron the output tree NeuronProfiler wrote
      compiled/trace.json    (``<instance>_pid_<pid>/<timestamp>/trace.json``, ``ntrace.pb``, ...)

``manifest.json`` (``"format": "nprof-run"``, ``format_version`` 1) records how the run was made
(command line, backend and device, host, versions, input, schedule, environment variables), the
un-profiled timings of each implementation, what failed, and a sha256 for every file. Readers refuse
an unknown major ``format_version`` instead of guessing. Both capture (the writer) and parse/report
(the readers) import this module. Capture imports one thing from parse: the Neuron conversion
(:func:`nprof_report.parse.convert_tree`), which build runs too, so that a bundle converted on the
Trainium host carries its tables; nothing in parse or report imports capture.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nprof_report.errors import InputError

FORMAT = "nprof-run"
FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"


@dataclass(frozen=True)
class FileEntry:
    """One file of the run, relative to the run folder."""

    path: str
    role: str
    bytes: int
    sha256: str


@dataclass(frozen=True)
class Timing:
    """Un-profiled wall time of one call (``torch.utils.benchmark``), in microseconds."""

    median_us: float
    iqr_us: float
    mean_us: float
    runs: int
    calls_per_run: int


@dataclass(frozen=True)
class Implementation:
    """What happened to one implementation during the capture."""

    name: str
    description: str
    status: str  # "ok", "failed" or "interrupted"
    bundle: str | None = None
    trace: str | None = None
    first_call_s: float | None = None
    unprofiled: Timing | None = None
    error: str | None = None


@dataclass(frozen=True)
class Manifest:
    """The run's ``manifest.json``."""

    run_id: str
    created_utc: str
    command: list[str]
    backend: str
    device: str
    host: dict[str, Any]
    versions: dict[str, str | None]
    workload: dict[str, Any]
    schedule: dict[str, int]
    profiler: dict[str, Any]
    environment: dict[str, str]
    implementations: list[Implementation] = field(default_factory=list)
    files: list[FileEntry] = field(default_factory=list)
    format: str = FORMAT
    format_version: int = FORMAT_VERSION
    tool_version: str = ""

    def to_json(self) -> str:
        """Serialise with sorted keys so that two manifests diff cleanly."""
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, *, path: Path) -> Manifest:
        """Parse a manifest, refusing other formats and unknown major versions."""
        try:
            raw = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError(path, f"manifest is not valid JSON ({exc})") from exc
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            raise InputError(path, 'not an nprof-report run manifest (no "format": "nprof-run")')
        version = raw.get("format_version")
        if version != FORMAT_VERSION:
            raise InputError(
                path,
                f"manifest format_version {version!r} is not supported (this nprof-report reads "
                f"{FORMAT_VERSION})",
                "upgrade nprof-report",
            )
        try:
            impls = [
                Implementation(
                    **{
                        **i,
                        "unprofiled": Timing(**i["unprofiled"]) if i.get("unprofiled") else None,
                    }
                )
                for i in raw.get("implementations", [])
            ]
            files = [FileEntry(**f) for f in raw.get("files", [])]
            fields = {k: v for k, v in raw.items() if k not in ("implementations", "files")}
            return cls(**fields, implementations=impls, files=files)
        except (TypeError, KeyError) as exc:
            raise InputError(path, f"manifest has missing or unexpected fields ({exc})") from exc


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_entries(run_dir: Path, roles: dict[str, str]) -> list[FileEntry]:
    """Checksum every file under ``run_dir`` except the manifest; ``roles`` maps suffixes to roles."""
    entries = []
    for file in sorted(p for p in run_dir.rglob("*") if p.is_file()):
        rel = file.relative_to(run_dir).as_posix()
        if rel == MANIFEST_NAME or rel.startswith("report/") or file.name.endswith(".tmp"):
            continue
        role = next((r for suffix, r in roles.items() if file.name.endswith(suffix)), "other")
        entries.append(FileEntry(rel, role, file.stat().st_size, sha256_file(file)))
    return entries


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temp file and a rename, so readers never see half."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_manifest(run_dir: Path) -> Manifest:
    """Load ``<run_dir>/manifest.json``."""
    path = run_dir / MANIFEST_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, "manifest is not UTF-8 text") from exc
    except OSError as exc:
        raise InputError(path, f"cannot read manifest ({exc.strerror})") from exc
    return Manifest.from_json(text, path=path)


def verify_checksums(run_dir: Path, manifest: Manifest) -> list[str]:
    """Return one message per file that is missing or no longer matches its recorded sha256."""
    problems = []
    for entry in manifest.files:
        file = run_dir / entry.path
        if not file.is_file():
            problems.append(f"{entry.path} is listed in the manifest but missing")
        elif file.stat().st_size != entry.bytes or sha256_file(file) != entry.sha256:
            problems.append(f"{entry.path} no longer matches the manifest's sha256")
    return problems

"""The run folder and its ``manifest.json``: the contract between capture and the other stages.

A capture writes one *run folder*::

    nprof-runs/<run-id>/
      manifest.json          written last (temp file + rename); rewritten if an implementation fails
      naive/trace.json       one *bundle* per implementation: torch.profiler's Kineto trace,
      fused/trace.json       byte for byte, and on Neuron the output tree NeuronProfiler wrote
      compiled/trace.json    (``<instance>_pid_<pid>/<timestamp>/trace.json``, ``ntrace.pb``, ...)

A sweep over several sizes puts each size's bundles in a folder of its own
(``64x4096/naive/trace.json``); a run of one size keeps the layout above.

``manifest.json`` (``"format": "nprof-run"``, ``format_version`` 1) records how the run was made
(command line, backend and device, host, versions, the study and its sizes, schedule, environment
variables), the un-profiled timings and the numerical check of each implementation at each size,
what failed, and a sha256 for every file. Readers refuse an unknown major ``format_version``
instead of guessing; ``format_minor`` counts additions that older manifests lack (1: ``size`` and
``check`` per implementation, ``workload.sizes``; 2: ``workload.work``, the bytes and FLOPs the
study declares per size, and ``hardware``, what the roofline needs of the device: on the CPU a
measured peak with its method, on Neuron the instance type and logical-core setting), and fields of
a newer minor are ignored.
Both capture (the writer) and parse/report (the readers) import this module. Capture imports one
thing from parse: the Neuron conversion (:func:`nprof_report.parse.convert_tree`), which build runs
too, so that a bundle converted on the Trainium host carries its tables; nothing in parse or report
imports capture.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from nprof_report.errors import InputError

FORMAT = "nprof-run"
FORMAT_VERSION = 1
FORMAT_MINOR = 2
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
class NumericalCheck:
    """One implementation's output against the reference's (the study's first implementation).

    ``status``: ``pass``, ``fail`` (some element outside ``atol + rtol * |reference|``, or another
    shape), ``reference`` (the reference itself) or ``not compared`` (``note`` says why). Errors are
    computed in float64: ``max_abs_error`` = max |out - ref|, ``max_rel_error`` = max |out - ref| /
    |ref| over the elements where ref is not 0.
    """

    reference: str
    status: str
    atol: float | None = None
    rtol: float | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    mismatched: int | None = None
    elements: int | None = None
    note: str | None = None


@dataclass(frozen=True)
class Implementation:
    """What happened to one implementation (at one size of a sweep) during the capture."""

    name: str
    description: str
    status: str  # "ok", "failed", "interrupted" or "not run"
    bundle: str | None = None
    trace: str | None = None
    first_call_s: float | None = None
    unprofiled: Timing | None = None
    error: str | None = None
    size: list[int] | None = None  # format_minor 1
    check: NumericalCheck | None = None  # format_minor 1


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
    hardware: dict[str, Any] = field(default_factory=dict)  # format_minor 2 (capture/hardware.py)
    format: str = FORMAT
    format_version: int = FORMAT_VERSION
    format_minor: int = 0  # what an old manifest without the key is; capture writes FORMAT_MINOR
    tool_version: str = ""

    @property
    def sizes(self) -> list[list[int]]:
        """The sizes the run swept, in order; one (``workload.shape``) for a run of one size."""
        sizes = self.workload.get("sizes")
        if sizes:
            return [list(s) for s in sizes]
        shape = self.workload.get("shape")
        return [list(shape)] if shape else []

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
        newer = isinstance(raw.get("format_minor"), int) and raw["format_minor"] > FORMAT_MINOR
        known = _known if newer else lambda _, d: d
        try:
            impls = [
                Implementation(
                    **{
                        **known(Implementation, i),
                        "unprofiled": Timing(**known(Timing, i["unprofiled"]))
                        if i.get("unprofiled")
                        else None,
                        "check": NumericalCheck(**known(NumericalCheck, i["check"]))
                        if i.get("check")
                        else None,
                    }
                )
                for i in raw.get("implementations", [])
            ]
            files = [FileEntry(**known(FileEntry, f)) for f in raw.get("files", [])]
            rest = {k: v for k, v in raw.items() if k not in ("implementations", "files")}
            return cls(**known(cls, rest), implementations=impls, files=files)
        except (TypeError, KeyError) as exc:
            raise InputError(path, f"manifest has missing or unexpected fields ({exc})") from exc


def size_label(size: tuple[int, ...] | list[int]) -> str:
    """``64×4096``: how reports and progress name a size."""
    return "×".join(map(str, size))


def size_folder(size: tuple[int, ...] | list[int]) -> str:
    """``64x4096``: the folder of one size's bundles in a sweep."""
    return "x".join(map(str, size))


def elements(size: tuple[int, ...] | list[int]) -> int:
    """Number of elements of a tensor of this size: the order of a sweep."""
    n = 1
    for d in size:
        n *= d
    return n


def _known(cls: type, record: dict[str, Any]) -> dict[str, Any]:
    """The keys of ``record`` that ``cls`` declares: a newer minor version only adds keys."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in record.items() if k in names}


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

"""Find Neuron profile sessions on disk (formats.md §2.5, §2.6, §3.1).

A *session* is the folder one profiling session wrote: ``ntrace.pb`` / ``trace_info.pb`` (RUNTIME),
``*.neff`` / ``*.ntff`` (DEVICE), ``trace.json`` (framework), plus whatever ``neuron-explorer view``
wrote from it (Parquet tables in ``<data-path>/profiles/global/<name>@latest/`` or the legacy JSON
exports). The documentation says to glob for files rather than hard-code names (§2.5), and older
captures have no ``<timestamp>/`` level, so discovery is purely by file-name patterns:

* a folder holding a *raw* marker (``*.pb``, ``*.neff``, ``*.ntff``, ``framework_mapping_*.json``)
  is a session;
* processed outputs (``SystemProfileEvents*.parquet``, device tables, a legacy system-profile JSON
  export under any name -- recognised by its content, since ``--output-file`` names it freely
  (§9.3) -- and ``device_profile_model_*.json``) belong to the nearest enclosing session folder;
  if there is none
  (the user points at a bare ``neuron-explorer`` output), the folder above ``profiles/`` (or the
  file's own folder) becomes the session.

A framework trace in the ``<instance-id>_pid_<pid>/`` folder above a ``<timestamp>/`` session
(``neuron_framework_trace_rank_<N>.json``, where the troubleshooting page puts it, §9.6) belongs
to that process's session when the session folder holds none of its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from nprof_report.errors import InputError

# neff_<hash>.neff and neff_<hash>_vnc_<n>.neff (§2.6; the hash is the runtime model id).
NEFF_RE = re.compile(r"^neff_(?P<model>[0-9A-Za-z]+?)(?:_vnc_(?P<vnc>\d+))?\.neff$")
# <hash>[_instid_<i>]_vnc_<n>.ntff (model mode, §2.6) and profile_nc_<i>_session_<j>.ntff (§2.5).
NTFF_MODEL_RE = re.compile(
    r"^(?P<model>[0-9A-Za-z]+?)(?:_instid_(?P<inst>\d+))?_vnc_(?P<vnc>\d+)\.ntff$"
)
NTFF_SESSION_RE = re.compile(r"^profile_nc_(?P<nc>\d+)_session_(?P<sess>\d+)\.ntff$")
DEVICE_JSON_RE = re.compile(r"^device_profile_model_(?P<model>[0-9A-Za-z]+)\.json$")
FRAMEWORK_MAPPING_RE = re.compile(r"^framework_mapping_.*\.json$")
PROCESS_DIR_RE = re.compile(r"^(?P<instance>.+)_pid_(?P<pid>\d+)$")
# Parquet table file: <Table>.parquet or the split form <Table>_<k>.parquet (§3.1).
TABLE_RE = re.compile(r"^(?P<table>[A-Za-z]+)(?:_(?P<part>\d+))?\.parquet$")
# Framework trace names: trace.json (§2.5), pytorch_trace.json (older API, §2.8), the rank-suffixed
# troubleshooting variant, and plain Kineto export names.
TRACE_JSON_NAMES = ("trace.json", "pytorch_trace.json")
TRACE_JSON_RE = re.compile(r"^(neuron_framework_trace_rank_\d+\.json|.*\.pt\.trace\.json)$")

# The head of a legacy system-profile export: a top-level "trace_event(s)" key (§3.3, §7.8).
LEGACY_KEY_RE = re.compile(rb'"trace_events?"\s*:')
SNIFF_BYTES = 1 << 16

RAW_PB = ("ntrace.pb", "trace_info.pb", "cpu_util.pb", "host_mem.pb")
SYSTEM_TABLES = ("SystemProfileEvents",)
SYSTEM_AUX_TABLES = ("SystemProfileMetadata", "SystemProfileHbmUsage", "Warning", "SchemaFields")
DEVICE_TABLES = ("Summary", "Instruction", "ExecutionInfo")
DEVICE_AUX_TABLES = ("Metadata", "NeffHeader", "DeviceProfileList")
# convert.py runs neuron-explorer into <session>/.nprof-explorer.partial-*/ and renames the
# folder into place when it succeeded; one left behind by a killed run is half-written, so nothing
# under it counts as processed output.
PARTIAL_DIR_PREFIX = ".nprof-explorer.partial-"


@dataclass(frozen=True)
class NeffFile:
    """A NEFF copied into the session; ``model_id`` is the hash in its name (§2.6)."""

    path: Path
    model_id: str
    vnc: int | None


@dataclass(frozen=True)
class NtffFile:
    """A device trace: model mode (``model_id`` set) or session mode (``session_idx`` set)."""

    path: Path
    model_id: str | None
    vnc: int | None
    instance_idx: int | None = None
    nc_idx: int | None = None
    session_idx: int | None = None

    @property
    def is_session(self) -> bool:
        """True for ``profile_nc_<i>_session_<j>.ntff`` (all activity of one core, §2.7)."""
        return self.session_idx is not None


@dataclass(frozen=True)
class ProfileDir:
    """One ``neuron-explorer view`` Parquet output folder: table name -> its (split) files."""

    path: Path
    tables: tuple[tuple[str, tuple[Path, ...]], ...]

    def files(self, table: str) -> tuple[Path, ...]:
        """The files of ``table`` in part order (empty when absent)."""
        for name, paths in self.tables:
            if name == table:
                return paths
        return ()

    @property
    def is_system(self) -> bool:
        """True when the folder holds ``SystemProfileEvents``."""
        return bool(self.files("SystemProfileEvents"))

    @property
    def is_device(self) -> bool:
        """True when the folder holds any device-profile table."""
        return any(self.files(t) for t in DEVICE_TABLES)


@dataclass(frozen=True)
class NeuronSession:
    """The files of one profiling session, as found on disk (paths only; nothing is parsed)."""

    path: Path
    instance_id: str | None
    process_id: int | None
    trace_json: Path | None
    pb_files: tuple[Path, ...]
    neffs: tuple[NeffFile, ...]
    ntffs: tuple[NtffFile, ...]
    system_profile_dirs: tuple[ProfileDir, ...]
    device_profile_dirs: tuple[ProfileDir, ...]
    system_profile_json: tuple[Path, ...]
    device_profile_json: tuple[tuple[str, Path], ...]
    framework_mappings: tuple[Path, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def has_processed(self) -> bool:
        """True when a system profile was converted (Parquet or legacy JSON)."""
        return bool(self.system_profile_dirs or self.system_profile_json)

    def pb(self, name: str) -> Path | None:
        """The raw ``<name>`` (e.g. ``ntrace.pb``) if present."""
        for p in self.pb_files:
            if p.name == name:
                return p
        return None


def _is_raw(name: str) -> bool:
    return (
        name in RAW_PB
        or name.endswith((".neff", ".ntff"))
        or FRAMEWORK_MAPPING_RE.match(name) is not None
    )


def is_legacy_system_json(path: Path) -> bool:
    """Whether ``path`` is a legacy system-profile JSON export, by content (any file name)."""
    if path.name == "system_profile.json":
        return True
    if path.suffix != ".json" or DEVICE_JSON_RE.match(path.name) or _is_trace_name(path.name):
        return False
    try:
        with path.open("rb") as fh:
            head = fh.read(SNIFF_BYTES)
    except OSError:
        return False
    return LEGACY_KEY_RE.search(head) is not None


def _is_trace_name(name: str) -> bool:
    return (
        name in TRACE_JSON_NAMES
        or TRACE_JSON_RE.match(name) is not None
        or (FRAMEWORK_MAPPING_RE.match(name) is not None)
    )


def _is_processed(path: Path) -> bool:
    name = path.name
    if DEVICE_JSON_RE.match(name) or is_legacy_system_json(path):
        return True
    m = TABLE_RE.match(name)
    return m is not None and m.group("table") in (
        *SYSTEM_TABLES,
        *SYSTEM_AUX_TABLES,
        *DEVICE_TABLES,
        *DEVICE_AUX_TABLES,
    )


def _owner(path: Path, raw_dirs: set[Path], root: Path) -> Path:
    """Session folder that a processed output in ``path`` (a folder) belongs to."""
    for anc in (path, *path.parents):
        if anc in raw_dirs:
            return anc
        if anc == root:
            break
    # A bare neuron-explorer output: <data-path>/profiles/global/<name>@latest/ -> <data-path>.
    parts = path.parts
    if "profiles" in parts:
        idx = len(parts) - 1 - parts[::-1].index("profiles")
        cand = Path(*parts[:idx]) if idx > 0 else path
        if cand == root or root in cand.parents:
            return cand
    return path


def _profile_dir(path: Path, files: Iterable[Path]) -> ProfileDir:
    groups: dict[str, list[tuple[int, Path]]] = {}
    for f in files:
        m = TABLE_RE.match(f.name)
        if m is None:
            continue
        part = int(m.group("part")) if m.group("part") is not None else -1
        groups.setdefault(m.group("table"), []).append((part, f))
    tables = tuple(
        (name, tuple(p for _, p in sorted(items))) for name, items in sorted(groups.items())
    )
    return ProfileDir(path=path, tables=tables)


def _process_of(session_dir: Path) -> tuple[str | None, int | None]:
    for d in (session_dir, session_dir.parent):
        m = PROCESS_DIR_RE.match(d.name)
        if m:
            return m.group("instance"), int(m.group("pid"))
    return None, None


def _in_partial(path: Path, root: Path) -> bool:
    return any(part.startswith(PARTIAL_DIR_PREFIX) for part in path.relative_to(root).parts[:-1])


def _pick_trace_json(files: list[Path]) -> Path | None:
    for name in TRACE_JSON_NAMES:
        for f in files:
            if f.name == name:
                return f
    cands = sorted(f for f in files if TRACE_JSON_RE.match(f.name))
    return cands[0] if cands else None


def _pid_folder_trace(session_dir: Path) -> Path | None:
    """A framework trace in the ``<instance-id>_pid_<pid>/`` folder above the session (§9.6)."""
    parent = session_dir.parent
    if PROCESS_DIR_RE.match(parent.name) is None or parent == session_dir:
        return None
    try:
        files = [f for f in parent.iterdir() if f.is_file()]
    except OSError:
        return None
    return _pick_trace_json(files)


# What capture records beside a bundle's sessions (capture/backends.py), then the run manifest.
CAPTURE_RECORD_NAMES = ("neuron-capture.json", "manifest.json")
CAPTURE_SEARCH_LEVELS = 4  # a run's manifest sits above <bundle>/<instance>_pid_<pid>/<timestamp>/
NUM_WARMUP_VAR = "NEURON_RT_INSPECT_DEVICE_PROFILE_NUM_WARMUP"


def capture_environment(session_dir: Path) -> dict[str, str]:
    """The environment recorded at capture for the session (``environment`` of the nearest
    ``neuron-capture.json`` or run ``manifest.json`` above it); empty when none is found."""
    for d in (session_dir, *session_dir.parents[:CAPTURE_SEARCH_LEVELS]):
        for name in CAPTURE_RECORD_NAMES:
            path = d / name
            if not path.is_file():
                continue
            try:
                doc = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            env = doc.get("environment") if isinstance(doc, dict) else None
            if isinstance(env, dict):
                return {str(k): str(v) for k, v in env.items()}
    return {}


def device_profile_warmup(session_dir: Path) -> int:
    """``NEURON_RT_INSPECT_DEVICE_PROFILE_NUM_WARMUP`` as captured (0 when unset or not a count):
    in model mode the runtime profiles the (N+1)-th execution of each model (§9.5)."""
    value = capture_environment(session_dir).get(NUM_WARMUP_VAR, "0").strip()
    return int(value) if value.isdigit() else 0


def find_sessions(root: Path) -> list[NeuronSession]:
    """Find every Neuron profile session under ``root`` (run folder down to one session folder).

    Args:
        root: any folder; searched recursively.

    Returns:
        Sessions sorted by path; empty when the folder holds no Neuron output.

    Raises:
        InputError: ``root`` is not a readable folder.
    """
    root = Path(root)
    if not root.is_dir():
        raise InputError(root, "is not a folder", "give the Neuron profile output folder")
    try:
        all_files = [p for p in root.rglob("*") if p.is_file() and not _in_partial(p, root)]
    except OSError as exc:
        raise InputError(root, f"cannot be listed ({exc.strerror or exc})") from exc

    raw_dirs = {p.parent for p in all_files if _is_raw(p.name)}
    by_session: dict[Path, list[Path]] = {d: [] for d in raw_dirs}
    for f in all_files:
        if f.parent in raw_dirs:
            by_session[f.parent].append(f)
        elif _is_processed(f):
            by_session.setdefault(_owner(f.parent, raw_dirs, root), []).append(f)

    sessions = [_build(d, files) for d, files in by_session.items()]
    return sorted(sessions, key=lambda s: str(s.path))


def _build(session_dir: Path, files: list[Path]) -> NeuronSession:
    direct = [f for f in files if f.parent == session_dir]
    neffs: list[NeffFile] = []
    ntffs: list[NtffFile] = []
    notes: list[str] = []
    for f in sorted(direct):
        if f.suffix == ".neff":
            m = NEFF_RE.match(f.name)
            if m:
                vnc = m.group("vnc")
                neffs.append(NeffFile(f, m.group("model"), int(vnc) if vnc else None))
            else:
                notes.append(f"{f.name}: NEFF name does not carry a model id (neff_<hash>.neff)")
        elif f.suffix == ".ntff":
            ms = NTFF_SESSION_RE.match(f.name)
            mm = NTFF_MODEL_RE.match(f.name)
            if ms:
                ntffs.append(
                    NtffFile(
                        f,
                        None,
                        None,
                        nc_idx=int(ms.group("nc")),
                        session_idx=int(ms.group("sess")),
                    )
                )
            elif mm:
                inst = mm.group("inst")
                ntffs.append(
                    NtffFile(
                        f,
                        mm.group("model"),
                        int(mm.group("vnc")),
                        instance_idx=int(inst) if inst else None,
                    )
                )
            else:
                notes.append(f"{f.name}: unrecognised NTFF name")
            if f.stat().st_size == 0:
                # A 0-byte NTFF is a documented failure sign (§2.5).
                notes.append(f"{f.name}: 0-byte NTFF (device profile capture failed)")

    pb_files = tuple(sorted(f for f in direct if f.name in RAW_PB))
    names = {p.name for p in pb_files}
    if "ntrace.pb" in names and "trace_info.pb" not in names:
        notes.append("ntrace.pb without trace_info.pb (system profile cannot be converted, §2.5)")

    profile_groups: dict[Path, list[Path]] = {}
    sys_json: list[Path] = []
    dev_json: list[tuple[str, Path]] = []
    for f in sorted(files):
        if f.suffix == ".parquet" and TABLE_RE.match(f.name):
            profile_groups.setdefault(f.parent, []).append(f)
        elif f.suffix == ".json" and is_legacy_system_json(f):
            sys_json.append(f)
        else:
            m = DEVICE_JSON_RE.match(f.name)
            if m:
                dev_json.append((m.group("model"), f))
    pdirs = [_profile_dir(d, fs) for d, fs in sorted(profile_groups.items())]
    instance, pid = _process_of(session_dir)
    return NeuronSession(
        path=session_dir,
        instance_id=instance,
        process_id=pid,
        trace_json=_pick_trace_json(direct) or _pid_folder_trace(session_dir),
        pb_files=pb_files,
        neffs=tuple(neffs),
        ntffs=tuple(ntffs),
        system_profile_dirs=tuple(p for p in pdirs if p.is_system or not p.is_device),
        device_profile_dirs=tuple(p for p in pdirs if p.is_device),
        system_profile_json=tuple(sys_json),
        device_profile_json=tuple(dev_json),
        framework_mappings=tuple(sorted(f for f in direct if FRAMEWORK_MAPPING_RE.match(f.name))),
        notes=tuple(notes),
    )

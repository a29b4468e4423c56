"""Convert raw Neuron system traces with ``neuron-explorer view`` (formats.md §2.5, §3.1, §7.4).

``ntrace.pb`` / ``trace_info.pb`` have no public schema and are never parsed here (§3, §7.4). When a
session holds them but no processed tables, and ``neuron-explorer`` is installed, this module runs

    neuron-explorer view -d <session> --output-format parquet --ingest-only \\
        --data-path <session>/nprof-explorer --display-name <session name> --disable-ui

and keeps the Parquet tables inside the session folder (``<session>/nprof-explorer/profiles/global/
<name>@latest/``, §3.1), so a copied bundle builds without Neuron tools. The tool writes into
``<session>/.nprof-explorer.partial-*/`` and the folder is renamed into place only after the tool
exited 0 and wrote ``SystemProfileEvents``; :func:`~nprof_report.parse.neuron.files.find_sessions`
ignores partial folders, so a failed, timed-out or killed conversion leaves no half-written tables.

Nothing here raises for a session that cannot be converted: every outcome is a
:class:`ConversionResult` whose ``message`` is one line for the report, naming what is missing and
the command that would produce it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from nprof_report.parse.neuron.files import (
    PARTIAL_DIR_PREFIX,
    SYSTEM_TABLES,
    TABLE_RE,
    NeuronSession,
    find_sessions,
)

TOOL_NAME = "neuron-explorer"
# aws-neuronx-tools installs the tool here on Neuron hosts, often not on PATH (§3).
FALLBACK_TOOL_DIRS: tuple[Path, ...] = (Path("/opt/aws/neuron/bin"),)
# Final output folder, inside the session; passed as --data-path.
OUTPUT_DIR_NAME = "nprof-explorer"
LOG_NAME = "neuron-explorer.log"
# Kept next to the raw files when a conversion fails (the output folder itself is discarded).
FAILED_LOG_NAME = "neuron-explorer.failed.log"
DEFAULT_TIMEOUT_S = 600.0

Status = Literal["converted", "already-processed", "no-raw-files", "tool-missing", "failed"]


@dataclass(frozen=True)
class ConversionResult:
    """What :func:`convert_session` did for one session.

    Attributes:
        status: ``converted`` (tables written now), ``already-processed`` (tables or legacy JSON
            were there; nothing run), ``no-raw-files`` (no ``ntrace.pb`` + ``trace_info.pb`` pair),
            ``tool-missing`` (``neuron-explorer`` not found) or ``failed`` (it ran and did not
            produce tables: non-zero exit, timeout, no ``SystemProfileEvents``, unwritable folder).
        session_dir: the session folder.
        command: the argv that was run; for ``tool-missing`` the argv that would produce the tables
            (with ``neuron-explorer`` as the program); empty when nothing applies.
        output_dir: ``<session>/nprof-explorer`` for ``converted``; ``None`` otherwise.
        message: one line for the report.
        log: the tool's stdout+stderr (inside ``output_dir`` on success, ``<session>/
            neuron-explorer.failed.log`` on failure); ``None`` when nothing ran.
        returncode: the tool's exit status; ``None`` when it did not run or was killed at the
            timeout.
        seconds: wall time of the run; ``None`` when nothing ran.
    """

    status: Status
    session_dir: Path
    command: tuple[str, ...]
    output_dir: Path | None
    message: str
    log: Path | None = None
    returncode: int | None = None
    seconds: float | None = None

    @property
    def ok(self) -> bool:
        """True when the session now has processed system-profile output."""
        return self.status in ("converted", "already-processed")


def find_tool(tool: str | None = None) -> str | None:
    """The ``neuron-explorer`` executable: ``tool`` (a name or path) if given, else PATH, else
    :data:`FALLBACK_TOOL_DIRS`; ``None`` when not found."""
    if tool is not None:
        return shutil.which(tool)
    found = shutil.which(TOOL_NAME)
    if found:
        return found
    for d in FALLBACK_TOOL_DIRS:
        cand = shutil.which(TOOL_NAME, path=str(d))
        if cand:
            return cand
    return None


def display_name(session_dir: Path) -> str:
    """``--display-name`` for a session: its folder name, restricted to ``[A-Za-z0-9_.-]``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", session_dir.name) or "session"


def view_command(
    tool: str, session_dir: Path, data_path: Path, name: str | None = None
) -> list[str]:
    """argv of the documented Parquet conversion (formats.md §3.1 table and "Other flags").

    ``view -d <dir>`` with ``--output-format parquet`` (the default, spelled out) writes the tables
    to ``<data-path>/profiles/global/<display-name>@latest/`` when ``--ingest-only``,
    ``--data-path`` and ``--display-name`` are set; ``--disable-ui`` keeps it from serving the UI.
    """
    return [
        tool,
        "view",
        "-d",
        str(session_dir),
        "--output-format",
        "parquet",
        "--ingest-only",
        "--data-path",
        str(data_path),
        "--display-name",
        name if name is not None else display_name(session_dir),
        "--disable-ui",
    ]


def suggested_command(session_dir: Path) -> str:
    """The shell line a user would run on a Neuron host so that a later build finds the tables."""
    return shlex.join(view_command(TOOL_NAME, session_dir, session_dir / OUTPUT_DIR_NAME))


def convert_session(
    session: NeuronSession,
    *,
    tool: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    label: str | None = None,
) -> ConversionResult:
    """Run ``neuron-explorer view`` for one session when it has raw traces but no tables.

    Args:
        session: from :func:`~nprof_report.parse.neuron.files.find_sessions`.
        tool: the executable (name or path); default ``neuron-explorer`` from PATH, then
            ``/opt/aws/neuron/bin``.
        timeout_s: the tool (and any process it started in its process group) is killed after
            this many seconds and the result is ``failed``.
        label: how the message names the session; default its folder name.

    Returns:
        The outcome; never raises for a session that cannot be converted.
    """
    sdir = session.path
    who = label or sdir.name
    if session.has_processed:
        return ConversionResult(
            "already-processed", sdir, (), None, f"{who}: system profile already converted"
        )
    if session.pb("ntrace.pb") is None:
        return ConversionResult(
            "no-raw-files",
            sdir,
            (),
            None,
            f"{who}: no ntrace.pb and no converted system profile; capture with the RUNTIME "
            "profile mode to get Neuron runtime and device timing",
        )
    if session.pb("trace_info.pb") is None:
        return ConversionResult(
            "no-raw-files",
            sdir,
            (),
            None,
            f"{who}: ntrace.pb not converted: trace_info.pb is missing and neuron-explorer needs "
            "both (formats.md §2.5)",
        )

    exe = find_tool(tool)
    if exe is None:
        where = "is not on PATH" if tool is None else f"was not found ({tool})"
        cmd = view_command(TOOL_NAME, sdir, sdir / OUTPUT_DIR_NAME)
        return ConversionResult(
            "tool-missing",
            sdir,
            tuple(cmd),
            None,
            f"{who}: ntrace.pb not converted: neuron-explorer {where}; run "
            f"`{shlex.join(cmd)}` on a Neuron host, then build again",
        )
    return _run(session, exe, timeout_s, who)


def convert_tree(
    root: Path,
    *,
    tool: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[ConversionResult]:
    """:func:`convert_session` for every session under ``root`` (sorted by path).

    Messages name each session by its path relative to the folder above ``root``
    (e.g. ``fused/i-…_pid_1993573/20261101_120100_000``).

    Raises:
        InputError: ``root`` is not a readable folder (from ``find_sessions``).
    """
    root = Path(root)
    out: list[ConversionResult] = []
    for s in find_sessions(root):
        try:
            rel = s.path.relative_to(root)
            label = root.name if rel == Path() else str(Path(root.name) / rel)
        except ValueError:
            label = str(s.path)
        out.append(convert_session(s, tool=tool, timeout_s=timeout_s, label=label))
    return out


# ------------------------------------------------------------------------------------ internals


def _run(session: NeuronSession, exe: str, timeout_s: float, who: str) -> ConversionResult:
    sdir = session.path
    dest = sdir / OUTPUT_DIR_NAME
    failed_log = sdir / FAILED_LOG_NAME
    name = display_name(sdir)
    _remove_stale_partials(sdir, max(timeout_s, 60.0))
    try:
        tmp = Path(tempfile.mkdtemp(prefix=PARTIAL_DIR_PREFIX, dir=sdir))
    except OSError as exc:
        return _failed(sdir, [], who, f"cannot write into the session folder ({_os_msg(exc)})")
    cmd = view_command(exe, sdir, tmp, name)
    log = tmp / LOG_NAME
    t0 = time.monotonic()
    returncode: int | None = None
    problem: str | None = None
    try:
        with log.open("ab") as fh:
            fh.write(f"$ {shlex.join(cmd)}\n".encode())
            fh.flush()
            returncode, problem = _exec(cmd, fh, tmp, timeout_s)
    except OSError as exc:
        problem = f"could not run {exe} ({_os_msg(exc)})"
    except BaseException:  # e.g. Ctrl-C: the tool is already stopped; drop its partial output
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    seconds = time.monotonic() - t0
    if problem is None and not _has_system_table(tmp):
        problem = "neuron-explorer exited 0 but wrote no SystemProfileEvents table"

    if problem is None:
        problem = _move_into_place(tmp, dest)
    if problem is not None:
        tail = _last_line(log)
        kept = _keep_log(log, failed_log)
        shutil.rmtree(tmp, ignore_errors=True)
        detail = problem + (f" (last output: {tail})" if tail else "")
        if kept:
            detail += f"; log: {failed_log}"
        return _failed(sdir, cmd, who, detail, failed_log if kept else None, returncode, seconds)

    # Check that discovery now attributes the tables to this session (§3.1 nested path).
    again = [s for s in find_sessions(sdir) if s.path == sdir]
    if not again or not any(
        dest in p.path.parents for p in again[0].system_profile_dirs
    ):  # pragma: no cover - only if find_sessions and this module disagree
        shutil.rmtree(dest, ignore_errors=True)
        return _failed(
            sdir,
            cmd,
            who,
            f"tables were written but are not found under {dest}",
            None,
            returncode,
            seconds,
        )
    with contextlib.suppress(OSError):
        failed_log.unlink(missing_ok=True)
    return ConversionResult(
        "converted",
        sdir,
        tuple(cmd),
        dest,
        f"{who}: ntrace.pb converted with neuron-explorer in {seconds:.1f} s into "
        f"{OUTPUT_DIR_NAME}/",
        dest / LOG_NAME,
        returncode,
        seconds,
    )


def _exec(
    cmd: list[str], log: IO[bytes], cwd: Path, timeout_s: float
) -> tuple[int | None, str | None]:
    """Run ``cmd`` in its own process group, output to ``log``; (exit status, problem or None)."""
    # Output goes straight to the log file, not a pipe, so a grandchild that keeps the descriptor
    # open cannot make us wait past the timeout. cwd is the partial folder: any stray file the tool
    # writes to its working directory is discarded with it on failure.
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        start_new_session=True,
    )
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return None, f"neuron-explorer timed out after {timeout_s:g} s and was stopped"
    except BaseException:
        _kill_group(proc)
        raise
    if rc != 0:
        return rc, f"neuron-explorer exited with status {rc}"
    return rc, None


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the tool's process group (it leads it: ``start_new_session``), then reap it.

    Called only while ``proc`` is not yet reaped, so its pid, and with it the group id, cannot
    have been reused by another process."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _has_system_table(folder: Path) -> bool:
    for p in folder.rglob("*.parquet"):
        m = TABLE_RE.match(p.name)
        if m and m.group("table") in SYSTEM_TABLES and p.is_file():
            return True
    return False


def _move_into_place(tmp: Path, dest: Path) -> str | None:
    """Rename ``tmp`` to ``dest``; an old ``dest`` (no tables, or it would not be converting) is
    first renamed to a partial name so that a crash never leaves two outputs."""
    old: Path | None = None
    try:
        if dest.exists() or dest.is_symlink():
            old = Path(tempfile.mkdtemp(prefix=PARTIAL_DIR_PREFIX, dir=dest.parent))
            old.rmdir()
            dest.rename(old)
        tmp.rename(dest)
    except OSError as exc:
        if old is not None and not dest.exists():
            with contextlib.suppress(OSError):
                old.rename(dest)
        return f"cannot move the output into {dest} ({_os_msg(exc)})"
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return None


def _remove_stale_partials(sdir: Path, older_than_s: float) -> None:
    """Delete partial folders left by killed runs (older than any run still allowed to go on)."""
    now = time.time()
    with contextlib.suppress(OSError):
        for p in sdir.iterdir():
            if not p.name.startswith(PARTIAL_DIR_PREFIX) or not p.is_dir() or p.is_symlink():
                continue
            with contextlib.suppress(OSError):
                if now - p.stat().st_mtime > older_than_s:
                    shutil.rmtree(p, ignore_errors=True)


def _keep_log(log: Path, target: Path) -> bool:
    try:
        shutil.copyfile(log, target)
    except OSError:
        return False
    return True


def _last_line(log: Path, limit: int = 200) -> str:
    try:
        with log.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 4096))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("$ ")]
    if not lines:
        return ""
    last = lines[-1]
    return last if len(last) <= limit else last[: limit - 1] + "…"


def _os_msg(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _failed(
    sdir: Path,
    cmd: list[str],
    who: str,
    detail: str,
    log: Path | None = None,
    returncode: int | None = None,
    seconds: float | None = None,
) -> ConversionResult:
    return ConversionResult(
        "failed",
        sdir,
        tuple(cmd),
        None,
        f"{who}: ntrace.pb not converted: {detail}; run `{suggested_command(sdir)}` to retry",
        log,
        returncode,
        seconds,
    )

"""Only nprof-report's own lines on stderr: what libraries write there is caught.

Libraries write to stderr on their own, between the command's lines: Python warnings
(matplotlib's "Tight layout not applied"), log records (Ray's token-authentication banner when
``--ray local`` starts a cluster), and text that C and C++ code writes to file descriptor 2
(Kineto's ``STAGE:`` and ``USDT:`` lines while ``capture`` profiles). A command shows none of it as
the library wrote it:

* a warning or a log record (WARNING and above) is caught where it is made (:func:`catching`,
  for the whole command, in the process and in the CLI runner alike): one that matters becomes a
  one-line note of ours (:data:`RULES`), one known to be harmless is dropped, and any other
  becomes a note naming the library and its message's first line; each note once;
* what reaches file descriptor 2 below Python, from C and C++ libraries and from the processes
  a command starts (decode and PDF workers, Ray's), goes to a temporary file instead
  (:func:`hold_descriptor`, the CLI's process only); when the command ends, lines of ours there
  (``nprof-report: …``, a worker's notes) are shown, the rules apply to the others, and what no
  rule knows is counted in one note that points at ``--debug``;
* ``--debug`` shows everything raw, as the libraries wrote it.

Our own lines go to ``sys.stderr``, which is file descriptor 2 as it was when the command started.
A process that dies by a signal loses what was held (``--debug`` shows it).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import IO

DEBUG_ENV = "NPROF_DEBUG"
"""Set to 1 by ``--debug`` for the processes a command starts (:func:`in_worker`)."""
PREFIX = "nprof-report: "
NOTE = PREFIX + "note: "

RULES: tuple[tuple[re.Pattern[str], str | None], ...] = (
    # matters: a chart may show its labels cut or overlapping
    (
        re.compile(r"Tight layout not applied"),
        "a chart's labels did not fit in it (matplotlib could not apply its tight layout); "
        "the chart is drawn as laid out",
    ),
    # a chart of one value: matplotlib widens the axis itself
    (re.compile(r"Attempting to set identical (?:low and high|left == right|bottom == top)"), None),
    # matters: a local cluster anyone on the network can use while the command runs
    (
        re.compile(r"Token authentication is disabled for this Ray cluster"),
        "the Ray cluster started here runs without token authentication until the command "
        "ends (`ray get-auth-token --generate` makes a token; see Ray's token-auth page)",
    ),
    (re.compile(r"Token authentication is enabled for this Ray cluster"), None),
    # Kineto's own progress lines while capture profiles
    (re.compile(r"^(?:STAGE|USDT):\S* "), None),
)
"""(what a library wrote, our note or None to drop it); the first that matches applies."""


def rule_for(text: str) -> tuple[bool, str | None]:
    """(whether a rule knows ``text``, and its note or None)."""
    for pattern, note in RULES:
        if pattern.search(text):
            return True, note
    return False, None


class _Notes:
    """Our notes, each written once (to ``sys.stderr`` as it is when written)."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def say(self, note: str) -> None:
        line = note if note.startswith(PREFIX) else NOTE + note
        if line in self.seen:
            return
        self.seen.add(line)
        with contextlib.suppress(OSError, ValueError):
            print(line, file=sys.stderr, flush=True)

    def library(self, source: str, text: str) -> None:
        """What library ``source`` wrote: our note, nothing, or its first line named."""
        known, note = rule_for(text)
        if known:
            if note is not None:
                self.say(note)
            return
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
        if first:
            self.say(f"{source}: {first}")


NOTES = _Notes()


def _library_of(filename: str) -> str:
    """The top package of the file a warning came from (``matplotlib``), else its name."""
    path = Path(filename)
    for parent in path.parents:
        if parent.name in ("site-packages", "dist-packages", "lib-dynload"):
            return path.relative_to(parent).parts[0].removesuffix(".py")
    return path.stem


class _Handler(logging.Handler):
    """Log records of WARNING and above, as notes."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # a library's bad format string is still not ours to show
            text = str(record.msg)
        NOTES.library(record.name.partition(".")[0] or "a library", text)


@contextlib.contextmanager
def catching(debug: bool = False) -> Iterator[None]:
    """Warnings and log records of the block as our notes (module docstring); ``debug``: as
    they are. Which warnings are shown at all is left to the warning filters (Python hides
    DeprecationWarnings of libraries by default; the tests turn every warning into an error)."""
    if debug:
        yield
        return

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: IO[str] | None = None,
        line: str | None = None,
    ) -> None:
        NOTES.library(_library_of(filename), str(message))

    NOTES.seen.clear()  # once per command
    handler = _Handler(logging.WARNING)
    root = logging.getLogger()
    before, last_resort = warnings.showwarning, logging.lastResort
    warnings.showwarning = show
    root.addHandler(handler)
    # a record of a logger that does not propagate and has no handler (Ray's, once ray.init
    # has cleared them) goes to the last resort, which writes to stderr
    logging.lastResort = handler
    try:
        yield
    finally:
        warnings.showwarning = before
        logging.lastResort = last_resort
        root.removeHandler(handler)


@contextlib.contextmanager
def adopted(name: str) -> Iterator[None]:
    """The log records of logger ``name`` as our notes in the block, for a library that gives
    its logger a handler of its own (Ray's writes to stderr and does not propagate); as they
    are with ``--debug``."""
    logger = logging.getLogger(name)
    if os.environ.get(DEBUG_ENV) == "1":
        yield
        return
    handlers = list(logger.handlers)
    for h in handlers:
        logger.removeHandler(h)
    ours = _Handler(logging.WARNING)
    logger.addHandler(ours)
    try:
        yield
    finally:
        logger.removeHandler(ours)
        for h in handlers:
            logger.addHandler(h)


def in_worker() -> contextlib.AbstractContextManager[None]:
    """:func:`catching` in a process a command started (a decode, parse or PDF worker): its
    notes reach the command's stderr through the held descriptor, and are shown once."""
    return catching(os.environ.get(DEBUG_ENV) == "1")


def hold_descriptor(debug: bool = False) -> None:
    """Point file descriptor 2 at a temporary file for the rest of the process, ``sys.stderr``
    at a copy of what it was, and go through what was held at exit (module docstring).
    ``debug``: leave both as they are. Anything that fails here leaves them as they are too,
    and so does a ``sys.stderr`` that is not the process's own (the CLI run inside a test that
    captures it): the descriptor is held only for a command that is the whole process."""
    before = sys.stderr
    if debug or before is not sys.__stderr__ or before is None:
        return
    try:
        before.flush()
        held = tempfile.TemporaryFile()  # noqa: SIM115 (held for the rest of the process)
        ours = os.dup(2)
        stream = open(  # noqa: SIM115 (open for the rest of the process)
            ours,
            "w",
            encoding=getattr(before, "encoding", None) or "utf-8",
            errors="backslashreplace",
            buffering=1,
        )
        os.dup2(held.fileno(), 2)
    except (OSError, ValueError, AttributeError):
        return
    sys.stderr = stream
    atexit.register(_release, held)


def _release(held: IO[bytes]) -> None:
    """Show what was held the way the module docstring says."""
    try:
        held.flush()
        held.seek(0)
        unknown = 0
        for raw in held:
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if not text.strip():
                continue
            if text.startswith(PREFIX):
                NOTES.say(text)  # a worker's note, or a line of ours a child process wrote
                continue
            known, note = rule_for(text)
            if note is not None:
                NOTES.say(note)
            elif not known:
                unknown += 1
        if unknown:
            NOTES.say(
                f"libraries wrote {unknown} line{'s' * (unknown != 1)} on stderr that are not "
                "shown; run with --debug to see them"
            )
    except (OSError, ValueError):
        pass

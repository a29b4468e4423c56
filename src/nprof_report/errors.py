"""Errors that end a command with exit code 2 and one line naming the file and the problem."""

from __future__ import annotations

from pathlib import Path


class NprofError(Exception):
    """Base class of every error the command line reports without a traceback."""

    exit_code = 2


class InputError(NprofError):
    """A file or folder the user gave cannot be used.

    The message always names the path first, so the one-line report reads
    ``<path>: <what is wrong>[; <what to do>]``.
    """

    def __init__(self, path: Path | str, problem: str, hint: str | None = None) -> None:
        self.path = Path(path)
        self.problem = problem
        self.hint = hint
        text = f"{self.path}: {problem}"
        if hint:
            text += f"; {hint}"
        super().__init__(text)


class CaptureError(NprofError):
    """The capture could not run (missing backend, bad option)."""


class EngineError(NprofError):
    """The engine that runs per-rank jobs cannot start (Ray missing, no cluster at the address)."""

"""Processes of ours: whether the one that left a temporary file behind still runs, and
stopping a worker."""

from __future__ import annotations

import contextlib
import os
import subprocess


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs (a process of another user counts); our own pid counts as gone:
    what carries it was left by an earlier process that had the same number."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill a worker unless it has ended, and close its pipes (what was not sent is lost)."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()

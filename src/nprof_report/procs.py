"""Whether the process that left a temporary file behind still runs."""

from __future__ import annotations

import os


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

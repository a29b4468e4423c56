"""Only our lines on stderr (issue 27, part 5; nprof_report/quiet.py): library warnings, log
records and what C code writes to file descriptor 2 become our one-line notes or nothing;
``--debug`` shows them raw. (conftest.py checks the stderr of every CLI run of the suite.)"""

from __future__ import annotations

import logging
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from nprof_report import quiet
from tests.conftest import foreign_lines

TIGHT = (
    "Tight layout not applied. The left and right margins cannot be made large enough to "
    "accommodate all Axes decorations."
)
# a process that meets what libraries do: a warning that matters, a harmless one, a log record
# (and one of a logger without handlers that does not propagate, as Ray's), a library's own
# C-level line, Kineto's, and a line of a worker of ours; then a line of ours
SCRIPT = f"""
import logging, os, sys, warnings
from nprof_report import quiet
debug = sys.argv[1] == "debug"
quiet.hold_descriptor(debug)
with quiet.catching(debug):
    warnings.warn({TIGHT!r}, UserWarning)
    warnings.warn("Attempting to set identical low and high xlims makes transformation singular")
    logging.getLogger("somelib").warning("a record of somelib\\nits second line")
    lonely = logging.getLogger("ray.lonely")
    lonely.propagate = False
    lonely.warning("Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE")
    os.write(2, b"GLib-WARNING: a C library complains\\n")
    os.write(2, b"STAGE:2026-12-03 19:16:58 7531:7531 ActivityProfilerController.cpp:314] done\\n")
    os.write(2, b"nprof-report: note: a worker's note\\n")
    print("nprof-report: error: ours", file=sys.stderr)
"""


def _run(mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=False
    )


def test_a_process_shows_only_our_lines() -> None:
    proc = _run("quiet")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert foreign_lines(proc.stderr) == []
    assert lines == [
        "nprof-report: note: a chart's labels did not fit in it (matplotlib could not apply its "
        "tight layout); the chart is drawn as laid out",
        "nprof-report: note: somelib: a record of somelib",
        "nprof-report: error: ours",
        "nprof-report: note: a worker's note",
        "nprof-report: note: libraries wrote 1 line on stderr that are not shown; run with "
        "--debug to see them",
    ]


def test_debug_shows_them_raw() -> None:
    proc = _run("debug")
    assert "UserWarning: " + TIGHT in proc.stderr
    assert "a record of somelib\nits second line" in proc.stderr
    assert "Token authentication is enabled" in proc.stderr
    assert "GLib-WARNING: a C library complains" in proc.stderr
    assert "STAGE:2026-12-03" in proc.stderr
    assert not [ln for ln in proc.stderr.splitlines() if ln.startswith("nprof-report: note: lib")]


def test_catching_restores_what_it_replaced(capsys: pytest.CaptureFixture[str]) -> None:
    show, last = warnings.showwarning, logging.lastResort
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        with quiet.catching():
            warnings.warn(TIGHT, UserWarning, stacklevel=1)
            warnings.warn(TIGHT, UserWarning, stacklevel=1)  # each note once
    assert (warnings.showwarning, logging.lastResort) == (show, last)
    assert capsys.readouterr().err.count("tight layout") == 1


def test_the_library_is_named_by_its_package() -> None:
    site = Path(logging.__file__).parent / "site-packages" / "matplotlib" / "figure.py"
    assert quiet._library_of(str(site)) == "matplotlib"
    assert quiet._library_of("/somewhere/script.py") == "script"


def test_the_suites_check_knows_our_lines_from_the_libraries() -> None:
    """What tests/conftest.py fails a CLI run on: the lines issue 27 saw, and none of ours."""
    ours = [
        "nprof-report: note: trace.json: 1 of 2 device activities have no link to a framework op",
        "nprof-report: error: t.json: is not valid JSON",
        "Usage: nprof-report build [OPTIONS] [PATHS]...",
        "Try 'nprof-report build --help' for help.",
        "",
        "Error: Invalid value for '--max-regression': 'lots' is not a percentage like 5%",
        "naive: done ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 4/4 0:00:02",
    ]
    theirs = [
        "/usr/lib/python3/site-packages/matplotlib/figure.py:3524: UserWarning: " + TIGHT,
        "  fig.tight_layout()",
        "Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt "
        "out. For more information, see https://docs.ray.io/en/latest/ray-security/token-auth.html",
        "USDT:2026-12-03 19:16:58 7531:7531 SyncActivityProfilerHandler.cpp:52] profiler_start",
    ]
    assert foreign_lines("\n".join(ours + theirs)) == theirs

"""CONSTRUCTED variants of real traces for the tests: a trace stretched in time, a job of ranks.

:func:`stretch` makes every duration and every gap of a trace ``factor`` times as long: each
timestamp moves away from the trace's first one by that factor, and each complete event ends
where its stretched end lies. The nesting, the links and the order of every event are kept
(times are rounded to the unit the trace writes them in, whole microseconds for integer
timestamps and nanoseconds for fractional ones, and a stretch by more than 1 never makes two
distinct times equal). Nothing else changes: names, ids, args, metadata.
"""

from __future__ import annotations

import copy
import gzip
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

CONSTRUCTED_KEY = "nprof_constructed"


def load(path: Path) -> dict[str, Any]:
    """A trace document, gzip or not."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    doc: dict[str, Any] = json.loads(data)
    return doc


def _units(value: int | float) -> tuple[int, int]:
    """(the time in its unit, units per µs): whole µs for an integer, ns for a fraction."""
    if isinstance(value, int):
        return value, 1
    return round(Fraction(str(value)) * 1000), 1000


def stretch(doc: dict[str, Any], factor: float) -> dict[str, Any]:
    """A copy of ``doc`` with every duration and gap ``factor`` times as long (module docstring)."""
    out = copy.deepcopy(doc)
    events = out["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), int | float)]
    origin = min(Fraction(str(e["ts"])) for e in timed)
    k = Fraction(str(factor))

    def moved(us: Fraction, scale: int) -> Fraction:
        return Fraction(round((origin + (us - origin) * k) * scale), scale)

    for e in timed:
        start, scale = _units(e["ts"])
        start_us = Fraction(start, scale)
        new_start = moved(start_us, scale)
        if isinstance(e.get("dur"), int | float):
            dur, dscale = _units(e["dur"])
            unit = max(scale, dscale)
            new_end = moved(start_us + Fraction(dur, dscale), unit)
            e["dur"] = _write(new_end - new_start, isinstance(e["dur"], int) and unit == 1)
        e["ts"] = _write(new_start, scale == 1)
    out[CONSTRUCTED_KEY] = (
        f"CONSTRUCTED: every duration and gap of a real trace stretched by {factor:g}"
    )
    return out


def _write(us: Fraction, whole: bool) -> int | float:
    return int(us) if whole else float(round(us, 3))


def write(doc: dict[str, Any], path: Path) -> Path:
    """Write ``doc`` as JSON (gzip for a ``.gz`` name)."""
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data, mtime=0) if path.name.endswith(".gz") else data)
    return path


def rank_job(base: Path, folder: Path, ranks: int, slow: int, factor: float = 1.15) -> Path:
    """``ranks`` copies of the trace ``base`` as ``rank<N>.json`` in ``folder``; rank ``slow``
    stretched by ``factor`` (:func:`stretch`), the others unchanged copies."""
    folder.mkdir(parents=True, exist_ok=True)
    doc = load(base)
    for rank in range(ranks):
        target = folder / f"rank{rank}.json"
        if rank == slow:
            write(stretch(doc, factor), target)
        else:
            target.write_bytes(json.dumps(doc).encode())
    return folder

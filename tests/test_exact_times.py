"""Times become integer nanoseconds exactly as the file wrote them, on every decoding route.

Constructed traces (labelled so): 16-digit epoch microseconds, as the 2021-2023 layouts wrote
them, which ``round(us * 1000)`` in float64 moved by up to 128 ns, and relative times with three
decimals near the top of Kineto's three-month window.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from nprof_report.parse.read.reference import read_trace
from nprof_report.parse.read.rows import us_to_ns
from nprof_report.parse.read.split import read_work_parts
from nprof_report.parse.read.stream import read_trace_stream

# 1623142623781019 µs is 1623142623781018880 ns through float64 (issue 15)
EPOCH_US = [1623142623781019, 1661938466265032, 1682725897226747 + 13, 9007199254740991]
RELATIVE_US = ["7889237999999.999", "4203669604595.407", "0.001", "8796093022207.999"]


def _events(times: list[Any], odd: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, ts in enumerate(times * 40):
        out.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": f"op{i % 7}",
                "pid": True
                if odd and i == 3
                else 1,  # a boolean pid sends a piece to the slow path
                "tid": 1,
                "ts": ts,
                "dur": times[(i + 1) % len(times)] if i % 5 == 0 else 1.5,
                "args": {"External id": i},
            }
        )
    return out


def _write(path: Path, times: list[Any], base: int | None, odd: bool) -> list[int]:
    """Write the constructed trace; return the exact ts in ns of each event (base added)."""
    events = _events(times, odd)
    body = json.dumps(
        {"traceEvents": events, "nprof_constructed": True}
        | ({"baseTimeNanoseconds": base} if base is not None else {})
    )
    for t in times:  # the relative times as decimal text, not as Python's float repr
        if isinstance(t, str):
            body = body.replace(json.dumps(t), t)
    path.write_text(body)
    return [int(Decimal(str(e["ts"])) * 1000) + (base or 0) for e in events]


# each route's rows (every event of these traces is a complete cpu_op)
ROUTES = {
    "read_trace": lambda p: read_trace(p).events,
    "stream": lambda p: read_trace_stream(p, chunk_bytes=4096).events,
    "stream work rows": lambda p: read_trace_stream(p, work_only=True, chunk_bytes=4096).events,
    "split workers": lambda p: (
        read_work_parts(p, workers=2, min_bytes=0, chunk_bytes=4096).parts.host
    ),
}


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("odd", [False, True], ids=["fast", "slow path"])
@pytest.mark.parametrize(
    ("times", "base"),
    [(EPOCH_US, None), (RELATIVE_US, 1719853884000000000)],
    ids=["epoch", "relative"],
)
def test_times_are_exact_on_every_route(
    tmp_path: Path, route: str, odd: bool, times: list[Any], base: int | None
) -> None:
    path = tmp_path / "trace.json"
    want = _write(path, times, base, odd)
    assert ROUTES[route](path).sort("event_id")["ts_ns"].to_list() == want


def test_us_to_ns_is_exact_where_the_float_product_is_not() -> None:
    assert round(1623142623781019.0 * 1000) == 1623142623781018880  # the old rule
    assert us_to_ns(1623142623781019.0) == 1623142623781019000
    assert us_to_ns(float("8796093022207.999")) == 8796093022207999
    assert us_to_ns(-1623142623781019.0) == -1623142623781019000
    assert us_to_ns(0.0005) == 0 and us_to_ns(0.0015) == 2  # half to even, as round()

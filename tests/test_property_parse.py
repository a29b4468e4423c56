"""Property tests: malformed and adversarial traces either parse or fail with InputError, nothing else.

Hypothesis generates documents from the shapes traces take (and break in): events with missing,
mistyped, huge, negative or non-finite fields, unknown categories, hostile names, flows, device
activities with or without links; serialised as JSON, the array format, gzip, pretty-printed, or
cut short at a random byte. Every generated case goes through the whole parse stage (loading,
nesting, links, key_averages, the per-step figures).
"""

from __future__ import annotations

import gzip
import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nprof_report.errors import InputError
from nprof_report.parse import Source, load_source
from nprof_report.parse.derive import derive
from nprof_report.parse.frames import load_frames
from nprof_report.parse.keyavg import key_averages
from nprof_report.parse.parts import trace_rows
from nprof_report.parse.read.reference import read_trace
from nprof_report.report.figures.analyses import analyse

CATS = [
    "cpu_op",
    "user_annotation",
    "cuda_runtime",
    "privateuse1_driver",
    "kernel",
    "gpu_memcpy",
    "ac2g",
    "Trace",
    "python_function",
    "weird_cat",
    None,
]
NAMES = [
    "aten::mul",
    "ProfilerStep#3",
    "ProfilerStep#x",
    "cudaLaunchKernel",
    "",
    "<b>&\"'",
    "\x00\x07ctl",
    "ProfilerStep#",
    "[memory]",
    "k" * 300,
]
numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=0, max_value=1e7),
    st.sampled_from([0, 1, 10, 100, 1000]),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=8))
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)

event = st.fixed_dictionaries(
    {},
    optional={
        "ph": st.sampled_from(["X", "X", "X", "i", "M", "s", "f", "C", 7, None]),
        "cat": st.sampled_from(CATS),
        "name": st.one_of(st.sampled_from(NAMES), values),
        "pid": st.one_of(st.sampled_from([1, 2, "Spans", "", 0]), values),
        "tid": st.one_of(st.sampled_from([1, 7, "PyTorch Profiler"]), values),
        "ts": st.one_of(st.floats(min_value=0, max_value=500), numbers, values),
        "dur": st.one_of(st.floats(min_value=-5, max_value=200), numbers, values),
        "id": st.one_of(st.integers(0, 5), values),
        "args": st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "External id": st.one_of(st.integers(0, 6), values),
                    "correlation": st.one_of(st.integers(0, 6), values),
                },
            ),
            values,
        ),
    },
)
documents = st.one_of(
    st.fixed_dictionaries(
        {"traceEvents": st.lists(st.one_of(event, event, event, values), max_size=25)},
        optional={
            "baseTimeNanoseconds": st.one_of(st.integers(0, 2**62), values),
            "deviceProperties": values,
            "distributedInfo": values,
            "schemaVersion": values,
        },
    ),
    st.lists(event, max_size=10),
    values,
)


def _serialise(doc: Any, layout: str, cut: float | None) -> bytes:
    text = json.dumps(doc, indent=2 if layout == "pretty" else None, allow_nan=True).encode()
    if cut is not None:
        text = text[: int(len(text) * cut)]
    return gzip.compress(text) if layout == "gzip" else text


@settings(
    max_examples=int(os.environ.get("NPROF_PROPERTY_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
)
@given(
    doc=documents,
    layout=st.sampled_from(["plain", "pretty", "gzip"]),
    cut=st.one_of(st.none(), st.floats(min_value=0.0, max_value=1.0)),
)
def test_parse_succeeds_or_fails_with_input_error(
    tmp_path_factory: pytest.TempPathFactory, doc: Any, layout: str, cut: float | None
) -> None:
    path = tmp_path_factory.mktemp("p") / ("t.json.gz" if layout == "gzip" else "t.json")
    path.write_bytes(_serialise(doc, layout, cut))
    try:
        frames = load_frames(path)
    except InputError as exc:
        message = str(exc)
        assert str(path) in message and "\n" not in message
        return
    # the reference loader agrees on what is an error and on the events (the raw args text may
    # differ in documented edge cases: duplicate keys, integers beyond 64 bits)
    reference = read_trace(path)
    assert reference.events.drop("args").equals(frames.events.drop("args"))
    assert (frames.ops["dur_ns"] >= 0).all()
    assert set(frames.links["src_id"]).issubset(set(frames.events["event_id"]))
    assert set(frames.links["dst_id"]).issubset(set(frames.events["event_id"]))
    table = key_averages(frames)
    assert (table["calls"] > 0).all()
    rebuilt = derive(trace_rows(reference))
    assert rebuilt.ops.equals(frames.ops)
    analyse(load_source(Source("t", path, path.parent)))

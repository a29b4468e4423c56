"""An independent reference for ``nprof-report ops``: PyTorch's own code fed with a trace file.

PyTorch computes ``key_averages()`` from the live profiler's events: ``profile._parse_kineto_results``
turns them into ``FunctionEvent`` objects and attaches each device activity to the CPU event whose
id its *linked correlation id* names; ``EventList._build_tree()`` nests and merges them;
``EventList.key_averages()`` groups them. This module runs those three functions of the installed
torch, unchanged, on stand-ins for the live events made from a trace file's ``X`` events. It reads
the JSON itself (``json`` with exact decimals) and imports nothing from nprof_report, so it shares
no code with the parser it checks.

What the stand-ins carry, per event, is what the live event would return:

* ``device_type``: ``deviceTypeFromActivity`` of ``torch/csrc/profiler/kineto_shim.cpp``, by the
  event's category (:data:`DEVICE_TYPE`; Kineto's 2021 names ``Operator``, ``Runtime``, ``Kernel``,
  ``Memcpy``, ``Memset`` are the same activity types); an unknown category is CPU, as there.
* ``correlation_id``: an op's or annotation's ``External id``; a runtime or device activity's
  ``correlation``.
* ``linked_correlation_id``: for runtime and device activities, the ``External id`` of the
  RecordFunction scope that was innermost on the launching thread (Kineto writes it as the
  activity's ``External id``, ``external id`` in 2021). Some layouts (2022, 2023) lost that link
  and write the CUPTI correlation id there instead: every runtime call's ``External id`` equals its
  ``correlation``. There the reference finds the link the way it was made: the innermost enclosing
  ``cpu_op`` / ``user_annotation`` on the launching thread (by PyTorch's own nesting) owns the
  runtime call, and a device activity belongs to the runtime call with its ``correlation`` (or
  the ``s`` end of its flow); a GPU user annotation, which no runtime call launches, keeps its
  External id (its annotation's) as in every layout. That is :data:`ENCLOSURE`; the tests say
  where it was used. The enclosure walk is PyTorch's own (``_populate_cpu_children``) over the
  thread's scopes and runtime calls alone: what CUPTI saw as innermost was a RecordFunction, so
  other CPU work does not take part.
* times in integer nanoseconds exactly as written (decimal text), relative to the first event.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ENCLOSURE = "enclosure"
EXTERNAL_ID = "external id"

# deviceTypeFromActivity (torch/csrc/profiler/kineto_shim.cpp); the device kinds are resolved to
# the names PyTorch prints for a CUDA/ROCm build without a PrivateUse1 backend
DEVICE_TYPE = {
    "kernel": "CUDA",
    "gpu_memcpy": "CUDA",
    "gpu_memset": "CUDA",
    "cuda_sync": "CUDA",
    "gpu_user_annotation": "CUDA",
    "cuda_profiler_range": "CUDA",
    "mtia_ccp_events": "MTIA",
    "mtia_insight": "MTIA",
    "mtia_counters": "MTIA",
    "hpu_op": "HPU",
    # Kineto 2021 wrote these names for CONCURRENT_KERNEL, GPU_MEMCPY, GPU_MEMSET
    "Kernel": "CUDA",
    "Memcpy": "CUDA",
    "Memset": "CUDA",
}
# RecordFunction scopes: the events whose correlation PyTorch pushes (ops and user annotations)
SCOPES = {"cpu_op", "user_annotation", "Operator"}
# CPU-typed host side of device work
RUNTIME = {
    "cuda_runtime",
    "cuda_driver",
    "xpu_runtime",
    "xpu_driver",
    "mtia_runtime",
    "glow_runtime",
    "privateuse1_runtime",
    "privateuse1_driver",
    "Runtime",
}
FLOW_CATS = {"ac2g", "async", "async_cpu_to_gpu"}


def _ns(value: Any) -> int:
    """Nanoseconds of a time in microseconds, exactly as the file wrote it."""
    return int((Decimal(value) * 1000).to_integral_value(rounding=ROUND_HALF_EVEN))


def _ext(args: dict[str, Any]) -> int | None:
    value = args.get("External id", args.get("external id"))
    return None if value is None else int(value)


@dataclass
class _Event:
    """A stand-in for ``torch._C._autograd._KinetoEvent`` (the accessors PyTorch calls)."""

    raw_name: str
    cat: str
    tid: str
    start: int
    end: int
    corr: int
    linked: int
    dtype: Any

    def name(self) -> str:
        return self.raw_name

    def start_ns(self) -> int:
        return self.start

    def end_ns(self) -> int:
        return self.end

    def device_type(self) -> Any:
        return self.dtype

    def correlation_id(self) -> int:
        return self.corr

    def linked_correlation_id(self) -> int:
        return self.linked

    def start_thread_id(self) -> str:
        return self.tid

    def end_thread_id(self) -> str:
        return self.tid

    def fwd_thread_id(self) -> str:
        return self.tid

    def is_async(self) -> bool:
        return False

    def is_user_annotation(self) -> bool:
        return self.cat == "user_annotation" or self.cat == "gpu_user_annotation"

    def is_python_function(self) -> bool:
        return self.cat == "python_function"

    def activity_type(self) -> str:
        return self.cat

    def cuda_elapsed_us(self) -> int:
        return -1  # no legacy (pre-Kineto) device time

    def privateuse1_elapsed_us(self) -> int:
        return -1

    def __getattr__(self, attr: str) -> Any:
        # the accessors whose values key_averages() does not use (shapes, stack, flops ...)
        empty: dict[str, Any] = {
            "overload_name": "",
            "shapes": [],
            "concrete_inputs": [],
            "kwinputs": {},
            "stack": [],
            "scope": 0,
            "sequence_nr": -1,
            "device_index": 0,
            "device_resource_id": 0,
            "flops": 0,
            "metadata_json": "",
            "extra_meta": None,
            "flow_id": 0,
            "flow_type": 0,
            "flow_start": False,
            "external_id": 0,
            "structured_input_shapes": [],
            "structured_input_strides": [],
            "dtypes": [],
            "python_id": -1,
            "python_parent_id": -1,
            "python_module_id": -1,
        }
        if attr in empty:
            return lambda: empty[attr]
        raise AttributeError(attr)


def read_events(path: Path) -> list[dict[str, Any]]:
    """The trace's events, numbers with fractions as exact decimals."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw, parse_float=Decimal)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return [e for e in events if isinstance(e, dict)]


def link_rule(events: list[dict[str, Any]]) -> str:
    """:data:`EXTERNAL_ID` where the runtime calls' External ids name their scopes, else
    :data:`ENCLOSURE` (every runtime call's External id is its own correlation id)."""
    both = [
        (_ext(e.get("args") or {}), (e.get("args") or {}).get("correlation"))
        for e in events
        if e.get("ph") == "X" and e.get("cat") in RUNTIME
    ]
    both = [(x, c) for x, c in both if x is not None and c is not None]
    return ENCLOSURE if both and all(x == int(c) for x, c in both) else EXTERNAL_ID


def _kineto_events(events: list[dict[str, Any]], rule: str) -> list[_Event]:
    from torch.autograd import DeviceType

    complete = [
        e
        for e in events
        if e.get("ph") == "X" and e.get("dur") is not None and e.get("cat") not in (None, "Trace")
    ]
    origin = min((_ns(e["ts"]) for e in complete), default=0)
    out = []
    for e in complete:
        args = e.get("args") or {}
        cat = e["cat"]
        start = _ns(e["ts"]) - origin
        dtype = getattr(DeviceType, DEVICE_TYPE.get(cat, "CPU"))
        ext = _ext(args)
        if cat in SCOPES:
            corr, linked = ext or 0, 0
        elif cat in RUNTIME or dtype != DeviceType.CPU:
            corr = int(args.get("correlation") or 0)
            linked = (ext or 0) if rule == EXTERNAL_ID or cat == "gpu_user_annotation" else 0
        else:  # python functions and other CPU-typed activities: never linked
            corr, linked = 0, 0
        out.append(
            _Event(
                raw_name=e["name"],
                cat=cat,
                tid=str(e.get("tid")),
                start=start,
                end=start + _ns(e["dur"]),
                corr=corr,
                linked=linked,
                dtype=dtype,
            )
        )
    if rule == ENCLOSURE:
        _link_by_enclosure(out, events, origin)
    return out


def _link_by_enclosure(out: list[_Event], events: list[dict[str, Any]], origin: int) -> None:
    """Link runtime calls to their innermost enclosing scope (PyTorch's nesting on the thread),
    and device activities to their runtime call's scope (by correlation, else by flow)."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import EventList, FunctionEvent

    host = [k for k in out if k.cat in SCOPES or k.cat in RUNTIME]
    fes = [
        FunctionEvent(id=i, name=k.raw_name, thread=k.tid, start_us=k.start, end_us=k.end)
        for i, k in enumerate(host)
    ]
    EventList(fes)._populate_cpu_children()
    owner_of_corr: dict[int, int] = {}
    for k, fe in zip(host, fes):
        if k.cat not in RUNTIME:
            continue
        parent = fe.cpu_parent
        while parent is not None and host[parent.id].cat not in SCOPES:
            parent = parent.cpu_parent
        k.linked = host[parent.id].corr if parent is not None else 0
        if k.corr:
            owner_of_corr.setdefault(k.corr, k.linked)
    # flows: the s end sits on the runtime call, the f end on the device activity
    runtime_at = {(k.tid, k.start): k for k in host if k.cat in RUNTIME}
    flow_owner: dict[Any, int] = {}
    for e in events:
        if e.get("cat") in FLOW_CATS and e.get("ph") == "s":
            k = runtime_at.get((str(e.get("tid")), _ns(e["ts"]) - origin))
            if k is not None:
                flow_owner.setdefault(e.get("id"), k.linked)
    device_at: dict[tuple[str, int], int] = {}
    for e in events:
        if e.get("cat") in FLOW_CATS and e.get("ph") == "f" and e.get("id") in flow_owner:
            device_at.setdefault((str(e.get("tid")), _ns(e["ts"]) - origin), flow_owner[e["id"]])
    for k in out:
        if k.dtype == DeviceType.CPU or k.cat == "gpu_user_annotation":
            continue  # a GPU user annotation has no runtime call: it keeps its External id
        if k.corr in owner_of_corr:
            k.linked = owner_of_corr[k.corr]
        else:
            k.linked = device_at.get((k.tid, k.start), 0)


@dataclass(frozen=True)
class Row:
    """One ``FunctionEventAvg``, times in integer nanoseconds."""

    name: str
    device_type: str
    is_user_annotation: bool
    calls: int
    self_cpu_ns: int
    cpu_total_ns: int
    self_device_ns: int
    device_total_ns: int


def reference_key_averages(path: Path) -> tuple[dict[tuple[str, str, bool], Row], str]:
    """PyTorch's ``key_averages()`` of the trace's events, by (name, device type, annotation), and
    the link rule that was used (:func:`link_rule`)."""
    import torch.autograd.profiler as torch_profiler
    from torch.autograd.profiler_util import EventList

    events = read_events(path)
    rule = link_rule(events)
    result = SimpleNamespace(
        events=lambda: _kineto_events(events, rule),
        trace_start_ns=lambda: 0,
    )
    owner = SimpleNamespace(use_device="cuda")
    parsed = torch_profiler.profile._parse_kineto_results(owner, result)  # type: ignore[arg-type]
    tree = EventList(parsed, use_device="cuda")
    tree._build_tree()
    rows: dict[tuple[str, str, bool], Row] = {}
    for avg in tree.key_averages():
        device = str(avg.device_type).removeprefix("DeviceType.")
        key = (avg.key, device, bool(avg.is_user_annotation))
        assert key not in rows, key  # one node (-1), no legacy rows: the key is unique
        rows[key] = Row(
            name=avg.key,
            device_type=device,
            is_user_annotation=bool(avg.is_user_annotation),
            calls=avg.count,
            # float µs sums of integer-ns times: far closer than 0.5 ns to the integer
            self_cpu_ns=round(avg.self_cpu_time_total * 1000),
            cpu_total_ns=round(avg.cpu_time_total * 1000),
            self_device_ns=round(avg.self_device_time_total * 1000),
            device_total_ns=round(avg.device_time_total * 1000),
        )
    return rows, rule

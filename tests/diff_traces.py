"""CONSTRUCTED Kineto traces for the diff tests: a model step with known ops, made slower,
added to or renamed on purpose, with seeded per-event noise.

The layout follows current Kineto (formats.md 1): ``ProfilerStep#N`` and ``record_function``
scopes as ``user_annotation``, framework ops as ``cpu_op`` with ``External id``, launches as
``cuda_runtime`` carrying the op's External id and a ``correlation`` that the ``kernel`` repeats;
kernels run one after another on one stream, and each step ends with a device synchronize.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCOPE = "## forward ##"


@dataclass
class Op:
    """A framework op: its own host time (µs), the kernel it launches, the ops inside it."""

    name: str
    host_us: float
    kernel: tuple[str, float] | None = None
    children: list[Op] = field(default_factory=list)


def model(
    *,
    slower: dict[str, float] | None = None,
    added: bool = False,
    renamed: bool = False,
    device: bool = True,
) -> list[Op]:
    """The step's ops. ``slower`` maps a kernel name to a factor on that kernel's time, or,
    with ``device`` off (no kernels written), on the host time of the op that names it."""
    slower = slower or {}

    def op(name: str, host: float, kernel: str, us: float, children: list[Op] | None = None) -> Op:
        factor = slower.get(kernel, 1.0)
        if not device:
            return Op(name, host * factor, None, children or [])
        return Op(name, host, (kernel, us * factor), children or [])

    ops = [
        Op("aten::linear", 10.0, children=[op("aten::mm", 30.0, "gemm_128x64", 400.0)]),
        op("aten::relu", 6.0, "relu_kernel_v2" if renamed else "relu_kernel", 10.0),
        op("aten::mm", 8.0, "gemm_small", 20.0),  # the same op in another context
        op("aten::layer_norm", 12.0, "ln_kernel", 15.0),
        op("aten::add", 5.0, "add_kernel", 8.0),
    ]
    if added:
        ops.append(op("aten::dropout", 3.0, "dropout_kernel", 4.0))
    return ops


class _Writer:
    def __init__(self, seed: int, noise: float) -> None:
        self.rng = random.Random(seed)
        self.noise = noise
        self.events: list[dict[str, Any]] = []
        self.ext = 0
        self.corr = 0
        self.device_free = 0.0

    def jitter(self, us: float) -> float:
        return max(0.1, us * (1 + self.noise * self.rng.gauss(0, 1)))

    def x(self, cat: str, name: str, ts: float, dur: float, **args: Any) -> None:
        pid, tid = (0, 7) if cat == "kernel" else (1, 1)
        event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
        if args:
            event["args"] = args
        self.events.append(event)

    def op(self, op: Op, t: float) -> float:
        """Emit ``op`` starting at ``t``; return its end."""
        self.ext += 1
        ext = self.ext
        host = self.jitter(op.host_us)
        cur = t + 0.4 * host
        for child in op.children:
            cur = self.op(child, cur) + 0.5
        if op.kernel is not None:
            self.corr += 1
            launch = self.jitter(4.0)
            kernel, us = op.kernel
            start = max(cur + self.jitter(5.0), self.device_free + 0.5)
            dur = self.jitter(us)
            self.x(
                "cuda_runtime",
                "cudaLaunchKernel",
                cur,
                launch,
                **{"External id": ext, "correlation": self.corr},
            )
            self.x("kernel", kernel, start, dur, **{"External id": ext, "correlation": self.corr})
            self.device_free = start + dur
            cur += launch
        end = cur + 0.6 * host
        self.x("cpu_op", op.name, t, end - t, **{"External id": ext})
        return end


def write_trace(
    path: Path,
    ops: list[Op],
    *,
    steps: int = 12,
    seed: int = 0,
    noise: float = 0.02,
    what: str = "diff test trace",
) -> Path:
    """Write ``steps`` profiled steps of ``ops`` under one ``record_function`` scope."""
    w = _Writer(seed, noise)
    t = 1000.0
    for step in range(steps):
        s0 = t
        t += w.jitter(3.0)
        scope0 = t
        for op in ops:
            t = w.op(op, t) + w.jitter(1.0)
        w.x("user_annotation", SCOPE, scope0, t - scope0)
        t += 0.5
        if w.device_free > t:  # the loop's synchronize waits for the last kernel
            sync_end = w.device_free + 2.0
            w.x("cuda_runtime", "cudaDeviceSynchronize", t, sync_end - t)
            t = sync_end
        t += w.jitter(4.0)
        w.x("user_annotation", f"ProfilerStep#{step + 3}", s0, t - s0)
        t += 20.0
    doc = {
        "schemaVersion": 1,
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
        "nprof_constructed": what,
        "traceEvents": w.events,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path

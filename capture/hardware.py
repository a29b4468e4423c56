"""What the roofline needs to know about the device a capture ran on: the manifest's ``hardware``.

On the CPU no published peak fits an arbitrary host, so the capture measures one: a STREAM-style
triad (``a = b + q·c`` with ``torch.add(b, c, alpha=q, out=a)``, one pass, counted as STREAM counts
it: 3 × 8 bytes per float64 element) for the memory bandwidth and a float32 matmul (2·n³ FLOPs) for
the FLOP/s, each the best of several repeats, about 0.3 s in all. On Trainium the report looks the
published figures up by the instance type (``/sys/devices/virtual/dmi/id/product_name``, which EC2
Nitro instances set to it) and the logical-NeuronCore setting (``NEURON_LOGICAL_NC_CONFIG``); on a
GPU by the device name the trace's ``deviceProperties`` carry, so nothing is measured there.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

DMI_PRODUCT_NAME = Path("/sys/devices/virtual/dmi/id/product_name")
LNC_VARIABLE = "NEURON_LOGICAL_NC_CONFIG"
TRIAD_ELEMENTS = 1 << 23  # 64 MiB per float64 array, 192 MiB in all
TRIAD_REPEATS = 10
MATMUL_N = 1024
MATMUL_REPEATS = 5
TRIAD_METHOD = (
    "STREAM-style triad a = b + q·c, torch.add(b, c, alpha=q, out=a) on {n:,} float64 elements "
    "(3 × {mib} MiB), {threads} torch threads, best of {repeats} (first included), counted "
    "as 3 × 8 bytes per element"
)
MATMUL_METHOD = (
    "float32 matmul {n}×{n} @ {n}×{n}, 2·n³ FLOPs, {threads} torch threads, best of {repeats}"
)


def _best_seconds(run: Any, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best


def _triad_seconds(elements: int) -> float:
    import torch

    a = torch.empty(elements, dtype=torch.float64)
    b = torch.rand(elements, dtype=torch.float64)
    c = torch.rand(elements, dtype=torch.float64)
    return _best_seconds(lambda: torch.add(b, c, alpha=3.0, out=a), TRIAD_REPEATS)


def measure_cpu_peak(elements: int = TRIAD_ELEMENTS, matmul_n: int = MATMUL_N) -> dict[str, Any]:
    """The host's measured memory bandwidth (GB/s) and FLOP/s (GFLOP/s), with their methods."""
    import torch

    threads = torch.get_num_threads()
    triad_s = _triad_seconds(elements)
    m = torch.rand(matmul_n, matmul_n, dtype=torch.float32)
    matmul_s = _best_seconds(lambda: torch.mm(m, m), MATMUL_REPEATS)
    return {
        "bandwidth_gbps": round(3 * 8 * elements / triad_s / 1e9, 3),
        "bandwidth_method": TRIAD_METHOD.format(
            n=elements, mib=elements * 8 >> 20, threads=threads, repeats=TRIAD_REPEATS
        ),
        "gflops": round(2 * matmul_n**3 / matmul_s / 1e9, 3),
        "gflops_method": MATMUL_METHOD.format(n=matmul_n, threads=threads, repeats=MATMUL_REPEATS),
    }


def instance_type() -> str | None:
    """The EC2 instance type (``trn2.48xlarge``), where the host's DMI data names it."""
    try:
        text = DMI_PRODUCT_NAME.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


def logical_nc_config() -> int | None:
    """The logical-NeuronCore setting (physical cores per device), when set in the environment."""
    value = os.environ.get(LNC_VARIABLE, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def hardware_record(backend: str) -> dict[str, Any]:
    """The manifest's ``hardware`` record for a capture on ``backend``."""
    if backend == "cpu":
        try:
            return {"measured": measure_cpu_peak()}
        except (RuntimeError, MemoryError) as exc:  # the capture goes on without a peak
            return {"measured": None, "error": f"peak not measured: {type(exc).__name__}: {exc}"}
    if backend == "neuron":
        return {
            "instance_type": instance_type(),
            "instance_type_source": str(DMI_PRODUCT_NAME),
            "logical_nc_config": logical_nc_config(),
        }
    return {}

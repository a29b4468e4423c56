"""Event classes by Kineto category (formats.md 1.5, ``RULES.md`` §2), never by lists of
launch-function names.

``DEVICE_CATS`` are the activities PyTorch types as device events (``deviceTypeFromActivity`` in
``torch/csrc/profiler/kineto_shim.cpp``); they are what ``key_averages()`` counts as device time.
``RUNTIME_CATS`` are the host side of device work: CPU-typed rows of their own, like
``cudaLaunchKernel``. Everything else that is a complete event on a thread is CPU work.
"""

from __future__ import annotations

import polars as pl

# Kineto before mid-2021 wrote ``Operator``, ``Runtime``, ``Kernel``, ``Memcpy`` and ``Memset`` for
# the activity types that are now ``cpu_op``, ``cuda_runtime``, ``kernel``, ``gpu_memcpy`` and
# ``gpu_memset`` (with ``external id`` in lower case on runtime and device events).
OP_CATS = frozenset({"cpu_op", "Operator"})
ANNOTATION_CATS = frozenset({"user_annotation"})
PYTHON_CATS = frozenset({"python_function"})
RUNTIME_CATS = frozenset(
    {
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
)
DEVICE_CATS = frozenset(
    {
        "kernel",
        "gpu_memcpy",
        "gpu_memset",
        "cuda_sync",
        "gpu_user_annotation",
        "cuda_profiler_range",
        "mtia_ccp_events",
        "mtia_insight",
        "mtia_counters",
        "hpu_op",
        "Kernel",
        "Memcpy",
        "Memset",
    }
)
# The device type PyTorch gives each device activity (``deviceTypeFromActivity``), by the name it
# prints (``DeviceType.CUDA`` -> ``CUDA``); ROCm builds call theirs CUDA as well.
_DEVICE_TYPE = {
    "mtia_ccp_events": "MTIA",
    "mtia_insight": "MTIA",
    "mtia_counters": "MTIA",
    "hpu_op": "HPU",
}
_COPY_OR_KERNEL = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"})


def device_types(categories: set[str]) -> dict[str, str]:
    """The device type of each device category, in a trace holding ``categories``.

    The categories tell the build: with a PrivateUse1 backend registered (``privateuse1_*``
    events) every kind but HPU is ``PrivateUse1``; in an XPU build (``xpu_*`` events) kernels,
    copies and sets are ``XPU``; else ``CUDA`` (MTIA and HPU have their own).
    """
    privateuse1 = any(c.startswith("privateuse1_") for c in categories)
    xpu = any(c.startswith("xpu_") for c in categories)
    out = {}
    for cat in DEVICE_CATS:
        kind = _DEVICE_TYPE.get(cat, "CUDA")
        if privateuse1 and kind != "HPU":
            kind = "PrivateUse1"
        elif xpu and cat in _COPY_OR_KERNEL:
            kind = "XPU"
        out[cat] = kind
    if (
        privateuse1
    ):  # driver rows read as device executions (privateuse1.py), as PR #186433 types them
        out["privateuse1_driver"] = "PrivateUse1"
    return out


def lost_link(runtime: pl.DataFrame) -> bool:
    """Whether the runtime calls (``external_id``, ``correlation``) lost the link to their scope:
    every call with both ids carries its own correlation id as its External id (the 2022 and
    2023 layouts, ``RULES.md`` §4)."""
    both = runtime.filter(pl.col("external_id").is_not_null() & pl.col("correlation").is_not_null())
    return both.height > 0 and bool((both["external_id"] == both["correlation"]).all())


# CPU-typed categories PyTorch knows that are neither ops nor runtime calls.
OTHER_CPU_CATS = frozenset({"external_correlation", "overhead", "cpu_instant_event", "Trace"})
KNOWN_CATS = OP_CATS | ANNOTATION_CATS | PYTHON_CATS | RUNTIME_CATS | DEVICE_CATS | OTHER_CPU_CATS

# Categories that never take part in nesting or key_averages: the profiler's own span.
SKIP_CATS = frozenset({"Trace"})

# Names key_averages drops entirely (``_filter_name`` in torch/autograd/profiler.py).
FILTERED_NAMES = frozenset(
    {
        "[memory]",
        "[OutOfMemory]",
        "profiler::_record_function_enter",
        "profiler::_record_function_enter_new",
        "profiler::_record_function_exit",
        "aten::is_leaf",
        "aten::output_nr",
        "aten::_version",
    }
)


def host_class(cat: str | None) -> str | None:
    """Class of a host (CPU-typed) complete event, or None for device events and skipped rows."""
    if cat in OP_CATS:
        return "op"
    if cat in ANNOTATION_CATS:
        return "annotation"
    if cat in RUNTIME_CATS:
        return "runtime"
    if cat in PYTHON_CATS:
        return "python"
    if cat in DEVICE_CATS or cat in SKIP_CATS:
        return None
    return "other"

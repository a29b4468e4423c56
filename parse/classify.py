"""Event classes by Kineto category (formats.md 1.5), never by lists of launch-function names.

``DEVICE_CATS`` are the activities PyTorch types as device events (``deviceTypeFromActivity`` in
``torch/csrc/autograd/profiler_kineto.cpp``); they are what ``key_averages()`` counts as device time.
``RUNTIME_CATS`` are the host side of device work: CPU-typed rows of their own, like
``cudaLaunchKernel``. Everything else that is a complete event on a thread is CPU work.
"""

from __future__ import annotations

OP_CATS = frozenset({"cpu_op"})
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
    }
)
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

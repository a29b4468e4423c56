"""A study for nprof-report: which implementation of my_op is fastest, and from which size on?

Run it and build the report:

    nprof-report capture --study my_op.py && nprof-report build

`capture` runs every implementation at every size: a first call (compilation happens here, outside
the profile), a numerical check of its output against the first implementation's, profiled steps,
and un-profiled timings. `--shape 8,1024 --shape 64,4096` replaces SIZES, `--impl NAME` picks
implementations, `--dtype float16` replaces DTYPE, `--backend cpu|cuda|neuron` the device.

This file is an example to edit: the GELU (tanh approximation) written out op by op, the built-in
kernel, and the op-by-op version under torch.compile.
"""

from __future__ import annotations

from typing import Any

import torch

from nprof_report.capture.study import Implementation, Study, itemsize

# The sizes to sweep: each is passed to make_inputs. Keep the smallest one small: a study error
# there (an exception in make_inputs) stops the capture before anything is written.
SIZES = [(8, 1024), (64, 4096), (256, 8192)]
DTYPE = "float32"


def make_inputs(size: tuple[int, ...], dtype: torch.dtype, device: str) -> tuple[Any, ...]:
    """The positional arguments of every implementation, for one size.

    Called once per size, after torch.manual_seed(STUDY.seed); every implementation gets the same
    tensors, so none may modify them in place. `device` is "cpu", "cuda" or "neuron".
    """
    x = torch.randn(*size, dtype=torch.float32).to(dtype)
    return (x.to(device),)


def gelu_eager(x: torch.Tensor) -> torch.Tensor:
    """The reference (first implementation): one framework op per arithmetic step."""
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    return 0.5 * x * (1.0 + torch.tanh(inner))


def gelu_builtin(x: torch.Tensor) -> torch.Tensor:
    """One fused kernel."""
    return torch.nn.functional.gelu(x, approximate="tanh")


def bytes_moved(size: tuple[int, ...], dtype: str) -> int:
    """The fewest bytes one call must read and write: x in, y out, each one element per element.

    Optional, with flops: the report then shows how close each implementation comes to the
    device's peak bandwidth and FLOP/s (a roofline). dtype is the dtype's name ("float32").
    """
    elements = 1
    for d in size:
        elements *= d
    return 2 * elements * itemsize(dtype)


def flops(size: tuple[int, ...], dtype: str) -> int:
    """Floating-point operations of one call: count those of the formula, not of any one kernel
    (here 9 per element: x·x·x is two, ·0.044715, + x, ·0.79788, tanh counted as one, 1 + tanh,
    0.5·x and the last product)."""
    elements = 1
    for d in size:
        elements *= d
    return 9 * elements


STUDY = Study(
    name="my_op",
    implementations=[
        # (name, description shown in the report, callable); the first is the reference of the
        # numerical check and the baseline of every comparison
        Implementation("eager", "tanh approximation, op by op", gelu_eager),
        Implementation("builtin", "torch.nn.functional.gelu(approximate='tanh')", gelu_builtin),
        # compile=True: torch.compile(fn) afresh at each size (backend="neuron" on Trainium);
        # compile_mode="max-autotune" and the like pass through
        Implementation(
            "compiled", "the eager version under torch.compile", gelu_eager, compile=True
        ),
    ],
    make_inputs=make_inputs,
    sizes=SIZES,
    dtype=DTYPE,
    # tolerance=Tolerance(atol=1e-5, rtol=1e-4),  # default: torch.testing.assert_close's for DTYPE
    inputs="x = randn(size)",  # one line for the report's provenance
    parameters={},  # anything else worth recording in the manifest
    bytes_moved=bytes_moved,  # optional, with flops: the roofline section of the report
    flops=flops,
)

"""The numerical check: an implementation's output against the reference implementation's.

The pass rule is ``torch.isclose``'s (the rule of ``torch.testing.assert_close``): every element
within ``atol + rtol * |reference|``; NaN matches NaN at the same place. The reported errors are
computed in float64 on the CPU, so they are not rounded to the outputs' dtype.
"""

from __future__ import annotations

from typing import Any

from nprof_report.bundle import NumericalCheck
from nprof_report.capture.study import Tolerance


def _tensors(value: Any) -> list[Any] | None:
    """The tensors of an output (a tensor, or nested tuples/lists of them); None if anything else."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        out: list[Any] = []
        for item in value:
            inner = _tensors(item)
            if inner is None:
                return None
            out += inner
        return out
    return None


def compare_outputs(
    output: Any, reference: Any, reference_name: str, tolerance: Tolerance
) -> NumericalCheck:
    """Compare ``output`` with ``reference`` elementwise; see the module docstring."""
    import torch

    def verdict(status: str, **kw: Any) -> NumericalCheck:
        return NumericalCheck(
            reference_name, status, atol=tolerance.atol, rtol=tolerance.rtol, **kw
        )

    outs, refs = _tensors(output), _tensors(reference)
    if outs is None or refs is None:
        kind = type(output if outs is None else reference).__name__
        return NumericalCheck(
            reference_name, "not compared", note=f"the output is a {kind}, not tensors"
        )
    if len(outs) != len(refs):
        return verdict("fail", note=f"{len(outs)} output tensors, the reference has {len(refs)}")
    max_abs = max_rel = 0.0
    mismatched = total = 0
    for n, (out, ref) in enumerate(zip(outs, refs)):
        if tuple(out.shape) != tuple(ref.shape):
            return verdict(
                "fail",
                note=f"output {n} has shape {tuple(out.shape)}, the reference {tuple(ref.shape)}",
            )
        wide = torch.complex128 if (out.is_complex() or ref.is_complex()) else torch.float64
        a = out.detach().to("cpu", wide)
        b = ref.detach().to("cpu", wide)
        close = torch.isclose(a, b, rtol=tolerance.rtol, atol=tolerance.atol, equal_nan=True)
        mismatched += int((~close).sum())
        total += a.numel()
        diff = (a - b).abs()
        finite = torch.isfinite(diff)
        if bool(finite.any()):
            max_abs = max(max_abs, float(diff[finite].max()))
            nonzero = finite & (b != 0)
            if bool(nonzero.any()):
                max_rel = max(max_rel, float((diff[nonzero] / b[nonzero].abs()).max()))
    note = None
    if mismatched:
        note = f"{mismatched} of {total} elements outside atol + rtol * |reference|"
    return verdict(
        "fail" if mismatched else "pass",
        max_abs_error=max_abs,
        max_rel_error=max_rel,
        mismatched=mismatched,
        elements=total,
        note=note,
    )

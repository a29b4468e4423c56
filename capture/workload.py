"""The RMSNorm study: three implementations of the same function on the same input.

* ``naive``: ``t * t``, ``mean``, ``rsqrt(mean_sq + eps)``, ``t * rms * weight`` as separate eager ops;
* ``fused``: ``torch.rms_norm``;
* ``compiled``: the naive function under ``torch.compile``.

torch is imported inside functions so that importing this module costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

IMPLEMENTATIONS = ("naive", "fused", "compiled")
DESCRIPTIONS = {
    "naive": "t*t, mean, rsqrt(mean_sq + eps), t*rms*weight as separate eager ops",
    "fused": "torch.rms_norm",
    "compiled": "the naive function under torch.compile",
}


@dataclass(frozen=True)
class Workload:
    """Input of the study."""

    shape: tuple[int, ...]
    dtype: str
    eps: float = 1e-6
    seed: int = 0

    def describe(self) -> dict[str, Any]:
        """The manifest's ``workload`` record."""
        return {
            "name": "rmsnorm",
            "shape": list(self.shape),
            "dtype": self.dtype,
            "eps": self.eps,
            "seed": self.seed,
            "input": f"x = randn({', '.join(map(str, self.shape))}), weight = ones({self.shape[-1]})",
        }


def make_inputs(workload: Workload, device: Any) -> tuple[Any, Any]:
    """``x = randn(shape)`` and ``weight = ones(shape[-1])`` on ``device``, in the study's dtype."""
    import torch

    dtype = getattr(torch, workload.dtype)
    gen = torch.Generator().manual_seed(workload.seed)
    x = torch.randn(*workload.shape, generator=gen, dtype=torch.float32).to(dtype)
    weight = torch.ones(workload.shape[-1], dtype=dtype)
    return x.to(device), weight.to(device)


def make_function(
    name: str, workload: Workload, *, compile_backend: str | None = None
) -> Callable[..., Any]:
    """The implementation ``name`` as a callable ``f(x, weight)``."""
    import torch

    eps = workload.eps
    normalized = (workload.shape[-1],)

    def rmsnorm_naive(t: Any, weight: Any) -> Any:
        x_sq = t * t
        mean_sq = x_sq.mean(dim=-1, keepdim=True)
        rms = torch.rsqrt(mean_sq + eps)
        return t * rms * weight

    def rmsnorm_fused(t: Any, weight: Any) -> Any:
        return torch.rms_norm(t, normalized, weight, eps=eps)

    if name == "naive":
        return rmsnorm_naive
    if name == "fused":
        return rmsnorm_fused
    if name == "compiled":
        if compile_backend is None:
            return torch.compile(rmsnorm_naive)
        return torch.compile(rmsnorm_naive, backend=compile_backend)
    raise ValueError(f"unknown implementation {name!r}")

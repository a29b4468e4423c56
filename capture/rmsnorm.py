"""The built-in study: RMSNorm in three implementations on the same input.

* ``naive``: ``t * t``, ``mean``, ``rsqrt(mean_sq + eps)``, ``t * rms * weight`` as separate eager ops;
* ``fused``: ``torch.rms_norm``;
* ``compiled``: the naive function under ``torch.compile``.

``nprof-report capture`` runs it when no ``--study`` is given. It uses only the public study API
(:mod:`nprof_report.capture.study`), so it is also the example to copy; torch is imported inside
the functions so that importing this module costs nothing.
"""

from __future__ import annotations

from typing import Any

from nprof_report.capture.study import Implementation, Size, Study, itemsize

EPS = 1e-6
SEED = 0


def make_inputs(size: Size, dtype: Any, device: str) -> tuple[Any, Any]:
    """``x = randn(size)`` (drawn in float32, then cast) and ``weight = ones(size[-1])``."""
    import torch

    gen = torch.Generator().manual_seed(SEED)
    x = torch.randn(*size, generator=gen, dtype=torch.float32).to(dtype)
    weight = torch.ones(size[-1], dtype=dtype)
    return x.to(device), weight.to(device)


def rmsnorm_naive(t: Any, weight: Any) -> Any:
    """Four eager ops and the two multiplications, each rounded to the input's dtype."""
    import torch

    x_sq = t * t
    mean_sq = x_sq.mean(dim=-1, keepdim=True)
    rms = torch.rsqrt(mean_sq + EPS)
    return t * rms * weight


def rmsnorm_fused(t: Any, weight: Any) -> Any:
    """One ``aten::rms_norm`` call."""
    import torch

    return torch.rms_norm(t, (t.shape[-1],), weight, eps=EPS)


def bytes_moved(size: Size, dtype: str) -> int:
    """The fewest bytes one call must move: read x (N·D) and the weight (D), write y (N·D).

    ``N`` is the product of every dimension but the last, ``D`` the last. Intermediates (``t*t``,
    ``mean_sq``) are not counted: an implementation that writes and reads them back moves more
    than this, which is what the roofline shows.
    """
    d = size[-1]
    n = 1
    for dim in size[:-1]:
        n *= dim
    return (2 * n * d + d) * itemsize(dtype)


def flops(size: Size, dtype: str) -> int:
    """4·N·D: per element one multiply (x·x), one add (the row sum of the mean), one multiply by
    the row's rsqrt and one by the weight; the per-row divide, add of eps and rsqrt (3·N) are
    left out."""
    n = 1
    for dim in size:
        n *= dim
    return 4 * n


STUDY = Study(
    name="RMSNorm",
    implementations=[
        Implementation(
            "naive",
            "t*t, mean, rsqrt(mean_sq + eps), t*rms*weight as separate eager ops",
            rmsnorm_naive,
        ),
        Implementation("fused", "torch.rms_norm", rmsnorm_fused),
        Implementation(
            "compiled", "the naive function under torch.compile", rmsnorm_naive, compile=True
        ),
    ],
    make_inputs=make_inputs,
    sizes=[(4, 512)],
    dtype="bfloat16",
    # no tolerance: bfloat16's default (rtol 1.6e-2, atol 1e-5); naive rounds every intermediate to
    # bfloat16 and fused does not, measured up to 0.9 % apart (relative) at 4×512 to 256×8192
    inputs="x = randn(size), weight = ones(size[-1])",
    parameters={"eps": EPS, "seed": SEED},
    bytes_moved=bytes_moved,
    flops=flops,
)

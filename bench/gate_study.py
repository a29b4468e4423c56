"""A tiny study for the regression gate: a numerically stable softmax, and the same with one more
pass over the input (the planted regression of ``bench/bench_gate.py`` and ``tests/test_gate.py``).

    nprof-report capture --study bench/gate_study.py --backend cpu             # the baseline code
    nprof-report capture --study bench/gate_study.py:EXTRA_PASS --backend cpu  # one more pass
    nprof-report capture --study bench/gate_study.py --shape 16,2048           # 2x the input

Both studies name their one implementation ``stable``, so ``check`` pairs them. ``STUDY``
dispatches five framework ops a step (amax, sub, exp, sum, div); ``EXTRA_PASS`` computes the
normaliser a second time and averages the two (sub, exp, sum, mul, add more: ten ops, about
twice the passes over the input) and returns the same values.
"""

from __future__ import annotations

from typing import Any

from nprof_report.capture.study import Implementation, Study

SIZE = (8, 2048)
SEED = 0


def make_inputs(size: tuple[int, ...], dtype: Any, device: str) -> tuple[Any]:
    """``x = randn(size)``."""
    import torch

    gen = torch.Generator().manual_seed(SEED)
    return (torch.randn(*size, generator=gen, dtype=torch.float32).to(dtype).to(device),)


def stable(x: Any) -> Any:
    """softmax(x) = exp(x - max) / sum(exp(x - max)) over the last dimension."""
    m = x.amax(dim=-1, keepdim=True)
    e = (x - m).exp()
    return e / e.sum(dim=-1, keepdim=True)


def stable_extra_pass(x: Any) -> Any:
    """The same softmax with the normaliser computed twice (one more pass over the input)."""
    m = x.amax(dim=-1, keepdim=True)
    e = (x - m).exp()
    s = e.sum(dim=-1, keepdim=True)
    again = (x - m).exp().sum(dim=-1, keepdim=True)
    return e / ((s + again) * 0.5)


def _study(fn: Any, description: str) -> Study:
    return Study(
        name="softmax",
        implementations=[Implementation("stable", description, fn)],
        make_inputs=make_inputs,
        sizes=[SIZE],
        dtype="float32",
        inputs="x = randn(size)",
        parameters={"seed": SEED},
    )


STUDY = _study(stable, "exp(x - max) / sum, five eager ops")
EXTRA_PASS = _study(stable_extra_pass, "the normaliser computed twice: one more pass")

"""nprof-report: PyTorch profiler captures turned into design-review evidence.

The stages live in sub-packages: :mod:`nprof_report.capture` (needs torch),
:mod:`nprof_report.parse` and :mod:`nprof_report.report` (never import torch).
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]

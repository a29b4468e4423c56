"""A constructed Neuron run of the built-in study: the real capture path with a stand-in
torch_neuronx whose NeuronProfiler writes the CONSTRUCTED Neuron trees of fixtures/neuron/.

torch-neuronx cannot be installed here (tests/test_capture_neuron.py), so the run's manifest,
schedule and numerical check come from a real ``capture --backend neuron`` on this CPU, while
each bundle's profile is the constructed tree for that implementation (``naive``:
``eager_naive``, ``fused``, ``compiled``). The un-profiled timing is left out (it would time this
CPU), so the run's figures are the constructed profiles' alone. Every trace.json of those
trees says it was constructed (its ``nprof_constructed`` key), and so does every report built
from the run. Nothing here is evidence of how Neuron hardware performs.
"""

from __future__ import annotations

import shutil
import sys
import types
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NEURON

TREES = {"naive": "eager_naive", "fused": "fused", "compiled": "compiled"}


def stand_in(
    export: Callable[[Path, Any], None],
    calls: list[tuple[str, Any]] | None = None,
    refuse: tuple[str, ...] = (),
) -> types.ModuleType:
    """A stand-in ``torch_neuronx`` with the documented profiling API (formats.md 2.1): its
    ``NeuronProfiler.export_trace(prof)`` calls ``export(profile_output_dir, prof)``; ``calls``
    records what it receives; ``refuse`` names the NeuronConfig parameters it rejects, as an
    older NeuronConfig would."""
    import torch

    root = types.ModuleType("torch_neuronx")
    profiling = types.ModuleType("torch_neuronx.profiling")
    record = calls if calls is not None else []

    class ProfileMode:
        DEVICE = "DEVICE"
        RUNTIME = "RUNTIME"

    class NeuronConfig(torch._C._profiler._ExperimentalConfig):  # type: ignore[misc]
        def __init__(self, **kwargs: Any) -> None:
            for name in refuse:  # an older NeuronConfig without this parameter
                if name in kwargs:
                    raise TypeError(f"__init__() got an unexpected keyword argument '{name}'")
            super().__init__()
            self.kwargs = kwargs
            record.append(("NeuronConfig", kwargs))

    class NeuronProfiler:
        def __init__(self, config: NeuronConfig) -> None:
            self.config = config

        def export_trace(self, prof: Any) -> None:
            export(Path(self.config.kwargs["profile_output_dir"]), prof)

    profiling.ProfileMode = ProfileMode  # type: ignore[attr-defined]
    profiling.NeuronConfig = NeuronConfig  # type: ignore[attr-defined]
    profiling.NeuronProfiler = NeuronProfiler  # type: ignore[attr-defined]
    root.profiling = profiling  # type: ignore[attr-defined]
    return root


def _copy_tree(out: Path, prof: Any) -> None:
    """The constructed tree of the implementation whose bundle ``out`` is."""
    shutil.copytree(NEURON / TREES[out.name], out, dirs_exist_ok=True)


def constructed_neuron_run(out: Path) -> Path:
    """Capture the built-in study with the stand-in; return the run folder."""
    import torch

    from nprof_report.capture import backends, session
    from nprof_report.capture.session import CaptureOptions, run_capture

    module = stand_in(_copy_tree)
    real_select = backends.select_backend

    def select(name: str) -> Any:
        # torch.compile(backend="neuron") needs torch-neuronx: Inductor stands in
        return replace(real_select(name), compile_backend=None)

    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "torch_neuronx", module)
        mp.setitem(sys.modules, "torch_neuronx.profiling", module.profiling)
        mp.setattr(torch, "neuron", types.SimpleNamespace(synchronize=lambda: None), raising=False)
        mp.setattr(backends, "NEURON_DEVICE", "cpu")
        mp.setattr(session, "select_backend", select)
        # no un-profiled timing: it would time this CPU, not the constructed profiles
        mp.setattr(session, "_time_unprofiled", lambda *args: None)
        mp.setattr("nprof_report.parse.neuron.convert.FALLBACK_TOOL_DIRS", ())
        return run_capture(CaptureOptions(out=out, backend="neuron", active=3, timing_seconds=0.05))

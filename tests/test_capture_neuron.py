"""The Neuron capture path, driven by a stand-in torch_neuronx that records the calls it receives.

torch-neuronx cannot be installed here (its public package is a placeholder), so this checks the
calls our code makes against the documented API (formats.md 2.1): activities, NeuronConfig
arguments, on_trace_ready, and torch.neuron.synchronize() once per step before prof.step().
The tensors stay on the CPU: device placement on a NeuronCore is not exercised.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from nprof_report.bundle import read_manifest

pytestmark = pytest.mark.capture


def _stand_in(calls: list[tuple[str, Any]]) -> types.ModuleType:
    import torch

    root = types.ModuleType("torch_neuronx")
    profiling = types.ModuleType("torch_neuronx.profiling")

    class ProfileMode:
        DEVICE = "DEVICE"
        RUNTIME = "RUNTIME"

    class NeuronConfig(torch._C._profiler._ExperimentalConfig):  # type: ignore[misc]
        def __init__(self, **kwargs: Any) -> None:
            super().__init__()
            self.kwargs = kwargs
            calls.append(("NeuronConfig", kwargs))

    class NeuronProfiler:
        def __init__(self, config: NeuronConfig) -> None:
            self.config = config

        def export_trace(self, prof: Any) -> None:
            out = Path(self.config.kwargs["profile_output_dir"])
            session = out / "i-standin_pid_1" / "20261130_000000_000"
            session.mkdir(parents=True)
            prof.export_chrome_trace(str(session / "trace.json"))
            calls.append(("export_trace", str(session)))

    profiling.ProfileMode = ProfileMode  # type: ignore[attr-defined]
    profiling.NeuronConfig = NeuronConfig  # type: ignore[attr-defined]
    profiling.NeuronProfiler = NeuronProfiler  # type: ignore[attr-defined]
    root.profiling = profiling  # type: ignore[attr-defined]
    return root


def test_neuron_path_makes_the_documented_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch
    import torch.profiler

    from nprof_report.capture import backends
    from nprof_report.capture.session import CaptureOptions, run_capture

    calls: list[tuple[str, Any]] = []
    module = _stand_in(calls)
    monkeypatch.setitem(sys.modules, "torch_neuronx", module)
    monkeypatch.setitem(sys.modules, "torch_neuronx.profiling", module.profiling)
    monkeypatch.setattr(
        torch,
        "neuron",
        types.SimpleNamespace(synchronize=lambda: calls.append(("synchronize", None))),
        raising=False,
    )
    monkeypatch.setattr(backends, "NEURON_DEVICE", "cpu")
    real_profile = torch.profiler.profile

    def recording_profile(*args: Any, **kwargs: Any) -> Any:
        calls.append(("profile", kwargs))
        prof = real_profile(*args, **kwargs)
        real_step = prof.step

        def step() -> None:
            calls.append(("step", None))
            real_step()

        prof.step = step
        return prof

    monkeypatch.setattr(torch.profiler, "profile", recording_profile)
    run = run_capture(
        CaptureOptions(
            out=tmp_path, backend="auto", active=2, timing_seconds=0.05, implementations=("naive",)
        )
    )

    manifest = read_manifest(run)
    assert manifest.backend == "neuron"
    assert manifest.profiler["activities"] == ["CPU", "PrivateUse1"]
    config = next(kw for name, kw in calls if name == "NeuronConfig")
    assert config["profile_output_dir"] == str(run / "naive")
    assert config["capture_enabled_for_nc"] == "0"
    assert config["modes"] == ["DEVICE", "RUNTIME"]
    prof_kwargs = next(kw for name, kw in calls if name == "profile")
    assert prof_kwargs["activities"] == [
        torch.profiler.ProfilerActivity.CPU,
        torch.profiler.ProfilerActivity.PrivateUse1,
    ]
    assert prof_kwargs["experimental_config"].kwargs is config
    assert prof_kwargs["on_trace_ready"].__name__ == "export_trace"
    # synchronize before every prof.step(), inside the profiled loop
    names = [n for n, _ in calls]
    profiled = names[names.index("profile") : names.index("export_trace")]
    steps = [i for i, n in enumerate(profiled) if n == "step"]
    assert len(steps) == 2 + 1 + 2  # wait + warmup + active; the last step() fires the export
    assert all(profiled[i - 1] == "synchronize" for i in steps)
    impl = manifest.implementations[0]
    assert impl.status == "ok"
    assert impl.trace == "naive/i-standin_pid_1/20261130_000000_000/trace.json"


def test_neuron_backend_without_torch_neuronx_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from nprof_report.capture.backends import select_backend
    from nprof_report.errors import CaptureError

    monkeypatch.setitem(sys.modules, "torch_neuronx", None)
    with pytest.raises(CaptureError, match="torch_neuronx cannot be imported"):
        select_backend("neuron")

"""Where the workload runs: TorchNeuron (PrivateUse1), CUDA or CPU, and how each is profiled.

The Neuron path follows the TorchNeuron profiling how-to (formats.md 2.1): activities
``CPU + PrivateUse1``, ``experimental_config=NeuronConfig(modes=[DEVICE, RUNTIME],
profile_output_dir=<bundle>, capture_enabled_for_nc='0')``, ``on_trace_ready=
NeuronProfiler(nc).export_trace`` and ``torch.neuron.synchronize()`` before each ``prof.step()``.
It has not run on Trainium hardware; tests drive it with a stand-in ``torch_neuronx``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import platform
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nprof_report.errors import CaptureError

BACKENDS = ("auto", "neuron", "cuda", "cpu")
# The tensor device of the Neuron path; tests that inject a stand-in torch_neuronx point it at cpu.
NEURON_DEVICE = "neuron"


@dataclass(frozen=True)
class Backend:
    """How to place, synchronise and profile the workload on one kind of device."""

    name: str
    device: str
    description: str
    activity_names: tuple[str, ...]
    synchronize: Callable[[], None]
    profiler_kwargs: Callable[[Path], dict[str, Any]]
    compile_backend: str | None = None


def _neuron_available() -> bool:
    try:
        importlib.import_module("torch_neuronx")
    except ImportError:
        return False
    return True


def select_backend(name: str) -> Backend:
    """Resolve ``auto`` (neuron, then cuda, then cpu) and build the backend."""
    import torch

    if name not in BACKENDS:
        raise CaptureError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    if name == "auto":
        name = "neuron" if _neuron_available() else "cuda" if torch.cuda.is_available() else "cpu"
    if name == "neuron":
        return _neuron_backend()
    if name == "cuda":
        if not torch.cuda.is_available():
            raise CaptureError("--backend cuda: torch.cuda.is_available() is False on this machine")
        from torch.profiler import ProfilerActivity

        def cuda_kwargs(_: Path) -> dict[str, Any]:
            return {"activities": [ProfilerActivity.CPU, ProfilerActivity.CUDA]}

        return Backend(
            "cuda",
            "cuda",
            torch.cuda.get_device_name(0),
            ("CPU", "CUDA"),
            torch.cuda.synchronize,
            cuda_kwargs,
        )
    from torch.profiler import ProfilerActivity

    def cpu_kwargs(_: Path) -> dict[str, Any]:
        return {"activities": [ProfilerActivity.CPU]}

    return Backend("cpu", "cpu", _cpu_description(), ("CPU",), lambda: None, cpu_kwargs)


def _neuron_backend() -> Backend:
    try:
        importlib.import_module("torch_neuronx")
        profiling = importlib.import_module("torch_neuronx.profiling")
    except ImportError as exc:
        raise CaptureError(
            f"--backend neuron: torch_neuronx cannot be imported ({exc}); run on a Trainium host "
            "with the Neuron SDK's PyTorch environment"
        ) from exc
    import torch
    from torch.profiler import ProfilerActivity

    def neuron_kwargs(bundle: Path) -> dict[str, Any]:
        nc = profiling.NeuronConfig(
            modes=[profiling.ProfileMode.DEVICE, profiling.ProfileMode.RUNTIME],
            profile_output_dir=str(bundle),
            capture_enabled_for_nc="0",
        )
        return {
            "activities": [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
            "experimental_config": nc,
            "on_trace_ready": profiling.NeuronProfiler(nc).export_trace,
        }

    def neuron_sync() -> None:
        torch.neuron.synchronize()  # type: ignore[attr-defined]

    return Backend(
        "neuron",
        NEURON_DEVICE,
        "AWS Neuron (TorchNeuron, PrivateUse1), NeuronCore 0",
        ("CPU", "PrivateUse1"),
        neuron_sync,
        neuron_kwargs,
        compile_backend="neuron",
    )


def _cpu_description() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    return f"CPU: {model}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}"


def versions() -> dict[str, str | None]:
    """Versions of python, torch and, when present, the Neuron packages and tools."""
    import torch

    from nprof_report import __version__

    found: dict[str, str | None] = {
        "nprof_report": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }
    for dist in ("torch-neuronx", "neuronx-cc", "libneuronxla", "neuronx-distributed"):
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[dist] = None
    tool = shutil.which("neuron-explorer")
    found["neuron-explorer"] = None
    if tool:
        try:
            out = subprocess.run(
                [tool, "--version"], capture_output=True, text=True, timeout=20, check=False
            )
            found["neuron-explorer"] = (out.stdout or out.stderr).strip().splitlines()[0]
        except (OSError, subprocess.SubprocessError, IndexError):
            found["neuron-explorer"] = "present, version unknown"
    return found


ENV_PREFIXES = ("NEURON_", "XLA_", "TORCH_NEURONX_", "TORCHINDUCTOR_", "PYTORCH_", "CUDA_", "OMP_")


def relevant_environment() -> dict[str, str]:
    """Environment variables that change what a capture measures."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}

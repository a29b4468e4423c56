"""Where the workload runs: TorchNeuron (PrivateUse1), CUDA or CPU, and how each is profiled.

The Neuron path follows the TorchNeuron profiling how-to (formats.md 2.1) and the TorchNeuron
profiling article (§2.3, §9.1): activities ``CPU + PrivateUse1``, ``experimental_config=
NeuronConfig(modes=[DEVICE, RUNTIME], profile_output_dir=<bundle>, capture_enabled_for_nc='0',
correlate_device_time=True, neff_cache_dir=<NEFF cache>)``, ``on_trace_ready=
NeuronProfiler(nc).export_trace`` and ``torch.neuron.synchronize()`` before each ``prof.step()``.
``correlate_device_time`` puts Neuron device time into ``trace.json`` and ``key_averages()``;
``neff_cache_dir`` makes the profiler copy the NEFFs into the session folder (§9.4). A
``NeuronConfig`` that rejects one of these two is built again without it, with a warning, and the
drop is recorded. Each bundle gets ``neuron-capture.json`` (the ``NeuronConfig`` arguments passed
and dropped, the ``NEURON_RT_INSPECT_*`` variables) and, when ``neuron-explorer`` is installed,
``neuron-profile-schema.yaml`` (``neuron-explorer view --show-profile-schema``), which the parser
uses to resolve renamed Explorer columns. It has not run on Trainium hardware; tests drive it with
a stand-in ``torch_neuronx``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nprof_report.errors import CaptureError

BACKENDS = ("auto", "neuron", "cuda", "cpu")
# The tensor device of the Neuron path; tests that inject a stand-in torch_neuronx point it at cpu.
NEURON_DEVICE = "neuron"
# NeuronConfig arguments an installed torch-neuronx may not know: dropped one by one if refused.
OPTIONAL_NEURON_CONFIG = ("correlate_device_time", "neff_cache_dir")
NEFF_CACHE_VAR = "TORCH_NEURONX_NEFF_CACHE_DIR"
CAPTURE_RECORD = "neuron-capture.json"  # read back by parse/neuron/files.py
SCHEMA_DUMP = "neuron-profile-schema.yaml"  # read back by parse/neuron/columns.py
INSPECT_PREFIX = "NEURON_RT_INSPECT_"
SCHEMA_COMMANDS = (("view", "--show-profile-schema"), ("--show-profile-schema",))  # 2.33+, older


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
    # settings for the manifest's "profiler" record, filled as profiler_kwargs runs
    profiler_settings: dict[str, Any] = field(default_factory=dict)


def _neuron_installed() -> bool:
    """Whether torch_neuronx can be imported, without importing it."""
    if "torch_neuronx" in sys.modules:
        return sys.modules["torch_neuronx"] is not None
    return importlib.util.find_spec("torch_neuronx") is not None


def _neuron_available() -> bool:
    try:
        importlib.import_module("torch_neuronx")
    except ImportError:
        return False
    return True


def neff_cache_dir() -> str:
    """The NEFF cache the profiler copies NEFFs from: ``TORCH_NEURONX_NEFF_CACHE_DIR`` if set,
    else a folder under the temporary directory, exported so that torch-neuronx compiles into it
    (set before torch_neuronx is imported by :func:`select_backend`)."""
    return os.environ.setdefault(
        NEFF_CACHE_VAR, str(Path(tempfile.gettempdir()) / "nprof-neff-cache")
    )


def build_neuron_config(cls: Callable[..., Any], kwargs: dict[str, Any]) -> tuple[Any, list[str]]:
    """``cls(**kwargs)``; a parameter of :data:`OPTIONAL_NEURON_CONFIG` that the installed
    ``NeuronConfig`` refuses (``TypeError``) is dropped and the call retried, with a warning.

    Returns:
        The config and, per dropped parameter, ``"<name>: <the error>"``.
    """
    args = dict(kwargs)
    dropped: list[str] = []
    while True:
        try:
            return cls(**args), dropped
        except TypeError as exc:
            optional = [k for k in OPTIONAL_NEURON_CONFIG if k in args]
            # the parameter the message names, else the newest optional one still passed
            name = next((k for k in optional if k in str(exc)), optional[-1] if optional else None)
            if name is None:
                raise
            args.pop(name)
            dropped.append(f"{name}: {exc}")
            warnings.warn(
                f"NeuronConfig refused {name} ({exc}); capturing without it", stacklevel=2
            )


def schema_dump(out: Path) -> dict[str, Any]:
    """Save ``neuron-explorer view --show-profile-schema`` (or the pre-2.33 top-level flag) to
    ``out``; say what was done. Nothing is written when the tool is missing or fails."""
    from nprof_report.parse import find_tool

    tool = find_tool()
    if tool is None:
        return {"file": None, "note": "neuron-explorer not found"}
    problems = []
    for args in SCHEMA_COMMANDS:
        cmd = [tool, *args]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            problems.append(f"{' '.join(args)}: {exc}")
            continue
        if done.returncode == 0 and done.stdout.strip():
            out.write_text(done.stdout, encoding="utf-8")
            return {"file": out.name, "command": ["neuron-explorer", *args]}
        problems.append(f"{' '.join(args)}: exit {done.returncode}")
    return {"file": None, "note": "; ".join(problems)}


def select_backend(name: str) -> Backend:
    """Resolve ``auto`` (neuron, then cuda, then cpu) and build the backend."""
    import torch

    if name not in BACKENDS:
        raise CaptureError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    if name in ("auto", "neuron") and _neuron_installed():
        neff_cache_dir()  # exported before torch_neuronx is imported, so that it caches there
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

    settings: dict[str, Any] = {}

    def neuron_kwargs(bundle: Path) -> dict[str, Any]:
        requested: dict[str, Any] = {
            "modes": [profiling.ProfileMode.DEVICE, profiling.ProfileMode.RUNTIME],
            "profile_output_dir": str(bundle),
            "capture_enabled_for_nc": "0",
            "correlate_device_time": True,
            "neff_cache_dir": neff_cache_dir(),
        }
        nc, dropped = build_neuron_config(profiling.NeuronConfig, requested)
        refused = {d.split(":", 1)[0] for d in dropped}
        settings["correlate_device_time"] = "correlate_device_time" not in refused
        settings["neff_cache_dir"] = (
            None if "neff_cache_dir" in refused else requested["neff_cache_dir"]
        )
        settings["neuron_config_dropped"] = dropped
        record = {
            "format": "nprof-neuron-capture",
            "neuron_config": {
                "passed": {k: str(v) for k, v in requested.items() if k not in refused},
                "dropped": dropped,
            },
            "environment": {
                k: v
                for k, v in sorted(os.environ.items())
                if k.startswith(INSPECT_PREFIX) or k == NEFF_CACHE_VAR
            },
            "profile_schema": schema_dump(bundle / SCHEMA_DUMP),
        }
        (bundle / CAPTURE_RECORD).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
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
        profiler_settings=settings,
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

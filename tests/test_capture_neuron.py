"""The Neuron capture path, driven by a stand-in torch_neuronx that records the calls it receives.

torch-neuronx cannot be installed here (its public package is a placeholder), so this checks the
calls our code makes against the documented API (formats.md 2.1): activities, NeuronConfig
arguments, on_trace_ready, and torch.neuron.synchronize() once per step before prof.step().
The tensors stay on the CPU: device placement on a NeuronCore is not exercised.
"""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from nprof_report.bundle import read_manifest
from tests.neuron_standin import stand_in

pytestmark = pytest.mark.capture


def _stand_in(calls: list[tuple[str, Any]], refuse: tuple[str, ...] = ()) -> types.ModuleType:
    """The stand-in, writing the profiler's own trace into a session folder as NeuronProfiler
    lays it out (``<instance>_pid_<pid>/<timestamp>/trace.json``)."""

    def export(out: Path, prof: Any) -> None:
        session = out / "i-standin_pid_1" / "20261130_000000_000"
        session.mkdir(parents=True)
        prof.export_chrome_trace(str(session / "trace.json"))
        calls.append(("export_trace", str(session)))

    return stand_in(export, calls, refuse)


def _fake_explorer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A neuron-explorer on PATH that prints a schema for ``view --show-profile-schema`` only."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "neuron-explorer"
    tool.write_text(
        '#!/bin/sh\nif [ "$1" = view ] && [ "$2" = --show-profile-schema ]; then\n'
        "  echo 'openapi: 3.0.3'; echo 'info: {version: 12.0.1}'; exit 0\nfi\nexit 2\n"
    )
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def _capture(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refuse: tuple[str, ...] = ()
) -> tuple[Path, list[tuple[str, Any]]]:
    import torch
    import torch.profiler

    from nprof_report.capture import backends
    from nprof_report.capture.session import CaptureOptions, run_capture

    calls: list[tuple[str, Any]] = []
    module = _stand_in(calls, refuse)
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
    monkeypatch.setenv("NEURON_RT_INSPECT_DEVICE_PROFILE_NUM_WARMUP", "2")
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "neff-cache"))
    run = run_capture(
        CaptureOptions(
            out=tmp_path / "runs",
            backend="auto",
            active=2,
            timing_seconds=0.05,
            implementations=("naive",),
        )
    )
    return run, calls


def test_neuron_path_makes_the_documented_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    _fake_explorer(tmp_path, monkeypatch)
    run, calls = _capture(tmp_path, monkeypatch)
    manifest = read_manifest(run)
    assert manifest.backend == "neuron"
    assert manifest.profiler["activities"] == ["CPU", "PrivateUse1"]
    config = next(kw for name, kw in calls if name == "NeuronConfig")
    assert config["profile_output_dir"] == str(run / "naive")
    assert config["capture_enabled_for_nc"] == "0"
    assert config["modes"] == ["DEVICE", "RUNTIME"]
    # as the TorchNeuron profiling article captures (formats.md §2.3, §9.1, §9.4)
    assert config["correlate_device_time"] is True
    assert config["neff_cache_dir"] == str(tmp_path / "neff-cache")
    assert manifest.profiler["correlate_device_time"] is True
    assert manifest.profiler["record_shapes"] is False
    assert manifest.profiler["neuron_config_dropped"] == []
    record = json.loads((run / "naive" / "neuron-capture.json").read_text())
    assert record["environment"]["NEURON_RT_INSPECT_DEVICE_PROFILE_NUM_WARMUP"] == "2"
    assert record["neuron_config"]["dropped"] == []
    assert record["profile_schema"]["command"] == [
        "neuron-explorer",
        "view",
        "--show-profile-schema",
    ]
    assert "12.0.1" in (run / "naive" / "neuron-profile-schema.yaml").read_text()
    roles = {f.path: f.role for f in manifest.files}
    assert roles["naive/neuron-capture.json"] == "neuron-capture-record"
    assert roles["naive/neuron-profile-schema.yaml"] == "neuron-profile-schema"
    prof_kwargs = next(kw for name, kw in calls if name == "profile")
    assert prof_kwargs["activities"] == [
        torch.profiler.ProfilerActivity.CPU,
        torch.profiler.ProfilerActivity.PrivateUse1,
    ]
    assert prof_kwargs["experimental_config"].kwargs is config
    assert prof_kwargs["record_shapes"] is False
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


def test_refused_neuron_config_parameter_is_dropped_warned_and_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("nprof_report.parse.neuron.convert.FALLBACK_TOOL_DIRS", ())
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # no neuron-explorer
    with pytest.warns(UserWarning, match="NeuronConfig refused correlate_device_time"):
        run, calls = _capture(tmp_path, monkeypatch, refuse=("correlate_device_time",))
    manifest = read_manifest(run)
    assert manifest.implementations[0].status == "ok"
    config = next(kw for name, kw in calls if name == "NeuronConfig")
    assert "correlate_device_time" not in config and config["neff_cache_dir"]
    assert manifest.profiler["correlate_device_time"] is False
    (dropped,) = manifest.profiler["neuron_config_dropped"]
    assert dropped.startswith("correlate_device_time: ") and "unexpected keyword" in dropped
    record = json.loads((run / "naive" / "neuron-capture.json").read_text())
    assert record["neuron_config"]["dropped"] == [dropped]
    assert record["profile_schema"] == {"file": None, "note": "neuron-explorer not found"}
    assert not (run / "naive" / "neuron-profile-schema.yaml").exists()


def test_neuron_config_refusing_everything_optional_still_captures() -> None:
    from nprof_report.capture.backends import build_neuron_config

    seen: list[dict[str, Any]] = []

    def old_config(**kwargs: Any) -> dict[str, Any]:
        seen.append(kwargs)
        if set(kwargs) - {"modes", "profile_output_dir"}:
            raise TypeError("incompatible constructor arguments")  # names no parameter
        return kwargs

    with pytest.warns(UserWarning, match="NeuronConfig refused"):
        config, dropped = build_neuron_config(
            old_config,
            {
                "modes": [],
                "profile_output_dir": "x",
                "correlate_device_time": True,
                "neff_cache_dir": "c",
            },
        )
    assert config == {"modes": [], "profile_output_dir": "x"}
    assert [d.split(":")[0] for d in dropped] == ["neff_cache_dir", "correlate_device_time"]
    with pytest.raises(TypeError):  # a required parameter refused is not hidden
        build_neuron_config(old_config, {"modes": [], "profile_output_dir": "x", "extra": 1})


def test_neuron_backend_without_torch_neuronx_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from nprof_report.capture.backends import select_backend
    from nprof_report.errors import CaptureError

    monkeypatch.setitem(sys.modules, "torch_neuronx", None)
    with pytest.raises(CaptureError, match="torch_neuronx cannot be imported"):
        select_backend("neuron")

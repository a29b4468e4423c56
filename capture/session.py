"""Run the study: one profiled bundle and one un-profiled timing per implementation.

The run folder is created new (never reused); ``manifest.json`` is rewritten atomically after
each implementation, so a capture that is interrupted or fails half-way keeps the bundles already
written and says in the manifest what failed.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import socket
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from nprof_report import __version__
from nprof_report.bundle import (
    MANIFEST_NAME,
    Implementation,
    Manifest,
    Timing,
    file_entries,
    write_atomic,
)
from nprof_report.capture.backends import Backend, relevant_environment, select_backend, versions
from nprof_report.capture.workload import (
    DESCRIPTIONS,
    IMPLEMENTATIONS,
    Workload,
    make_function,
    make_inputs,
)
from nprof_report.errors import CaptureError
from nprof_report.parse.neuron.convert import convert_tree

FILE_ROLES = {
    "trace.json": "kineto-trace",
    ".pt.trace.json": "kineto-trace",
    ".json.gz": "kineto-trace",
    ".neff": "neff",
    ".ntff": "ntff",
    "ntrace.pb": "neuron-system-trace",
    "trace_info.pb": "neuron-system-trace-info",
    ".parquet": "neuron-explorer-table",
    "neuron-capture.json": "neuron-capture-record",  # capture/backends.py
    "neuron-profile-schema.yaml": "neuron-profile-schema",
}


@dataclass(frozen=True)
class CaptureOptions:
    """What ``nprof-report capture`` was asked to do."""

    out: Path
    backend: str = "auto"
    shape: tuple[int, ...] = (4, 512)
    dtype: str = "bfloat16"
    wait: int = 2
    warmup: int = 1
    active: int = 8
    implementations: tuple[str, ...] = IMPLEMENTATIONS
    record_shapes: bool = False  # as the TorchNeuron profiling article captures (--record-shapes)
    timing_seconds: float = 0.5
    command: tuple[str, ...] = ()


def new_run_dir(parent: Path, backend: str) -> Path:
    """Create ``<parent>/<UTC time>-<backend>[-n]``; an existing folder is never reused."""
    parent.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    for n in range(1, 1000):
        candidate = parent / (f"{stamp}-{backend}" + ("" if n == 1 else f"-{n}"))
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise CaptureError(f"{parent}: could not create a new run folder")


def run_capture(options: CaptureOptions, console: Console | None = None) -> Path:
    """Capture every implementation; return the run folder."""
    import torch

    if options.active < 1 or options.wait < 0 or options.warmup < 0:
        raise CaptureError("schedule: --active must be >= 1, wait and warmup >= 0")
    if not hasattr(torch, options.dtype) or not isinstance(
        getattr(torch, options.dtype), torch.dtype
    ):
        raise CaptureError(f"--dtype {options.dtype!r} is not a torch dtype")
    console = console or Console(stderr=True)
    backend = select_backend(options.backend)
    workload = Workload(shape=options.shape, dtype=options.dtype)
    run_dir = new_run_dir(options.out, backend.name)
    manifest = Manifest(
        run_id=run_dir.name,
        created_utc=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        command=list(options.command) or sys.argv,
        backend=backend.name,
        device=backend.description,
        host={
            "hostname": socket.gethostname(),
            "platform": platform.platform(),
            "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
        },
        versions=versions(),
        workload=workload.describe(),
        schedule={
            "wait": options.wait,
            "warmup": options.warmup,
            "active": options.active,
            "repeat": 1,
        },
        profiler={
            "activities": list(backend.activity_names),
            "record_shapes": options.record_shapes,
            "synchronize_before_step": True,
        },
        environment=relevant_environment(),
        tool_version=__version__,
    )
    results: list[Implementation] = []

    def save(pending: list[Implementation]) -> None:
        # the backend's profiler settings (Neuron: NeuronConfig arguments passed or dropped)
        profiler = {**manifest.profiler, **backend.profiler_settings}
        done = replace(manifest, profiler=profiler, implementations=results + pending)
        files = file_entries(run_dir, FILE_ROLES)
        write_atomic(run_dir / MANIFEST_NAME, replace(done, files=files).to_json())

    save([])
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        for name in options.implementations:
            task = progress.add_task(f"{name}: compile and warm up", total=4)
            try:
                results.append(
                    _capture_one(name, backend, workload, options, run_dir, progress, task)
                )
            except KeyboardInterrupt:
                results.append(
                    Implementation(
                        name,
                        DESCRIPTIONS[name],
                        "interrupted",
                        error="interrupted by the user (Ctrl-C)",
                    )
                )
                rest = options.implementations[len(results) :]
                save([Implementation(n, DESCRIPTIONS[n], "not run") for n in rest])
                raise
            except Exception as exc:  # one failed implementation must not lose the others
                results.append(
                    Implementation(
                        name, DESCRIPTIONS[name], "failed", error=f"{type(exc).__name__}: {exc}"
                    )
                )
                progress.update(task, description=f"{name}: FAILED ({type(exc).__name__})")
            save([])
    return run_dir


def _capture_one(
    name: str,
    backend: Backend,
    workload: Workload,
    options: CaptureOptions,
    run_dir: Path,
    progress: Progress,
    task: Any,
) -> Implementation:
    from torch.profiler import profile, schedule

    bundle = run_dir / name
    bundle.mkdir()
    fn = make_function(name, workload, compile_backend=backend.compile_backend)
    x, weight = make_inputs(workload, backend.device)
    t0 = time.perf_counter()
    fn(x, weight)  # compilation (torch.compile, Neuron NEFFs) happens here, outside the profile
    backend.synchronize()
    first_call_s = time.perf_counter() - t0
    for _ in range(3):
        fn(x, weight)
    backend.synchronize()
    progress.update(task, advance=1, description=f"{name}: profile")

    kwargs = backend.profiler_kwargs(bundle)
    trace_path = bundle / "trace.json"
    kwargs.setdefault("on_trace_ready", lambda p: p.export_chrome_trace(str(trace_path)))
    steps = options.wait + options.warmup + options.active
    with profile(
        schedule=schedule(
            wait=options.wait, warmup=options.warmup, active=options.active, repeat=1
        ),
        record_shapes=options.record_shapes,
        **kwargs,
    ) as prof:
        for _ in range(steps):
            fn(x, weight)
            backend.synchronize()
            prof.step()
    progress.update(task, advance=1, description=f"{name}: time without the profiler")

    timing = _time_unprofiled(fn, x, weight, backend, options.timing_seconds)
    progress.update(task, advance=1, description=f"{name}: write bundle")
    if backend.name == "neuron":
        progress.update(task, description=f"{name}: convert the Neuron traces (neuron-explorer)")
        for result in convert_tree(bundle):
            if not result.ok:
                progress.console.print(f"[yellow]{result.message}[/yellow]")
    traces = sorted(
        p
        for p in bundle.rglob("*.json")
        if p.name.endswith("trace.json") or p.name.startswith("neuron_framework_trace_rank_")
    )
    if not traces:
        raise CaptureError(f"{bundle}: the profiler wrote no trace.json")
    progress.update(task, advance=1, description=f"{name}: done")
    return Implementation(
        name=name,
        description=DESCRIPTIONS[name],
        status="ok",
        bundle=name,
        trace=traces[0].relative_to(run_dir).as_posix(),
        first_call_s=round(first_call_s, 6),
        unprofiled=timing,
    )


def _time_unprofiled(fn: Any, x: Any, weight: Any, backend: Backend, seconds: float) -> Timing:
    """Median wall time of one call plus synchronisation, with ``torch.utils.benchmark``."""
    from torch.utils.benchmark import Timer

    sync = backend.synchronize
    timer = Timer(
        stmt="fn(x, weight); sync()", globals={"fn": fn, "x": x, "weight": weight, "sync": sync}
    )
    m = timer.blocked_autorange(min_run_time=seconds)
    return Timing(
        median_us=round(m.median * 1e6, 4),
        iqr_us=round(m.iqr * 1e6, 4),
        mean_us=round(m.mean * 1e6, 4),
        runs=len(m.times),
        calls_per_run=int(m.number_per_run),
    )

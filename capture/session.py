"""Run a study: for every size, one profiled bundle and one un-profiled timing per implementation.

The run folder is created new (never reused); ``manifest.json`` is rewritten atomically after
each implementation, so a capture that is interrupted or fails half-way keeps the bundles already
written and says in the manifest what failed. An implementation that raises at one size is
recorded as failed there and the others go on; so do the other sizes when the study's input
builder raises at one of them (at the first size it is the study's error: exit code 2, nothing
written).
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from nprof_report import __version__
from nprof_report.bundle import (
    FORMAT_MINOR,
    MANIFEST_NAME,
    Implementation,
    Manifest,
    NumericalCheck,
    Timing,
    elements,
    file_entries,
    size_folder,
    size_label,
    write_atomic,
)
from nprof_report.capture import study as study_api
from nprof_report.capture.backends import Backend, relevant_environment, select_backend, versions
from nprof_report.capture.hardware import hardware_record
from nprof_report.capture.numerics import compare_outputs
from nprof_report.capture.study import Size, Study
from nprof_report.errors import CaptureError, InputError
from nprof_report.parse import convert_tree

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
    """What ``nprof-report capture`` was asked to do; empty or None fields take the study's."""

    out: Path
    study: str | None = None  # path.py[:NAME] or module:NAME; None: the built-in RMSNorm study
    backend: str = "auto"
    sizes: tuple[Size, ...] = ()
    dtype: str | None = None
    wait: int = 2
    warmup: int = 1
    active: int = 8
    implementations: tuple[str, ...] = ()
    record_shapes: bool = False  # as the TorchNeuron profiling article captures (--record-shapes)
    timing_seconds: float = 0.5
    command: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Plan:
    """The study resolved against the options: what will run, in which order."""

    study: Study
    source: str
    implementations: list[study_api.Implementation]
    sizes: list[Size]
    dtype: str
    work: list[dict[str, Any]]  # the declared bytes and FLOPs per size; empty if none declared

    def bundle(self, size: Size, name: str) -> str:
        """``naive`` in a run of one size, ``64x4096/naive`` in a sweep."""
        return name if len(self.sizes) == 1 else f"{size_folder(size)}/{name}"

    def tag(self, size: Size, name: str) -> str:
        """How progress names an implementation: ``naive``, or ``64×4096 naive`` in a sweep."""
        return name if len(self.sizes) == 1 else f"{size_label(size)} {name}"


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


def _plan(options: CaptureOptions, study: Study | None) -> _Plan:
    import torch

    if options.active < 1 or options.wait < 0 or options.warmup < 0:
        raise CaptureError("schedule: --active must be >= 1, wait and warmup >= 0")
    if study is None:
        study, source = study_api.load_study(options.study)
    else:
        source = options.study or f"<{study.name}>"
    dtype = options.dtype or study.dtype
    if not isinstance(getattr(torch, dtype, None), torch.dtype):
        raise CaptureError(f"--dtype {dtype!r} is not a torch dtype")
    by_name = {i.name: i for i in study.implementations}
    unknown = [n for n in options.implementations if n not in by_name]
    if unknown:
        raise CaptureError(
            f"--impl {unknown[0]!r}: the {study.name} study has {', '.join(by_name)}"
        )
    picked = list(dict.fromkeys(options.implementations)) or list(by_name)
    sizes = sorted(dict.fromkeys(options.sizes or tuple(study.sizes)), key=elements)
    return _Plan(
        study,
        source,
        [by_name[n] for n in picked],
        sizes,
        dtype,
        _work(study, source, sizes, dtype),
    )


def _work(study: Study, source: str, sizes: list[Size], dtype: str) -> list[dict[str, Any]]:
    """The study's ``bytes_moved`` and ``flops`` at every size, checked before anything runs."""
    out = []
    for size in sizes:
        try:
            work = study.work(size, dtype)
        except Exception as exc:  # the study's own functions: its error, exit code 2
            where = study_api.study_file(source) or source
            raise InputError(
                where, f"declared work: {study_api.describe_error(exc, source)}"
            ) from exc
        if work is not None:
            out.append({"size": list(size), **work})
    return out


def run_capture(
    options: CaptureOptions, console: Console | None = None, *, study: Study | None = None
) -> Path:
    """Capture every implementation at every size; return the run folder.

    ``study`` overrides ``options.study`` (a :class:`Study` built in Python, for tests and
    notebooks).
    """
    import torch

    plan = _plan(options, study)
    console = console or Console(stderr=True)
    backend = select_backend(options.backend)
    dtype = getattr(torch, plan.dtype)
    first_inputs = _build_inputs(plan, plan.sizes[0], dtype, backend)
    if isinstance(first_inputs, Exception):  # before anything is written: the study's error
        raise InputError(study_api.study_file(plan.source) or plan.source, first_inputs.args[0])
    run_dir = new_run_dir(options.out, backend.name)
    manifest = _manifest(plan, options, backend, run_dir)
    results: list[Implementation] = []

    def save(pending: list[Implementation]) -> None:
        # the backend's profiler settings (Neuron: NeuronConfig arguments passed or dropped)
        profiler = {**manifest.profiler, **backend.profiler_settings}
        done = replace(manifest, profiler=profiler, implementations=results + pending)
        files = file_entries(run_dir, FILE_ROLES)
        write_atomic(run_dir / MANIFEST_NAME, replace(done, files=files).to_json())

    def record(
        impl: study_api.Implementation, size: Size, status: str, **kw: Any
    ) -> Implementation:
        return Implementation(impl.name, impl.description, status, size=list(size), **kw)

    save([])
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
    )
    todo = [(size, impl) for size in plan.sizes for impl in plan.implementations]
    with Progress(*columns, console=console, transient=False) as progress:
        inputs: Any = first_inputs
        reference: Any = _NoReference("no reference output yet")
        for n, (size, impl) in enumerate(todo):
            tag = plan.tag(size, impl.name)
            task = progress.add_task(f"{tag}: compile and warm up", total=4)
            try:
                if impl is plan.implementations[0]:  # a new size
                    if n:
                        inputs = _build_inputs(plan, size, dtype, backend)
                    reference = _NoReference(f"the reference {impl.name} failed at this size")
                if isinstance(inputs, Exception):
                    results.append(record(impl, size, "failed", error=inputs.args[0]))
                    progress.update(task, description=f"{tag}: FAILED (make_inputs)")
                else:
                    done, output = _capture_one(
                        plan,
                        impl,
                        size,
                        inputs,
                        reference,
                        backend,
                        options,
                        run_dir,
                        progress,
                        task,
                    )
                    results.append(done)
                    if impl is plan.implementations[0]:
                        reference = output
                    del output
            except KeyboardInterrupt:
                results.append(
                    record(impl, size, "interrupted", error="interrupted by the user (Ctrl-C)")
                )
                save([record(i, s, "not run") for s, i in todo[n + 1 :]])
                raise
            except Exception as exc:  # one failed implementation must not lose the others
                error = study_api.describe_error(exc, plan.source)
                results.append(record(impl, size, "failed", error=error))
                progress.update(task, description=f"{tag}: FAILED ({type(exc).__name__})")
            save([])
    return run_dir


class _NoReference:
    """Stands for the reference output when there is none to compare with."""

    def __init__(self, why: str) -> None:
        self.why = why


def _build_inputs(plan: _Plan, size: Size, dtype: Any, backend: Backend) -> Any:
    """The study's inputs for ``size``, or the exception (with a message) its builder raised."""
    import torch

    torch.manual_seed(plan.study.seed)
    try:
        built = plan.study.make_inputs(size, dtype, backend.device)
    except Exception as exc:
        where = study_api.describe_error(exc, plan.source)
        return RuntimeError(f"make_inputs raised {where} for size {size_label(size)}")
    return built if isinstance(built, tuple) else (built,)


def _manifest(plan: _Plan, options: CaptureOptions, backend: Backend, run_dir: Path) -> Manifest:
    tolerance = plan.study.tolerance_for(plan.dtype)
    workload: dict[str, Any] = {
        "name": plan.study.name,
        "study": plan.source,
        "sizes": [list(s) for s in plan.sizes],
        "dtype": plan.dtype,
        "seed": plan.study.seed,
        "input": plan.study.inputs,
        "parameters": dict(plan.study.parameters),
        "tolerance": asdict(tolerance),
        "reference": plan.implementations[0].name,
    }
    if plan.work:
        workload["work"] = plan.work
    if len(plan.sizes) == 1:
        workload["shape"] = list(plan.sizes[0])
    return Manifest(
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
        workload=workload,
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
        hardware=hardware_record(backend.name),
        format_minor=FORMAT_MINOR,
        tool_version=__version__,
    )


def prepare(impl: study_api.Implementation, compile_backend: str | None) -> Callable[..., Any]:
    """The callable that is timed: ``impl.fn``, or a fresh ``torch.compile`` of it.

    ``torch.compiler.reset()`` first, so that each size compiles as it would alone (without it,
    the second size would recompile with dynamic shapes).
    """
    if not impl.compile:
        return impl.fn
    import torch

    torch.compiler.reset()
    kwargs: dict[str, Any] = {}
    if compile_backend is not None:
        kwargs["backend"] = compile_backend
    if impl.compile_mode is not None:
        kwargs["mode"] = impl.compile_mode
    return torch.compile(impl.fn, **kwargs)


def _capture_one(
    plan: _Plan,
    impl: study_api.Implementation,
    size: Size,
    inputs: tuple[Any, ...],
    reference: Any,
    backend: Backend,
    options: CaptureOptions,
    run_dir: Path,
    progress: Progress,
    task: Any,
) -> tuple[Implementation, Any]:
    from torch.profiler import profile, schedule

    name = plan.bundle(size, impl.name)
    tag = plan.tag(size, impl.name)
    bundle = run_dir / name
    bundle.mkdir(parents=True)
    fn = prepare(impl, backend.compile_backend)
    t0 = time.perf_counter()
    output = fn(*inputs)  # compilation (torch.compile, Neuron NEFFs) happens here, not profiled
    backend.synchronize()
    first_call_s = time.perf_counter() - t0
    check = _check(plan, impl, output, reference)
    for _ in range(3):
        fn(*inputs)
    backend.synchronize()
    progress.update(task, advance=1, description=f"{tag}: profile")

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
            fn(*inputs)
            backend.synchronize()
            prof.step()
    progress.update(task, advance=1, description=f"{tag}: time without the profiler")

    timing = _time_unprofiled(fn, inputs, backend, options.timing_seconds)
    progress.update(task, advance=1, description=f"{tag}: write bundle")
    if backend.name == "neuron":
        progress.update(task, description=f"{tag}: convert the Neuron traces (neuron-explorer)")
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
    mark = "" if check.status in ("pass", "reference") else f" (numerical check: {check.status})"
    progress.update(task, advance=1, description=f"{tag}: done{mark}")
    done = Implementation(
        name=impl.name,
        description=impl.description,
        status="ok",
        bundle=name,
        trace=traces[0].relative_to(run_dir).as_posix(),
        first_call_s=round(first_call_s, 6),
        unprofiled=timing,
        size=list(size),
        check=check,
    )
    return done, output


def _check(
    plan: _Plan, impl: study_api.Implementation, output: Any, reference: Any
) -> NumericalCheck:
    ref_name = plan.implementations[0].name
    if impl is plan.implementations[0]:
        return NumericalCheck(ref_name, "reference")
    if isinstance(reference, _NoReference):
        return NumericalCheck(ref_name, "not compared", note=reference.why)
    return compare_outputs(output, reference, ref_name, plan.study.tolerance_for(plan.dtype))


def _time_unprofiled(
    fn: Callable[..., Any], inputs: tuple[Any, ...], backend: Backend, seconds: float
) -> Timing:
    """Median wall time of one call plus synchronisation, with ``torch.utils.benchmark``."""
    from torch.utils.benchmark import Timer

    sync = backend.synchronize
    timer = Timer(stmt="fn(*args); sync()", globals={"fn": fn, "args": inputs, "sync": sync})
    m = timer.blocked_autorange(min_run_time=seconds)
    return Timing(
        median_us=round(m.median * 1e6, 4),
        iqr_us=round(m.iqr * 1e6, 4),
        mean_us=round(m.mean * 1e6, 4),
        runs=len(m.times),
        calls_per_run=int(m.number_per_run),
    )

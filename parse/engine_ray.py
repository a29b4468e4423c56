"""The Ray engine: each source's job runs in a Ray task on a cluster (``--ray [ADDRESS]``).

The only module that imports Ray; it is imported only when ``--ray`` is given (``pip install
'nprof-report[ray]'``). A job is a function of a source and its :class:`~.sources.LoadedSource`
(``report.jobs``), the same one the local pool runs in the parent: the engine only decides where
it runs.

* A task receives the source (its paths), not the file's bytes: it opens the trace itself, so the
  paths must be readable at the same place on every worker (a shared filesystem). It parses into
  the frame cache (:mod:`.cache`, Parquet; ``NPROF_CACHE_DIR`` on shared storage keeps the entries
  for the next build) and returns only what the job returns, the per-rank aggregates.
* Each task declares one CPU (a large trace is decoded by that many processes,
  ``NPROF_DECODE_WORKERS`` unless the driver sets it) and, as ``memory``, the estimate the local
  scheduler uses (:func:`~.parallel.estimated_peak` of :func:`~.parallel.uncompressed_size`), so
  Ray never starts more parses on a node than its memory holds. An estimate above the largest
  node's memory is declared as that node's memory (the task then runs alone there) and said in a
  note.
* A task whose worker dies (killed for memory, node lost) is retried :data:`RETRIES` times by Ray;
  a bad trace is an :class:`~nprof_report.errors.InputError`, returned as a value and never
  retried. A task that fails for good becomes an InputError naming the rank's file.
* ``local`` starts a Ray instance on this machine (``--jobs`` CPUs, default all) and stops it at
  the end; ``auto`` (``--ray`` without an address) joins the cluster ``ray start`` or
  ``RAY_ADDRESS`` points at; any other address is handed to ``ray.init``. When Ray is already
  initialised in this process (tests), that cluster is used as it is.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from nprof_report.errors import EngineError, InputError
from nprof_report.parse.inputs import Source
from nprof_report.parse.parallel import estimated_peak, uncompressed_size
from nprof_report.parse.read.workerpool import DECODE_WORKERS_ENV
from nprof_report.parse.sources import LoadedSource, load_source
from nprof_report.quiet import adopted

try:
    import ray
    from ray.exceptions import RayError, RayTaskError
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise EngineError(
        "--ray needs Ray, which is not installed; pip install 'nprof-report[ray]'"
    ) from exc

T = TypeVar("T")

RETRIES = 2
TASK_CPUS = 1
# what a task's process needs of the driver's environment: where the cache is, whether it is on,
# how many processes decode a large trace (default: the task's CPUs, not the node's)
ENV_KEYS = ("NPROF_CACHE_DIR", "NPROF_NO_CACHE", "XDG_CACHE_HOME", DECODE_WORKERS_ENV)


@dataclass(frozen=True)
class _Failed:
    """An InputError on its way back from a task (see :class:`.parallel._Failed`)."""

    kind: type[InputError]
    path: str
    problem: str
    hint: str | None


def _task(
    job: Callable[[Source, LoadedSource], Any],
    source: Source,
    use_cache: bool,
    env: dict[str, str | None],
    step_annotation: str | None = None,
) -> Any:
    """In a Ray worker: the driver's cache settings, then parse and aggregate."""
    wanted = {DECODE_WORKERS_ENV: str(TASK_CPUS)} | {k: v for k, v in env.items() if v}
    for key in ENV_KEYS:
        value = wanted.get(key)
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    try:
        loaded = load_source(source, use_cache=use_cache, step_annotation=step_annotation)
    except InputError as exc:
        return _Failed(type(exc), str(exc.path), exc.problem, exc.hint)
    return job(source, loaded)


def _connect(address: str, cpus: int | None) -> bool:
    """Join or start the cluster; True when this call started it (and so stops it)."""
    if ray.is_initialized():
        return False
    options: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": False,
        "configure_logging": False,
    }
    try:
        if address == "local":
            ray.init(num_cpus=cpus or os.cpu_count() or 1, **options)
        else:
            ray.init(address=address, **options)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise EngineError(f"cannot reach the Ray cluster at {address!r}: {exc}") from exc
    return True


def _largest_node_memory() -> int:
    alive = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call,unused-ignore]
    return int(max((n["Resources"].get("memory", 0) for n in alive), default=0))


def _declared_memory(source: Source, cap: int, notes: list[str]) -> int:
    if source.trace is None:
        return estimated_peak(0)
    try:
        peak = estimated_peak(uncompressed_size(source.trace))
    except OSError:  # the task meets (and names) the problem
        return estimated_peak(0)
    if cap and peak > cap:
        notes.append(
            f"{source.trace}: its parse is estimated at {peak >> 20} MiB, more than the largest "
            f"Ray node offers ({cap >> 20} MiB); declared as {cap >> 20} MiB"
        )
        return cap
    return peak


def run_on_ray(
    job: Callable[[Source, LoadedSource], T],
    sources: Sequence[Source],
    *,
    address: str,
    use_cache: bool = True,
    cpus: int | None = None,
    keep_going: bool = False,
    step_annotation: str | None = None,
) -> tuple[list[T | InputError], list[str]]:
    """``job(source, loaded)`` of every source in a Ray task; results in source order (an
    InputError where a source failed), and notes for the report's caveats. ``step_annotation``
    as in :func:`~.sources.load_source`.

    Without ``keep_going`` the first failure in source order is raised and the other tasks are
    cancelled.
    """
    # quietly: Ray's log records (its token-authentication banner) become our notes
    with adopted("ray"):
        return _run(job, sources, address, use_cache, cpus, keep_going, step_annotation)


def _run(
    job: Callable[[Source, LoadedSource], T],
    sources: Sequence[Source],
    address: str,
    use_cache: bool,
    cpus: int | None,
    keep_going: bool,
    step_annotation: str | None,
) -> tuple[list[T | InputError], list[str]]:
    started = _connect(address, cpus)
    try:
        notes: list[str] = []
        cap = _largest_node_memory()
        env = {k: os.environ.get(k) for k in ENV_KEYS}
        if not use_cache:
            env["NPROF_NO_CACHE"] = "1"
        remote = ray.remote(num_cpus=TASK_CPUS, max_retries=RETRIES)(_task)
        memory = {i: _declared_memory(s, cap, notes) for i, s in enumerate(sources)}
        refs: dict[int, Any] = {}
        for i in sorted(memory, key=lambda i: (-memory[i], i)):  # largest first packs best
            refs[i] = remote.options(memory=memory[i]).remote(
                job, sources[i], use_cache, env, step_annotation
            )
        out: list[T | InputError] = []
        for i, source in enumerate(sources):
            result = _outcome(refs[i], source)
            if isinstance(result, InputError) and not keep_going:
                for ref in refs.values():
                    ray.cancel(ref)
                raise result
            out.append(result)
        return out, notes
    finally:
        if started:
            ray.shutdown()


def _outcome(ref: Any, source: Source) -> Any:
    """The task's result, or the InputError that names the source's file."""
    path = source.trace if source.trace is not None else source.folder
    try:
        result = ray.get(ref)
    except RayTaskError as exc:  # the job raised: our defect, named by file and exception
        cause = exc.cause if exc.cause is not None else exc
        return InputError(
            path, f"its job failed on the Ray cluster ({type(cause).__name__}: {cause})"
        )
    except RayError as exc:  # the worker or its node died, and the retries too
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return InputError(
            path,
            f"its task failed on the Ray cluster after {1 + RETRIES} attempts "
            f"({type(exc).__name__}: {first})",
        )
    if isinstance(result, _Failed):
        return result.kind(result.path, result.problem, result.hint)
    return result

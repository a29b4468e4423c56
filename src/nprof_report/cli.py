"""The ``nprof-report`` command: a thin layer over the library.

Every command turns :class:`~nprof_report.errors.NprofError` into one line on stderr and exit
code 2; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from pathlib import Path

import click

from nprof_report import __version__
from nprof_report.errors import NprofError
from nprof_report.parse.workerpool import prestart

# what ``ops`` and ``build`` return: they only read and write files (no threads or processes of
# theirs are left running), so :func:`main` may end the process without the teardown; ``capture``
# runs torch, whose threads and exit handlers get the usual shutdown
LEAVE_FAST = "leave fast"


def _shape(value: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(v) for v in value.lower().replace("x", ",").split(",") if v.strip())
    except ValueError as exc:
        raise click.BadParameter(f"{value!r} is not a shape like 4,512") from exc
    if not dims or any(d <= 0 for d in dims):
        raise click.BadParameter(f"{value!r} is not a shape like 4,512")
    return dims


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nprof-report")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Turn PyTorch profiler captures into design-review evidence (HTML, PDF, CSV, JSON)."""
    ctx.obj = {"debug": debug}


@cli.command()
@click.option(
    "--backend",
    type=click.Choice(["auto", "neuron", "cuda", "cpu"]),
    default="auto",
    show_default=True,
    help="auto picks neuron, then cuda, then cpu.",
)
@click.option("--shape", default="4,512", show_default=True, help="Input shape of x.")
@click.option("--dtype", default="bfloat16", show_default=True, help="torch dtype of x and weight.")
@click.option(
    "--active",
    type=int,
    default=8,
    show_default=True,
    help="Profiled steps (schedule wait=2, warmup=1, then these).",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=Path("nprof-runs"),
    show_default=True,
    help="Parent folder of the new run folder.",
)
@click.option(
    "--impl",
    "impls",
    multiple=True,
    type=click.Choice(["naive", "fused", "compiled"]),
    help="Implementations to run (default: all three).",
)
def capture(
    backend: str, shape: str, dtype: str, active: int, out: Path, impls: tuple[str, ...]
) -> None:
    """Profile the RMSNorm study (naive, fused, compiled) and write a new run folder.

    The last line printed on standard output is the run folder's path.
    """
    from nprof_report.capture.session import CaptureOptions, run_capture

    options = CaptureOptions(
        out=out,
        backend=backend,
        shape=_shape(shape),
        dtype=dtype,
        active=active,
        implementations=impls or ("naive", "fused", "compiled"),
        command=("nprof-report", *sys.argv[1:]),
    )
    run_dir = run_capture(options)
    click.echo(str(run_dir))


_jobs = click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Traces parsed at once, in worker processes, within 75 % of available memory "
    "[default: the CPU count, once the traces to parse hold 256 MiB].",
)


def _ray_address(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``local``, ``auto``, ``ray://…`` or ``host:port``; a path given right after ``--ray`` would
    otherwise be taken for an address."""
    if value is None or value in ("local", "auto") or value.startswith("ray://"):
        return value
    host, _, port = value.rpartition(":")
    if host and port.isdigit():
        return value
    raise click.BadParameter(
        f"{value!r} is not a Ray address (local, auto, host:port, ray://…); put PATHS before --ray"
    )


_ray = click.option(
    "--ray",
    "ray",
    is_flag=False,
    flag_value="auto",
    default=None,
    metavar="[ADDRESS]",
    callback=_ray_address,
    help="Parse each trace in a task on a Ray cluster (pip install 'nprof-report[ray]'): "
    "ADDRESS of the cluster, 'local' to start one here (--jobs CPUs), none to join the running "
    "one. The traces must be readable at the same paths on every worker.",
)
_keep_going = click.option(
    "--keep-going",
    is_flag=True,
    help="Skip a trace that cannot be parsed and name it among the caveats, instead of stopping.",
)
_no_cache = click.option(
    "--no-cache",
    is_flag=True,
    help="Neither read nor write the cache of parsed frames (also NPROF_NO_CACHE=1).",
)


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Write the report here instead of <run>/report/.",
)
@_jobs
@_no_cache
@_ray
@_keep_going
def build(
    paths: tuple[Path, ...],
    out: Path | None,
    jobs: int | None,
    no_cache: bool,
    ray: str | None,
    keep_going: bool,
) -> str:
    """Build report.html, report.pdf, summary.json and CSV tables.

    PATHS may be run folders, bundles, Neuron profile trees or trace files (.json, .json.gz);
    with none, the newest run under ./nprof-runs/ is used. Prints the paths written.
    """
    if ray is None:
        prestart(list(paths))
    from nprof_report.report.build import build_report

    for written in build_report(
        list(paths), out=out, jobs=jobs, use_cache=not no_cache, ray=ray, keep_going=keep_going
    ):
        click.echo(str(written))
    return LEAVE_FAST


@cli.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "csv"]),
    default="table",
    show_default=True,
)
@click.option("--limit", type=int, default=None, help="Rows per table (table format).")
@click.option(
    "--by-rank",
    is_flag=True,
    help="One row per rank of a multi-rank job: step time, dispatch, device busy, communication.",
)
@_jobs
@_no_cache
@_ray
@_keep_going
def ops(
    path: Path,
    fmt: str,
    limit: int | None,
    by_rank: bool,
    jobs: int | None,
    no_cache: bool,
    ray: str | None,
    keep_going: bool,
) -> str:
    """Print the offline equivalent of prof.key_averages() for a trace, bundle or run."""
    if ray is None:
        prestart([path])
    from nprof_report.report.jobs import Engine
    from nprof_report.report.opsview import render_ops

    engine = Engine(jobs=jobs, use_cache=not no_cache, ray=ray, keep_going=keep_going)
    click.echo(render_ops(path, fmt=fmt, limit=limit, engine=engine, by_rank=by_rank))
    return LEAVE_FAST


# Polars' allocator (jemalloc) keeps freed pages for 10 s by default; parsing a large trace frees
# and reallocates hundreds of MB, so they are returned after 0.25 s (pola-rs/polars#23128). On a
# 530 MB trace `ops` then peaks at about 1.2x the file size instead of 1.4x; returning them at once
# (0 ms) saves another 10 % of memory but costs 30 % more time. One arena instead of one per thread
# lets a thread reuse what another freed: `ops` 0.5 s faster (3 interleaved runs: 10.0 -> 9.5 s,
# kernel time 2.9 -> 2.3 s), same peak. Set before Polars is first imported (commands import it
# lazily), inherited by worker processes, and only where the user has not set it.
_MALLOC_CONF = ("_RJEM_MALLOC_CONF", "dirty_decay_ms:250,muzzy_decay_ms:0,narenas:1")
# NumPy's OpenBLAS starts a thread per CPU at import, which spins while it waits; nothing here
# calls BLAS, and on a 530 MB trace those threads took 50 ms of CPU from the parse (perf samples)
_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "1")


def main() -> None:
    """Entry point: run the CLI, mapping library errors to exit code 2."""
    os.environ.setdefault(*_MALLOC_CONF)
    os.environ.setdefault(*_BLAS_THREADS)
    debug = "--debug" in sys.argv[1:]
    try:
        code = cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("nprof-report: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except NprofError as exc:
        if debug:
            raise
        click.echo(f"nprof-report: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("nprof-report: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:
        if debug:
            raise
        click.echo(
            f"nprof-report: internal error: {type(exc).__name__}: {exc} "
            "(run with --debug for the traceback)",
            err=True,
        )
        sys.exit(1)
    if code == LEAVE_FAST:
        _leave()


def _leave() -> None:
    """End a command that succeeded without the interpreter's teardown (freeing every module,
    a last garbage collection): 0.1-0.16 s after ``ops`` on a 530 MB trace. Exit handlers still
    run (they stop unused decode workers) and the output is flushed first."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError):  # a reader gone (a closed pipe) loses nothing more
            stream.flush()
    os._exit(0)

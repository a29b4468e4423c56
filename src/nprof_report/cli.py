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
# what ``check`` returns when it found a regression: exit code 1, otherwise as LEAVE_FAST
REGRESSION = "regression"


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
def build(paths: tuple[Path, ...], out: Path | None, jobs: int | None, no_cache: bool) -> str:
    """Build report.html, report.pdf, summary.json and CSV tables.

    PATHS may be run folders, bundles, Neuron profile trees or trace files (.json, .json.gz);
    with none, the newest run under ./nprof-runs/ is used. Prints the paths written.
    """
    prestart(list(paths))
    from nprof_report.report.build import build_report

    for written in build_report(list(paths), out=out, jobs=jobs, use_cache=not no_cache):
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
@_jobs
@_no_cache
def ops(path: Path, fmt: str, limit: int | None, jobs: int | None, no_cache: bool) -> str:
    """Print the offline equivalent of prof.key_averages() for a trace, bundle or run."""
    prestart([path])
    from nprof_report.report.opsview import render_ops

    click.echo(render_ops(path, fmt=fmt, limit=limit, jobs=jobs, use_cache=not no_cache))
    return LEAVE_FAST


@cli.command()
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=Path("nprof-diff"),
    show_default=True,
    help="Folder of diff.html, diff.pdf, diff.json and tables/diff_*.csv.",
)
@_jobs
@_no_cache
def diff(base: Path, new: Path, out: Path, jobs: int | None, no_cache: bool) -> str:
    """Compare NEW against BASE: which ops moved beyond the noise, and where step time went.

    BASE and NEW are anything build accepts, or a stored summary.json / diff.json; runs are
    compared implementation by implementation. Prints the paths written.
    """
    prestart([base, new])
    from nprof_report.report.diff_build import diff_report

    for written in diff_report(base, new, out=out, jobs=jobs, use_cache=not no_cache):
        click.echo(str(written))
    return LEAVE_FAST


def _threshold(ctx: click.Context, param: click.Parameter, value: str) -> float:
    from nprof_report.report.diff_check import parse_threshold

    try:
        return parse_threshold(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@cli.command("check")
@click.argument("new", type=click.Path(path_type=Path))
@click.option(
    "--baseline",
    type=click.Path(path_type=Path),
    required=True,
    help="A run, bundle or trace, or a stored summary.json / diff.json.",
)
@click.option(
    "--max-regression",
    default="5%",
    show_default=True,
    callback=_threshold,
    help="Allowed slowdown, in percent of the baseline's median.",
)
@click.option(
    "--metric",
    "metrics",
    multiple=True,
    type=click.Choice(["step", "device", "dispatch"]),
    help="What to check (repeatable) [default: step].",
)
@click.option("--op", "ops", multiple=True, help="Check these ops' metrics instead (repeatable).")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Also write diff.html, diff.pdf, diff.json and CSVs here.",
)
@_jobs
@_no_cache
def check_command(
    new: Path,
    baseline: Path,
    max_regression: float,
    metrics: tuple[str, ...],
    ops: tuple[str, ...],
    out: Path | None,
    jobs: int | None,
    no_cache: bool,
) -> str:
    """Exit 1 when NEW regressed against the baseline beyond the threshold and the noise.

    Exit 0: no regression; 1: one line per failing metric on stderr; 2: bad input.
    """
    prestart([baseline, new])
    from nprof_report.report.diff_build import check_regression

    failures, written = check_regression(
        new,
        baseline,
        max_regression_pct=max_regression,
        metrics=list(metrics) or ["step"],
        ops=list(ops),
        out=out,
        jobs=jobs,
        use_cache=not no_cache,
    )
    for path in written:
        click.echo(str(path))
    for line in failures:
        click.echo(f"nprof-report: regression: {line}", err=True)
    return REGRESSION if failures else LEAVE_FAST


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
    if code in (LEAVE_FAST, REGRESSION):
        _leave(1 if code == REGRESSION else 0)


def _leave(status: int) -> None:
    """End a command that succeeded without the interpreter's teardown (freeing every module,
    a last garbage collection): 0.1-0.16 s after ``ops`` on a 530 MB trace. Exit handlers still
    run (they stop unused decode workers) and the output is flushed first."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError):  # a reader gone (a closed pipe) loses nothing more
            stream.flush()
    os._exit(status)

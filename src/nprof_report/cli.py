"""The ``nprof-report`` command: a thin layer over the library.

Every command turns :class:`~nprof_report.errors.NprofError` into one line on stderr and exit
code 2; ``--debug`` shows the traceback instead. How the process is tuned (allocator, decode
workers started early, fast exit) is :mod:`nprof_report.runtime`'s.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

import click

from nprof_report import __version__, quiet, runtime
from nprof_report.errors import NprofError
from nprof_report.runtime import LEAVE_FAST

# what ``check`` returns when it found a regression: exit code 1, otherwise as LEAVE_FAST
REGRESSION = "regression"
# what ``inspect`` returns when the report's numbers would be incomplete: exit code 1 as well
INCOMPLETE = "incomplete"


def _shape(value: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(v) for v in value.lower().replace("x", ",").split(",") if v.strip())
    except ValueError as exc:
        raise click.BadParameter(f"{value!r} is not a shape like 4,512") from exc
    if not dims or any(d <= 0 for d in dims):
        raise click.BadParameter(f"{value!r} is not a shape like 4,512")
    return dims


class _Interrupted(Exception):
    """A command interrupted (Ctrl-C), carried past Click, which writes an empty line to stderr
    when it sees the KeyboardInterrupt itself."""


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            raise _Interrupted from exc


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nprof-report")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Turn PyTorch profiler captures into design-review evidence (HTML, PDF, CSV, JSON)."""
    ctx.obj = {"debug": debug}
    # libraries' warnings and log records as our notes (--debug: as they are), for the command
    ctx.with_resource(quiet.catching(debug))


@cli.command()
@click.option(
    "--study",
    "study",
    default=None,
    metavar="FILE.py[:NAME] | MODULE:NAME",
    help="The study to run (a Study named STUDY unless NAME is given) [default: the built-in "
    "RMSNorm study].",
)
@click.option(
    "--backend",
    type=click.Choice(["auto", "neuron", "cuda", "cpu"]),
    default="auto",
    show_default=True,
    help="auto picks neuron, then cuda, then cpu.",
)
@click.option(
    "--shape",
    "shapes",
    multiple=True,
    help="Input size, e.g. 64,4096; repeat for a sweep [default: the study's sizes; RMSNorm: 4,512].",
)
@click.option(
    "--dtype", default=None, help="torch dtype [default: the study's; RMSNorm: bfloat16]."
)
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
    help="Implementations to run, by name; repeat for several (default: all of the study's).",
)
@click.option(
    "--record-shapes",
    is_flag=True,
    help="Record input shapes (off by default, as the TorchNeuron profiling article captures).",
)
def capture(
    study: str | None,
    backend: str,
    shapes: tuple[str, ...],
    dtype: str | None,
    active: int,
    out: Path,
    impls: tuple[str, ...],
    record_shapes: bool,
) -> None:
    """Profile a study's implementations at each size and write a new run folder.

    The last line printed on standard output is the run folder's path.
    """
    from nprof_report.capture.session import CaptureOptions, run_capture

    options = CaptureOptions(
        out=out,
        study=study,
        backend=backend,
        sizes=tuple(_shape(s) for s in shapes),
        dtype=dtype,
        active=active,
        implementations=impls,
        record_shapes=record_shapes,
        command=("nprof-report", *sys.argv[1:]),
    )
    run_dir = run_capture(options)
    click.echo(str(run_dir))


@cli.command("new-study")
@click.argument("name")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="File to write [default: ./NAME.py]; never overwritten.",
)
def new_study(name: str, out: Path | None) -> None:
    """Write a commented study template to NAME.py, ready for `capture --study NAME.py`."""
    from nprof_report.capture.template import write_template

    click.echo(str(write_template(name, out)))


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
_step_annotation = click.option(
    "--step-annotation",
    "step_annotation",
    default=None,
    metavar="NAME",
    help="The user annotation (record_function name) whose instances are the steps [default: "
    "ProfilerStep#N; without them, a user annotation that repeats at the top of the thread that "
    "dispatches the ops; else the whole profiled window is one step].",
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
@click.option(
    "--allow-mixed",
    is_flag=True,
    help="Runs of different studies each get a section of their own (never compared) instead "
    "of an error.",
)
@_jobs
@_no_cache
@_ray
@_keep_going
@click.option(
    "--peak-gbps",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="The device's peak memory bandwidth in GB/s for the roofline (instead of the "
    "published or measured one).",
)
@click.option(
    "--peak-gflops",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="The device's peak GFLOP/s for the roofline (instead of the published or measured one).",
)
@_step_annotation
def build(
    paths: tuple[Path, ...],
    out: Path | None,
    allow_mixed: bool,
    jobs: int | None,
    no_cache: bool,
    ray: str | None,
    keep_going: bool,
    peak_gbps: float | None,
    peak_gflops: float | None,
    step_annotation: str | None,
) -> str:
    """Build report.html, report.pdf, summary.json and CSV tables.

    PATHS may be run folders, bundles, Neuron profile trees or trace files (.json, .json.gz);
    with none, the newest run under ./nprof-runs/ is used. Several runs are compared run by run
    (the first is the baseline); runs of different studies are refused unless --allow-mixed.
    Prints the paths written.
    """
    if ray is None:
        runtime.prestart(list(paths))
    from nprof_report.report.view import prestart as prestart_pdf  # light: no WeasyPrint here
    from nprof_report.report.view import starts_early

    if starts_early(list(paths)):
        prestart_pdf()  # before the imports below, so that both processes import at once
    # the imports make hundreds of thousands of objects, hardly any garbage (0.05 s of the 0.8 s
    # they take went to the collector); frozen out of its later passes
    with runtime.collector_paused(freeze=True):
        from nprof_report.report.build import build_report
        from nprof_report.report.figures import PeakOverride

    for written in build_report(
        list(paths),
        out=out,
        jobs=jobs,
        use_cache=not no_cache,
        ray=ray,
        keep_going=keep_going,
        peaks=PeakOverride(peak_gbps, peak_gflops),
        allow_mixed=allow_mixed,
        step_annotation=step_annotation,
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
    "--quiet",
    is_flag=True,
    help="Do not print the caveats (unknown categories, unlinked device activities ...) on stderr.",
)
@click.option(
    "--by-rank",
    is_flag=True,
    help="One row per rank of a multi-rank job: step time, dispatch, device busy, communication.",
)
@_jobs
@_no_cache
@_ray
@_keep_going
@_step_annotation
def ops(
    path: Path,
    fmt: str,
    limit: int | None,
    quiet: bool,
    by_rank: bool,
    jobs: int | None,
    no_cache: bool,
    ray: str | None,
    keep_going: bool,
    step_annotation: str | None,
) -> str:
    """Print the offline equivalent of prof.key_averages() for a trace, bundle or run.

    What the parse noted (the report's caveats) goes to stderr, one line each.
    """
    if ray is None:
        runtime.prestart([path])
    from nprof_report.report.jobs import Engine
    from nprof_report.report.opsview import render_ops

    engine = Engine(
        jobs=jobs,
        use_cache=not no_cache,
        ray=ray,
        keep_going=keep_going,
        step_annotation=step_annotation,
    )
    text, notes = render_ops(path, fmt=fmt, limit=limit, engine=engine, by_rank=by_rank)
    click.echo(text)
    if not quiet:
        for note in notes:
            click.echo(f"nprof-report: note: {note}", err=True)
    return LEAVE_FAST


@cli.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table: a checklist; json: the document (docs/inspect.md).",
)
@click.option(
    "--fingerprint",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    metavar="FILE",
    help="Also write the capture's structure, with no name or value from it, to FILE (JSON).",
)
def inspect(path: Path, fmt: str, fingerprint: Path | None) -> str:
    """Say what a capture holds and how each part was read, before trusting a report of it.

    PATH is anything build accepts. Exit 0: nothing is wrong; 1: something makes the report's
    numbers incomplete (listed last); 2: bad input.
    """
    from nprof_report.report.inspectview import run_inspect

    text, complete = run_inspect(path, fmt=fmt, fingerprint=fingerprint)
    click.echo(text)
    if fingerprint is not None:
        click.echo(f"nprof-report: fingerprint written to {fingerprint}", err=True)
    return LEAVE_FAST if complete else INCOMPLETE


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
@_step_annotation
def diff(
    base: Path,
    new: Path,
    out: Path,
    jobs: int | None,
    no_cache: bool,
    step_annotation: str | None,
) -> str:
    """Compare NEW against BASE: which ops moved beyond the noise, and where step time went.

    BASE and NEW are anything build accepts, or a stored summary.json / diff.json; runs are
    compared implementation by implementation. Prints the paths written.
    """
    runtime.prestart([base, new])
    from nprof_report.report.diff import diff_report

    for written in diff_report(
        base, new, out=out, jobs=jobs, use_cache=not no_cache, step_annotation=step_annotation
    ):
        click.echo(str(written))
    return LEAVE_FAST


def _threshold(ctx: click.Context, param: click.Parameter, value: str) -> float:
    from nprof_report.report.diff import parse_threshold

    try:
        return parse_threshold(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@cli.command("check")
@click.argument("new", type=click.Path(path_type=Path))
@click.option(
    "--baseline",
    "baselines",
    type=click.Path(path_type=Path),
    required=True,
    multiple=True,
    help="A run, bundle or trace, or a stored summary.json / diff.json; repeated: several runs "
    "of the baseline's code, whose spread is the noise.",
)
@click.option(
    "--max-regression",
    default="5%",
    show_default=True,
    callback=_threshold,
    help="Allowed slowdown, in percent of the baseline's median.",
)
@click.option(
    "--max-count-increase",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Allowed increase of a structural count per step (framework ops, runtime calls, "
    "device activities, declared bytes or FLOPs).",
)
@click.option(
    "--metric",
    "metrics",
    multiple=True,
    type=click.Choice(
        [
            "step",
            "device",
            "dispatch",
            "ops",
            "runtime-calls",
            "device-activities",
            "bytes",
            "flops",
        ]
    ),
    help="What to check (repeatable): times (step, device, dispatch) and counts per step (ops, "
    "runtime-calls, device-activities; bytes, flops where the study declares them) "
    "[default: step and every count].",
)
@click.option("--op", "ops", multiple=True, help="Check these ops' metrics instead (repeatable).")
@click.option(
    "--strict-time",
    is_flag=True,
    help="Let the time verdict fail the gate even where it cannot decide: one baseline (noise "
    "between runs unknown) or baselines that disagree by more than --max-regression.",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Also write diff.html, diff.pdf, diff.json and CSVs here.",
)
@_jobs
@_no_cache
@_step_annotation
def check_command(
    new: Path,
    baselines: tuple[Path, ...],
    max_regression: float,
    max_count_increase: int,
    metrics: tuple[str, ...],
    ops: tuple[str, ...],
    strict_time: bool,
    out: Path | None,
    jobs: int | None,
    no_cache: bool,
    step_annotation: str | None,
) -> str:
    """Exit 1 when NEW does more work per step than the baseline, or is slower beyond the
    threshold and the noise where time can decide.

    Exit 0: no regression; 1: one line per failure on stderr; 2: bad input. Notes on stderr say
    what the exit code rests on: with one baseline, or baselines that disagree by more than
    the threshold, the time verdict is advice (unless --strict-time).
    """
    runtime.prestart([*baselines, new])
    from nprof_report.report.diff import check_regression

    gate = check_regression(
        new,
        list(baselines),
        max_regression_pct=max_regression,
        metrics=list(metrics) or None,
        ops=list(ops),
        max_count_increase=max_count_increase,
        strict_time=strict_time,
        out=out,
        jobs=jobs,
        use_cache=not no_cache,
        step_annotation=step_annotation,
    )
    for path in gate.written:
        click.echo(str(path))
    for line in gate.failures:
        click.echo(f"nprof-report: regression: {line}", err=True)
    for line in gate.notes:
        click.echo(f"nprof-report: note: {line}", err=True)
    return REGRESSION if gate.failures else LEAVE_FAST


class _Terminated(KeyboardInterrupt):
    """SIGTERM, handled as Ctrl-C is: what is being written is cleaned up or left whole."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated


def main() -> None:
    """Entry point: run the CLI, mapping library errors (and OS errors, which the library words
    where it can) to one line and exit code 2; Ctrl-C and SIGTERM to 130 and 143."""
    runtime.tune()
    signal.signal(signal.SIGTERM, _on_sigterm)
    debug = "--debug" in sys.argv[1:]
    if debug:
        os.environ[quiet.DEBUG_ENV] = "1"  # the workers show their libraries' output raw too
    # only our lines on stderr: what libraries write below Python is held, and gone through at
    # exit (nprof_report/quiet.py)
    quiet.hold_descriptor(debug)
    try:
        code = cli.main(standalone_mode=False)
        sys.stdout.flush()  # a full disk or a closed pipe behind stdout is met here, not later
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
    except (KeyboardInterrupt, _Interrupted) as exc:
        terminated = isinstance(exc, _Terminated) or isinstance(exc.__cause__, _Terminated)
        click.echo(f"nprof-report: {'terminated' if terminated else 'interrupted'}", err=True)
        sys.exit(143 if terminated else 130)
    except BrokenPipeError:  # the reader went away (`| head`): nothing more to say
        _quiet_stdout()
        sys.exit(141)
    except OSError as exc:
        if debug:
            raise
        where = exc.filename or "standard output"
        click.echo(f"nprof-report: error: {where}: {exc.strerror or exc}", err=True)
        _quiet_stdout()
        sys.exit(2)
    except Exception as exc:
        if debug:
            raise
        click.echo(
            f"nprof-report: internal error: {type(exc).__name__}: {exc} "
            "(run with --debug for the traceback)",
            err=True,
        )
        sys.exit(1)
    if code in (LEAVE_FAST, REGRESSION, INCOMPLETE):
        runtime.leave(0 if code == LEAVE_FAST else 1)


def _quiet_stdout() -> None:
    """Drop what stdout still buffers, so the interpreter's exit does not fail on it again."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())

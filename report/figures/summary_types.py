"""The shape of ``summary.json`` (``nprof-summary``) as TypedDicts, for mypy: the document as
in memory and as :func:`.stored.read_summary` gives it back (version 2 writes its long lists to
Parquet tables, :mod:`.stored`).

:mod:`.summary` and :mod:`.sweep` build the document, :mod:`.ranks` its ``ranks`` record;
:mod:`.findings`, :mod:`.model`, :mod:`.sweepview`, :mod:`.ranksection` and the diff read it.
Keys and value types are those written: ``tests/test_summary_types.py`` checks real summaries
against these declarations, key by key. Rows that :mod:`.summary` copies from a frame or a
dataclass (per-step rows, top ops, key_averages, Neuron steps, the run's manifest) are declared
here too and the test holds them to their source.

All times are microseconds (``_us``) unless the key says otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, TypedDict

if TYPE_CHECKING:  # typing.NotRequired is 3.11+; only mypy reads these annotations
    from typing import NotRequired

    import polars as pl


class FileRecord(TypedDict):
    """A file of the run (the manifest's ``files``)."""

    path: str
    role: str
    bytes: int
    sha256: str


class RunRecord(TypedDict):
    """``run``: the run's manifest without its implementations."""

    run_id: str
    created_utc: str
    command: list[str]
    backend: str
    device: str
    host: dict[str, Any]
    versions: dict[str, str | None]
    workload: dict[str, Any]
    schedule: dict[str, int]
    profiler: dict[str, Any]
    environment: dict[str, str]
    files: list[FileRecord]
    hardware: dict[str, Any]
    format: str
    format_version: int
    format_minor: int
    tool_version: str


class StepSpread(TypedDict):
    """The step count and the spread of the step times (None without steps)."""

    steps: int
    step_median_us: float | None
    step_p25_us: float | None
    step_p75_us: float | None
    step_iqr_us: float | None
    step_min_us: float | None
    step_max_us: float | None


class Headline(StepSpread):
    """The page-1 figures of one implementation (medians over its steps)."""

    framework_ops_per_step: float
    all_ops_per_step: float
    dispatch_per_step_us: float
    dispatch_per_op_us: float | None
    op_self_cpu_per_step_us: float
    runtime_calls_per_step: float
    runtime_per_step_us: float
    device_per_step_us: float | None
    device_activities_per_step: float | None
    device_per_op_us: float | None
    device_busy_pct: float | None
    unprofiled_median_us: float | None
    unprofiled_iqr_us: float | None
    profiler_overhead_us: float | None
    profiler_overhead_pct: float | None
    first_call_s: float | None
    # what bounds the step: "dispatch" (host dispatch per step above device time per step) or
    # "device"; None without device activity (on the CPU the ops compute inside their dispatch)
    bound_by: Literal["dispatch", "device"] | None


class StepTime(TypedDict):
    """``step_time_us``: statistics of the step durations (``n`` too is written as a float)."""

    n: float
    median: float
    mean: float
    minimum: float
    maximum: float
    p25: float
    p75: float
    stdev: float
    iqr: float


class StepRow(TypedDict):
    """One profiled step (``analyses.STEP_COLUMNS`` with ``_ns`` written as ``_us``)."""

    step: int
    dur_us: float
    top_ops: int
    all_ops: int
    dispatch_us: float
    op_self_us: float
    runtime_calls: int
    runtime_us: float
    device_activities: int
    device_us: float
    host_framework_us: float
    host_runtime_us: float
    host_sync_us: float
    host_outside_us: float


class TopOpRow(TypedDict):
    """A top-level op by name (``analyses.per_top_op``)."""

    name: str
    calls: int
    dispatch_median_us: float | None
    dispatch_p90_us: float | None
    self_cpu_median_us: float | None
    runtime_median_us: float | None
    launch_latency_median_us: float | None
    device_median_us: float | None
    device_activities: int
    calls_per_step: float


class KeyAverageRow(TypedDict):
    """A ``key_averages()`` row (``parse.KEY_AVERAGES``)."""

    name: str
    device_type: str
    is_user_annotation: bool
    calls: int
    self_cpu_us: float
    cpu_total_us: float
    self_device_us: float
    device_total_us: float


class MedianStep(TypedDict):
    """The host breakdown of the median step; the parts add up to ``dur_us``."""

    step: int
    dur_us: float
    framework_us: float
    runtime_us: float
    sync_us: float
    outside_us: float
    device_us: float


class GapCause(TypedDict):
    cause: str
    count: int
    total_us: float


class GapRecord(TypedDict):
    step: int
    offset_us: float
    dur_us: float
    cause: str


class Gaps(TypedDict):
    """Device idle gaps: totals by cause, every duration, the largest ones."""

    count: int
    total_us: float
    by_cause: list[GapCause]
    durations_us: list[float]
    largest: list[GapRecord]


class TimelineBar(TypedDict):
    """A bar of the median step's timeline, times from the step's start."""

    lane: str
    start_us: float
    dur_us: float
    label: str


class Chain(TypedDict):
    """op -> runtime -> device of one of the heaviest ops."""

    op: str
    calls: int
    device_us_per_call: float
    runtime: str
    device: str


class NeuronStep(TypedDict):
    """Neuron system-trace figures of one step (``parse.neuron`` ``StepFigures``, in µs)."""

    submissions: int
    hw_rows: int
    executions: int
    distinct_models: int
    model_switches: int
    copyin_count: int
    copyin_us: float
    copyout_count: int
    copyout_us: float
    host_blocked_us: float
    submit_to_start_median_us: float | None
    submit_to_start_max_us: float | None
    device_busy_us: float
    device_idle_us: float
    loads: int


class NeuronClock(TypedDict):
    framework_matches: int
    framework_offset_us: float | None
    framework_error_us: float | None
    sync_points: int


class CrossCheckOp(TypedDict):
    name: str
    calls: int
    trace_json_us: float
    system_trace_us: float
    max_difference_us: float


class CrossCheck(TypedDict):
    """trace.json's device executions against the system trace."""

    ops: int
    trace_json_us: float
    system_trace_us: float
    max_per_op_difference_us: float
    clock_offset_us: float | None
    agree: bool
    per_op: list[CrossCheckOp]


class NeuronRecord(TypedDict):
    """One Neuron session's figures."""

    steps: list[NeuronStep]
    engine_active_pct: dict[str, float]
    mfu_estimated_pct: float | None
    mbu_estimated_pct: float | None
    clock: NeuronClock
    trace_json_cross_check: CrossCheck | None


class DiffProfile(TypedDict):
    """What ``diff`` and ``check`` compare (:mod:`.diff_profile`)."""

    steps: list[int]
    step_us: list[float]
    parts_us: dict[str, list[float]]
    ops: pl.DataFrame  # one row per op path (.diff_profile.OP_SERIES_SCHEMA)
    # bytes_moved / flops per call, where the run's manifest declares them
    declared: NotRequired[dict[str, float]]


class ImplementationRecord(TypedDict):
    """``implementations[]``: everything the report shows about one source."""

    label: str
    trace: str
    description: str | None
    timestamp_convention: str
    headline: Headline
    step_time_us: StepTime | None
    steps: list[StepRow]
    top_ops: Sequence[TopOpRow]  # a list, or .records.FrameRecords until written
    key_averages: Sequence[KeyAverageRow]
    median_step: MedianStep | None
    dispatch_samples_us: list[float]
    gaps: Gaps
    timeline: list[TimelineBar]
    chains: list[Chain]
    links: dict[str, int]
    has_device_activities: bool
    device_time_source: str
    neuron: list[NeuronRecord]
    diff_profile: DiffProfile | None
    step_rule: str  # ProfilerStep, annotation:<name> or window (parse/steps.py)


class SideImplementation(TypedDict):
    """An implementation as one side of a diff keeps it (``diff.json``), enough to serve again
    as a baseline; a stored document's record may lack a key (None here, :mod:`.diff_inputs`)."""

    label: str
    trace: str
    description: str | None
    headline: Headline
    step_time_us: StepTime | None
    steps: list[StepRow]
    diff_profile: DiffProfile
    step_rule: str | None  # None in a document written before issue 27


ONE_STEP = "one step: no spread"
"""What a comparison, a diff or a check says instead of a noise verdict where a side has one
step (a trace without ProfilerStep#N whose whole window is its step: ``parse/steps.py``)."""

Metric = Literal["step", "unprofiled"]
"""What a comparison compares: profiled steps or un-profiled calls."""


class ComparisonFigures(TypedDict, total=False):
    """One implementation's headline against the baseline's (:func:`.summary.compare`); a
    metric's keys are there when both sides have it."""

    step_delta_us: float
    step_ratio: float | None
    step_exceeds_noise: bool | None  # None: a side has one step, so no spread
    step_spread: str  # "one step: no spread", only then
    unprofiled_delta_us: float
    unprofiled_ratio: float | None
    unprofiled_exceeds_noise: bool
    ops_per_step_delta: float


class Comparison(ComparisonFigures):
    """``comparisons[]``."""

    baseline: str
    label: str


def metric_figures(
    figures: ComparisonFigures, metric: Metric
) -> tuple[float | None, float | None, bool | None]:
    """``(delta_us, ratio, exceeds_noise)`` of ``metric`` (None where not compared)."""
    if metric == "step":
        return (
            figures.get("step_delta_us"),
            figures.get("step_ratio"),
            figures.get("step_exceeds_noise"),
        )
    return (
        figures.get("unprofiled_delta_us"),
        figures.get("unprofiled_ratio"),
        figures.get("unprofiled_exceeds_noise"),
    )


class Finding(TypedDict):
    """``findings[]``: a rule's result and the figures that triggered it."""

    severity: Literal["high", "medium", "info"]
    rule: str
    title: str
    evidence: str


class RankRow(StepSpread):
    """One rank's medians over its steps (``ranks.ranks[]``)."""

    rank: int
    label: str
    trace: str
    dispatch_median_us: float | None
    device_median_us: float | None
    device_busy_pct: float | None
    compute_median_us: float | None
    comm_median_us: float | None
    comm_pct: float | None
    comm_by_kind_us: dict[str, float | None]


class StepPart(TypedDict):
    """A part of a rank's step against the other ranks' median."""

    part: str
    comm: bool
    rank_us: float
    others_us: float
    delta_us: float


class StragglerFigures(TypedDict):
    """A slow rank: its step median against the other ranks', each part of its step."""

    rank: int
    label: str
    step_median_us: float
    others_median_us: float
    slower_pct: float
    parts: list[StepPart]


class Straggler(StragglerFigures):
    """``ranks.stragglers[]``: the figures and the evidence they make."""

    evidence: str


class WaitedFor(TypedDict):
    """``ranks.waited_for[]``: a rank the others wait for in collectives."""

    rank: int
    label: str
    work_excess_pct: float
    parts: list[StepPart]
    evidence: str


class RanksRecord(TypedDict):
    """``ranks``: several ranks of one job (:mod:`.ranks`)."""

    rank_from: str
    world_size: int | None
    backend: str | None
    ranks_present: int
    comm_source: str
    comm_kinds: list[str]
    ranks: list[RankRow]
    steps: list[int]
    step_rules: list[str]  # the ranks' step rules (parse/steps.py), each once
    step_time_us: list[list[float | None]]
    stragglers: list[Straggler]
    waited_for: list[WaitedFor]


class SweepPoint(Headline):
    """An implementation's headline at one size."""

    size: list[int]
    size_label: str
    elements: int


class SweepSeries(TypedDict):
    label: str
    points: list[SweepPoint]


class ComparisonPoint(ComparisonFigures):
    """A comparison with the baseline at one size."""

    size: list[int]
    size_label: str


class Crossover(TypedDict):
    """The verdict at each size and the size from which the largest size's holds
    (:func:`.sweep.crossover`); ``metric`` only where some size was compared."""

    verdicts: list[str | None]
    holds: str | None
    from_size: list[int] | None
    below: str | None
    metric: NotRequired[Metric | None]


class SweepComparison(Crossover):
    baseline: str
    label: str
    points: list[ComparisonPoint]


class SmallestDetail(TypedDict):
    implementations: list[ImplementationRecord]
    comparisons: list[Comparison]


class SweepRecord(TypedDict):
    """``sweep``: every size of a run that swept several (:mod:`.sweep`)."""

    sizes: list[list[int]]
    largest: list[int]
    smallest: list[int]
    series: list[SweepSeries]
    comparisons: list[SweepComparison]
    smallest_detail: SmallestDetail


class CheckRecord(TypedDict):
    """``numerical_check[]``: an implementation's output against the reference's at one size
    (the manifest's ``NumericalCheck`` with the implementation and size)."""

    label: str
    size: list[int] | None
    size_label: str | None
    reference: str
    status: str
    atol: float | None
    rtol: float | None
    max_abs_error: float | None
    max_rel_error: float | None
    mismatched: int | None
    elements: int | None
    note: str | None


class RooflineRecord(TypedDict):
    """``roofline[]``: one implementation at one size against the device's peaks
    (:mod:`.roofline`); GB/s and GFLOP/s are 10⁹ per second."""

    label: str
    size: list[int]
    size_label: str
    bytes: int | None
    flops: int | None
    intensity: float | None  # FLOPs per byte
    time_us: float | None
    time_source: Literal["device", "unprofiled"] | None
    achieved_gbps: float | None
    achieved_gflops: float | None
    peak_gbps: float | None
    peak_gflops: float | None
    peak_source: str
    pct_of_peak_bw: float | None
    pct_of_peak_flops: float | None
    bound: Literal["memory", "compute"] | None
    above_peak: bool


class RooflineBasis(TypedDict):
    """``roofline_basis``: the peaks the roofline is drawn against and where they come from;
    ``note`` says why there is no roofline or no percentage."""

    device: str | None
    dtype: str | None
    peak_gbps: float | None
    peak_gflops: float | None
    peak_kind: str
    peak_source: str | None
    ridge_flops_per_byte: float | None
    note: str | None


class FailureRecord(TypedDict):
    """``failures[]``: an implementation that did not run at some size of its run (the
    manifest's status and error), with the sizes where it did."""

    label: str  # as the report names it (with its run where there are several)
    implementation: str
    run: str | None
    status: str  # "failed", "interrupted" or "not run"
    sizes: list[str]  # where it did not run, in order of size ("" : a size not recorded)
    error: str | None  # the first line of the first error
    ran_at: list[str]  # the sizes where it ran


class ConstructedInput(TypedDict):
    """``constructed[]``: an input built by hand or by a script, not captured."""

    label: str
    note: str


class RunMember(TypedDict):
    """A record of a run: its label, its implementation's name and its size."""

    label: str
    implementation: str
    size_label: str | None


class RunSide(TypedDict):
    """``runs[]``: one run of several given to ``build`` (absent with one)."""

    name: str
    prefix: str  # what its labels start with: its backend, or its name
    path: str
    study: str | None
    backend: str | None
    device: str | None
    sizes: list[str]  # in order of size
    members: list[RunMember]  # its records, in order
    constructed: bool
    run: RunRecord | None


class RunComparison(Comparison):
    """``across_runs[]``: one implementation at one size in a run against the same
    implementation and size in the study's first run (the baseline run)."""

    implementation: str
    size_label: str | None
    baseline_run: str
    run: str
    holds: str | None  # the run's against the baseline run's: faster, slower, within noise
    metric: Metric | None  # the figure compared: un-profiled calls, else profiled steps
    times: float | None  # how many times faster or slower (1 or more)


class BackendOpSide(TypedDict):
    """A framework op on one backend: how often it is dispatched per step, its host dispatch
    per call, and the device work it launched per call (nested ops' included)."""

    calls_per_step: float
    dispatch_per_call_us: float | None
    device_per_call_us: float | None
    device_activities_per_call: float | None


class BackendOp(TypedDict):
    """A framework op aligned by name across two backends (None: not dispatched there)."""

    op: str
    baseline: BackendOpSide | None
    other: BackendOpSide | None


class BackendComparison(TypedDict):
    """One implementation (at one size) on two backends, op by op."""

    implementation: str
    size_label: str | None
    baseline: str
    label: str
    baseline_backend: str
    backend: str
    ops: list[BackendOp]


class BackendsRecord(TypedDict):
    """``backends``: runs of one study on different backends, compared by structure."""

    backends: list[str]
    runs: list[str]
    comparisons: list[BackendComparison]


class Summary(TypedDict):
    """The ``summary.json`` document."""

    format: str
    format_version: int
    run: RunRecord | None
    implementations: list[ImplementationRecord]
    comparisons: list[Comparison]
    caveats: list[str]
    findings: list[Finding]
    ranks: NotRequired[RanksRecord]
    sweep: NotRequired[SweepRecord]
    numerical_check: NotRequired[list[CheckRecord]]
    roofline: NotRequired[list[RooflineRecord]]
    roofline_basis: NotRequired[RooflineBasis | None]
    failures: NotRequired[list[FailureRecord]]
    constructed: NotRequired[list[ConstructedInput]]
    output_wrong: NotRequired[list[str]]  # labels of records whose output failed the check
    runs: NotRequired[list[RunSide]]
    across_runs: NotRequired[list[RunComparison]]
    backends: NotRequired[BackendsRecord]

"""Communication time of one rank: collectives on the host, their device activities, per step.

Classified by structure, not by lists of kernel names:

* a host event is a *collective* when PyTorch's distributed instrumentation made it: category
  ``collective_comm`` (Kineto's activity type), an op of the ``c10d::`` namespace (the process
  group's ops, ``c10d::allreduce_``), ``record_param_comms`` (the record function PyTorch wraps
  every collective in) or an annotation ``<backend>:<op>`` of a process-group backend
  (``nccl:all_reduce``, ``gloo:all_reduce``; the trace's ``distributedInfo.backend`` counts too);
* nested collectives on one thread (``c10d::allreduce_`` > ``record_param_comms`` >
  ``nccl:all_reduce``) form one *span*, whose *kind* (all_reduce, all_gather, reduce_scatter,
  all_to_all, broadcast, p2p, barrier ...) comes from the first of its names that tells it;
* a device activity is communication when the op that launched it (``op->device`` link) starts
  inside a span, and takes the span's kind. A device activity no op launched is communication
  only when its name carries a collective library's prefix (``nccl``, ``rccl``): nothing else
  about an unlinked kernel says what it does;
* on Neuron, the system trace's collective executions (``cc_*`` hardware events, formats.md 5.1)
  are device communication of kind ``collective``, assigned to steps by their start.

Per step, *host comm* is the time covered by the spans that start in the step (up to the step's
end; spans on several threads at once count once), and *device comm* the summed duration of the
step's communication activities (as device time is counted everywhere); a rank's *comm* figure is the
device one when the trace has device communication, the host one otherwise (CPU-only gloo jobs,
TorchNeuron traces without a system trace).
"""

from __future__ import annotations

import re

import polars as pl

from nprof_report.parse import LoadedSource

PG_BACKENDS = frozenset({"nccl", "gloo", "mpi", "ucc", "xccl", "hccl", "neuron"})
LIBRARY_KERNEL_PREFIXES = ("nccl", "rccl")
NEURON_COLLECTIVE_PREFIX = "cc_"
# first match wins: "reduce_scatter" before "reduce", "all_gather" before "gather"
KINDS = (
    ("allreduce", "all_reduce"),
    ("reducescatter", "reduce_scatter"),
    ("allgather", "all_gather"),
    ("alltoall", "all_to_all"),
    ("broadcast", "broadcast"),
    ("barrier", "barrier"),
    ("batchisendirecv", "p2p"),
    ("sendrecv", "p2p"),
    ("send", "p2p"),
    ("recv", "p2p"),
    ("reduce", "reduce"),
    ("gather", "gather"),
    ("scatter", "scatter"),
)
UNKNOWN_KIND = "other"

COMM_STEPS = pl.Schema(
    {
        "step": pl.Int32(),
        "kind": pl.String(),
        "host_comm_ns": pl.Int64(),
        "device_comm_ns": pl.Int64(),
    }
)


def kind_of(name: str) -> str | None:
    """The collective a name says, or None: ``c10d::_allgather_base_`` -> ``all_gather``."""
    bare = re.sub(r"[^a-z]", "", name.rsplit(":", 1)[-1].lower())
    return next((kind for key, kind in KINDS if bare.startswith(key)), None)


def _is_collective(ops: pl.DataFrame, backends: frozenset[str]) -> pl.Expr:
    """Collective ops and annotations of ``ops``: category ``collective_comm``, a ``c10d::`` or
    ``record_param_comms`` name, or an annotation named ``<backend>:...``.

    The names are tested once each, among the distinct names: text made of every op's name was
    85 MB at ``build``'s peak on 1.5 million ops (issue 32)."""
    names = ops.select(pl.col("name").unique().drop_nulls().cast(pl.String))
    name = pl.col("name")
    prefix = name.str.extract(r"^([A-Za-z0-9_]+):[^:]", 1)
    by_name = names.filter(name.str.starts_with("c10d::") | (name == "record_param_comms"))
    by_backend = names.filter(prefix.is_in(list(backends)))
    return (
        (pl.col("cat") == "collective_comm")
        | pl.col("name").is_in(by_name["name"].implode())
        | ((pl.col("cls") == "annotation") & pl.col("name").is_in(by_backend["name"].implode()))
    )


def spans(loaded: LoadedSource) -> pl.DataFrame:
    """Collective spans: ``thread, start_ns, end_ns, kind`` (nested collectives merged)."""
    backend = (loaded.frames.meta.distributed_info or {}).get("backend")
    backends = PG_BACKENDS | ({backend} if isinstance(backend, str) else set())
    ops = loaded.frames.ops
    ops = ops.filter(_is_collective(ops, frozenset(backends))).select(
        pl.col("thread").cast(pl.String), "start_ns", "end_ns", pl.col("name").cast(pl.String)
    )
    if ops.is_empty():
        return pl.DataFrame(
            schema={
                "thread": pl.String,
                "start_ns": pl.Int64,
                "end_ns": pl.Int64,
                "kind": pl.String,
            }
        )
    kinds = {n: kind_of(n) for n in ops["name"].unique().to_list()}
    ordered = ops.with_columns(
        pl.col("name").replace_strict(kinds, return_dtype=pl.String).alias("kind")
    ).sort("thread", "start_ns", pl.col("end_ns"), descending=[False, False, True])
    reach = pl.col("end_ns").cum_max().shift(1).over("thread")
    opens = reach.is_null() | (pl.col("start_ns") >= reach)
    return (
        ordered.with_columns(span=opens.cum_sum())
        .group_by("thread", "span", maintain_order=True)
        .agg(
            pl.col("start_ns").min(),
            pl.col("end_ns").max(),
            pl.col("kind").drop_nulls().first().fill_null(UNKNOWN_KIND),
        )
        .drop("span")
    )


def device_comm(loaded: LoadedSource, host_spans: pl.DataFrame) -> pl.DataFrame:
    """Device communication activities: ``step, kind, dur_ns``."""
    frames = loaded.frames
    schema = pl.Schema(
        {"step": frames.device.schema["step"], "kind": pl.String(), "dur_ns": pl.Int64()}
    )
    by_launch = pl.DataFrame(schema=schema)
    op_device = (
        frames.links.lazy().filter(pl.col("kind") == "op->device").select("src_id", "dst_id")
    )
    if not host_spans.is_empty():  # without collective spans no launch is inside one
        # the launching ops' threads made text after the join: not every op's (issue 32)
        launched = (
            op_device.select(pl.col("src_id").alias("event_id"), "dst_id")
            .join(frames.ops.lazy().select("event_id", "thread", "start_ns"), on="event_id")
            .with_columns(pl.col("thread").cast(pl.String))
            .sort("start_ns")
            .collect()
        )
        inside = launched.join_asof(
            host_spans.sort("start_ns").rename({"start_ns": "span_start"}),
            left_on="start_ns",
            right_on="span_start",
            by="thread",
            strategy="backward",
            check_sortedness=False,  # sorted by start_ns within each thread
        ).filter(pl.col("span_start").is_not_null() & (pl.col("start_ns") < pl.col("end_ns")))
        by_launch = frames.device.join(
            inside.select(pl.col("dst_id").alias("event_id"), "kind").unique("event_id"),
            on="event_id",
        ).select("step", "kind", "dur_ns")
    linked = op_device.select("dst_id").collect()["dst_id"].implode()
    # the library's kernels by name, each distinct name tested once (not text of every row)
    lower = pl.col("name").str.to_lowercase()
    library = (
        frames.device.select(pl.col("name").unique().drop_nulls().cast(pl.String))
        .filter(pl.any_horizontal(lower.str.starts_with(p) for p in LIBRARY_KERNEL_PREFIXES))
        .to_series()
    )
    unlinked = (
        frames.device.lazy()
        .filter(pl.col("name").is_in(library.implode()) & ~pl.col("event_id").is_in(linked))
        .select("step", pl.lit(UNKNOWN_KIND).alias("kind"), "dur_ns")
        .collect()
    )
    return pl.concat([by_launch, unlinked, _neuron_collectives(loaded)]).with_columns(
        pl.col("step").cast(pl.Int32)
    )


def _neuron_collectives(loaded: LoadedSource) -> pl.DataFrame:
    steps = loaded.frames.steps.select("step", "start_ns", "end_ns").sort("start_ns")
    parts = [
        data.events.filter(pl.col("name").str.starts_with(NEURON_COLLECTIVE_PREFIX)).select(
            "start_ns", "dur_ns"
        )
        for data, _ in loaded.neuron
    ]
    events = pl.concat(parts) if parts else pl.DataFrame(schema={"start_ns": pl.Int64})
    if events.is_empty():
        return pl.DataFrame(schema={"step": pl.Int32, "kind": pl.String, "dur_ns": pl.Int64})
    return (
        events.sort("start_ns")
        .join_asof(steps.rename({"start_ns": "s0"}), left_on="start_ns", right_on="s0")
        .filter(pl.col("start_ns") < pl.col("end_ns"))
        .select(pl.col("step").cast(pl.Int32), pl.lit("collective").alias("kind"), "dur_ns")
    )


def _union_ns(intervals: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Per ``keys``: the time covered by the ``start_ns``-``end_ns`` intervals, overlaps once."""
    ordered = intervals.sort(*keys, "start_ns")
    reach = pl.col("end_ns").cum_max().shift(1).over(keys)
    opens = reach.is_null() | (pl.col("start_ns") >= reach)
    return (
        ordered.with_columns(run=opens.cum_sum())
        .group_by(*keys, "run")
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .group_by(keys)
        .agg(host_comm_ns=(pl.col("end_ns") - pl.col("start_ns")).sum())
    )


def comm_per_step(loaded: LoadedSource) -> pl.DataFrame:
    """Host and device communication time per step and kind (``COMM_STEPS``).

    Host: the time the step spends in collective spans, each span counted from its start to its
    end or the step's end, spans overlapping on several threads counted once. Device: summed
    durations of the communication activities, as device time is counted everywhere else.
    """
    host_spans = spans(loaded)
    steps = loaded.frames.steps.select("step", "start_ns", "end_ns").sort("start_ns")
    clipped = (
        host_spans.sort("start_ns")
        .join_asof(
            steps.rename({"start_ns": "s0", "end_ns": "s1"}), left_on="start_ns", right_on="s0"
        )
        .filter(pl.col("start_ns") < pl.col("s1"))
        .select("step", "kind", "start_ns", pl.min_horizontal("end_ns", "s1").alias("end_ns"))
    )
    host = _union_ns(clipped, ["step", "kind"])
    device = (
        device_comm(loaded, host_spans)
        .filter(pl.col("step").is_not_null())
        .group_by("step", "kind")
        .agg(device_comm_ns=pl.col("dur_ns").sum())
    )
    both = host.join(device, on=["step", "kind"], how="full", coalesce=True).fill_null(0)
    return both.select([pl.col(n).cast(t) for n, t in COMM_STEPS.items()]).sort("step", "kind")

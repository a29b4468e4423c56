"""trace.json device executions checked against the Neuron system trace, never added to it.

When a trace's ``privateuse1_driver`` rows are device executions (:mod:`..privateuse1`), the ops
already carry Neuron device time from ``trace.json``. The system trace's ``nc_exec_running`` spans,
linked to the same driver rows through ``nrt_sequence_id`` (:mod:`.link`), measure the same
executions: adding them would count each execution twice. They are compared instead, per op, and
the start offset between the two clocks is measured (formats.md §9.1, §7.11).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from nprof_report.parse.privateuse1 import DRIVER_CAT
from nprof_report.parse.schema import TraceFrames

# Per-op agreement: within 1 µs or 1 % of the op's device time, whichever is larger.
AGREE_ABS_NS = 1_000
AGREE_REL = 0.01

PER_OP = pl.Schema(
    {
        "event_id": pl.Int64(),
        "name": pl.String(),
        "trace_ns": pl.Int64(),
        "system_ns": pl.Int64(),
        "diff_ns": pl.Int64(),
    }
)
BY_NAME = pl.Schema(
    {
        "name": pl.String(),
        "calls": pl.UInt32(),
        "trace_ns": pl.Int64(),
        "system_ns": pl.Int64(),
        "max_diff_ns": pl.Int64(),
    }
)


@dataclass(frozen=True)
class CrossCheck:
    """Device time per op from ``trace.json`` against the system trace's figures.

    Attributes:
        ops: ops with device time from both.
        trace_ns, system_ns: their device time from each source.
        max_diff_ns: the largest per-op |trace.json - system trace|.
        disagreeing: ops whose difference exceeds the tolerance (1 µs or 1 %).
        offset_ns: median start of a trace.json execution minus the start of the system trace's
            execution it is linked to (the clock offset); None when none is linked one to one.
        only_trace, only_system: ops with device time from one source only.
        per_op: PER_OP rows of the ops in both.
    """

    ops: int
    trace_ns: int
    system_ns: int
    max_diff_ns: int
    disagreeing: int
    offset_ns: int | None
    only_trace: int
    only_system: int
    per_op: pl.DataFrame

    def by_name(self) -> pl.DataFrame:
        """BY_NAME: the per-op comparison summed over the calls of each op name."""
        return (
            self.per_op.group_by("name")
            .agg(
                pl.len().alias("calls"),
                pl.col("trace_ns", "system_ns").sum(),
                pl.col("diff_ns").abs().max().alias("max_diff_ns"),
            )
            .select(list(BY_NAME))
            .sort("name")
        )

    @property
    def agree(self) -> bool:
        """True when every op in both is within the tolerance."""
        return self.ops > 0 and self.disagreeing == 0

    @property
    def note(self) -> str:
        """One line for the report."""
        if self.ops == 0:
            return (
                "Neuron device time comes from trace.json's privateuse1_driver rows; the system "
                "trace links none of their ops, so it could not cross-check them"
            )
        offset = f"{self.offset_ns / 1000:.3f} µs" if self.offset_ns is not None else "unknown"
        verdict = (
            "they agree"
            if self.agree
            else f"{self.disagreeing} ops differ by more than 1 µs or 1 %, so the driver rows may "
            "not be the executions themselves (the device time shown is trace.json's)"
        )
        extra = ""
        if self.only_trace or self.only_system:
            extra = (
                f"; {self.only_trace} ops have device time only in trace.json, "
                f"{self.only_system} only in the system trace"
            )
        return (
            f"Neuron device time comes from trace.json's privateuse1_driver rows (counted once); "
            f"the system trace cross-checks {self.ops} ops: {self.trace_ns / 1000:.3f} µs in "
            f"trace.json vs {self.system_ns / 1000:.3f} µs in nc_exec_running, largest per-op "
            f"difference {self.max_diff_ns / 1000:.3f} µs, clock offset (trace.json minus "
            f"system trace) {offset}: {verdict}{extra}"
        )


def trace_device_by_op(frames: TraceFrames) -> pl.DataFrame:
    """``event_id`` (op), ``trace_ns``: the op's own ``privateuse1_driver`` device executions."""
    drv = frames.device.filter(pl.col("cat") == DRIVER_CAT).select(
        pl.col("event_id").alias("dst_id"), "dur_ns"
    )
    return (
        frames.links.filter(pl.col("kind") == "op->device")
        .join(drv, on="dst_id")
        .group_by("src_id")
        .agg(pl.col("dur_ns").sum().cast(pl.Int64).alias("trace_ns"))
        .rename({"src_id": "event_id"})
    )


def cross_check(
    frames: TraceFrames,
    system_by_op: pl.DataFrame,
    device_by_driver: pl.DataFrame,
    executions: pl.DataFrame,
) -> CrossCheck:
    """Compare trace.json's per-op device time with the system trace's.

    Args:
        frames: the trace's frames, whose device activities hold the driver rows.
        system_by_op: ``event_id`` (op), ``device_ns`` from the system trace
            (:func:`~nprof_report.parse.neuron.device_time_rows`, kind ``op``).
        device_by_driver: :attr:`~nprof_report.parse.neuron.NeuronLinks.device_by_driver`.
        executions: EXECUTIONS of the session.
    """
    trace = trace_device_by_op(frames)
    system = system_by_op.group_by("event_id").agg(
        pl.col("device_ns").sum().cast(pl.Int64).alias("system_ns")
    )
    names = frames.ops.select("event_id", pl.col("name").cast(pl.String))
    both = (
        trace.join(system, on="event_id")
        .join(names, on="event_id", how="left")
        .with_columns((pl.col("trace_ns") - pl.col("system_ns")).alias("diff_ns"))
        .select(list(PER_OP))
        .sort("event_id")
    )
    limit = pl.max_horizontal(pl.lit(AGREE_ABS_NS), pl.col("system_ns") * AGREE_REL)
    disagreeing = both.filter(pl.col("diff_ns").abs() > limit).height
    one = device_by_driver.filter(pl.col("n_executions") == 1).select(
        "event_id", pl.col("exec_keys").list.first().alias("exec_key")
    )
    starts = (
        one.join(executions.select("exec_key", pl.col("start_ns").alias("_sys")), on="exec_key")
        .join(frames.device.select("event_id", "start_ns"), on="event_id")
        .select((pl.col("start_ns") - pl.col("_sys")).alias("offset"))
        .get_column("offset")
    )
    median = starts.median() if len(starts) else None
    max_diff = both.get_column("diff_ns").abs().max() if both.height else 0
    return CrossCheck(
        ops=both.height,
        trace_ns=int(both.get_column("trace_ns").sum()),
        system_ns=int(both.get_column("system_ns").sum()),
        max_diff_ns=int(max_diff) if isinstance(max_diff, int) else 0,
        disagreeing=disagreeing,
        offset_ns=int(median) if isinstance(median, (int, float)) else None,
        only_trace=trace.join(system, on="event_id", how="anti").height,
        only_system=system.join(trace, on="event_id", how="anti").height,
        per_op=both,
    )

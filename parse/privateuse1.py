"""What a trace's ``privateuse1_driver`` rows are: device executions or host-side driver calls.

Kineto writes TorchNeuron's device interaction as ``privateuse1_driver`` rows. PyTorch has typed
them as CPU work (host calls, like ``cudaLaunchKernel``), but pytorch/pytorch PR #186433 maps
``PRIVATEUSE1_DRIVER`` to ``DeviceType.PrivateUse1``: "device-side kernel execution for
PrivateUse1 backends", which ``key_averages()`` then adds to the op that launched it as device
time, like a CUDA kernel (formats.md §9.1). With ``NeuronConfig(correlate_device_time=True)`` the
rows are expected to be executions on stream tracks, aligned to the host clock; older captures
carry host calls. Which one a trace holds is decided here, per trace, from the trace itself:

* **host calls** when a driver row sits on a thread that runs framework ops (a call that thread
  made), when no row is linked to an op, or when every linked row lies inside the op that launched
  it, as a synchronous call must;
* **device executions** when the rows sit on tracks of their own, are linked to ops (``External
  id`` of an op, ``correlation`` shared with a ``privateuse1_runtime`` launch, or an ``ac2g`` flow
  end) and at least one runs past the end of its op: the op returned while it still ran, which a
  call the op made cannot do, and an asynchronous device execution does.

As device executions the rows move from the host events to the device activities, so the derived
frames link them to their op through the launch (``correlation``/``ac2g``) or ``External id``
and ``key_averages`` gives their duration to the op as device time; as host calls they stay CPU
rows of their own (``<name> [privateuse1_driver]``). The Neuron system trace then only cross-checks
device time (:mod:`.neuron.crosscheck`); it never adds it a second time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import polars as pl

DRIVER_CAT = "privateuse1_driver"
Meaning = Literal["device", "host", "none"]


@dataclass(frozen=True)
class DriverRows:
    """The decision for one trace.

    Attributes:
        meaning: ``device`` (device executions), ``host`` (host-side driver calls) or ``none``
            (the trace has no ``privateuse1_driver`` rows).
        rows: how many ``privateuse1_driver`` complete events the trace holds.
        evidence: why, in words.
    """

    meaning: Meaning
    rows: int
    evidence: str

    @property
    def note(self) -> str:
        """One line for the report and the ``ops`` output."""
        if self.meaning == "none":
            return ""
        what = (
            "device executions (device time of the op that launched them, as key_averages() "
            "counts PrivateUse1 events)"
            if self.meaning == "device"
            else "host-side driver calls (CPU rows of their own, no device time)"
        )
        return f"{self.rows} privateuse1_driver rows read as {what}: {self.evidence}"


def decide(host: pl.DataFrame, flows: pl.DataFrame) -> DriverRows:
    """Decide what the ``privateuse1_driver`` rows among ``host`` are (module docstring).

    Args:
        host: complete host-class events with ``cls``, ``cat``, ``pid``, ``tid``, ``ts_ns``,
            ``dur_ns``, ``external_id``, ``correlation`` (:class:`~.parts.Parts` ``host``).
        flows: ``ac2g`` flow ends (``ph``, ``flow_id``, ``pid``, ``tid``, ``ts_ns``).
    """
    is_driver = pl.col("cat") == DRIVER_CAT
    drv = host.filter(is_driver)
    n = drv.height
    if n == 0:
        return DriverRows("none", 0, "")
    ops = host.filter(pl.col("cls") == "op")
    op_threads = ops.select("pid", "tid").unique()
    on_op_thread = drv.join(op_threads, on=["pid", "tid"], how="semi", nulls_equal=True).height
    if on_op_thread:
        return DriverRows(
            "host", n, f"{on_op_thread} of them sit on a thread that runs framework ops"
        )
    flow_ends = flows.filter(pl.col("ph") == "f").select("pid", "tid", "ts_ns").unique()
    op_span = (
        ops.filter(pl.col("external_id").is_not_null())
        .unique("external_id", keep="first", maintain_order=True)
        .select("external_id", (pl.col("ts_ns") + pl.col("dur_ns")).alias("_op_end"))
    )
    # the launch a driver row shares its correlation with, and the end of that launch's op
    launches = (
        host.filter((pl.col("cls") == "runtime") & ~is_driver & pl.col("correlation").is_not_null())
        .unique("correlation", keep="first", maintain_order=True)
        .join(op_span, on="external_id", how="left")
        .select("correlation", pl.lit(True).alias("_launched"), pl.col("_op_end").alias("_via"))
    )
    drv = (
        drv.join(op_span, on="external_id", how="left")
        .join(launches, on="correlation", how="left")
        .with_columns(pl.coalesce("_op_end", "_via").alias("_op_end"))
        .join(
            flow_ends.with_columns(pl.lit(True).alias("_flow")),
            on=["pid", "tid", "ts_ns"],
            how="left",
        )
    )
    linked = drv.filter(
        pl.col("_op_end").is_not_null()
        | pl.col("_launched").fill_null(False)
        | pl.col("_flow").fill_null(False)
    )
    if linked.height == 0:
        return DriverRows("host", n, "none is linked to an op (External id, correlation or ac2g)")
    past = linked.filter(
        pl.col("_op_end").is_not_null() & (pl.col("ts_ns") + pl.col("dur_ns") > pl.col("_op_end"))
    ).height
    if past == 0:
        return DriverRows(
            "host",
            n,
            f"{linked.height} are linked to ops on tracks of their own, but each lies inside the "
            "op that launched it, as a synchronous call does",
        )
    return DriverRows(
        "device",
        n,
        f"they sit on tracks of their own, {linked.height} are linked to ops (External id, "
        f"correlation, ac2g) and {past} run past the end of the op that launched them, as "
        "asynchronous device work does (PyTorch PR #186433 types them PrivateUse1)",
    )


def retype(
    host: pl.DataFrame, device: pl.DataFrame, flows: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame, DriverRows]:
    """``(host, device, decision)``: as device executions, the driver rows leave ``host`` for
    ``device`` (with ``device``'s columns); otherwise both frames are returned unchanged."""
    found = decide(host, flows)
    if found.meaning != "device":
        return host, device, found
    is_driver = pl.col("cat") == DRIVER_CAT
    moved = host.filter(is_driver).select(device.columns)
    device = pl.concat([device, moved], how="vertical_relaxed")
    return host.filter(~is_driver), device, found


def device_meaning(device: pl.DataFrame) -> bool:
    """Whether derived device activities hold ``privateuse1_driver`` rows (read as device
    executions by :func:`retype`)."""
    return device.height > 0 and device.filter(pl.col("cat") == DRIVER_CAT).height > 0

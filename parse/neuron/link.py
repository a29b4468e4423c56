"""Correlate Kineto framework events with Neuron system-trace events (formats.md §4).

The chain (§4.1): Kineto ``privateuse1_driver`` event --(``nrt_sequence_id`` in ``flow_id``)-->
``neuron_rt`` rows --(small per-model flow id, qualified by ``model_id``)--> ``nc_exec_running``
rows (one per physical core) --(merge across pcores)--> one execution --(``model_id`` = NEFF hash)
--> NEFF/NTFF files and device profile.

Every function is pure (frames in, frames out). Every link row has a ``method`` column naming how
it was made, so the report can show how far to trust an attribution (§4.2 "practical parse path").

Clocks: Kineto ``ts_ns`` and ``SystemProfileEvents`` times are both Unix-epoch ns (§1.2, §3.2);
hardware rows are already shifted to the host clock by Explorer using ``timestamp_sync_point``.
:func:`clock_alignment` measures, rather than assumes, how well the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from nprof_report.parse.neuron.load import conform

DRIVER_CAT = "privateuse1_driver"
# Kineto arg spellings accepted for the NRT sequence id: the name Explorer displays (§1.11, [IMG])
# and the older framework-mapping name (§3.5). The JSON spelling is unconfirmed (§7.1).
SEQ_ARG_KEYS = ("nrt_sequence_id", "nrta_seq_id", "nrt_seq_id")
# Tolerance when matching a Kineto event to Explorer's framework copy of it by name and time.
FRAMEWORK_MATCH_TOLERANCE_NS = 50_000

DRIVER_EVENTS = pl.Schema(
    {
        "event_id": pl.Int64(),
        "name": pl.String(),
        "pid": pl.String(),
        "tid": pl.String(),
        "start_ns": pl.Int64(),
        "end_ns": pl.Int64(),
        "external_id": pl.Int64(),
        "correlation": pl.Int64(),
        "nrt_sequence_id": pl.String(),
        "neff_cache_key": pl.String(),
    }
)
DRIVER_RT_LINKS = pl.Schema(
    {
        "event_id": pl.Int64(),  # Kineto EVENTS.event_id of the driver event
        "nrt_sequence_id": pl.String(),
        "rt_id": pl.Int64(),  # SYSTEM_EVENTS.event_id of the neuron_rt row
        "rt_name": pl.String(),
        "method": pl.String(),
    }
)
RT_HW_LINKS = pl.Schema(
    {
        "rt_id": pl.Int64(),
        "hw_id": pl.Int64(),
        "exec_key": pl.String(),
        "model_id": pl.String(),
        "flow_id": pl.String(),
        "method": pl.String(),
    }
)
EXECUTIONS = pl.Schema(
    {
        "exec_key": pl.String(),
        "process_id": pl.Int64(),
        "nc_idx": pl.Int64(),
        "model_id": pl.String(),
        "model_name": pl.String(),
        "flow_id": pl.String(),
        "exec_id": pl.Int64(),
        "start_ns": pl.Int64(),
        "end_ns": pl.Int64(),
        "dur_ns": pl.Int64(),  # union of the per-pcore intervals
        "n_rows": pl.UInt32(),
        "pcore_idxs": pl.List(pl.Int64),
        "hw_ids": pl.List(pl.Int64),
        "method": pl.String(),
    }
)
EXEC_FILES = pl.Schema(
    {
        "exec_key": pl.String(),
        "model_id": pl.String(),
        "neff_path": pl.String(),
        "ntff_path": pl.String(),
        "device_profile": pl.String(),
        "device_ns": pl.Int64(),
        # the execution its device profile recorded: in a session profile every one matched to
        # ExecutionInfo; in model mode the (N+1)-th of its model, N =
        # NEURON_RT_INSPECT_DEVICE_PROFILE_NUM_WARMUP (formats.md §9.5)
        "profiled": pl.Boolean(),
        "method": pl.String(),
    }
)


def driver_events(events: pl.DataFrame) -> pl.DataFrame:
    """Kineto ``privateuse1_driver`` complete events with their NRT args (DRIVER_EVENTS)."""
    d = events.filter((pl.col("cat") == DRIVER_CAT) & (pl.col("ph") == "X"))
    seq = pl.coalesce(
        [pl.col("args").str.json_path_match(f"$.{k}") for k in SEQ_ARG_KEYS]
    ).str.replace_all('"', "")
    return conform(
        d.with_columns(
            pl.col("ts_ns").alias("start_ns"),
            (pl.col("ts_ns") + pl.col("dur_ns").fill_null(0)).alias("end_ns"),
            seq.alias("nrt_sequence_id"),
            pl.col("args").str.json_path_match("$.neff_cache_key").alias("neff_cache_key"),
        ),
        DRIVER_EVENTS,
    )


def match_framework_rows(events: pl.DataFrame, sys_events: pl.DataFrame) -> pl.DataFrame:
    """Pair Kineto events with Explorer's ``framework`` copies of them.

    Pairs have the same name and whole-µs duration (a copy keeps its duration; this keeps an op
    from pairing with its same-named runtime/driver event), and the nearest start.

    Returns:
        ``event_id`` (Kineto), ``fw_id`` (SYSTEM_EVENTS), ``cat``, ``offset_ns`` (system minus
        Kineto start), ``fw_flow_ids``; only pairs within FRAMEWORK_MATCH_TOLERANCE_NS.
    """
    k = (
        events.filter((pl.col("ph") == "X") & pl.col("ts_ns").is_not_null())
        .select(
            "event_id",
            pl.col("name", "cat").cast(pl.String),  # Categorical in EVENTS
            pl.col("ts_ns").alias("k_start"),
            (pl.col("dur_ns").fill_null(0) // 1000).alias("dur_us"),
        )
        .sort("k_start")
    )
    fw = (
        sys_events.filter(pl.col("source") == "framework")
        .select(
            pl.col("event_id").alias("fw_id"),
            "name",
            pl.col("start_ns").alias("fw_start"),
            (pl.col("dur_ns").fill_null(0) // 1000).alias("dur_us"),
            pl.col("flow_ids").alias("fw_flow_ids"),
        )
        .sort("fw_start")
    )
    if k.height == 0 or fw.height == 0:
        return pl.DataFrame(
            schema={
                "event_id": pl.Int64(),
                "fw_id": pl.Int64(),
                "cat": pl.String(),
                "offset_ns": pl.Int64(),
                "fw_flow_ids": pl.List(pl.String),
            }
        )
    j = fw.join_asof(
        k,
        left_on="fw_start",
        right_on="k_start",
        by=["name", "dur_us"],
        strategy="nearest",
        tolerance=FRAMEWORK_MATCH_TOLERANCE_NS,
        check_sortedness=False,  # sorted above; polars cannot check it with ``by``
    ).filter(pl.col("event_id").is_not_null())
    # One Kineto event per framework row; keep the closest when two rows claim the same event.
    return (
        j.with_columns((pl.col("fw_start") - pl.col("k_start")).alias("offset_ns"))
        .sort(pl.col("offset_ns").abs())
        .unique("event_id", keep="first")
        .select("event_id", "fw_id", "cat", "offset_ns", "fw_flow_ids")
        .sort("event_id")
    )


def link_driver_to_runtime(events: pl.DataFrame, sys_events: pl.DataFrame) -> pl.DataFrame:
    """Link (a): Kineto driver event -> ``neuron_rt`` rows sharing its NRT sequence id.

    Methods:
        ``nrt_sequence_id=flow_id``: the driver arg is in the runtime row's ``flow_id`` list
        (§4.2, [DOC]+[IMG]). ``nrt_sequence_id=attr``: the runtime row has the id as an attribute.
        ``framework_row+flow_id``: the driver event has no sequence id arg (§7.1); its Explorer
        framework copy (same name, nearest start) supplies the flow id instead.
    """
    drv = driver_events(events)
    rt = sys_events.filter(pl.col("source") == "neuron_rt")
    if drv.height == 0 or rt.height == 0:
        return pl.DataFrame(schema=DRIVER_RT_LINKS)
    rt_flow = rt.select(
        pl.col("event_id").alias("rt_id"), pl.col("name").alias("rt_name"), "flow_ids"
    ).explode("flow_ids")
    rt_flow = rt_flow.rename({"flow_ids": "nrt_sequence_id"}).filter(
        pl.col("nrt_sequence_id").is_not_null()
    )
    rt_attr = rt.filter(pl.col("nrt_sequence_id").is_not_null()).select(
        pl.col("event_id").alias("rt_id"), pl.col("name").alias("rt_name"), "nrt_sequence_id"
    )
    with_seq = drv.filter(pl.col("nrt_sequence_id").is_not_null()).select(
        "event_id", "nrt_sequence_id"
    )
    parts = [
        with_seq.join(rt_flow, on="nrt_sequence_id").with_columns(
            pl.lit("nrt_sequence_id=flow_id").alias("method")
        ),
        with_seq.join(rt_attr, on="nrt_sequence_id").with_columns(
            pl.lit("nrt_sequence_id=attr").alias("method")
        ),
    ]
    missing = drv.filter(pl.col("nrt_sequence_id").is_null())
    if missing.height:
        fw = match_framework_rows(
            events.filter(pl.col("event_id").is_in(missing.get_column("event_id").implode())),
            sys_events,
        )
        via = (
            fw.select("event_id", pl.col("fw_flow_ids").alias("nrt_sequence_id"))
            .explode("nrt_sequence_id")
            .filter(pl.col("nrt_sequence_id").is_not_null())
        )
        parts.append(
            via.join(rt_flow, on="nrt_sequence_id").with_columns(
                pl.lit("framework_row+flow_id").alias("method")
            )
        )
    out = pl.concat([conform(p, DRIVER_RT_LINKS) for p in parts])
    return out.unique(["event_id", "rt_id"], keep="first", maintain_order=True).sort(
        "event_id", "rt_id"
    )


def _hw_rows(sys_events: pl.DataFrame) -> pl.DataFrame:
    hw = sys_events.filter(
        (pl.col("source") == "neuron_hw") & (pl.col("name") == "nc_exec_running")
    )
    # The hardware flow key: the row's whole flow_id list (formats.md §9.7: unique across the
    # models of a session), sorted and joined; exec_id when the list is empty.
    has_flows = pl.col("flow_ids").list.len().fill_null(0) > 0
    return hw.with_columns(
        pl.when(has_flows)
        .then(pl.col("flow_ids").list.sort().list.join(","))
        .otherwise(pl.col("exec_id").cast(pl.String))
        .alias("flow_id"),
        pl.when(has_flows)
        .then(pl.col("flow_ids"))
        .otherwise(pl.concat_list(pl.col("exec_id").cast(pl.String)))
        .alias("_flows"),
    ).with_columns(
        pl.concat_str(
            [
                pl.col("process_id").cast(pl.String).fill_null("?"),
                pl.col("model_id").fill_null("?"),
                pl.col("flow_id").fill_null("?"),
                pl.col("exec_id").cast(pl.String).fill_null("?"),
            ],
            separator=":",
        ).alias("exec_key")
    )


def merge_executions(sys_events: pl.DataFrame) -> pl.DataFrame:
    """Link (c): merge the per-physical-core ``nc_exec_running`` rows of one execution.

    With LNC=2 every execution appears once per physical core (§4.1 step 4, §5.5). Rows are
    grouped by ``(process_id, model_id, flow_id list, exec_id)``; ``dur_ns`` is the length of the union
    of their intervals, ``start_ns``/``end_ns`` its hull. Method ``model_id+flow_id+exec_id``
    ([3P] Tilebench); ``...+single_row`` when only one core reported.
    """
    hw = _hw_rows(sys_events)
    if hw.height == 0:
        return pl.DataFrame(schema=EXECUTIONS)
    hw = hw.sort("exec_key", "start_ns").with_columns(
        pl.col("end_ns").cum_max().shift(1).over("exec_key").alias("_prev_end")
    )
    hw = hw.with_columns(
        (pl.col("_prev_end").is_null() | (pl.col("start_ns") > pl.col("_prev_end")))
        .cast(pl.Int32)
        .cum_sum()
        .over("exec_key")
        .alias("_seg")
    )
    segs = hw.group_by("exec_key", "_seg").agg(
        (pl.col("end_ns").max() - pl.col("start_ns").min()).alias("_len")
    )
    union = segs.group_by("exec_key").agg(pl.col("_len").sum().alias("dur_ns"))
    agg = hw.group_by("exec_key").agg(
        pl.col("process_id").first(),
        pl.col("nc_idx").drop_nulls().first(),
        pl.col("model_id").first(),
        pl.col("model_name").drop_nulls().first(),
        pl.col("flow_id").first(),
        pl.col("exec_id").first(),
        pl.col("start_ns").min(),
        pl.col("end_ns").max(),
        pl.len().alias("n_rows"),
        pl.col("pcore_idx").sort().alias("pcore_idxs"),
        pl.col("event_id").sort().alias("hw_ids"),
    )
    out = agg.join(union, on="exec_key").with_columns(
        pl.when(pl.col("n_rows") > 1)
        .then(pl.lit("model_id+flow_id+exec_id"))
        .otherwise(pl.lit("model_id+flow_id+exec_id(single_row)"))
        .alias("method")
    )
    return conform(out, EXECUTIONS).sort("start_ns", "exec_key")


def link_runtime_to_hw(sys_events: pl.DataFrame) -> pl.DataFrame:
    """Link (b): ``neuron_rt`` row -> ``nc_exec_running`` rows via the per-model flow id.

    The small execution flow id is unique only per model (§4.1 step 4), so candidates (same
    ``process_id`` and flow id) are qualified:

    * ``flow_id+model_id``: the runtime row carries ``model_id`` (e.g. ``nrt_model_submit``);
    * ``flow_id+model_id(sibling)``: a runtime row with the same ``flow_id`` list carries it
      (``kbl_exec_wait`` has none, but shares ``[seq, flow]`` with the submit, §6.2);
    * ``flow_id(unique)``: only one model has that flow id;
    * ``flow_id+nearest_start``: ambiguous; the execution starting nearest after the runtime row.
    """
    hw = _hw_rows(sys_events)
    rt = sys_events.filter(pl.col("source") == "neuron_rt")
    if hw.height == 0 or rt.height == 0:
        return pl.DataFrame(schema=RT_HW_LINKS)
    rt = rt.with_columns(
        pl.col("flow_ids").list.sort().list.join(",").alias("_fkey"),
    )
    sib = (
        rt.filter(pl.col("model_id").is_not_null() & pl.col("_fkey").is_not_null())
        .group_by("process_id", "_fkey")
        .agg(pl.col("model_id").unique().alias("_sib"))
        .filter(pl.col("_sib").list.len() == 1)
        .with_columns(pl.col("_sib").list.first())
    )
    rt = rt.join(sib, on=["process_id", "_fkey"], how="left").with_columns(
        pl.when(pl.col("model_id").is_not_null())
        .then(pl.lit("flow_id+model_id"))
        .when(pl.col("_sib").is_not_null())
        .then(pl.lit("flow_id+model_id(sibling)"))
        .alias("_qual"),
        pl.coalesce("model_id", "_sib").alias("_model"),
    )
    rt_x = rt.select(
        pl.col("event_id").alias("rt_id"),
        "process_id",
        pl.col("start_ns").alias("rt_start"),
        "_model",
        "_qual",
        pl.col("flow_ids").alias("flow_id"),
    ).explode("flow_id")
    # a runtime row's flow id meets every hardware row whose flow list holds it
    cand = rt_x.rename({"flow_id": "_flows"}).join(
        hw.select(
            pl.col("event_id").alias("hw_id"),
            "process_id",
            "_flows",
            "flow_id",
            "exec_key",
            "model_id",
            pl.col("start_ns").alias("hw_start"),
        ).explode("_flows"),
        on=["process_id", "_flows"],
    )
    if cand.height == 0:
        return pl.DataFrame(schema=RT_HW_LINKS)
    qualified = cand.filter(
        pl.col("_model").is_not_null() & (pl.col("model_id") == pl.col("_model"))
    ).with_columns(pl.col("_qual").alias("method"))
    rest = cand.filter(pl.col("_model").is_null())
    n_models = rest.group_by("rt_id").agg(pl.col("model_id").n_unique().alias("_n"))
    rest = rest.join(n_models, on="rt_id")
    unique = rest.filter(pl.col("_n") == 1).with_columns(pl.lit("flow_id(unique)").alias("method"))
    amb = rest.filter(pl.col("_n") > 1).with_columns(
        (pl.col("hw_start") - pl.col("rt_start")).alias("_gap")
    )
    # Prefer executions starting after the runtime row; then the smallest gap.
    best = (
        amb.sort(pl.col("_gap") < 0, pl.col("_gap").abs())
        .group_by("rt_id", maintain_order=True)
        .first()
        .select("rt_id", pl.col("exec_key").alias("_best"))
    )
    nearest = (
        amb.join(best, on="rt_id")
        .filter(pl.col("exec_key") == pl.col("_best"))
        .with_columns(pl.lit("flow_id+nearest_start").alias("method"))
    )
    out = pl.concat([conform(p, RT_HW_LINKS) for p in (qualified, unique, nearest)])
    return out.unique(["rt_id", "hw_id"], maintain_order=True).sort("rt_id", "hw_id")


def mixed_flow_warnings(sys_events: pl.DataFrame) -> list[str]:
    """Hardware flow-id lists that hold executions of more than one model.

    A third-party parser written against real output treats such a list as an error (§9.7);
    executions stay apart here (their key includes ``model_id``) and the report says so.
    """
    hw = _hw_rows(sys_events)
    mixed = (
        hw.group_by("process_id", "flow_id")
        .agg(pl.col("model_id").drop_nulls().n_unique().alias("_n"))
        .filter(pl.col("_n") > 1)
        .sort("process_id", "flow_id")
    )
    return [
        f"process {pid}: nc_exec_running flow ids [{flow}] hold executions of {n} models; "
        "they are kept apart by model_id"
        for pid, flow, n in mixed.iter_rows()
    ]


def link_executions_to_files(
    executions: pl.DataFrame,
    neffs: list[tuple[str, str]],
    ntffs: list[tuple[str | None, str, bool]],
    summary: pl.DataFrame,
    execution_info: pl.DataFrame,
    num_warmup: int = 0,
) -> pl.DataFrame:
    """Link (d): execution -> NEFF / NTFF files and device-profile time.

    Args:
        executions: EXECUTIONS.
        neffs: ``(model_id, path)`` of the session's NEFFs.
        ntffs: ``(model_id or None, path, is_session)`` of the session's NTFFs.
        summary: DEVICE_SUMMARY (model-mode profiles carry ``model_id``).
        execution_info: DEVICE_EXECUTION_INFO (session profiles: one row per execution).

    Device time per execution (``device_ns``): in a session profile the n-th execution of a model
    is matched to the n-th ``ExecutionInfo`` row naming its NEFF (method ``execution_info_order``,
    §4.2); otherwise ``Summary.total_time`` of the model's profile, which covers the one profiled
    execution (model mode, §2.7), is used (``summary_total_time``). That one execution is the
    model's ``num_warmup + 1``-th in the system trace (``NEURON_RT_INSPECT_DEVICE_PROFILE_NUM_WARMUP``,
    §9.5); ``profiled`` marks it.
    """
    if executions.height == 0:
        return pl.DataFrame(schema=EXEC_FILES)
    neff_df = pl.DataFrame(
        {"model_id": [m for m, _ in neffs], "neff_path": [p for _, p in neffs]},
        schema={"model_id": pl.String(), "neff_path": pl.String},
    ).unique("model_id", keep="first", maintain_order=True)
    model_ntff = [(m, p) for m, p, s in ntffs if m is not None and not s]
    ntff_df = pl.DataFrame(
        {"model_id": [m for m, _ in model_ntff], "ntff_path": [p for _, p in model_ntff]},
        schema={"model_id": pl.String(), "ntff_path": pl.String},
    ).unique("model_id", keep="first", maintain_order=True)
    session_ntff = next((p for m, p, s in ntffs if s), None)
    ex = executions.select("exec_key", "model_id", "start_ns").sort("start_ns")
    ex = ex.with_columns(pl.int_range(pl.len()).over("model_id").alias("_nth"))
    ex = ex.join(neff_df, on="model_id", how="left").join(ntff_df, on="model_id", how="left")

    # Only session profiles map executions by order: a model-mode profile (its Summary names one
    # model) holds the first execution of its NEFF, often in warm-up (§2.7).
    model_profiles = summary.filter(pl.col("model_id").is_not_null()).get_column("profile")
    info = execution_info.filter(
        pl.col("model_id").is_not_null() & ~pl.col("profile").is_in(model_profiles.implode())
    ).sort("profile", "execution_index")
    info = info.with_columns(pl.int_range(pl.len()).over("model_id").alias("_nth")).select(
        "model_id",
        "_nth",
        pl.col("profile").alias("_info_profile"),
        (pl.col("execution_end_dev_ns") - pl.col("execution_start_dev_ns")).alias("_info_ns"),
    )
    summ = (
        summary.filter(pl.col("model_id").is_not_null())
        .group_by("model_id", maintain_order=True)
        .agg(pl.col("profile").first().alias("_sum_profile"), pl.col("total_time_ns").first())
    )
    ex = ex.join(info, on=["model_id", "_nth"], how="left").join(summ, on="model_id", how="left")
    has_info = pl.col("_info_ns").is_not_null()
    has_sum = pl.col("total_time_ns").is_not_null()
    ex = ex.with_columns(
        pl.when(pl.col("ntff_path").is_null() & has_info)
        .then(pl.lit(session_ntff, pl.String))
        .otherwise(pl.col("ntff_path"))
        .alias("ntff_path"),
        pl.coalesce("_info_profile", "_sum_profile").alias("device_profile"),
        (has_info | (has_sum & (pl.col("_nth") == num_warmup))).alias("profiled"),
        pl.when(has_info)
        .then(pl.col("_info_ns"))
        .otherwise(pl.col("total_time_ns"))
        .alias("device_ns"),
        pl.concat_str(
            [
                pl.when(pl.col("neff_path").is_not_null())
                .then(pl.lit("model_id=neff_hash"))
                .otherwise(pl.lit("no_neff")),
                pl.when(has_info)
                .then(pl.lit("execution_info_order"))
                .when(has_sum)
                .then(pl.lit("summary_total_time"))
                .otherwise(pl.lit("no_device_profile")),
            ],
            separator="+",
        ).alias("method"),
    )
    return conform(ex, EXEC_FILES).sort("exec_key")


def device_time_by_driver_event(
    drv_rt: pl.DataFrame, rt_hw: pl.DataFrame, executions: pl.DataFrame
) -> pl.DataFrame:
    """Per Kineto driver event: the merged device time of the executions it led to.

    Returns:
        ``event_id``, ``device_ns`` (sum of distinct executions' union durations),
        ``n_executions``, ``exec_keys`` (List(String)), ``method`` (the link methods joined
        with ``>``, e.g. ``nrt_sequence_id=flow_id>flow_id+model_id>model_id+flow_id+exec_id``).
    """
    schema = {
        "event_id": pl.Int64(),
        "device_ns": pl.Int64(),
        "n_executions": pl.UInt32(),
        "exec_keys": pl.List(pl.String),
        "method": pl.String(),
    }
    if drv_rt.height == 0 or rt_hw.height == 0:
        return pl.DataFrame(schema=schema)
    j = (
        drv_rt.select("event_id", "rt_id", pl.col("method").alias("m_a"))
        .join(rt_hw.select("rt_id", "exec_key", pl.col("method").alias("m_b")), on="rt_id")
        .join(executions.select("exec_key", "dur_ns", pl.col("method").alias("m_c")), on="exec_key")
    )
    per_exec = j.group_by("event_id", "exec_key").agg(
        pl.col("dur_ns").first(),
        pl.concat_str(["m_a", "m_b", "m_c"], separator=">").sort().first().alias("method"),
    )
    out = per_exec.group_by("event_id").agg(
        pl.col("dur_ns").sum().alias("device_ns"),
        pl.len().alias("n_executions"),
        pl.col("exec_key").sort().alias("exec_keys"),
        pl.col("method").unique().sort().str.join("|").alias("method"),
    )
    return out.select(list(schema)).cast(schema).sort("event_id")  # type: ignore[arg-type]


@dataclass(frozen=True)
class ClockAlignment:
    """Measured agreement of the Kineto and Neuron clocks (§7.11).

    Attributes:
        framework_matches: Kineto events paired with Explorer's framework copies.
        framework_offset_ns: median (system - Kineto) start offset of those pairs; null if none.
        framework_error_ns: largest absolute offset over the pairs (the alignment error).
        sync_points: ``timestamp_sync_point`` rows seen.
        sync_checked: hardware rows whose device timestamp could be re-mapped.
        sync_residual_ns: largest |start_ns - (sync_cpu + (nc_start - sync_nc))| over them.
    """

    framework_matches: int
    framework_offset_ns: int | None
    framework_error_ns: int | None
    sync_points: int
    sync_checked: int
    sync_residual_ns: int | None


def clock_alignment(events: pl.DataFrame, sys_events: pl.DataFrame) -> ClockAlignment:
    """Measure host/device and trace.json/system-trace clock agreement.

    Two checks: (1) the same framework event appears in ``trace.json`` and, as Explorer's
    ``<name> [trace.json]`` copy, in SystemProfileEvents: compare their starts; (2) hardware rows
    carrying ``nc_start_timestamp_ns`` (§5.3) are re-mapped with the latest preceding
    ``timestamp_sync_point`` (``adjusted = cpu + (dev - nc)``, §4.2) and compared with
    ``start_ns``.
    """
    fw = match_framework_rows(events, sys_events) if events.height else None
    offs = fw.get_column("offset_ns") if fw is not None else pl.Series([], dtype=pl.Int64)
    sync = (
        sys_events.filter(pl.col("name") == "timestamp_sync_point")
        .select(
            pl.col("extra_json")
            .str.json_path_match("$.cpu_timestamp_ns")
            .cast(pl.Int64, strict=False)
            .alias("cpu"),
            pl.col("extra_json")
            .str.json_path_match("$.nc_timestamp_ns")
            .cast(pl.Int64, strict=False)
            .alias("nc"),
        )
        .drop_nulls()
        .sort("nc")
    )
    hw = (
        sys_events.filter(pl.col("source") == "neuron_hw")
        .select(
            "start_ns",
            pl.col("extra_json")
            .str.json_path_match("$.nc_start_timestamp_ns")
            .cast(pl.Int64, strict=False)
            .alias("dev"),
        )
        .drop_nulls()
        .sort("dev")
    )
    residual: int | None = None
    checked = 0
    if sync.height and hw.height:
        j = hw.join_asof(sync, left_on="dev", right_on="nc", strategy="backward").drop_nulls()
        checked = j.height
        if checked:
            r = (j["start_ns"] - (j["cpu"] + (j["dev"] - j["nc"]))).abs().max()
            residual = int(r) if isinstance(r, int) else None
    med = offs.median() if len(offs) else None
    mx = offs.abs().max() if len(offs) else None
    return ClockAlignment(
        framework_matches=len(offs),
        framework_offset_ns=int(med) if isinstance(med, (int, float)) else None,
        framework_error_ns=int(mx) if isinstance(mx, (int, float)) else None,
        sync_points=sys_events.filter(pl.col("name") == "timestamp_sync_point").height,
        sync_checked=checked,
        sync_residual_ns=residual,
    )

"""The offline equivalent of ``prof.key_averages()`` for a trace file.

The rules are PyTorch's (``_parse_kineto_results`` in ``torch/autograd/profiler.py`` and
``EventList`` / ``FunctionEvent`` in ``torch/autograd/profiler_util.py``), written down in
``RULES.md`` beside this module:

1. events named in :data:`~.classify.FILTERED_NAMES` are dropped; ``ProfilerStep#N`` is
   renamed ``ProfilerStep*``;
2. CPU-typed events nest per thread (:mod:`.nesting`);
3. ``_remove_dup_nodes``: an event whose direct parent has the same name and which is that
   parent's only child is removed; its children move to the parent and its device activities
   replace the parent's. Repeated until nothing changes;
4. ``Self CPU`` = duration - children's durations; device activities linked to a scope are its
   "kernels" (:mod:`.kineto`'s op->device links, and PyTorch's id collision,
   :func:`_shared_ids`); ``device total`` = own kernels + children's device total; ``self
   device`` = own kernels. Device activities also form rows of their own, with device time only,
   under the device type PyTorch prints (:func:`~.classify.device_types`);
5. rows are grouped by name, device type and whether the event is a user annotation.

Deliberate difference: a runtime or driver call that carries an op's name (TorchNeuron's
``privateuse1_*`` events) is listed as ``<name> [<category>]`` instead of folding into the op's
row.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import polars as pl

from nprof_report.parse.classify import FILTERED_NAMES, device_types, lost_link
from nprof_report.parse.nesting import climb, give_back_freed, levels, positions, rows_of
from nprof_report.parse.schema import TraceFrames

KEY_AVERAGES = pl.Schema(
    {
        "name": pl.String,
        "device_type": pl.String,
        "is_user_annotation": pl.Boolean,
        "calls": pl.Int64,
        "self_cpu_us": pl.Float64,
        "cpu_total_us": pl.Float64,
        "self_device_us": pl.Float64,
        "device_total_us": pl.Float64,
    }
)


_SUMS = ("self_cpu", "cpu_total", "self_device", "device_total")


def _key(name: pl.Expr) -> pl.Expr:
    return (
        pl.when(name.cat.starts_with("ProfilerStep#"))
        .then(pl.lit("ProfilerStep*", pl.Categorical()))
        .otherwise(name)
        .alias("name")
    )


def _codes(s: pl.Series) -> np.ndarray:
    """Integer codes of equal strings (equal strings, equal codes)."""
    return s.cast(pl.Categorical).to_physical().to_numpy().astype(np.int64, copy=False)


def _reparent(
    all_ops: pl.DataFrame, all_ids: np.ndarray, filtered: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Ops kept (not filtered out), and each kept op's parent as a row among the kept (-1: top).

    Filtered events are gone: an op is re-parented to its nearest surviving ancestor.
    ``all_ids``: the ops' event ids.
    """
    all_parent = rows_of(
        all_ids, all_ops["parent_id"].fill_null(-1).to_numpy().astype(np.int64, copy=False)
    )
    keep = ~all_ops["name"].is_in(filtered).fill_null(False).to_numpy()
    if keep.all():  # nothing to re-parent (most traces): the rows are those of all the ops
        return keep, all_parent
    up = climb(all_parent, all_parent, ~keep)
    del all_parent
    rows = np.flatnonzero(keep)
    new_row = np.full(len(all_ids), -1, dtype=np.int64)
    new_row[rows] = np.arange(len(rows))
    up = up[rows]
    return keep, np.where(up >= 0, new_row[np.maximum(up, 0)], -1)


def _of_kept(column: pl.Series, keep: np.ndarray) -> np.ndarray:
    """``column``'s values of the ops ``keep`` marks: the frame's own memory, not a copy, where
    every op is kept (most traces)."""
    return (column if keep.all() else column.filter(pl.Series(keep))).to_numpy()


def _kernel_ns(
    ids: np.ndarray, links: pl.DataFrame, device: pl.DataFrame, shared: pl.DataFrame
) -> np.ndarray:
    """Each op's own kernel time (by row of ``ids``, the ops' event ids): the device activities
    linked to it (op->device) and those PyTorch also gives it (``shared``, :func:`_shared_ids`),
    as exact integer sums. An array, not a joined frame: one value per op is all that is kept."""
    kern = np.zeros(len(ids), dtype=np.int64)
    linked = (
        links.lazy()
        .filter(pl.col("kind") == "op->device")
        .join(device.lazy().select(pl.col("event_id").alias("dst_id"), "dur_ns"), on="dst_id")
        .select("src_id", "dur_ns")
        .collect()
    )
    for frame in (linked, shared):
        _add_by_id(
            kern,
            ids,
            frame["src_id"].fill_null(-1).to_numpy().astype(np.int64, copy=False),
            frame["dur_ns"].fill_null(0).to_numpy().astype(np.int64, copy=False),
        )
    return kern


def _add_by_id(into: np.ndarray, ids: np.ndarray, keys: np.ndarray, values: np.ndarray) -> None:
    """Add each value to ``into`` at the row of its key in ``ids`` (keys not there: dropped)."""
    rows = rows_of(ids, keys)
    found = rows >= 0
    np.add.at(into, rows[found], values[found])


def _shared_ids(ops: pl.DataFrame, links: pl.DataFrame, device: pl.DataFrame) -> pl.DataFrame:
    """The device time PyTorch gives CPU events other than an activity's op (``src_id, dur_ns``).

    ``_parse_kineto_results`` hands a device activity to *every* CPU event whose id is the
    activity's linked id, not only to the scope that launched it: to a second scope with the same
    External id, and to a runtime call that no scope launched, which is one of those CPU events
    under its CUPTI correlation id (the id collision of ``RULES.md`` §4: its ancestors then count
    the time twice). An activity linked to no scope still has its External id as linked id (in
    the layouts that kept the link). ``ops`` prints what PyTorch prints, so the same rows get the
    same time; the links are not changed.
    """
    ids = ops["event_id"].to_numpy().astype(np.int64, copy=False)
    runtime = (ops["cls"] == "runtime").to_numpy()
    lost = lost_link(ops.filter(pl.Series(runtime)).select("external_id", "correlation"))
    op_dev = links.filter(pl.col("kind") == "op->device").select("src_id", "dst_id")
    # each activity's linked id: its scope's External id, else (link kept) its own
    scope_row = rows_of(ids, op_dev["src_id"].to_numpy().astype(np.int64, copy=False))
    ext = ops["external_id"].fill_null(-1).to_numpy()
    by_link = pl.DataFrame(
        {"event_id": op_dev["dst_id"], "_src": op_dev["src_id"], "_id": ext[scope_row]}
    )
    acts = device.select("event_id", "dur_ns", pl.col("external_id").alias("_own"), "cat").join(
        by_link, on="event_id", how="left"
    )
    own = (
        pl.col("_own") if not lost else pl.when(pl.col("cat") == "gpu_user_annotation").then("_own")
    )
    acts = acts.select(
        "dur_ns",
        "_src",
        pl.when(pl.col("_src").is_not_null()).then("_id").otherwise(own).alias("_id"),
    ).filter(pl.col("_id") > 0)
    if acts.is_empty():
        return pl.DataFrame(schema={"src_id": pl.Int64, "dur_ns": pl.Int64})
    # the CPU events PyTorch keys by id: scopes it keeps, by External id; runtime calls linked to
    # no scope, by correlation id. Only those with an id some activity has: the join with all of
    # them (1.4 M rows on a 530 MB trace) was key_averages' peak (421 MiB live, then 403)
    wanted = acts["_id"].unique().implode()
    linked_calls = links.filter(pl.col("kind") == "op->runtime")["dst_id"]
    unlinked = ~pl.col("event_id").is_in(linked_calls.implode())
    no_ext = pl.col("external_id").is_null() | (pl.col("external_id") == 0)
    frontend = pl.concat(
        [
            ops.filter(
                pl.col("cls").is_in(["op", "annotation"])
                & pl.col("external_id").is_in(wanted)
                & ~pl.col("name").is_in(list(FILTERED_NAMES)).fill_null(False)
            ).select(pl.col("event_id").alias("src_id"), pl.col("external_id").alias("_id")),
            ops.filter(
                (pl.col("cls") == "runtime")
                & pl.col("correlation").is_in(wanted)
                & (unlinked if lost else no_ext)
            ).select(pl.col("event_id").alias("src_id"), pl.col("correlation").alias("_id")),
        ]
    )
    return (
        acts.join(frontend, on="_id")
        .filter(pl.col("src_id").ne_missing(pl.col("_src")))
        .select(pl.col("src_id").cast(pl.Int64), pl.col("dur_ns").cast(pl.Int64))
    )


def key_averages(
    frames: TraceFrames, extra_device_ns: Mapping[int, int] | None = None
) -> pl.DataFrame:
    """One row per key, like ``prof.key_averages()``, in ``KEY_AVERAGES`` schema (µs floats).

    ``extra_device_ns`` adds device time to ops by ``event_id`` from outside the trace (the
    Neuron system trace); it counts as the op's own kernels. Rows are sorted by self CPU time,
    descending, then by name.

    The rules of the module docstring, computed on arrays: the dup-node rule (3) removes every
    op whose parent (nearest surviving ancestor) has its name and exactly one child -- applied
    repeatedly, a chain of same-name only children folds into its top op, which takes the
    children and the kernels of the chain's last op; device totals accumulate leaves first.
    """
    filtered = list(FILTERED_NAMES)
    all_ops = frames.ops
    device = frames.device.select("event_id", "name", "cat", "dur_ns", "external_id").filter(
        ~pl.col("name").is_in(filtered)
    )
    ids = all_ops["event_id"].to_numpy().astype(np.int64, copy=False)
    kern_all = _kernel_ns(ids, frames.links, device, _shared_ids(all_ops, frames.links, device))
    if extra_device_ns:
        extra = np.fromiter(extra_device_ns, np.int64, len(extra_device_ns))
        _add_by_id(kern_all, ids, extra, np.fromiter(extra_device_ns.values(), np.int64))
    keep, parent = _reparent(all_ops, ids, filtered)
    del ids
    kern = kern_all if keep.all() else kern_all[keep]
    del kern_all
    give_back_freed()

    # A runtime/driver call named like an op (TorchNeuron names them after the aten op) gets its
    # category appended, so its row does not fold into the op's row.
    kept = pl.Series(keep)
    ops = all_ops.select("name", "cls", "cat").filter(kept)
    op_names = ops.filter(pl.col("cls") != "runtime")["name"].unique()
    clash = ops.select(
        pl.arg_where((pl.col("cls") == "runtime") & pl.col("name").is_in(op_names.implode()))
    ).to_series()
    name = ops["name"]
    if len(clash):  # only those rows are formatted: a name column of text would be large
        renamed = ops[clash].select(
            pl.format("{} [{}]", "name", pl.col("cat").fill_null("None")).cast(pl.Categorical())
        )
        name = name.scatter(clash, renamed.to_series())
    ann = (ops["cls"] == "annotation").fill_null(False)
    del ops, op_names, clash
    n = len(name)
    # PyTorch compares the names it prints (``ProfilerStep#N`` as ``ProfilerStep*``)
    code = _codes(pl.select(_key(pl.lit(name))).to_series())
    has_parent = parent >= 0
    par0 = np.maximum(parent, 0)
    n_children = np.bincount(parent[has_parent], minlength=n)
    removed = has_parent & (code == code[par0]) & (n_children[par0] == 1)
    del code, par0, n_children, has_parent  # the arrays are per op: free what is done
    alive = ~removed
    # each chain's last removed op hands its kernels to the chain's top (surviving) op
    has_removed_child = np.bincount(parent[removed], minlength=n) > 0
    bottoms = np.flatnonzero(removed & ~has_removed_child)
    tops = climb(parent, parent[bottoms], removed)
    kern[tops] = kern[bottoms]
    eff = climb(parent, parent, removed)  # the surviving parent of a surviving op
    del parent, has_removed_child, bottoms, tops, removed

    child = np.flatnonzero(alive & (eff >= 0)).astype(positions(n))  # levels' copy: as narrow
    dur = _of_kept(all_ops["dur_ns"], keep).astype(np.int64, copy=False)
    child_cpu = np.zeros(n, dtype=np.int64)
    np.add.at(child_cpu, eff[child], dur[child])
    # the surviving ops' values are taken from each per-op array as soon as it is complete, and
    # the totals summed in the kernels' own array: fewer arrays of every op at once
    self_device = kern[alive]
    total = kern
    total[~alive] = 0
    del kern
    depth = _of_kept(all_ops["depth"], keep)
    for level in levels(child, depth):
        np.add.at(total, eff[level], total[level])
    del eff, child, depth, kept, keep
    device_total = total[alive]
    del total
    cpu_total = dur[alive]
    self_cpu = child_cpu[alive]
    del dur, child_cpu
    np.subtract(cpu_total, self_cpu, out=self_cpu)
    live_rows = pl.Series(alive)
    del alive
    give_back_freed()

    name, ann = name.filter(live_rows), ann.filter(live_rows)
    # by name and annotation first, as one integer per row (Categorical code, flag): a group_by on
    # one integer column took a third of the memory of one on the two columns (20 against
    # 50-57 MiB for 1.2 M rows); then the few groups by key: the same first-seen order and the
    # same integer sums as grouping every row by its key
    pair = name.to_physical().cast(pl.Int64).fill_null(-1).to_numpy() * 2 + ann.to_numpy()
    groups = (
        pl.DataFrame(
            {
                "pair": pair,
                "self_cpu": self_cpu,
                "cpu_total": cpu_total,
                "self_device": self_device,
                "device_total": device_total,
            }
        )
        .with_row_index("_first")
        .group_by("pair", maintain_order=True)
        .agg(pl.len().cast(pl.Int64).alias("calls"), pl.col("_first").first(), pl.col(_SUMS).sum())
    )
    del pair, self_cpu, cpu_total, self_device, device_total
    give_back_freed()
    cpu = (
        groups.select(
            name.gather(groups["_first"]).alias("name"),
            ann.gather(groups["_first"]).alias("ann"),
            "calls",
            *_SUMS,
        )
        .group_by(_key(pl.col("name")), "ann", maintain_order=True)
        .agg(pl.col("calls", *_SUMS).sum())
        .with_columns(device_type=pl.lit("CPU"))
    )
    categories = {
        str(c) for f in (all_ops, device) for c in f["cat"].drop_nulls().unique().to_list()
    }
    dev = (
        device.select(
            _key(pl.col("name")).alias("name"),
            (pl.col("cat") == "gpu_user_annotation").fill_null(False).alias("ann"),
            pl.col("cat")
            .cast(pl.String)
            .replace_strict(device_types(categories), default="CUDA")
            .alias("device_type"),
            pl.col("dur_ns").cast(pl.Int64),
        )
        .group_by("name", "device_type", "ann", maintain_order=True)
        .agg(pl.len().cast(pl.Int64).alias("calls"), pl.col("dur_ns").sum())
        .select(
            "name",
            "ann",
            "calls",
            pl.lit(0, pl.Int64).alias("self_cpu"),
            pl.lit(0, pl.Int64).alias("cpu_total"),
            pl.col("dur_ns").alias("self_device"),
            pl.col("dur_ns").alias("device_total"),
            "device_type",
        )
    )
    both = pl.concat([cpu, dev.select(cpu.columns)])
    table = pl.DataFrame(
        {
            "name": both["name"],
            "device_type": both["device_type"],
            "is_user_annotation": both["ann"],
            "calls": both["calls"],
            # true division of the exact integer sums, as Python's ``ns / 1000``
            **{
                f"{col}_us": both[col].cast(pl.Float64).to_numpy() / 1000.0
                for col in ("self_cpu", "cpu_total", "self_device", "device_total")
            },
        },
        schema=KEY_AVERAGES,
    )
    return table.sort(["self_cpu_us", "device_total_us", "name"], descending=[True, True, False])

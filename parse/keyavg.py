"""The offline equivalent of ``prof.key_averages()`` for a trace file.

The rules are PyTorch's (``_parse_kineto_results`` in ``torch/autograd/profiler.py`` and
``EventList`` / ``FunctionEvent`` in ``torch/autograd/profiler_util.py``, formats.md 1.10):

1. events named in :data:`~.classify.FILTERED_NAMES` are dropped; ``ProfilerStep#N`` is
   renamed ``ProfilerStep*``;
2. CPU-typed events nest per thread (:mod:`.kineto`);
3. ``_remove_dup_nodes``: an event whose direct parent has the same name and which is that
   parent's only child is removed; its children move to the parent and its device activities
   replace the parent's. Repeated until nothing changes;
4. ``Self CPU`` = duration - children's durations; device activities linked to an op are its
   "kernels"; ``device total`` = own kernels + children's device total; ``self device`` = own
   kernels. Device activities also form rows of their own, with device time only;
5. rows are grouped by name, device type and whether the event is a user annotation.

Deliberate differences: a runtime or driver call that carries an op's name (TorchNeuron's
``privateuse1_*`` events) is listed as ``<name> [<category>]`` instead of folding into the op's
row; and PyTorch keys CPU events by their own correlation id when it attaches
kernels, so a runtime call whose CUPTI correlation id happens to equal an op's id can receive
that op's kernels too; we attach device time only along the links parse established.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import polars as pl

from nprof_report.parse.classify import FILTERED_NAMES
from nprof_report.parse.kineto import TraceFrames

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


@dataclass
class _Node:
    name: str
    dur_ns: int
    parent: int | None
    children: list[int]
    kernels_ns: int
    annotation: bool


def _key(name: str) -> str:
    return "ProfilerStep*" if name.startswith("ProfilerStep#") else name


def key_averages(
    frames: TraceFrames, extra_device_ns: Mapping[int, int] | None = None
) -> pl.DataFrame:
    """One row per key, like ``prof.key_averages()``, in ``KEY_AVERAGES`` schema (µs floats).

    ``extra_device_ns`` adds device time to ops by ``event_id`` from outside the trace (the
    Neuron system trace); it counts as the op's own kernels. Rows are sorted by self CPU time,
    descending, then by name.
    """
    ops = frames.ops.filter(~pl.col("name").is_in(list(FILTERED_NAMES)))
    device = frames.device.filter(~pl.col("name").is_in(list(FILTERED_NAMES)))
    kernels = (
        frames.links.filter(pl.col("kind") == "op->device")
        .join(device.select(pl.col("event_id").alias("dst_id"), "dur_ns"), on="dst_id")
        .group_by("src_id")
        .agg(pl.col("dur_ns").sum())
    )
    kernel_ns = dict(zip(kernels["src_id"].to_list(), kernels["dur_ns"].to_list()))
    for eid, ns in (extra_device_ns or {}).items():
        kernel_ns[eid] = kernel_ns.get(eid, 0) + ns
    ids = ops["event_id"].to_list()
    index = {eid: i for i, eid in enumerate(ids)}
    # A runtime/driver call named like an op (TorchNeuron names them after the aten op) gets its
    # category appended, so its row does not fold into the op's row.
    op_names = set(ops.filter(pl.col("cls") != "runtime")["name"].to_list())
    names = [
        f"{n} [{c}]" if k == "runtime" and n in op_names else n
        for n, c, k in zip(ops["name"].to_list(), ops["cat"].to_list(), ops["cls"].to_list())
    ]
    nodes = [
        _Node(name, dur, None, [], kernel_ns.get(eid, 0), cls == "annotation")
        for eid, name, dur, cls in zip(ids, names, ops["dur_ns"].to_list(), ops["cls"].to_list())
    ]
    # Filtered events are gone: re-parent to the nearest surviving ancestor.
    parent_of = dict(zip(frames.ops["event_id"].to_list(), frames.ops["parent_id"].to_list()))
    for i, eid in enumerate(ids):
        p = parent_of[eid]
        while p is not None and p not in index:
            p = parent_of.get(p)
        if p is not None:
            nodes[i].parent = index[p]
            nodes[index[p]].children.append(i)
    alive = _remove_dup_nodes(nodes)
    device_total = _device_totals(nodes, alive)

    rows: dict[tuple[str, str, bool], list[float]] = {}
    for i in alive:
        n = nodes[i]
        child_cpu = sum(nodes[c].dur_ns for c in n.children)
        child_dev = sum(device_total[c] for c in n.children)
        row = rows.setdefault((_key(n.name), "CPU", n.annotation), [0, 0.0, 0.0, 0.0, 0.0])
        row[0] += 1
        row[1] += n.dur_ns - child_cpu
        row[2] += n.dur_ns
        row[3] += device_total[i] - child_dev
        row[4] += device_total[i]
    for name, dur, cat in zip(
        device["name"].to_list(), device["dur_ns"].to_list(), device["cat"].to_list()
    ):
        row = rows.setdefault(
            (_key(name), "device", cat == "gpu_user_annotation"), [0, 0.0, 0.0, 0.0, 0.0]
        )
        row[0] += 1
        row[3] += dur
        row[4] += dur
    table = pl.DataFrame(
        [
            {
                "name": name,
                "device_type": dtype,
                "is_user_annotation": ann,
                "calls": int(v[0]),
                "self_cpu_us": v[1] / 1000,
                "cpu_total_us": v[2] / 1000,
                "self_device_us": v[3] / 1000,
                "device_total_us": v[4] / 1000,
            }
            for (name, dtype, ann), v in rows.items()
        ],
        schema=KEY_AVERAGES,
    )
    return table.sort(["self_cpu_us", "device_total_us", "name"], descending=[True, True, False])


def _remove_dup_nodes(nodes: list[_Node]) -> list[int]:
    """``EventList._remove_dup_nodes``: same-name only children fold into their parent."""
    alive = list(range(len(nodes)))
    while True:
        removed = set()
        for i in alive:
            n = nodes[i]
            p = n.parent
            if p is not None and nodes[p].name == n.name and len(nodes[p].children) == 1:
                nodes[p].children = n.children
                nodes[p].kernels_ns = n.kernels_ns
                for c in n.children:
                    nodes[c].parent = p
                removed.add(i)
        if not removed:
            return alive
        alive = [i for i in alive if i not in removed]


def _device_totals(nodes: list[_Node], alive: list[int]) -> dict[int, int]:
    """Device total per node (own kernels + children's), computed leaves first."""
    depth: dict[int, int] = {}
    for i in alive:
        d, p = 0, nodes[i].parent
        while p is not None:
            d, p = d + 1, nodes[p].parent
        depth[i] = d
    total: dict[int, int] = {}
    for i in sorted(alive, key=lambda k: -depth[k]):
        total[i] = nodes[i].kernels_ns + sum(total.get(c, 0) for c in nodes[i].children)
    return total

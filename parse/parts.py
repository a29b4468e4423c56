"""The work rows of a trace, split into what the derived frames are made of.

:func:`split_rows` takes the rows of one batch (or of one worker's part of a large trace,
:mod:`.split`) apart: host events with their class, device activities, ``ac2g`` flow ends and
``ProfilerStep#N`` annotations (``user_annotation``; ``Operator`` in the 2021 layout).
:func:`merge` puts such pieces together into :class:`Parts`, which :mod:`.derive` derives ops,
device activities, links and steps from. Every reading route ends here (:class:`TraceRows`): the
split workers take their rows apart themselves, the sequential routes through
:func:`trace_rows`.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from nprof_report.parse.classify import DEVICE_CATS, KNOWN_CATS, host_class
from nprof_report.parse.schema import STEPS, Trace, TraceMeta, conform

_BATCHES = 8
# the events columns that ops, device activities and links are made of
_WORK_COLUMNS = [
    "event_id",
    "cat",
    "name",
    "pid",
    "tid",
    "ts_ns",
    "dur_ns",
    "external_id",
    "correlation",
]


@dataclass
class Parts:
    """What the derived frames are made of, taken from the events in one pass.

    Mutable so that the derivation can take the frames out of it and let each go when used.
    """

    host: pl.DataFrame  # complete events of CPU-side classes, with ``cls``
    device: pl.DataFrame  # complete device activities
    steps: pl.DataFrame  # STEPS
    flows: pl.DataFrame  # ac2g flow ends: ph, flow_id, pid, tid, ts_ns
    notes: list[str]


@dataclass(frozen=True)
class TraceRows:
    """What a reader hands :func:`~.derive.derive`: the trace's metadata and notes, its work rows
    taken apart, and every event (``EVENTS``) when they were kept (else None)."""

    meta: TraceMeta
    notes: list[str]
    parts: Parts
    events: pl.DataFrame | None


FRAMES = ("host", "device", "flows", "step_rows")


@dataclass
class Pieces:
    """:func:`split_rows` of some rows: the parts before they are merged."""

    host: pl.DataFrame
    device: pl.DataFrame
    flows: pl.DataFrame
    step_rows: pl.DataFrame  # name (text), ts_ns, dur_ns
    categories: list[str]  # every non-null ``cat`` among the rows

    def frames(self) -> dict[str, pl.DataFrame]:
        """The frames by name (:data:`FRAMES`)."""
        return {name: getattr(self, name) for name in FRAMES}


def batches(events: pl.DataFrame) -> list[pl.DataFrame]:
    """Zero-copy slices of ``events`` for :func:`parts_of`, which lets go of each once read."""
    size = max(1, -(-events.height // _BATCHES))
    return [events.slice(i, size) for i in range(0, events.height, size)] or [events]


def trace_rows(trace: Trace) -> TraceRows:
    """The rows of a loaded trace, its events kept."""
    return TraceRows(
        trace.meta, trace.notes, parts_of(batches(trace.events), trace.meta.path.name), trace.events
    )


def parts_of(batches: list[pl.DataFrame], name: str) -> Parts:
    """The parts of the events in ``batches`` (as :func:`batches` cuts them).

    The list is emptied as the batches are read: when the caller holds no other reference to
    the events, their memory goes batch by batch while the parts grow, instead of both being
    held at once.
    """
    return merge([pieces_of(batches)], name)


def pieces_of(batches: list[pl.DataFrame]) -> Pieces:
    """:func:`split_rows` of each batch, put together; the list is emptied as it is read."""
    out = []
    while batches:
        out.append(split_rows(batches.pop(0)))
    return _concat(out)


def _concat(pieces: list[Pieces]) -> Pieces:
    """Pieces in file order, as one."""
    return Pieces(
        **{name: pl.concat([p.frames()[name] for p in pieces], rechunk=False) for name in FRAMES},
        categories=sorted({c for p in pieces for c in p.categories}),
    )


def split_rows(events: pl.DataFrame) -> Pieces:
    """Take ``events`` (``WORK_EVENTS`` or ``EVENTS`` columns) apart."""
    cats = events.select(pl.col("cat").drop_nulls().unique().cast(pl.String)).to_series().to_list()
    mapping = {c: host_class(c) for c in cats}
    cls_of_cat = (
        pl.col("cat").replace_strict(mapping, default=None, return_dtype=pl.Categorical())
        if mapping
        else pl.lit(None, pl.Categorical())
    )
    cls = pl.when(pl.col("cat").is_null()).then(pl.lit(host_class(None), pl.Categorical()))
    batch = events.lazy()
    # only the columns the derived frames use, so no full copy of the events is made
    complete = batch.filter((pl.col("ph") == "X") & pl.col("dur_ns").is_not_null()).select(
        _WORK_COLUMNS
    )
    host, device, flows, step_rows = pl.collect_all(
        [
            complete.with_columns(cls=cls.otherwise(cls_of_cat)).filter(
                pl.col("cls").is_not_null()
            ),
            complete.filter(pl.col("cat").is_in(list(DEVICE_CATS))),
            batch.filter((pl.col("cat") == "ac2g") & pl.col("ph").is_in(["s", "f"])).select(
                "ph", "flow_id", "pid", "tid", "ts_ns"
            ),
            # the 2021 layout wrote the step annotations as ops (``Operator``)
            batch.filter(
                (pl.col("ph") == "X")
                & pl.col("cat").is_in(["user_annotation", "Operator"])
                & pl.col("name").cat.starts_with("ProfilerStep#")
            ).select(pl.col("name").cast(pl.String), "ts_ns", "dur_ns"),
        ]
    )
    return Pieces(host, device, flows, step_rows, cats)


def merge(pieces: list[Pieces], name: str) -> Parts:
    """:class:`Parts` of pieces in file order (``name``: the trace's, for notes)."""
    whole = _concat(pieces)
    notes: list[str] = []
    unknown = [c for c in whole.categories if c not in KNOWN_CATS]
    if unknown:
        notes.append(f"{name}: unknown categories treated as CPU work: {', '.join(unknown)}")
    return Parts(
        # one chunk per column: the columns derive adds are single chunks, and a frame whose
        # columns are chunked differently is copied whole to align them (78 MB more at the peak)
        host=whole.host.rechunk(),
        device=whole.device,
        steps=_steps(whole.step_rows, notes, name),
        flows=whole.flows,
        notes=notes,
    )


def _steps(rows: pl.DataFrame, notes: list[str], name: str) -> pl.DataFrame:
    """``STEPS`` from the step annotations, in time order (ties in file order).

    A step number is a key everywhere after this (per-step rows, ``diff``'s series), so numbers
    that repeat (profiler sessions or processes concatenated in one file) are replaced by 1, 2,
    ... in time order, with a note (``RULES.md`` §8).
    """
    ann = rows.with_columns(step=pl.col("name").str.extract(r"^ProfilerStep#(\d+)$").cast(pl.Int32))
    ann = ann.filter(pl.col("step").is_not_null()).sort("ts_ns", maintain_order=True)
    distinct = ann["step"].n_unique()
    if distinct < ann.height:
        notes.append(
            f"{name}: its {ann.height} ProfilerStep#N annotations carry {distinct} distinct "
            "numbers; the steps are numbered 1 to "
            f"{ann.height} in time order instead"
        )
        ann = ann.with_columns(step=pl.int_range(1, ann.height + 1, dtype=pl.Int32))
    return conform(
        ann.with_columns(
            start_ns=pl.col("ts_ns"),
            end_ns=pl.col("ts_ns") + pl.col("dur_ns"),
        ).with_columns(dur_ns=pl.col("end_ns") - pl.col("start_ns")),
        STEPS,
    )

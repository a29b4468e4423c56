"""Load Neuron device-profile tables and the older framework mapping (formats.md §3.2, §3.4, §3.5).

Device tables are per NEFF/NTFF pair (model mode) or per session NTFF. Their ``start_ts``-like
times are on the **device clock** relative to the profile start (§3.2 "Clocks"), so the columns are
named ``*_dev_ns``; ``Summary`` times are seconds on disk and become ``*_ns`` here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from nprof_report.errors import InputError
from nprof_report.parse.neuron.columns import resolve
from nprof_report.parse.neuron.files import ProfileDir
from nprof_report.parse.neuron.load import conform, read_json, read_parquet

# Device-profile tables (§3.2). Times of Instruction/ExecutionInfo are on the device clock,
# relative to the profile start, hence the ``_dev_ns`` names. Summary times are seconds on disk.
DEVICE_SUMMARY = pl.Schema(
    {
        "model_id": pl.String(),
        "profile": pl.String(),
        "total_time_ns": pl.Int64(),
        "total_active_time_ns": pl.Int64(),
        "tensor_engine_active_time_percent": pl.Float64(),
        "vector_engine_active_time_percent": pl.Float64(),
        "scalar_engine_active_time_percent": pl.Float64(),
        "gpsimd_engine_active_time_percent": pl.Float64(),
        "sync_engine_active_time_percent": pl.Float64(),
        "dma_active_time_percent": pl.Float64(),
        "mfu_estimated_percent": pl.Float64(),
        "hfu_estimated_percent": pl.Float64(),
        "mbu_estimated_percent": pl.Float64(),
        "model_flops": pl.Float64(),
        "hardware_flops": pl.Float64(),
        "hbm_read_bytes": pl.Int64(),
        "hbm_write_bytes": pl.Int64(),
    }
)
DEVICE_INSTRUCTION = pl.Schema(
    {
        "model_id": pl.String(),
        "profile": pl.String(),
        "start_dev_ns": pl.Int64(),
        "end_dev_ns": pl.Int64(),
        "dur_ns": pl.Int64(),
        "engine": pl.String(),
        "timeline_track": pl.String(),
        "pcore_idx": pl.Int64(),
        "opcode": pl.String(),
        "hlo_name": pl.String(),
        "bir_id": pl.String(),
        "raw_flops": pl.Int64(),
        "hbm_read_bytes": pl.Int64(),
        "hbm_write_bytes": pl.Int64(),
    }
)
DEVICE_EXECUTION_INFO = pl.Schema(
    {
        "model_id": pl.String(),
        "profile": pl.String(),
        "execution_index": pl.Int64(),
        "neff_name": pl.String(),
        "execution_start_dev_ns": pl.Int64(),
        "execution_end_dev_ns": pl.Int64(),
        "num_subgraphs": pl.Int64(),
        "row_count": pl.Int64(),
    }
)
FRAMEWORK_MAPPING = pl.Schema(
    {
        "nrt_sequence_id": pl.String(),
        "seq_nr": pl.Int64(),
        "th_id": pl.Int64(),
        "stream_id": pl.Int64(),
    }
)

_NEFF_IN_NAME = re.compile(r"neff_([0-9A-Za-z]+?)(?:_vnc_\d+)?\.neff")


# ----------------------------------------------------------------------------- device tables


def model_id_from_neff_name(name: str | None) -> str | None:
    """``neff_<hash>[_vnc_<n>].neff`` -> ``<hash>`` (§2.6)."""
    if not name:
        return None
    m = _NEFF_IN_NAME.search(name)
    return m.group(1) if m else None


def _seconds_to_ns(col: str) -> pl.Expr:
    return (pl.col(col).cast(pl.Float64, strict=False) * 1e9).round(0).cast(pl.Int64)


def _device_frames(
    summary: pl.DataFrame,
    instr: pl.DataFrame,
    info: pl.DataFrame,
    model_id: str | None,
    profile: str,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    if info.height and "neff_name" in info.columns:
        info = info.with_columns(
            pl.col("neff_name")
            .map_elements(model_id_from_neff_name, return_dtype=pl.String)
            .alias("model_id")
        ).rename(
            {
                k: v
                for k, v in {
                    "execution_start_ts": "execution_start_dev_ns",
                    "execution_end_ts": "execution_end_dev_ns",
                }.items()
                if k in info.columns
            }
        )
        if model_id is None:
            ids = info.get_column("model_id").drop_nulls().unique()
            model_id = ids[0] if len(ids) == 1 else None
    if summary.height:
        summary = summary.with_columns(
            *[
                _seconds_to_ns(c).alias(f"{c}_ns")
                for c in ("total_time", "total_active_time")
                if c in summary.columns
            ]
        )
    if instr.height:
        instr = instr.rename(
            {
                k: v
                for k, v in {
                    "start_ts": "start_dev_ns",
                    "end_ts": "end_dev_ns",
                    "duration_ns": "dur_ns",
                }.items()
                if k in instr.columns
            }
        )
        if "engine" in instr.columns:  # case is not fixed (§7.6)
            instr = instr.with_columns(pl.col("engine").cast(pl.String).str.to_lowercase())
    tag = [pl.lit(profile).alias("profile")]
    out = []
    for df, schema in (
        (summary, DEVICE_SUMMARY),
        (instr, DEVICE_INSTRUCTION),
        (info, DEVICE_EXECUTION_INFO),
    ):
        if "model_id" not in df.columns or schema is not DEVICE_EXECUTION_INFO:
            df = df.with_columns(pl.lit(model_id, pl.String).alias("model_id"))
        out.append(conform(df.with_columns(tag), schema))
    return out[0], out[1], out[2]


def load_device_profile_dir(
    d: ProfileDir,
    known_model_ids: Sequence[str] = (),
    *,
    version: str | None = None,
    dump: Mapping[str, Mapping[str, str]] | None = None,
    schema_fields: Mapping[str, Mapping[str, str]] | None = None,
    notes: list[str] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Load ``Summary``, ``Instruction``, ``ExecutionInfo`` of one device profile (§3.2).

    The model id comes from ``ExecutionInfo.neff_name`` when it names one NEFF, else from a known
    model id (NEFF hash) that appears in the folder name; session profiles covering several NEFFs
    keep a null ``model_id`` on Summary/Instruction and per-row ids in ExecutionInfo.

    Returns:
        ``(summary, instruction, execution_info)`` in DEVICE_SUMMARY, DEVICE_INSTRUCTION,
        DEVICE_EXECUTION_INFO.
    """
    model_id = next((m for m in known_model_ids if m in d.path.name), None)
    tables = []
    for table in ("Summary", "Instruction", "ExecutionInfo"):
        files = d.files(table)
        df, found = resolve(
            read_parquet(files),
            table,
            path=files[0] if files else d.path,
            version=version,
            dump=dump,
            schema_fields=schema_fields,
        )
        if notes is not None:
            notes.extend(found)
        tables.append(df)
    return _device_frames(tables[0], tables[1], tables[2], model_id, str(d.path))


_LEGACY_ENGINE = {
    "tensormatrix": "tensor",
    "tensor": "tensor",
    "pe": "tensor",
    "vector": "vector",
    "dve": "vector",
    "scalar": "scalar",
    "act": "scalar",
    "gpsimd": "gpsimd",
    "pool": "gpsimd",
    "sync": "sync",
    "sp": "sync",
}


def _summary_rows(obj: Any) -> list[dict[str, Any]]:
    """``summary`` as a list, a flat dict, or a dict keyed by NeuronCore (§3.4)."""
    if isinstance(obj, list):
        return [r for r in obj if isinstance(r, dict)]
    if isinstance(obj, dict):
        if all(isinstance(v, dict) for v in obj.values()) and obj:
            return list(obj.values())
        return [obj]
    return []


def load_device_profile_json(
    path: Path, model_id: str
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Load a legacy ``device_profile_model_<model_id>.json`` (§3.4) into the device schemas.

    ``instruction.timestamp`` is taken as a device-clock ns value; ``label`` is the timeline
    track, from which the engine is guessed [INF].
    """
    doc = read_json(path)
    if not isinstance(doc, dict):
        raise InputError(path, "is not a device_profile JSON object")
    summary = pl.DataFrame(_summary_rows(doc.get("summary")), infer_schema_length=None)
    ins = [r for r in doc.get("instruction") or [] if isinstance(r, dict)]
    rows = []
    for r in ins:
        start = r.get("timestamp")
        dur = r.get("duration")
        label = str(r.get("label") or "")
        rows.append(
            {
                "start_ts": start,
                "end_ts": None if start is None or dur is None else start + dur,
                "duration_ns": dur,
                "timeline_track": label,
                "engine": _LEGACY_ENGINE.get(label.lower()),
                "opcode": r.get("opcode"),
                "hlo_name": r.get("hlo_name"),
            }
        )
    instr = pl.DataFrame(rows, infer_schema_length=None)
    return _device_frames(summary, instr, pl.DataFrame(), model_id, str(path))


# ----------------------------------------------------------------------------- framework mapping


def load_framework_mapping(path: Path) -> pl.DataFrame:
    """Load an older torch-neuronx ``framework_mapping_*.json`` (§3.5) into FRAMEWORK_MAPPING.

    One row per (``nrta_seq_id``, framework op) pair: one NRT execution can map to several ops.
    """
    doc = read_json(path)
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        raise InputError(path, "has no 'data' list", "expected framework_mapping format (§3.5)")
    rows = []
    for entry in data:
        if not isinstance(entry, dict) or "nrta_seq_id" not in entry:
            continue
        for op in entry.get("framework_op_exec_ids") or [{}]:
            rows.append(
                {
                    "nrt_sequence_id": str(entry["nrta_seq_id"]),
                    "seq_nr": op.get("seq_nr"),
                    "th_id": op.get("th_id"),
                    "stream_id": op.get("stream_id"),
                }
            )
    if not rows:
        return pl.DataFrame(schema=FRAMEWORK_MAPPING)
    return conform(pl.DataFrame(rows, infer_schema_length=None), FRAMEWORK_MAPPING)

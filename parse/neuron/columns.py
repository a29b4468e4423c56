"""Explorer table columns -> the names the loaders read: one versioned table (formats.md §3.2, §9.2).

Like HTA's parser config, the names Explorer writes are kept apart from the code that reads them.
Each :class:`Column` gives the name of schema 7.4.0 (Neuron 2.31/2.32, ``profile-schema-reference``,
[DOC]), which is the name the loaders use, and aliases for other schema versions. Neuron 2.33
writes schema **12.0.1**, a MAJOR bump ("a table or field removed/renamed, or a type change"),
whose table contents could not be read when this table was written: its aliases are guesses [INF],
to be replaced by the names a real ``neuron-explorer view --show-profile-schema`` dump shows.

Tables are read by the columns they have, not by their version number (:func:`resolve`):

1. the 7.x name is read as the column;
2. otherwise, when Explorer's output holds a ``SchemaFields`` table (one row per table and field,
   formats.md §3.2, §9.9: the output describes itself), a field of the same table that the data
   has, that no other column claimed and whose description says it was renamed from the 7.x name,
   or whose name and description match the column's ``hint``, is read as the column: Explorer's
   own word comes before any guess;
3. otherwise the first alias present (the guesses above);
4. otherwise, when the bundle holds a schema dump (what ``neuron-explorer view
   --show-profile-schema`` printed, saved by capture, possibly by another Explorer than the one
   that wrote the tables), the same search as step 2 over the dump's entries;
5. a column still missing is null, unless it is ``required``: then the table cannot be read and
   :class:`~nprof_report.errors.InputError` names the table, the column, the schema version and the
   command that prints the installed schema.

Types are normalised where a major change may retype a column: a timestamp type becomes epoch ns,
text or integer flow-id lists become lists of decimal text; the loaders cast the rest leniently.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from nprof_report.errors import InputError

MAPPING_VERSION = 1
# The schema majors this table has names for, and where they come from.
SCHEMA_SOURCES: Mapping[int, str] = {
    7: "7.4.0, Neuron 2.31-2.32: profile-schema-reference.rst [DOC]",
    12: "12.0.1, Neuron 2.33-2.34: aliases inferred, the real column names were not readable [INF]",
}
KNOWN_SCHEMA_MAJORS = frozenset(SCHEMA_SOURCES)
SCHEMA_COMMAND = "neuron-explorer view --show-profile-schema"
# Files capture writes the dump to (capture/backends.py), searched from a session upwards.
SCHEMA_DUMP_NAMES = ("neuron-profile-schema.yaml", "neuron-profile-schema.yml")
SEARCH_LEVELS = 3  # the session folder and this many folders above it
QUOTES = "'\""


@dataclass(frozen=True)
class Column:
    """One column the loaders read.

    Attributes:
        name: its name in schema 7.x, as the loaders spell it.
        aliases: other names for it, in order of preference ([INF] for 12.x).
        required: the table cannot be read without it.
        hint: a regular expression over a schema-dump field's name and description that
            identifies a renamed column (step 2 of :func:`resolve`).
        is_list: a list of ids (``flow_id``): text and integer lists are normalised.
    """

    name: str
    aliases: tuple[str, ...] = ()
    required: bool = False
    hint: str = ""
    is_list: bool = False


TABLES: Mapping[str, tuple[Column, ...]] = {
    "SystemProfileEvents": (
        Column("id", ("event_id",), hint=r"\bunique\b.*\bid\b|\bevent id\b"),
        Column("name", ("event_name",), required=True, hint=r"\bevent name\b"),
        Column(
            "start_ts",
            ("start_time", "start_timestamp", "start_timestamp_ns", "start_ns", "timestamp"),
            required=True,
            hint=r"\bstart\b",
        ),
        Column(
            "end_ts", ("end_time", "end_timestamp", "end_timestamp_ns", "end_ns"), hint=r"\bend\b"
        ),
        Column("duration_ns", ("duration", "dur_ns", "duration_nanos"), hint=r"\bduration\b"),
        Column(
            "trace_event_source",
            ("event_source", "source", "trace_source"),
            hint=r"\bsource\b.*neuron_(rt|hw)|neuron_(rt|hw).*\bsource\b",
        ),
        Column("instance_id", ("instance",)),
        Column("process_id", ("pid",)),
        Column("thread_id", ("tid",)),
        Column("nc_idx", ("lnc_idx", "logical_nc_idx")),
        Column("pcore_idx", ("physical_core_idx", "device_core_idx")),
        Column("worker_gid", ("global_worker_id",)),
        Column("flow_id", ("flow_ids", "flows"), hint=r"\bflow\b", is_list=True),
        Column("framework_stream_id", ("stream_id",)),
        Column(
            "extra_attributes_json",
            ("attributes_json", "extra_attributes", "attributes", "args_json"),
            hint=r"\battributes\b.*\bjson\b|\bjson\b.*\battributes\b",
        ),
    ),
    "Instruction": (
        Column("start_ts", ("start_time", "start_timestamp", "start_ns"), hint=r"\bstart\b"),
        Column("end_ts", ("end_time", "end_timestamp", "end_ns"), hint=r"\bend\b"),
        Column("duration_ns", ("duration", "dur_ns"), hint=r"\bduration\b"),
        Column("engine", ("engine_name",)),
        Column("opcode", ("op_code", "instruction_opcode")),
    ),
    "ExecutionInfo": (
        Column("execution_index", ("index", "exec_index")),
        Column("neff_name", ("neff", "neff_file", "neff_path")),
        Column("execution_start_ts", ("execution_start_ns", "start_ts", "start_time")),
        Column("execution_end_ts", ("execution_end_ns", "end_ts", "end_time")),
    ),
    "Summary": (
        Column("total_time", ("total_time_s", "total_exec_time")),
        Column("total_active_time", ("total_active_time_s",)),
    ),
    "Metadata": (Column("profile_schema_version", ("schema_version", "profile_schema")),),
}

_RENAMED_FROM = re.compile(
    r"(?:formerly|renamed from|was|previously)\s+`?([A-Za-z_][A-Za-z0-9_]*)`?"
)


def schema_major(version: str | None) -> int | None:
    """The MAJOR of a semver ``profile_schema_version``; None when it is not semver."""
    if version is None:
        return None
    head = version.strip().split(".")[0]
    return int(head) if head.isdigit() else None


def find_schema_dump(folder: Path) -> Path | None:
    """The schema dump saved beside a session: in ``folder`` or up to :data:`SEARCH_LEVELS`
    folders above it (a run bundle holds its sessions two levels down)."""
    for d in (folder, *folder.parents[:SEARCH_LEVELS]):
        for name in SCHEMA_DUMP_NAMES:
            if (d / name).is_file():
                return d / name
    return None


def read_schema_dump(path: Path) -> dict[str, dict[str, str]]:
    """Table -> field -> "type format description" from an OpenAPI YAML dump.

    Reads only the block layout ``components: schemas: <Table>: properties: <field>: <key>:
    <value>`` that OpenAPI writers produce (no YAML library is required); anything else is
    skipped. An unreadable file gives an empty mapping: the dump only helps.
    """
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return {}
    out: dict[str, dict[str, str]] = {}
    stack: list[tuple[int, str]] = []
    for raw in lines:
        text = raw.split(" #", 1)[0].rstrip()
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        indent = len(text) - len(text.lstrip())
        key, _, value = text.strip().partition(":")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        names = [k for _, k in stack]
        stack.append((indent, key))
        if len(names) >= 3 and names[-3] == "schemas" and names[-1] == "properties":
            out.setdefault(names[-2], {}).setdefault(key, "")  # .../<Table>/properties/<field>
        elif (
            len(names) >= 4
            and names[-4] == "schemas"
            and names[-2] == "properties"
            and key in ("type", "format", "description")
        ):  # .../<Table>/properties/<field>/<key>: value
            entry = out.setdefault(names[-3], {})
            words = f"{entry.get(names[-1], '')} {value.strip().strip(QUOTES)}"
            entry[names[-1]] = words.strip()
    return out


SCHEMA_FIELDS_TABLE = "SchemaFields"
# SchemaFields columns whose text describes a field (profile-schema-reference, formats.md §3.2)
_DESCRIBING = ("field_description", "field_type", "field_format", "field_unit")


def schema_fields_of(df: pl.DataFrame) -> dict[str, dict[str, str]]:
    """Table -> field -> "description type format unit" from a ``SchemaFields`` table, the form
    :func:`read_schema_dump` gives; empty when it lacks ``table_name`` or ``field_name``."""
    if "table_name" not in df.columns or "field_name" not in df.columns:
        return {}
    words = [c for c in _DESCRIBING if c in df.columns]
    out: dict[str, dict[str, str]] = {}
    for row in df.select("table_name", "field_name", *words).cast(pl.String).iter_rows():
        table, name, *text = row
        if table is None or name is None:
            continue
        out.setdefault(table, {})[name] = " ".join(t for t in text if t).strip()
    return out


def _from_dump(
    col: Column, present: set[str], claimed: set[str], fields: Mapping[str, str]
) -> str | None:
    free = [f for f in fields if f in present and f not in claimed]
    named = [f for f in free if col.name in _RENAMED_FROM.findall(fields[f])]
    if len(named) == 1:
        return named[0]
    if not col.hint:
        return None
    hinted = [f for f in free if re.search(col.hint, f"{f} {fields[f]}", re.IGNORECASE)]
    return hinted[0] if len(hinted) == 1 else None


def _retype(df: pl.DataFrame, col: Column) -> pl.DataFrame:
    dt = df.schema[col.name]
    if isinstance(dt, pl.Datetime):
        return df.with_columns(pl.col(col.name).dt.epoch("ns"))
    if col.is_list and dt == pl.String:  # "1,2" or "[1, 2]" or '["1","2"]'
        return df.with_columns(
            pl.col(col.name)
            .str.replace_all(r"[\[\]\"'\s]", "")
            .str.split(",")
            .list.filter(pl.element() != "")
        )
    if col.is_list and isinstance(dt, pl.List):
        return df.with_columns(pl.col(col.name).cast(pl.List(pl.String)))
    return df


@dataclass(frozen=True)
class TablePlan:
    """How one Explorer table's columns are read (:func:`plan`).

    Attributes:
        own: the columns read under their 7.x name.
        renamed: (7.x name, the name read, where that name came from: ``SchemaFields``,
            ``alias`` or ``schema dump``), in :data:`TABLES` order.
        missing: the columns found under no name; ``required_missing`` those among them the
            table cannot be read without.
    """

    own: tuple[str, ...]
    renamed: tuple[tuple[str, str, str], ...]
    missing: tuple[str, ...]
    required_missing: tuple[str, ...]


def plan(
    present: Sequence[str],
    table: str,
    *,
    schema_fields: Mapping[str, Mapping[str, str]] | None = None,
    dump: Mapping[str, Mapping[str, str]] | None = None,
) -> TablePlan:
    """Which of ``present`` (a table's column names) is read as each column of :data:`TABLES`,
    in the order of the module docstring."""
    columns = TABLES.get(table, ())
    have = set(present)
    claimed = {c.name for c in columns if c.name in have}
    own = tuple(c.name for c in columns if c.name in have)
    described = (schema_fields or {}).get(table, {})
    dumped = (dump or {}).get(table, {})
    renamed: list[tuple[str, str, str]] = []
    missing: list[str] = []
    required: list[str] = []
    for col in columns:
        if col.name in have:
            continue
        found = None
        if described:
            found, via = _from_dump(col, have, claimed, described), "SchemaFields"
        if found is None:
            found = next((a for a in col.aliases if a in have and a not in claimed), None)
            via = "alias"
        if found is None and dumped:
            found, via = _from_dump(col, have, claimed, dumped), "schema dump"
        if found is None:
            missing.append(col.name)
            if col.required:
                required.append(col.name)
            continue
        claimed.add(found)
        renamed.append((col.name, found, via))
    return TablePlan(own, tuple(renamed), tuple(missing), tuple(required))


def resolve(
    df: pl.DataFrame,
    table: str,
    *,
    path: Path,
    version: str | None = None,
    dump: Mapping[str, Mapping[str, str]] | None = None,
    schema_fields: Mapping[str, Mapping[str, str]] | None = None,
) -> tuple[pl.DataFrame, list[str]]:
    """Rename and retype ``df`` (one Explorer ``table``) to the 7.x names the loaders read.

    Returns:
        The frame, and notes naming the columns read under another name.

    Raises:
        InputError: a required column is missing (names the table, the column, the schema
            version and :data:`SCHEMA_COMMAND`).
    """
    columns = {c.name: c for c in TABLES.get(table, ())}
    if df.width == 0:
        return df, []
    found = plan(df.columns, table, schema_fields=schema_fields, dump=dump)
    if found.required_missing:
        col = columns[found.required_missing[0]]
        raise InputError(
            path,
            f"Explorer table {table} has no column {col.name!r}"
            + (f" (nor {', '.join(col.aliases)})" if col.aliases else "")
            + f" in profile schema {version or 'of unknown version'}",
            f"run `{SCHEMA_COMMAND}` with the Explorer that wrote it and add the new "
            "name to parse/neuron/columns.py, or save that output beside the profile as "
            f"{SCHEMA_DUMP_NAMES[0]}",
        )
    df = df.rename({name: col for col, name, _ in found.renamed})
    for col in columns.values():
        if col.name in df.columns:
            df = _retype(df, col)
    how = [f"{col} from {name} ({via})" for col, name, via in found.renamed]
    note = (
        [
            f"{path}: {table} (schema {version or 'unknown'}) read with renamed columns: {'; '.join(how)}"
        ]
        if how
        else []
    )
    return df, note

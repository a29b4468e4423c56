"""Check a document against the TypedDicts of ``report/summary_types.py`` at run time.

mypy checks that the code reading the summary uses the declared keys and types; this checks that
the summary written has exactly those keys, with values of those types, so the declarations
cannot drift from what is written (rows copied from frames are cast, not constructed).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Sequence
from typing import Any, Literal, NotRequired, Union, get_args, get_origin, get_type_hints

import polars as pl

from nprof_report.report.figures import summary_types
from nprof_report.report.figures.records import Records
from nprof_report.report.figures.summary_types import Summary

# summary_types imports NotRequired and polars for mypy only
_NAMES = {**vars(summary_types), "NotRequired": NotRequired, "pl": pl}


def problems(value: Any, tp: Any, where: str = "summary") -> list[str]:
    """Where ``value`` departs from ``tp`` (empty: it conforms)."""
    if tp is Any:
        return []
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        found = [problems(value, arm, where) for arm in get_args(tp)]
        return [] if any(not f for f in found) else min(found, key=len)
    if origin is Literal:
        return [] if value in get_args(tp) else [f"{where}: {value!r} not in {get_args(tp)}"]
    if tp is None or tp is type(None):
        return [] if value is None else [f"{where}: {value!r} is not None"]
    if typing.is_typeddict(tp):
        return _typed_dict(value, tp, where)
    if origin is list or origin is Sequence:  # a Sequence: a list, or Records until written
        if not isinstance(value, list if origin is list else (list, Records)):
            return [f"{where}: {type(value).__name__} is not a list"]
        (item,) = get_args(tp)
        return [p for k, v in enumerate(value) for p in problems(v, item, f"{where}[{k}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__} is not a dict"]
        key_type, item = get_args(tp)
        return [
            p
            for k, v in value.items()
            for p in [*problems(k, key_type, f"{where} key"), *problems(v, item, f"{where}[{k!r}]")]
        ]
    if tp is float:  # an int is a float to mypy too
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, tp)
    return [] if ok else [f"{where}: {value!r} is not {tp.__name__}"]


def _typed_dict(value: Any, tp: Any, where: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: {type(value).__name__} is not a dict ({tp.__name__})"]
    hints = get_type_hints(tp, localns=_NAMES, include_extras=True)
    optional = {k for k, h in hints.items() if get_origin(h) is NotRequired}
    # the annotations are strings, so __required_keys__ sees total=False but not NotRequired
    required = set(tp.__required_keys__) - optional
    out = [f"{where}: {tp.__name__} lacks {k!r}" for k in sorted(required - set(value))]
    out += [f"{where}: {tp.__name__} has no key {k!r}" for k in sorted(set(value) - set(hints))]
    for key in hints.keys() & value.keys():
        hint = hints[key]
        if get_origin(hint) is NotRequired:
            (hint,) = get_args(hint)
        out += problems(value[key], hint, f"{where}.{key}")
    return out


def assert_conforms(summary: Any) -> None:
    """Fail with every place where ``summary`` departs from :class:`Summary`."""
    found = problems(summary, Summary)
    assert not found, "\n".join(found[:20])

"""Text from a trace made safe where it lands: a spreadsheet opening the CSV, a reader of the HTML.

Op and kernel names come from the trace, so whoever wrote the trace chose them.

* A CSV cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is read as a
  formula by spreadsheet programs (CSV injection). As the OWASP guidance says, such a cell gets a
  leading single quote, and string cells are written quoted (``csv.QUOTE_NONNUMERIC`` /
  Polars' ``quote_style="non_numeric"``). Numbers are left as they are: a negative time is data.
* Bidirectional formatting characters (U+202E RIGHT-TO-LEFT OVERRIDE and its kin) make a name
  display as something it is not (``aten::mm\u202eLTR`` reads backwards). In the HTML they are
  shown as their code point, ``⟨U+202E⟩``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")

# Unicode's Bidi_Control characters: the embeddings, overrides and isolates, and the marks
BIDI_CONTROLS = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def csv_cell(value: Any) -> Any:
    """``value`` as a CSV cell a spreadsheet shows as text; anything but a string unchanged."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def csv_row(values: Iterable[Any]) -> list[Any]:
    """:func:`csv_cell` of every value of a row (for ``csv.writer(..., quoting=QUOTE_NONNUMERIC)``)."""
    return [csv_cell(v) for v in values]


def show_bidi(text: str) -> str:
    """``text`` with each bidirectional formatting character written as ``⟨U+XXXX⟩``."""
    return BIDI_CONTROLS.sub(lambda m: f"⟨U+{ord(m.group()):04X}⟩", text)

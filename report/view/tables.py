"""Tables as the report shows them and as their CSV files hold them: :class:`Col` (one column's
spec), :func:`make_table` (records into a :class:`Table`), the cells' formatters and widths.

Which columns each table has is data, in :mod:`.columns`; :mod:`.model` fills them from the
summary.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nprof_report.report.figures import SHOWN_ROWS, cut_text
from nprof_report.report.view.safetext import csv_row
from nprof_report.textout import format_time_us

MAX_ROWS = SHOWN_ROWS
"""Rows a table shows (summary.json keeps them; all rows are in its CSV)."""
CELL_CHARS = 120
"""Characters a text cell shows; a longer name is shortened in the middle (the whole of it in
the CSV; in the cell's tooltip and summary.json up to :data:`~.figures.TEXT_CHARS` characters)."""

BREAK_CHARS = 40
"""A text cell longer than this may break after ``::``, ``,``, ``(``, ``<``, ``_`` and ``/``."""


@dataclass(frozen=True)
class Cell:
    """A formatted table cell: the pieces between which a line may break (``<wbr>``), and the
    whole text where the cell shows it shortened (``title``)."""

    parts: tuple[str, ...]
    full: str | None = None

    @property
    def text(self) -> str:
        """What the cell shows."""
        return "".join(self.parts)


@dataclass(frozen=True)
class CsvRows:
    """Every row of a table as its CSV holds them, made while the CSV is written (a table of
    100,000 op names is not copied into lists first), text that a spreadsheet would read as a
    formula quoted as text (:func:`~nprof_report.report.view.safetext.csv_row`)."""

    records: Sequence[Mapping[str, Any]]
    keys: tuple[str, ...]

    def __iter__(self) -> Iterator[list[Any]]:
        return (csv_row(r.get(k) for k in self.keys) for r in self.records)

    def __len__(self) -> int:
        return len(self.records)


@dataclass(frozen=True)
class Table:
    """A table as shown (``headers``, ``rows``) and as its CSV file ``csv`` holds it (``columns``,
    ``raw_rows``: every column and every row).

    The report shows at most :data:`MAX_ROWS` rows, and ``note`` says how many it left out.
    ``widths`` are the shown columns' shares of the table width in percent, ``kinds`` their
    alignment (``t`` text, ``n`` number): the tables use CSS's fixed layout, whose cost does not
    depend on what the cells hold.
    """

    title: str
    headers: list[str]
    widths: list[float]
    kinds: list[str]
    rows: list[list[Cell]]
    csv: str
    columns: list[str]
    raw_rows: CsvRows
    note: str | None = None


@dataclass(frozen=True)
class Col:
    """One column of a table: header, the record's key, formatter, relative width, and whether
    the report shows it (every column goes to the CSV)."""

    header: str
    key: str
    fmt: Callable[[Any], str]
    width: float = 1.0
    text: bool = False
    shown: bool = True


def make_table(
    title: str,
    csv: str,
    cols: list[Col],
    records: Sequence[Mapping[str, Any]],
    note: str | None = None,
    rank: tuple[str, Callable[[Mapping[str, Any]], Any]] | None = None,
) -> Table:
    """The table of ``records``; only the first :data:`MAX_ROWS` are formatted and shown.

    With ``rank`` (what it ranks by, in words; a key, largest first), a table with more rows
    shows the :data:`MAX_ROWS` largest by that key, in their original order.
    """
    shown_records = records
    left_out = max(len(records) - MAX_ROWS, 0)
    if left_out:
        if rank is not None:
            # one pass over the records (they may be made as they are read: .records)
            keep = heapq.nlargest(MAX_ROWS, enumerate(records), key=lambda kr: rank[1](kr[1]))
            shown_records = [r for _, r in sorted(keep, key=lambda kr: kr[0])]
            which = f"{MAX_ROWS} of {len(records):,} rows, those with the most {rank[0]}"
        else:
            shown_records = records[:MAX_ROWS]
            which = f"the first {MAX_ROWS} of {len(records):,} rows"
        kept = f"Showing {which}; the other {left_out:,} are in {csv}."
        note = f"{note} {kept}" if note else kept
    visible = [c for c in cols if c.shown]
    return Table(
        title=title,
        headers=[c.header for c in visible],
        widths=_widths(visible),
        kinds=["t" if c.text else "n" for c in visible],
        rows=[[_cell(c.fmt(r.get(c.key)), c.text) for c in visible] for r in shown_records],
        csv=csv,
        columns=[c.header for c in cols],
        raw_rows=CsvRows(records, tuple(c.key for c in cols)),
        note=note,
    )


# A4 less the margins, in pt, and the mean advance of a character of DejaVu Sans at the tables'
# 7.5 pt (digits 0.64 em, lower case letters about 0.55 em; the headers' bold about 0.67 em)
TABLE_PT = 515.0
CHAR_PT = 4.4
HEADER_CHAR_PT = 5.0
PADDING_PT = 9.0
NUMBER_CHARS = 9  # "123.456us"
NAME_CHARS = 18  # a column of names gets at least this, then its share of what is left


def _widths(cols: list[Col]) -> list[float]:
    """Each column's share of the table width (percent): first what its longest header word needs
    (and a number, for a column of numbers), so that no word has to break; what is left in
    proportion to the columns' ``width``. Where the needs add up to more than the table, they
    shrink in proportion."""
    need = []
    for c in cols:
        header = max(len(w) for w in c.header.split()) * HEADER_CHAR_PT
        cells = (NAME_CHARS if c.text else NUMBER_CHARS) * CHAR_PT
        need.append(100 * (max(header, cells) + PADDING_PT) / TABLE_PT)
    spare = max(100 - sum(need), 0.0)
    total = sum(c.width for c in cols)
    widths = [n + spare * c.width / total for n, c in zip(need, cols)]
    scale = 100 / sum(widths)
    return [round(w * scale, 2) for w in widths]


# after these, a name may break across lines; a long name has few spaces
_BREAK_AFTER = re.compile(r"(?<=::)|(?<=[,(<_/])")


def _cell(text: str, is_text: bool) -> Cell:
    """A cell of ``text``: a number or a short text as it is; a long text shortened in the middle
    to :data:`CELL_CHARS` characters, in pieces after which a line may break."""
    if not is_text or len(text) <= BREAK_CHARS:
        return Cell((text,))
    full = None
    if len(text) > CELL_CHARS:
        full = cut_text(text)  # a tooltip of any name stays small, as summary.json holds it
        head = CELL_CHARS * 2 // 3
        text = f"{text[:head]} … {text[head - CELL_CHARS + 3 :]}"
    return Cell(tuple(p for p in _BREAK_AFTER.split(text) if p), full)


def as_text(x: Any) -> str:
    return "–" if x is None else str(x)


def as_us(x: float | None) -> str:
    return "–" if x is None else format_time_us(float(x))


def as_us_signed(x: float | None) -> str:
    if x is None:
        return "–"
    return ("+" if x > 0 else "−" if x < 0 else "±") + format_time_us(abs(float(x)))


def as_number(x: float | None, unit: str = "") -> str:
    if x is None:
        return "–"
    # six significant digits, but a large value in full as the summary rounded it (173820.4%,
    # not 173820%)
    return f"{x:g}{unit}" if abs(x) < 1e5 else f"{x:.10g}{unit}"


def as_yesno(x: bool | str | None) -> str:
    """yes, no, '–' where absent, or the text a record holds instead (``one step: no spread``)."""
    if isinstance(x, str):
        return x
    return "–" if x is None else ("yes" if x else "no")


def as_sci(x: float | None) -> str:
    return "–" if x is None else f"{x:.3g}"

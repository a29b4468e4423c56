"""Plain-text and CSV renderings of a key_averages-style table, for ``nprof-report ops``."""

from __future__ import annotations

import polars as pl


def format_time_us(us: float) -> str:
    """Format like PyTorch's tables: ``123.456us``, ``1.234ms``, ``1.234s``."""
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


def format_table(table: pl.DataFrame, *, title: str | None = None, limit: int | None = None) -> str:
    """A fixed-width table in the layout of ``key_averages().table()``."""
    total_self = float(table["self_cpu_us"].sum()) or 1.0
    # PyTorch takes both CPU percentages relative to the summed self CPU time.
    has_device = float(table["device_total_us"].sum()) > 0
    # PyTorch's footer sums self device time over the device-typed rows only.
    # Device time attached to ops from outside the trace (Neuron) has no device rows.
    device_rows = table.filter(pl.col("device_type") != "CPU")
    if device_rows.is_empty():
        device_rows = table
    total_dev = float(device_rows["self_device_us"].sum()) or 1.0
    headers = ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"]
    if has_device:
        headers += ["Self Device", "Self Device %", "Device total", "Device time avg"]
    headers.append("# of Calls")
    rows = []
    for r in table.head(limit).iter_rows(named=True) if limit else table.iter_rows(named=True):
        calls = r["calls"] or 1
        row = [
            r["name"] if r["device_type"] == "CPU" else f"{r['name']} [{r['device_type']}]",
            f"{100 * r['self_cpu_us'] / total_self:.2f}%",
            format_time_us(r["self_cpu_us"]),
            f"{100 * r['cpu_total_us'] / total_self:.2f}%",
            format_time_us(r["cpu_total_us"]),
            format_time_us(r["cpu_total_us"] / calls),
        ]
        if has_device:
            row += [
                format_time_us(r["self_device_us"]),
                f"{100 * r['self_device_us'] / total_dev:.2f}%",
                format_time_us(r["device_total_us"]),
                format_time_us(r["device_total_us"] / calls),
            ]
        row.append(str(r["calls"]))
        rows.append(row)
    name_width = min(max([len(headers[0])] + [len(r[0]) for r in rows]), 60)
    widths = [name_width] + [max(12, len(h)) for h in headers[1:]]
    line = "  ".join("-" * w for w in widths)

    def fmt(cells: list[str]) -> str:
        name = cells[0] if len(cells[0]) <= name_width else cells[0][: name_width - 3] + "..."
        return "  ".join(
            [name.rjust(widths[0])] + [c.rjust(w) for c, w in zip(cells[1:], widths[1:])]
        )

    out = [title] if title else []
    out += [line, fmt(headers), line, *(fmt(r) for r in rows), line]
    out.append(f"Self CPU time total: {format_time_us(total_self)}")
    if has_device:
        out.append(f"Self Device time total: {format_time_us(total_dev)}")
    return "\n".join(out)

"""The floor under ``ops``' decoding: Polars' JSON reader alone, as the decode workers call it.

    python bench/reader_floor.py TRACE.json [--workers N]

Finds the ``traceEvents`` array and cuts it into the decode workers' blocks
(``split._file_blocks``), then ``N`` processes (default: one per CPU, as ``ops`` uses) each read
every ``N``-th block with ``polars_json.read_sub_pieces`` (the decoder's own reading: the fields
``ops`` reads, in 256 KB sub-pieces) and do nothing else: no checks against the reference loader's rules,
no columns derived, no parts written, no nesting, no ``key_averages``. Whatever ``ops`` does
beyond this is on top of it, so ``ops`` cannot be faster than this process on the same file
(issue 32: the time target is set against ``orjson.loads``; ``bench_scale.py`` runs this beside
both). Plain files only: a ``.json.gz`` is refused (its floor is this one's plus the
decompression). The children are forked, not exec'd, so ``run_bench``'s sampler does not count
their memory: only the time is meant.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import sys
from pathlib import Path

from nprof_report.parse.read.columns import Columns
from nprof_report.parse.read.polars_json import BOUNDARY, read_sub_pieces
from nprof_report.parse.read.split import _file_blocks
from nprof_report.parse.read.stream import Reader
from nprof_report.parse.read.workerpool import default_workers

_CLOSE = re.compile(rb"\}[ \t\r\n]*\]")


def _read_block(fh: io.BufferedReader, start: int, end: int | None) -> int:
    """Rows Polars' reader gives for the elements from ``start`` to ``end`` (None: up to the
    array's end, taken as the first ``}`` ``]`` after the block's last element separator)."""
    fh.seek(start)
    body = fh.read() if end is None else fh.read(end - start)
    if end is None:
        last = [m.end() for m in BOUNDARY.finditer(body)]
        close = _CLOSE.search(body, last[-1] if last else 0)
        assert close is not None, "no end of the events array"
        body = body[: close.start() + 1]
    return sum(frame.height for frame in read_sub_pieces(body))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("trace", type=Path)
    ap.add_argument("--workers", type=int, default=default_workers())
    ns = ap.parse_args(argv)
    with ns.trace.open("rb") as fh:
        if fh.read(2) == b"\x1f\x8b":
            print(f"{ns.trace}: gzip is not measured here", file=sys.stderr)
            return 2
    head = Reader(ns.trace, 8 << 20, Columns(True))
    try:
        head.find_array()
    finally:
        head.src.close()
    with ns.trace.open("rb") as fh:
        size = ns.trace.stat().st_size
        blocks = [
            (b.start, b.end) for b in _file_blocks(fh, head.offset, size, ns.workers, 8 << 20)
        ]
    children = []
    for k in range(ns.workers):
        pid = os.fork()
        if pid == 0:
            with ns.trace.open("rb") as fh:
                rows = sum(_read_block(fh, s, e) for s, e in blocks[k :: ns.workers])
            print(f"worker {k}: {rows} rows", flush=True)
            os._exit(0)
        children.append(pid)
    failed = sum(os.waitpid(pid, 0)[1] != 0 for pid in children)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

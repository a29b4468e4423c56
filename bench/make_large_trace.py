"""Write a large, realistic Kineto ``trace.json`` built from the public fixture traces.

The events of the real CUDA, ROCm and CPU-only traces are repeated back to back on one timeline.
Each repetition shifts ``ts`` past the previous block and offsets every id that links events
(``args["External id"]``, ``args["correlation"]`` and the flow ``id``) by the same amount, so
op -> runtime -> kernel links and flows stay consistent inside each block and never collide across
blocks. ``M`` metadata rows are written once per source.

    python bench/make_large_trace.py /tmp/big.json --mb 530                   # single-line JSON
    python bench/make_large_trace.py /tmp/big.json --mb 50 --layout kineto    # as Kineto writes
    python bench/make_large_trace.py /tmp/big.json --mb 50 --pretty           # fully indented
    python bench/make_large_trace.py /tmp/big.json.gz --mb 50                 # gzip (by the suffix)

Layouts: ``compact`` (one line), ``kineto`` (Kineto's own: an event over a few lines, its scalar
keys on one or two of them and ``args`` as a block, as in the public fixtures), ``indented``
(``--pretty``: every key on its own line, two-space indentation).

The output uses the current Kineto layout: relative float ``ts`` (three decimals) plus
``baseTimeNanoseconds``. The 2023 absolute-microsecond source is converted to it.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson

_HERE = Path(__file__).resolve().parent
_FIXTURE_DIRS = [_HERE.parent / "fixtures" / "public", Path("/work/shared/fixtures-public")]
SOURCES = {
    "cuda": "kineto-cuda-simple-add-benchmark.json",
    "rocm": "kineto-rocm-mi250-minitoy-train.json",
    "triton": "kineto-cuda-triton-compiled-example.json",
    "cpu": "kineto-cpu-only-gloo-rank34.pt.trace.json",
}
_BASE_NS = 1735632360000000000  # the ROCm trace's baseTimeNanoseconds
_GAP_US = 50.0
_ID_KEYS = ("External id", "external id", "correlation")


def fixture(name: str) -> Path:
    """The public fixture file ``name`` (repo copy first, then the shared folder)."""
    for folder in _FIXTURE_DIRS:
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(name)


class _Block:
    """One source trace, normalised: ts in µs from its first event, ids, metadata split off."""

    def __init__(self, doc: dict[str, Any]) -> None:
        events = [e for e in doc["traceEvents"] if isinstance(e, dict)]
        self.meta = [e for e in events if e.get("ph") == "M"]
        self.events = [e for e in events if e.get("ph") != "M"]
        timed = [e["ts"] for e in self.events if isinstance(e.get("ts"), (int, float))]
        self.t0 = min(timed)
        self.span = (
            max(
                float(e["ts"]) + float(e.get("dur", 0) or 0)
                for e in self.events
                if isinstance(e.get("ts"), (int, float))
            )
            - self.t0
        )
        ids = [0]
        for e in self.events:
            if isinstance(e.get("id"), int):
                ids.append(e["id"])
            args = e.get("args")
            if isinstance(args, dict):
                ids.extend(args[k] for k in _ID_KEYS if isinstance(args.get(k), int))
        self.id_stride = max(ids) + 1

    def shifted(self, start_us: float, id_off: int, with_meta: bool) -> Iterator[dict[str, Any]]:
        if with_meta:
            for e in self.meta:
                m = dict(e)
                m["ts"] = 0
                yield m
        for e in self.events:
            out = dict(e)
            if isinstance(e.get("ts"), (int, float)):
                out["ts"] = round(float(e["ts"]) - self.t0 + start_us, 3)
            if isinstance(e.get("id"), int):
                out["id"] = e["id"] + id_off
            args = e.get("args")
            if isinstance(args, dict) and any(k in args for k in _ID_KEYS):
                args = copy.copy(args)
                for k in _ID_KEYS:
                    if isinstance(args.get(k), int) and args[k] >= 0:
                        args[k] += id_off
                out["args"] = args
            yield out


def _open(path: Path) -> IO[bytes] | gzip.GzipFile:
    if path.suffix == ".gz":
        return gzip.open(path, "wb", compresslevel=3)
    return path.open("wb")


LAYOUTS = ("compact", "kineto", "indented")


def _kineto(ev: dict[str, Any]) -> bytes:
    """One event as Kineto's ChromeTraceLogger lays it out (see the public fixtures)."""

    def items(d: dict[str, Any], keys: list[str], sep: bytes) -> bytes:
        return sep.join(b'"%s": %s' % (k.encode(), orjson.dumps(d[k])) for k in keys)

    head = [k for k in ev if k not in ("ts", "dur", "args")]
    times = [k for k in ("ts", "dur") if k in ev]
    lines = [items(ev, head, b", ")] if head else []
    if times:
        lines.append(items(ev, times, b", "))
    args = ev.get("args")
    if isinstance(args, dict) and args:
        lines.append(b'"args": {\n      ' + items(args, list(args), b",") + b"\n    }")
    return b"  {\n    " + b",\n    ".join(lines) + b"\n  }"


def write_trace(
    out: Path, mb: float, sources: list[str], layout: str = "compact"
) -> tuple[int, int]:
    """Write ``out`` of about ``mb`` MB (uncompressed) in one of :data:`LAYOUTS`; returns
    (uncompressed bytes, events)."""
    pretty = layout == "indented"
    kineto = layout == "kineto"
    docs = {s: orjson.loads(fixture(SOURCES[s]).read_bytes()) for s in sources}
    blocks = {s: _Block(d) for s, d in docs.items()}
    first = docs[sources[0]]
    top: dict[str, Any] = {
        "schemaVersion": 1,
        "deviceProperties": first.get("deviceProperties", []),
        "record_shapes": 1,
    }
    target = int(mb * 1_000_000)
    opt = orjson.OPT_INDENT_2 if pretty else 0
    multiline = pretty or kineto
    sep = b",\n" if multiline else b","
    written = 0
    n = 0

    def dump(ev: dict[str, Any]) -> bytes:
        if kineto:
            return _kineto(ev)
        b = orjson.dumps(ev, option=opt)
        return b"    " + b.replace(b"\n", b"\n    ") if pretty else b

    with _open(out) as fh:
        if multiline:
            head = orjson.dumps(top, option=orjson.OPT_INDENT_2)[:-2] + b',\n  "traceEvents": [\n'
        else:
            head = orjson.dumps(top)[:-1] + b',"traceEvents":['
        fh.write(head)
        written += len(head)
        cursor = 0.0
        id_off = 0
        rep = 0
        first_event = True
        while written < target:
            for s in sources:
                blk = blocks[s]
                parts = []
                for ev in blk.shifted(cursor, id_off, with_meta=rep == 0):
                    parts.append(dump(ev))
                n += len(parts)
                chunk = sep.join(parts)
                if not first_event:
                    chunk = sep + chunk
                first_event = False
                fh.write(chunk)
                written += len(chunk)
                cursor += blk.span + _GAP_US
                id_off += blk.id_stride
            rep += 1
        tail_doc = {"traceName": str(out), "displayTimeUnit": "ms", "baseTimeNanoseconds": _BASE_NS}
        if multiline:
            tail = b"\n  ],\n  " + orjson.dumps(tail_doc, option=orjson.OPT_INDENT_2)[4:]
        else:
            tail = b"]," + orjson.dumps(tail_doc)[1:]
        fh.write(tail + b"\n")
        written += len(tail) + 1
    return written, n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("out", type=Path, help="output path (.json or .json.gz)")
    ap.add_argument("--mb", type=float, default=50.0, help="target size in MB, uncompressed")
    ap.add_argument("--layout", choices=LAYOUTS, default="compact", help="how events are laid out")
    ap.add_argument("--pretty", action="store_true", help="the indented layout (--layout indented)")
    ap.add_argument(
        "--sources",
        default="cuda,rocm,triton,cpu",
        help="comma-separated fixture sources to repeat: " + ",".join(SOURCES),
    )
    ns = ap.parse_args(argv)
    sources = [s.strip() for s in ns.sources.split(",") if s.strip()]
    unknown = [s for s in sources if s not in SOURCES]
    if unknown or not sources:
        ap.error(f"unknown sources {unknown}")
    size, n = write_trace(ns.out, ns.mb, sources, "indented" if ns.pretty else ns.layout)
    print(f"{ns.out}: {size} bytes uncompressed, {n} events", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

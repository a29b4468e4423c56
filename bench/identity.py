"""The identity harness: every output of a set of inputs, made by one checkout, compared with
another's, for changes that must not change what users get (a move, a refactor, a speed-up).

    python bench/identity.py make OUT --run RUN [--run RUN ...]   # build, diff, check, ops
    python bench/identity.py compare OUT_BEFORE OUT_AFTER

``make`` runs the CLI of the environment it is started with (``nprof-report`` beside its Python)
on: each ``--run`` (real captures: they are inputs, made once and shared by both sides), all
the runs together, every constructed Neuron tree and every public trace of ``fixtures/``, the
two ranks of one job as a folder, and diffs and checks of some of them. ``compare`` says which
files differ: bytes for everything but the PDF, whose text is compared page by page (its bytes
hold a creation date).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = ROOT / "fixtures" / "public"
NEURON = ROOT / "fixtures" / "neuron"


def _cli() -> list[str]:
    return [str(Path(sys.executable).with_name("nprof-report"))]


def _run(args: list[str], out: Path, env: dict[str, str]) -> None:
    """Run the CLI; keep its exit code and stdout/stderr beside the outputs."""
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([*_cli(), *args], capture_output=True, text=True, env=env)
    (out / "exit-code.txt").write_text(f"{proc.returncode}\n")
    # the paths printed hold the output folder; keep them relative to it
    (out / "stdout.txt").write_text(proc.stdout.replace(str(out), "<OUT>"))
    (out / "stderr.txt").write_text(proc.stderr.replace(str(out), "<OUT>"))


def cases(runs: list[Path], scratch: Path) -> dict[str, list[str]]:
    """Case name -> CLI arguments (``{out}`` stands for the case's folder)."""
    ranks = scratch / "ranks"
    ranks.mkdir(exist_ok=True)
    for rank in ("rank0", "rank1"):
        src = PUBLIC / f"kineto-cuda-2rank-sampled-{rank}.json.gz"
        if not (ranks / src.name).exists():
            shutil.copy(src, ranks / src.name)
    found: dict[str, list[str]] = {}
    for i, run in enumerate(runs):
        found[f"run{i}"] = ["build", str(run), "--out", "{out}"]
        found[f"run{i}-ops"] = ["ops", str(run), "--format", "json"]
        found[f"run{i}-diff-self"] = ["diff", str(run), str(run), "--out", "{out}"]
    if len(runs) > 1:
        found["runs-together"] = ["build", *map(str, runs), "--out", "{out}"]
    for tree in sorted(p for p in NEURON.iterdir() if p.is_dir()):
        found[f"neuron-{tree.name}"] = ["build", str(tree), "--out", "{out}"]
        found[f"neuron-{tree.name}-ops"] = ["ops", str(tree)]
    for trace in sorted(PUBLIC.glob("*.json*")):
        found[f"public-{trace.name}"] = ["build", str(trace), "--out", "{out}"]
        found[f"public-{trace.name}-ops"] = ["ops", str(trace), "--format", "csv"]
    found["ranks"] = ["build", str(ranks), "--out", "{out}"]
    found["ranks-ops"] = ["ops", str(ranks), "--by-rank"]
    rank0, rank1 = sorted(ranks.iterdir())
    found["diff-ranks"] = ["diff", str(rank0), str(rank1), "--out", "{out}"]
    found["check-ranks"] = ["check", str(rank1), "--baseline", str(rank0), "--out", "{out}"]
    neuron = [NEURON / "eager_naive", NEURON / "fused"]
    found["diff-neuron"] = ["diff", *map(str, neuron), "--out", "{out}"]
    return found


def make(out: Path, runs: list[Path]) -> None:
    out.mkdir(parents=True, exist_ok=False)
    # one folder for both sides: the rank folder's path is in what is built from it
    scratch = Path(tempfile.gettempdir()) / "nprof-identity-inputs"
    scratch.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "NPROF_CACHE_DIR": str(Path(tmp) / "cache")}
        for name, args in cases(runs, scratch).items():
            case = out / name
            print(name, file=sys.stderr)
            _run([a.replace("{out}", str(case)) for a in args], case, env)


def _pdf_pages(path: Path) -> list[bytes]:
    from pypdf import PdfReader

    return [page.extract_text().encode() for page in PdfReader(path).pages]


def _content(path: Path) -> bytes:
    """The file's bytes, but in a record of the files written (``.nprof-report.json``), the
    PDF's checksum (its bytes hold a creation date)."""
    data = path.read_bytes()
    if path.name.startswith(".nprof-") and path.suffix == ".json":
        data = re.sub(rb'("[^"]*\.pdf": )"[0-9a-f]{64}"', rb'\1"<PDF>"', data)
    return data


def compare(before: Path, after: Path) -> int:
    names = {p.relative_to(before) for p in before.rglob("*") if p.is_file()}
    names |= {p.relative_to(after) for p in after.rglob("*") if p.is_file()}
    differ = []
    for name in sorted(names):
        a, b = before / name, after / name
        if not (a.exists() and b.exists()):
            differ.append(f"{name}: only in {'after' if b.exists() else 'before'}")
        elif name.suffix == ".pdf":
            pa, pb = _pdf_pages(a), _pdf_pages(b)
            if pa != pb:
                first = next(
                    (i for i, (x, y) in enumerate(zip(pa, pb)) if x != y), min(len(pa), len(pb))
                )
                differ.append(f"{name}: text differs from page {first + 1}")
        elif _content(a) != _content(b):
            differ.append(f"{name}: bytes differ")
    print(f"{len(names)} files compared, {len(differ)} differ")
    for line in differ:
        print("  " + line)
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("out", type=Path)
    m.add_argument("--run", type=Path, action="append", default=[])
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.cmd == "make":
        make(args.out, args.run)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())

"""The parse stage's door: code outside parse/ imports ``nprof_report.parse``, never a module inside;
and the derive wing imports no reader.

Read from the source text (every ``import`` and ``from ... import`` statement, at any depth), so a
function-level import is caught as well as a top-level one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = [ROOT / "capture", ROOT / "report", ROOT / "src" / "nprof_report"]


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every module an import statement of ``path`` names."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
            # ``from nprof_report.parse import read`` names a sub-package too
            if node.module == "nprof_report.parse":
                found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return found


def inner_parse_imports(path: Path, exports: set[str]) -> list[tuple[int, str]]:
    """The imports of ``path`` that name a module inside parse (not a name the door exports)."""
    return [
        (line, module)
        for line, module in imported_modules(path)
        if module.startswith("nprof_report.parse.")
        and module.removeprefix("nprof_report.parse.") not in exports
    ]


def test_outside_parse_only_the_door_is_imported() -> None:
    import nprof_report.parse as door

    files = sorted(f for folder in OUTSIDE for f in folder.rglob("*.py"))
    assert len(files) > 10  # the walk found the sources
    bad = [
        f"{f.relative_to(ROOT)}:{line}: {module}"
        for f in files
        for line, module in inner_parse_imports(f, set(door.__all__))
    ]
    assert bad == []


def test_the_check_catches_a_submodule_import(tmp_path: Path) -> None:
    """Not passing by construction: each way of naming a module inside parse is found."""
    import nprof_report.parse as door

    path = tmp_path / "x.py"
    path.write_text(
        "from nprof_report.parse.keyavg import key_averages\n"
        "import nprof_report.parse.read.split\n"
        "from nprof_report.parse import read, resolve\n"
        "def f():\n    from nprof_report.parse.sources import load_source\n",
        encoding="utf-8",
    )
    assert inner_parse_imports(path, set(door.__all__)) == [
        (1, "nprof_report.parse.keyavg"),
        (2, "nprof_report.parse.read.split"),
        (3, "nprof_report.parse.read"),
        (5, "nprof_report.parse.sources"),
    ]


def test_derive_imports_no_reader() -> None:
    """Rows to frames needs no decoder: the frame types come without msgspec, zlib-ng, workers."""
    derive_wing = ["derive.py", "nesting.py", "parts.py", "schema.py", "keyavg.py", "classify.py"]
    bad = [
        f"parse/{name}:{line}: {module}"
        for name in derive_wing
        for line, module in imported_modules(ROOT / "parse" / name)
        if module.startswith(("nprof_report.parse.read", "nprof_report.parse.frames"))
    ]
    assert bad == []


@pytest.mark.parametrize("name", ["key_averages", "load_sources", "prestart", "convert_tree"])
def test_the_door_hands_out_its_names(name: str) -> None:
    import nprof_report.parse as door

    assert callable(getattr(door, name))

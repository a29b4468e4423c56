"""The package's floor plan, read from the source text: each wing has one door, the wings depend
one way, and no module imports itself back through others.

Wings: parse/ (``nprof_report.parse``), and report/'s three: ``figures`` (frames in, the summary
document out), ``view`` (the document into HTML and PDF) and ``diff`` (``diff`` and ``check``).
Code outside a wing imports its door (the ``__init__``), never a module inside. Tests may reach
behind a door: they test the modules one by one.

Every ``import`` and ``from ... import`` statement counts, at any depth, so a function-level or
``TYPE_CHECKING`` import is caught as well as a top-level one.
"""

from __future__ import annotations

import ast
import importlib
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# import package -> its folder (pyproject's package-dir)
PACKAGES = {
    "nprof_report": ROOT / "src" / "nprof_report",
    "nprof_report.capture": ROOT / "capture",
    "nprof_report.parse": ROOT / "parse",
    "nprof_report.report": ROOT / "report",
}
DOORS = [
    "nprof_report.parse",
    "nprof_report.report.figures",
    "nprof_report.report.view",
    "nprof_report.report.diff",
]
REPORT_COMMANDS = [
    "nprof_report.report.build",
    "nprof_report.report.inspectview",
    "nprof_report.report.opsview",
]
REPORT_SHARED = ["nprof_report.report.jobs", "nprof_report.report.publish"]
# what each report wing must not import: the wings depend one way, figures <- view <- diff,
# and no wing imports a command
FORBIDDEN = {
    "nprof_report.report.figures": [
        "nprof_report.report.view",
        "nprof_report.report.diff",
        *REPORT_COMMANDS,
        *REPORT_SHARED,
    ],
    "nprof_report.report.view": ["nprof_report.report.diff", *REPORT_COMMANDS, *REPORT_SHARED],
    "nprof_report.report.diff": REPORT_COMMANDS,
}


def modules() -> dict[str, Path]:
    """Every module of the package, by its import name."""
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


MODULES = modules()


def _absolute(module: str | None, level: int, importer: str, is_package: bool) -> str:
    if not level:
        return module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, *([module] if module else [])])


def imported_modules(path: Path, importer: str = "") -> list[tuple[int, str]]:
    """(line, module) of every module an import statement of ``path`` names: for
    ``from package import name``, the module ``package.name`` where there is one, else
    ``package``."""
    found = []
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module, node.level, importer, is_package)
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]
            found += [(node.lineno, s) for s in subs]
            if len(subs) < len(node.names):
                found.append((node.lineno, base))
    return sorted(found)


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def behind_doors(path: Path, importer: str) -> list[tuple[int, str]]:
    """The imports of ``path`` that name a module inside a wing the importer is not part of."""
    return [
        (line, module)
        for line, module in imported_modules(path, importer)
        for door in DOORS
        if module.startswith(door + ".") and not _within(importer, door)
    ]


def test_outside_a_wing_only_its_door_is_imported() -> None:
    assert len(MODULES) > 80  # the walk found the sources
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for name, path in sorted(MODULES.items())
        for line, module in behind_doors(path, name)
    ]
    assert bad == []


def test_the_check_catches_a_module_behind_a_door(tmp_path: Path) -> None:
    """Not passing by construction: each way of naming a module inside a wing is found."""
    path = tmp_path / "x.py"
    path.write_text(
        "from nprof_report.parse.keyavg import key_averages\n"
        "import nprof_report.parse.read.split\n"
        "from nprof_report.parse import read, resolve\n"
        "def f():\n    from nprof_report.report.view.model import build_model\n"
        "from nprof_report.report.figures import summary, Summary\n"
        "from nprof_report.report.diff import check_regression\n",
        encoding="utf-8",
    )
    assert behind_doors(path, "nprof_report.report.build") == [
        (1, "nprof_report.parse.keyavg"),
        (2, "nprof_report.parse.read.split"),
        (3, "nprof_report.parse.read"),
        (5, "nprof_report.report.view.model"),
        (6, "nprof_report.report.figures.summary"),
    ]
    # inside its own wing a module imports its neighbours
    assert behind_doors(path, "nprof_report.report.view.render") == [
        (1, "nprof_report.parse.keyavg"),
        (2, "nprof_report.parse.read.split"),
        (3, "nprof_report.parse.read"),
        (6, "nprof_report.report.figures.summary"),
    ]


@pytest.mark.parametrize("wing", sorted(FORBIDDEN))
def test_report_wings_depend_one_way(wing: str) -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for name, path in sorted(MODULES.items())
        if _within(name, wing)
        for line, module in imported_modules(path, name)
        if any(_within(module, f) for f in FORBIDDEN[wing])
    ]
    assert bad == []


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    return {
        name: {m for _, m in imported_modules(path, name) if m in MODULES and m != name}
        for name, path in MODULES.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """A cycle of ``graph`` (its modules in order, the first repeated last), or []."""
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as e:
        return list(e.args[1])
    return []


def test_no_import_cycle_anywhere_in_the_package() -> None:
    assert find_cycle(import_graph()) == []


def test_the_cycle_check_finds_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    cycle = find_cycle(graph)
    assert set(cycle) == {"a", "b", "c"}
    assert cycle[0] == cycle[-1]
    assert find_cycle({"a": {"b"}, "b": set()}) == []


def test_report_keeps_at_most_8_top_level_modules() -> None:
    top = sorted(p.name for p in (ROOT / "report").glob("*.py"))
    assert len(top) <= 8, top


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


@pytest.mark.parametrize(
    ("door", "name"),
    [
        ("nprof_report.parse", "key_averages"),
        ("nprof_report.parse", "load_sources"),
        ("nprof_report.parse", "prestart"),
        ("nprof_report.parse", "convert_tree"),
        ("nprof_report.report.figures", "summarise"),
        ("nprof_report.report.view", "build_model"),
        ("nprof_report.report.view", "render_html"),
        ("nprof_report.report.diff", "diff_report"),
        ("nprof_report.report.diff", "check_regression"),
    ],
)
def test_each_door_hands_out_its_names(door: str, name: str) -> None:
    assert callable(getattr(importlib.import_module(door), name))


@pytest.mark.parametrize("door", DOORS)
def test_each_door_lists_what_it_hands_out(door: str) -> None:
    """``__all__`` names what the door hands out, and every name in it resolves."""
    module = importlib.import_module(door)
    for name in module.__all__:
        assert getattr(module, name) is not None

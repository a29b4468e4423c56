"""The README is a front page and every relative link in it and in docs/ resolves.

A link resolves when the file or folder it names exists inside the repository and, for
``page.md#anchor`` or ``#anchor``, the anchor is a heading of that page as GitHub slugs it.
Links inside fenced code blocks and inline code are not links; ``http:``, ``mailto:`` and other
schemes are left to the reader.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
MAX_README_LINES = 300

FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target) and ![alt](target); the text may hold one level of brackets
INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s<>]*)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)"
)
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def prose_lines(markdown: str) -> list[tuple[int, str]]:
    """(line number, text) of every line outside fenced code blocks."""
    lines: list[tuple[int, str]] = []
    fence = ""
    for number, line in enumerate(markdown.splitlines(), start=1):
        opened = FENCE.match(line)
        if fence:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = ""
            continue
        if opened:
            fence = opened.group(1)
            continue
        lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading's text (before duplicates are numbered): the text as
    shown (code marks dropped, a link's text kept), lowercase, punctuation other than ``-`` and
    ``_`` dropped, each space a ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every heading's anchor in a page; a repeated one gets -1, -2, ... as on GitHub."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose_lines(markdown):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(markdown: str) -> list[tuple[int, str]]:
    """(line number, target) of every inline, image and reference link outside code."""
    found: list[tuple[int, str]] = []
    for number, line in prose_lines(markdown):
        text = CODE_SPAN.sub("", line)
        found.extend((number, m.group(1)) for m in INLINE_LINK.finditer(text))
        reference = REFERENCE_LINK.match(text)
        if reference:
            found.append((number, reference.group(1)))
    return found


def broken_links(page: Path, root: Path) -> list[str]:
    """One message per relative link of ``page`` that does not resolve inside ``root``."""
    problems: list[str] = []
    cache: dict[Path, set[str]] = {}
    for number, target in links(page.read_text(encoding="utf-8")):
        where = f"{page.relative_to(root)}:{number}: {target}"
        if not target or SCHEME.match(target) or target.startswith("//"):
            if not target:
                problems.append(f"{where}: empty link")
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page.resolve()
        if not resolved.is_relative_to(root.resolve()):
            problems.append(f"{where}: points outside the repository")
            continue
        if not resolved.exists():
            problems.append(f"{where}: no such file")
            continue
        if not anchor or resolved.suffix != ".md":
            continue
        if resolved not in cache:
            cache[resolved] = anchors(resolved.read_text(encoding="utf-8"))
        if anchor not in cache[resolved]:
            problems.append(f"{where}: no heading with the anchor #{anchor}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page, ROOT) == []


def test_the_readme_is_a_front_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"
    targets = {target for _, target in links("\n".join(lines))}
    assert "docs/README.md" in targets
    assert "docs/images/report-page1.png" in targets


def test_the_docs_index_names_every_page() -> None:
    index = DOCS / "README.md"
    named = {(DOCS / target.partition("#")[0]).resolve() for _, target in links(index.read_text())}
    pages = {p.resolve() for p in DOCS.rglob("*.md") if p != index}
    assert pages, "docs/ holds no pages"
    assert sorted(str(p.relative_to(ROOT)) for p in pages - named) == []


def test_the_checker_flags_a_broken_file_and_a_broken_anchor(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other page\n\n## Before and after: `diff`\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n## Title\n\n"
        "[fine](docs/other.md#before-and-after-diff) [fine](#title-1) [web](https://example.com)\n"
        "[missing file](docs/gone.md) and ![missing picture](docs/images/none.png)\n"
        "[missing anchor](docs/other.md#after) and [missing here](#title-2)\n"
        "`[in code](docs/gone.md)`\n\n"
        "```md\n[in a fence](docs/gone.md)\n```\n\n"
        "[outside](../elsewhere.md)\n"
        "[ref]: docs/nothing.md\n"
    )
    problems = broken_links(page, tmp_path)
    assert problems == [
        "page.md:6: docs/gone.md: no such file",
        "page.md:6: docs/images/none.png: no such file",
        "page.md:7: docs/other.md#after: no heading with the anchor #after",
        "page.md:7: #title-2: no heading with the anchor #title-2",
        "page.md:14: ../elsewhere.md: points outside the repository",
        "page.md:15: docs/nothing.md: no such file",
    ]


def test_slugs_are_githubs() -> None:
    assert slug("Before and after: `diff` and `check`") == "before-and-after-diff-and-check"
    assert slug("The run folder (bundle format, `nprof-run` version 1.1)") == (
        "the-run-folder-bundle-format-nprof-run-version-11"
    )
    assert slug("Issue 5's targets: the 530 MB traces") == "issue-5s-targets-the-530-mb-traces"
    assert slug("`privateuse1_driver` rows, [a link](x.md)") == "privateuse1_driver-rows-a-link"
    assert anchors("# A\n## A\n### A\n```\n# A\n```\n") == {"a", "a-1", "a-2"}

"""A matplotlib figure as the SVG the report inlines: drawn once, cropped to what it draws, in
markup WeasyPrint draws faster (:func:`figure_svg`); the same picture as ``savefig(...,
bbox_inches="tight")`` gives, in browsers and in the PDF. Also matplotlib's ``Figure``, imported
here without what the report does not use.
"""

from __future__ import annotations

import io
import re
from typing import Any
from xml.etree import ElementTree
from xml.sax.saxutils import escape, quoteattr

import matplotlib.artist
from matplotlib import rc_context, rcParams


def _imported_without_setter_docs() -> tuple[Any, Any]:
    """matplotlib's ``Figure`` and ``PlaceHolderLayoutEngine``, imported without the docstrings
    of its artists' ``set()``.

    As each of its ~100 Artist classes is defined, matplotlib writes a docstring for its ``set()``
    listing every property (``matplotlib.artist.kwdoc``): 0.08 s of the 0.33 s its import takes on
    the build's critical path, for help text nothing here reads. ``kwdoc`` is restored after.
    """
    kwdoc = getattr(matplotlib.artist, "kwdoc", None)
    if kwdoc is not None:
        matplotlib.artist.kwdoc = lambda artist: ""
    try:
        from matplotlib.figure import Figure
        from matplotlib.layout_engine import PlaceHolderLayoutEngine
    finally:
        if kwdoc is not None:
            matplotlib.artist.kwdoc = kwdoc
    return Figure, PlaceHolderLayoutEngine


Figure, PlaceHolderLayoutEngine = _imported_without_setter_docs()


def figure_svg(fig: Any) -> str:
    """The figure as SVG, cropped to what it draws (as ``bbox_inches="tight"``), in the markup
    :func:`_lean` makes of it."""
    buf = io.StringIO()
    bounds = _drawn_once(fig, buf)
    if fig.canvas.manager is not None:  # made by pyplot, which keeps it until closed
        import matplotlib.pyplot as plt

        plt.close(fig)
    text = buf.getvalue()
    return _lean(text[text.index("<svg") :], bounds)


def _drawn_once(fig: Any, out: io.StringIO) -> tuple[float, float, float, float]:
    """Draw ``fig`` as SVG into ``out`` and return the box (x, y, width, height in points, y down)
    that ``bbox_inches="tight"`` would crop it to.

    ``bbox_inches="tight"`` drew every figure twice, once to measure it and once at the cropped
    size, which only shifts what it draws; so the figure is drawn once, at its own size, and
    measured after that draw with the same renderer: :func:`_lean` then crops it with the
    ``viewBox``, the same picture at the same size (0.1 s of the 0.45 s the charts of a small
    report took).
    """
    if isinstance(fig.get_layout_engine(), PlaceHolderLayoutEngine):
        # what tight_layout() leaves behind, its layout done: savefig would draw the figure once
        # more (without output) before drawing it
        fig.set_layout_engine(None)
    measured: list[Any] = []
    draw = fig.draw

    def draw_and_measure(renderer: Any) -> None:
        draw(renderer)
        measured.append(fig.get_tightbbox(renderer).padded(rcParams["savefig.pad_inches"]))

    fig.draw = draw_and_measure
    try:
        with rc_context({"savefig.bbox": "standard"}):  # uncropped, whatever matplotlibrc says
            fig.savefig(out, format="svg", metadata={"Date": None, "Creator": None})
    finally:
        del fig.draw
    box = measured[0]
    height = fig.get_figheight()
    return box.x0 * 72, (height - box.y1) * 72, box.width * 72, box.height * 72


_SVG_NS = "http://www.w3.org/2000/svg"
_XLINK_NS = "http://www.w3.org/1999/xlink"
# properties that are also SVG presentation attributes; stroke-linejoin and stroke-linecap stay
# in ``style``, where they win over matplotlib's ``*{stroke-linejoin: round; ...}`` rule, as an
# attribute would not
_ATTRIBUTES = frozenset(
    [
        "fill",
        "fill-opacity",
        "stroke",
        "stroke-width",
        "stroke-opacity",
        "stroke-dasharray",
        "stroke-dashoffset",
        "stroke-miterlimit",
        "opacity",
        "font-size",
        "font-family",
        "font-weight",
        "font-style",
        "text-anchor",
    ]
)
_NO_ROTATION = re.compile(r"rotate\(-?0 [^ )]+ [^ )]+\)")
# what XML cannot hold (a control character in a label), which matplotlib writes as it is (the
# SVG then showed in no browser and not in the PDF): shown as U+FFFD, and the chart parses
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _lean(svg: str, bounds: tuple[float, float, float, float]) -> str:
    """matplotlib's SVG in fewer elements and no ``style`` to parse, cropped to ``bounds``.

    WeasyPrint draws an SVG element by element, pushing the graphics state and parsing each
    ``style`` attribute with its CSS parser: the charts of a small report took 0.3 s of the PDF's
    drawing. So ``<g>`` that only carry an id nobody refers to are left out (their children
    take their place), ``style`` declarations become presentation attributes, and the identity
    rotation of horizontal text goes: the same picture in browsers and in WeasyPrint, a quarter
    less of that time. The RDF metadata block, which only names namespaces, goes too.
    """
    root = ElementTree.fromstring(_NOT_XML.sub("\ufffd", svg))
    root.text = None
    x, y, width, height = (f"{v:.6f}".rstrip("0").rstrip(".") for v in bounds)
    root.set("width", f"{width}pt")
    root.set("height", f"{height}pt")
    root.set("viewBox", f"{x} {y} {width} {height}")
    referred = set(re.findall(r"#([^)\"\s]+)", svg))
    _lean_children(root, referred)
    out: list[str] = []
    _write(root, out, f' xmlns="{_SVG_NS}" xmlns:xlink="{_XLINK_NS}"')
    return "".join(out)


def _lean_children(parent: ElementTree.Element, referred: set[str]) -> None:
    kept: list[ElementTree.Element] = []
    for child in parent:
        tag = child.tag.rpartition("}")[2]
        if tag == "metadata":
            continue
        if tag != "text":  # inside a text, the whitespace is the text's
            _lean_children(child, referred)
        if tag == "g" and not (set(child.attrib) - {"id"}) and child.get("id") not in referred:
            kept += list(child)
            continue
        _style_to_attributes(child)
        if _NO_ROTATION.fullmatch(child.get("transform", "")):
            del child.attrib["transform"]
        if tag != "text":  # whitespace between elements; a text's own text stays
            child.text = child.text if child.text and child.text.strip() else None
        child.tail = None
        kept.append(child)
    parent[:] = kept


_PREFIXES = {"": "", _SVG_NS: "", _XLINK_NS: "xlink", "http://www.w3.org/XML/1998/namespace": "xml"}


def _write(element: ElementTree.Element, out: list[str], declare: str = "") -> None:
    """``element`` as XML, prefixing names as the SVG does (ElementTree's own writer takes its
    prefixes from a process-wide table, which WeasyPrint changes); a namespace of another kind
    is declared where it is used."""
    declared: dict[str, str] = {}

    def name(qualified: str) -> str:
        namespace, _, local = (
            qualified[1:].partition("}") if qualified[0] == "{" else ("", "", qualified)
        )
        prefix = _PREFIXES.get(namespace)
        if prefix is None:
            prefix = declared.setdefault(namespace, f"ns{len(declared)}")
        return f"{prefix}:{local}" if prefix else local

    tag = name(element.tag)
    attributes = "".join(f" {name(k)}={quoteattr(v)}" for k, v in element.attrib.items())
    declarations = "".join(f' xmlns:{p}="{n}"' for n, p in declared.items())
    out.append(f"<{tag}{declare}{declarations}{attributes}")
    if element.text is None and not len(element):
        out.append("/>")
        return
    out.append(">" + escape(element.text or ""))
    for child in element:
        _write(child, out)
        out.append(escape(child.tail or ""))
    out.append(f"</{tag}>")


def _style_to_attributes(element: ElementTree.Element) -> None:
    style = element.get("style")
    if style is None:
        return
    rest = []
    for declaration in style.split(";"):
        name, _, value = (part.strip() for part in declaration.partition(":"))
        if name in _ATTRIBUTES and name not in element.attrib:
            element.set(name, value)
        elif name:
            rest.append(f"{name}: {value}")
    if rest:
        element.set("style", "; ".join(rest))
    else:
        del element.attrib["style"]

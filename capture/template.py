"""``nprof-report new-study NAME``: a commented study file to start from.

The template is :mod:`nprof_report.capture.study_template`, a real module of the package, so it is
linted, type-checked and run by the tests like the rest; the file written is its source with the
study named ``NAME``.
"""

from __future__ import annotations

import os
import tempfile
from importlib import resources
from pathlib import Path

from nprof_report.errors import InputError

PLACEHOLDER = "my_op"


def template_text(name: str) -> str:
    """The template's source with ``my_op`` replaced by ``name``."""
    text = resources.files("nprof_report.capture").joinpath("study_template.py").read_text("utf-8")
    return text.replace(PLACEHOLDER, name)


def write_template(name: str, out: Path | None = None) -> Path:
    """Write the template for ``name`` to ``out`` (default ``./NAME.py``); never overwrite."""
    if not name.isidentifier():
        raise InputError(name, "is not a valid study name", "use letters, digits and _")
    path = out or Path(f"{name}.py")
    if path.exists():
        raise InputError(path, "already exists; not overwritten", "pass --out NEW.py")
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(template_text(name))
        os.chmod(tmp, 0o644)
        try:
            os.link(tmp, path)  # unlike a rename, fails if the file appeared meanwhile
        finally:
            os.unlink(tmp)
    except FileExistsError as exc:
        raise InputError(path, "already exists; not overwritten", "pass --out NEW.py") from exc
    except OSError as exc:
        raise InputError(path, f"cannot be written ({exc.strerror})") from exc
    return path

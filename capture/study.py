"""The study API: what ``nprof-report capture --study`` runs.

A study is a small Python file that declares a :class:`Study`: the implementations to compare
(name, description, callable), how to build the inputs for one size, the sizes to sweep, the dtype
and, optionally, the tolerance of the numerical check::

    from nprof_report.capture.study import Implementation, Study

    def make_inputs(size, dtype, device):
        import torch
        return (torch.randn(*size, dtype=dtype, device=device),)

    STUDY = Study(
        name="softmax",
        implementations=[
            Implementation("eager", "exp / sum", lambda x: x.exp() / x.exp().sum(-1, keepdim=True)),
            Implementation("builtin", "torch.softmax", lambda x: x.softmax(-1)),
        ],
        make_inputs=make_inputs,
        sizes=[(8, 256), (64, 4096)],
    )

The first implementation is the *reference* of the numerical check and the *baseline* of the
comparisons. The built-in RMSNorm study (:mod:`nprof_report.capture.rmsnorm`) is written with this
API; ``nprof-report new-study NAME`` writes a commented template. torch is never imported here, so
loading a study costs only what the study file itself imports.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nprof_report.errors import InputError

Size = tuple[int, ...]
# make_inputs(size, dtype, device) -> the positional arguments of every implementation
InputBuilder = Callable[[Size, Any, str], Any]
# bytes_moved(size, dtype) / flops(size, dtype) -> a count; dtype is its name ("float32")
WorkCount = Callable[[Size, str], int]

# bytes per element of the dtypes a study may name, for bytes_moved (torch is not imported here)
ITEMSIZE: dict[str, int] = {
    "float64": 8,
    "double": 8,
    "complex128": 16,
    "complex64": 8,
    "float32": 4,
    "float": 4,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}

# Default tolerances of the numerical check, per dtype: those of torch.testing.assert_close
# (https://pytorch.org/docs/stable/testing.html), which compares elementwise
# |actual - expected| <= atol + rtol * |expected|.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-5, 1e-3),
    "bfloat16": (1e-5, 1.6e-2),
    "float32": (1e-5, 1.3e-6),
    "float64": (1e-7, 1e-7),
    "complex64": (1e-5, 1.3e-6),
    "complex128": (1e-7, 1e-7),
}


class StudyError(ValueError):
    """A study that cannot run as declared (the loader names its file)."""


@dataclass(frozen=True)
class Tolerance:
    """Elementwise ``|output - reference| <= atol + rtol * |reference|``."""

    atol: float
    rtol: float

    @classmethod
    def for_dtype(cls, dtype: str) -> Tolerance:
        """torch.testing.assert_close's default for ``dtype``; exact for integer and bool dtypes."""
        atol, rtol = DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0))
        return cls(atol, rtol)


@dataclass(frozen=True)
class Implementation:
    """One way of computing the study's operation.

    ``fn`` is called as ``fn(*inputs)``, with the tuple ``make_inputs`` returned; it must not
    modify its inputs (every implementation of a size gets the same tensors). With ``compile``,
    the runner wraps ``fn`` in ``torch.compile`` (``backend="neuron"`` on Trainium,
    ``mode=compile_mode``), afresh for every size, outside the profiled steps.
    """

    name: str
    description: str
    fn: Callable[..., Any]
    compile: bool = False
    compile_mode: str | None = None


@dataclass(frozen=True)
class Study:
    """Implementations of one operation, the inputs they share and the sizes to sweep.

    ``make_inputs(size, dtype, device)`` returns the positional arguments (a tuple; anything else
    is passed as the one argument) for a size such as ``(64, 4096)``, a ``torch.dtype`` and a
    device string (``"cpu"``, ``"cuda"``, ``"neuron"``). It is called once per size, after
    ``torch.manual_seed(seed)``. ``tolerance`` defaults to :meth:`Tolerance.for_dtype`.
    ``inputs`` and ``parameters`` are recorded in the run's manifest and shown in the report.

    ``bytes_moved(size, dtype)`` and ``flops(size, dtype)``, both optional, declare the work of one
    call (``dtype`` is the dtype's name, ``"float32"``; :func:`itemsize` gives its bytes): the
    fewest bytes the operation must read and write, and its floating-point operations. With them
    the report places every implementation and size against the device's peak bandwidth and
    FLOP/s (a roofline); without them it says it cannot.
    """

    name: str
    implementations: Sequence[Implementation]
    make_inputs: InputBuilder
    sizes: Sequence[Size] = ((4, 512),)
    dtype: str = "float32"
    tolerance: Tolerance | None = None
    inputs: str = ""
    parameters: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    bytes_moved: WorkCount | None = None
    flops: WorkCount | None = None

    def __post_init__(self) -> None:
        # sizes written as lists ([64, 4096]) are taken as tuples
        sizes = tuple(tuple(s) if isinstance(s, list) else s for s in self.sizes)
        object.__setattr__(self, "sizes", sizes)
        problems = _problems(self)
        if problems:
            raise StudyError("; ".join(problems))

    def tolerance_for(self, dtype: str) -> Tolerance:
        """The study's tolerance, else the default for ``dtype``."""
        return self.tolerance or Tolerance.for_dtype(dtype)

    def work(self, size: Size, dtype: str) -> dict[str, int | None] | None:
        """``{"bytes": ..., "flops": ...}`` the study declares for one call at ``size`` (None
        where it declares neither). Raises :class:`StudyError` when a count is not a
        non-negative int or its function raises."""
        if self.bytes_moved is None and self.flops is None:
            return None
        return {
            "bytes": _count(self.bytes_moved, "bytes_moved", size, dtype),
            "flops": _count(self.flops, "flops", size, dtype),
        }


def itemsize(dtype: str) -> int:
    """Bytes per element of the dtype named ``dtype`` (``"bfloat16"``: 2)."""
    try:
        return ITEMSIZE[dtype]
    except KeyError:
        raise StudyError(f"itemsize: unknown dtype {dtype!r}") from None


def _count(fn: WorkCount | None, name: str, size: Size, dtype: str) -> int | None:
    if fn is None:
        return None
    value: object = fn(size, dtype)  # the caller names the study's file if this raises
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise StudyError(f"{name}({size!r}, {dtype!r}) returned {value!r}, not a non-negative int")
    return value


def _problems(study: Study) -> list[str]:
    out = []
    if not isinstance(study.name, str) or not study.name:
        out.append("name must be a non-empty string")
    impls = list(study.implementations)
    if not impls:
        out.append("declares no implementation")
    names = [getattr(i, "name", None) for i in impls]
    for n, impl in enumerate(impls):
        if not isinstance(impl, Implementation):
            out.append(f"implementations[{n}] is a {type(impl).__name__}, not an Implementation")
        elif not impl.name or not all(c.isalnum() or c in "-_." for c in impl.name):
            out.append(f"implementation name {impl.name!r} must be letters, digits, - _ .")
        elif not callable(impl.fn):
            out.append(f"implementation {impl.name!r}: fn is not callable ({impl.fn!r})")
    dupes = sorted({str(n) for n in names if names.count(n) > 1})
    if dupes:
        out.append(f"implementation names repeat: {', '.join(dupes)}")
    if not callable(study.make_inputs):
        out.append(f"make_inputs is not callable ({study.make_inputs!r})")
    for name in ("bytes_moved", "flops"):
        fn = getattr(study, name)
        if fn is not None and not callable(fn):
            out.append(f"{name} is not callable ({fn!r})")
    if not study.sizes:
        out.append("declares no size")
    for size in study.sizes:
        if not check_size(size):
            out.append(f"size {size!r} is not a tuple of positive ints")
    return out


def check_size(size: object) -> bool:
    """Whether ``size`` is a non-empty tuple of positive ints."""
    return (
        isinstance(size, tuple)
        and bool(size)
        and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in size)
    )


BUILTIN = "nprof_report.capture.rmsnorm:STUDY"


def load_study(spec: str | None) -> tuple[Study, str]:
    """Load ``path.py``, ``path.py:NAME`` or ``module:NAME`` (``NAME`` defaults to ``STUDY``).

    Returns the study and where it came from. Every problem -- a missing file, a syntax error, an
    exception while importing, no such object, an invalid study -- is an
    :class:`~nprof_report.errors.InputError` naming the file.
    """
    spec = spec or BUILTIN
    target, _, attr = spec.rpartition(":") if ":" in spec else (spec, "", "")
    attr = attr or "STUDY"
    looks_like_file = target.endswith(".py") or "/" in target or Path(target).exists()
    if looks_like_file:
        path = Path(target)
        module = _import_file(path)
        where: Path | str = path
    else:
        module = _import_module(target)
        where = getattr(module, "__file__", None) or target
    obj = getattr(module, attr, None)
    if obj is None:
        raise InputError(
            where,
            f"defines no {attr}",
            f"add `{attr} = Study(...)` (nprof_report.capture.study) or pass FILE:NAME",
        )
    if not isinstance(obj, Study):
        raise InputError(where, f"{attr} is a {type(obj).__name__}, not a Study")
    return obj, spec


def _import_file(path: Path) -> Any:
    if not path.is_file():
        raise InputError(path, "does not exist" if not path.exists() else "is not a file")
    name = "nprof_study_" + "".join(c if c.isalnum() else "_" for c in path.stem)
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise InputError(path, "cannot be imported as a Python file")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    try:
        module_spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        raise InputError(path, f"syntax error at line {exc.lineno}: {exc.msg}") from exc
    except StudyError as exc:
        sys.modules.pop(name, None)
        raise InputError(path, f"invalid study: {exc}") from exc
    except Exception as exc:
        sys.modules.pop(name, None)
        raise InputError(path, f"raised {_where(exc, path)} while being imported") from exc
    return module


def _import_module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            raise InputError(name, "no such module or file") from exc
        raise InputError(name, f"raised {_where(exc, None)} while being imported") from exc
    except StudyError as exc:
        raise InputError(name, f"invalid study: {exc}") from exc
    except Exception as exc:
        raise InputError(name, f"raised {_where(exc, None)} while being imported") from exc


def _where(exc: BaseException, path: Path | str | None) -> str:
    """``ValueError: bad (line 12)``: the exception and its last line in the study's file."""
    text = f"{type(exc).__name__}: {exc}"
    if path is None:
        return text
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if Path(f.filename).resolve() == Path(path).resolve()
    ]
    if frames:
        text += f" (line {frames[-1].lineno})"
    return text


def study_file(source: str) -> str | None:
    """The file a study was loaded from (``path.py[:NAME]`` or ``module:NAME``), if known."""
    target = source.rpartition(":")[0] if ":" in source else source
    if target.endswith(".py"):
        return target
    module = sys.modules.get(target)
    return getattr(module, "__file__", None)


def describe_error(exc: BaseException, source: str) -> str:
    """An exception raised by the study's own code, with its line in the study's file if there."""
    return _where(exc, study_file(source))

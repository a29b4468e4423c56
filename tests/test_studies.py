"""Studies: loading a study file, its errors, sweeps over sizes, and the numerical check.

The captures here are real (CPU, small sizes, two active steps); the wrong implementations are
deliberately wrong (labelled where they are defined).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nprof_report.bundle import read_manifest
from nprof_report.cli import cli, main
from nprof_report.report.figures import read_summary
from tests.summary_shape import assert_conforms

SMALL = ((4, 64), (16, 256))


def _run_main(args: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(sys, "argv", ["nprof-report", *args])
    with pytest.raises(SystemExit) as exit_info:
        main()
    code = exit_info.value.code
    return code if isinstance(code, int) else 1


STUDY_HEAD = """
from nprof_report.capture.study import Implementation, Study

def make_inputs(size, dtype, device):
    import torch
    return (torch.randn(*size, dtype=dtype, device=device),)

def double(x):
    return x * 2
"""


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("STUDY = Study(name='s', implementations=[", "syntax error at line 10"),
        ("OTHER = 1\n", "defines no STUDY"),
        (
            "STUDY = Study(name='s', implementations=[Implementation('a', 'd', None)],"
            " make_inputs=make_inputs)\n",
            "implementation 'a': fn is not callable",
        ),
        (
            "STUDY = Study(name='s', implementations=[], make_inputs=3)\n",
            "make_inputs is not callable",
        ),
        ("raise ValueError('no GPU here')\n", "raised ValueError: no GPU here (line 10)"),
        (
            "def bad(size, dtype, device):\n    raise RuntimeError('out of memory')\n\n"
            "STUDY = Study(name='s', implementations=[Implementation('a', 'd', double)],"
            " make_inputs=bad)\n",
            "make_inputs raised RuntimeError: out of memory (line 11) for size 4×512",
        ),
    ],
    ids=[
        "syntax",
        "no-study",
        "fn-not-callable",
        "builder-not-callable",
        "import-raises",
        "builder-raises",
    ],
)
def test_a_broken_study_exits_2_with_one_line_naming_the_file(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    body: str,
    problem: str,
) -> None:
    study = tmp_path / "broken_study.py"
    study.write_text(STUDY_HEAD + body)
    out = tmp_path / "runs"
    code = _run_main(
        ["capture", "--study", str(study), "--backend", "cpu", "--out", str(out)], monkeypatch
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1, err
    assert err[0].startswith(f"nprof-report: error: {study}: "), err
    assert problem in err[0]
    assert not out.exists() or not any(out.iterdir())  # nothing written


def test_unknown_implementation_and_missing_study_file_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _run_main(["capture", "--impl", "slow", "--backend", "cpu"], monkeypatch)
    err = capsys.readouterr().err
    assert code == 2 and "--impl 'slow': the RMSNorm study has naive, fused, compiled" in err
    missing = tmp_path / "nope.py"
    code = _run_main(["capture", "--study", str(missing)], monkeypatch)
    assert code == 2 and f"{missing}: does not exist" in capsys.readouterr().err


def test_new_study_writes_the_template_and_never_overwrites(tmp_path: Path) -> None:
    target = tmp_path / "attention.py"
    first = CliRunner().invoke(cli, ["new-study", "attention", "--out", str(target)])
    assert first.exit_code == 0, first.output
    text = target.read_text()
    assert 'name="attention"' in text and "my_op" not in text
    compile(text, str(target), "exec")
    target.write_text("mine")
    again = CliRunner().invoke(cli, ["new-study", "attention", "--out", str(target)])
    assert again.exit_code != 0
    assert target.read_text() == "mine"
    assert [p.name for p in tmp_path.iterdir()] == ["attention.py"]  # no temp file left


def test_numerical_check_against_torch_isclose() -> None:
    import torch

    from nprof_report.capture.numerics import compare_outputs
    from nprof_report.capture.study import Tolerance

    ref = torch.tensor([1.0, 2.0, 0.0, -4.0])
    out = torch.tensor([1.0, 2.1, 1e-6, -4.0])
    tol = Tolerance(atol=1e-5, rtol=1e-2)
    check = compare_outputs(out, ref, "ref", tol)
    expected_mismatch = int((~torch.isclose(out, ref, rtol=1e-2, atol=1e-5)).sum())
    assert check.status == "fail"
    assert check.mismatched == expected_mismatch == 1
    assert check.elements == 4
    assert check.max_abs_error == pytest.approx(float((out.double() - ref.double()).abs().max()))
    assert check.max_rel_error == pytest.approx(0.1 / 2.0, rel=1e-6)  # the 0 element is skipped
    ok = compare_outputs((ref.clone(), [ref * 2]), (ref, [ref * 2]), "ref", tol)
    assert ok.status == "pass" and ok.max_abs_error == 0.0 and ok.elements == 8
    shape = compare_outputs(ref[:3], ref, "ref", tol)
    assert shape.status == "fail" and "shape (3,)" in (shape.note or "")
    assert compare_outputs(3.0, ref, "ref", tol).status == "not compared"
    nan = torch.tensor([float("nan"), 1.0])
    assert compare_outputs(nan.clone(), nan, "ref", tol).status == "pass"
    assert compare_outputs(torch.tensor([1.0, 1.0]), nan, "ref", tol).status == "fail"


def test_default_tolerances_are_torch_testing_defaults() -> None:
    import torch
    import torch.testing._comparison as cmp

    from nprof_report.capture.study import Tolerance

    for name in ("float16", "bfloat16", "float32", "float64"):
        rtol, atol = cmp.default_tolerances(getattr(torch, name))
        assert Tolerance.for_dtype(name) == Tolerance(atol=atol, rtol=rtol), name


# A deliberately wrong implementation (constructed for the test): 1 % too large.
WRONG_STUDY = """
from nprof_report.capture.study import Implementation, Study

def make_inputs(size, dtype, device):
    import torch
    return (torch.randn(*size, dtype=dtype, device=device),)

def softmax(x):
    return x.softmax(-1)

def by_hand(x):
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)

def wrong(x):
    return x.softmax(-1) * 1.01

def breaks_when_large(x):
    if x.shape[0] > 4:
        raise RuntimeError("kernel supports 4 rows")
    return x.softmax(-1)

STUDY = Study(
    name="softmax",
    implementations=[
        Implementation("builtin", "torch.softmax", softmax),
        Implementation("by_hand", "exp / sum", by_hand),
        Implementation("wrong", "1 % off, on purpose", wrong),
        Implementation("small_only", "raises above 4 rows", breaks_when_large),
    ],
    make_inputs=make_inputs,
    sizes=[(16, 256), (4, 64)],
    inputs="x = randn(size)",
)
"""


@pytest.fixture(scope="module")
def wrong_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from nprof_report.capture.session import CaptureOptions, run_capture

    root = tmp_path_factory.mktemp("wrong")
    study = root / "softmax_study.py"
    study.write_text(WRONG_STUDY)
    return run_capture(
        CaptureOptions(
            out=root / "runs",
            study=str(study),
            backend="cpu",
            active=2,
            timing_seconds=0.05,
        )
    )


@pytest.mark.capture
def test_sweep_records_every_size_and_keeps_going_after_a_failure(wrong_run: Path) -> None:
    manifest = read_manifest(wrong_run)
    assert manifest.format_version == 1 and manifest.format_minor == 2
    assert manifest.sizes == [[4, 64], [16, 256]]  # in order of size, whatever the study's
    assert manifest.workload["name"] == "softmax"
    assert manifest.workload["tolerance"] == {"atol": 1e-5, "rtol": 1.3e-6}
    got = [(i.name, i.size, i.status) for i in manifest.implementations]
    assert got == [
        ("builtin", [4, 64], "ok"),
        ("by_hand", [4, 64], "ok"),
        ("wrong", [4, 64], "ok"),
        ("small_only", [4, 64], "ok"),
        ("builtin", [16, 256], "ok"),
        ("by_hand", [16, 256], "ok"),
        ("wrong", [16, 256], "ok"),
        ("small_only", [16, 256], "failed"),
    ]
    failed = manifest.implementations[-1]
    assert failed.error == "RuntimeError: kernel supports 4 rows (line 20)"
    for impl in manifest.implementations[:-1]:
        assert impl.bundle == f"{impl.size[0]}x{impl.size[1]}/{impl.name}"  # type: ignore[index]
        assert (wrong_run / impl.trace).is_file()  # type: ignore[operator]
    checks = {(i.name, tuple(i.size or ())): i.check for i in manifest.implementations}
    assert checks["builtin", (4, 64)].status == "reference"  # type: ignore[union-attr]
    assert checks["by_hand", (16, 256)].status == "pass"  # type: ignore[union-attr]
    wrong = checks["wrong", (16, 256)]
    assert wrong is not None and wrong.status == "fail"
    assert wrong.max_rel_error == pytest.approx(0.01, rel=1e-3)  # the 1 % put there
    assert checks["small_only", (16, 256)] is None  # raised before its output existed


@pytest.mark.capture
@pytest.mark.pdf
def test_report_flags_the_wrong_implementation_on_page_one(wrong_run: Path, tmp_path: Path) -> None:
    from pypdf import PdfReader

    from nprof_report.report.build import build_report

    out = tmp_path / "report"
    build_report([wrong_run], out=out)
    summary = read_summary(out / "summary.json")
    mismatch = [f for f in summary["findings"] if f["rule"] == "numerical-mismatch"]
    assert [f["severity"] for f in mismatch] == ["high"]
    assert mismatch[0]["title"].startswith("wrong's output differs from builtin's")
    assert "4×64, 16×256" in mismatch[0]["title"]
    assert summary["findings"][0]["rule"] == "numerical-mismatch"
    page_one = "".join(PdfReader(out / "report.pdf").pages[0].extract_text().split())
    assert "NUMERICALCHECKFAILED:wrongat4×64,16×256" in page_one
    # the largest size leads; the smallest size follows in its own sections
    assert [i["label"] for i in summary["implementations"]] == ["builtin", "by_hand", "wrong"]
    assert summary["run"]["workload"]["shape"] == [16, 256]
    detail = summary["sweep"]["smallest_detail"]["implementations"]
    assert [i["label"] for i in detail][:2] == ["builtin @ 4×64", "by_hand @ 4×64"]
    html = (out / "report.html").read_text()
    assert 'id="sweep"' in html and "Time per call against size" in html
    assert (out / "tables" / "sweep.csv").is_file()
    assert (out / "tables" / "numerical-check.csv").is_file()
    assert_conforms(summary)  # sweep and numerical_check records (tests/summary_shape.py)


@pytest.mark.capture
@pytest.mark.slow
def test_template_study_runs_end_to_end_at_two_sizes(tmp_path: Path) -> None:
    from nprof_report.capture.session import CaptureOptions, run_capture
    from nprof_report.report.build import build_report

    study = tmp_path / "gelu.py"
    assert CliRunner().invoke(cli, ["new-study", "gelu", "--out", str(study)]).exit_code == 0
    run = run_capture(
        CaptureOptions(
            out=tmp_path / "runs",
            study=str(study),
            backend="cpu",
            sizes=SMALL,
            active=2,
            timing_seconds=0.05,
        )
    )
    manifest = read_manifest(run)
    assert [(i.name, i.status) for i in manifest.implementations] == [
        (n, "ok") for _ in SMALL for n in ("eager", "builtin", "compiled")
    ]
    assert {i.check.status for i in manifest.implementations if i.check} == {"reference", "pass"}
    build_report([run], out=tmp_path / "report")
    summary = read_summary(tmp_path / "report" / "summary.json")
    sweep = summary["sweep"]
    assert sweep["sizes"] == [list(s) for s in SMALL]
    assert [s["label"] for s in sweep["series"]] == ["eager", "builtin", "compiled"]
    assert all(len(s["points"]) == 2 for s in sweep["series"])
    assert {c["label"] for c in sweep["comparisons"]} == {"builtin", "compiled"}
    assert summary["run"]["workload"]["name"] == "gelu"
    assert "gelu study" in (tmp_path / "report" / "report.html").read_text()


def test_study_api_rejects_what_cannot_run() -> None:
    from nprof_report.capture.study import Implementation, Study, StudyError

    def f(x: Any) -> Any:
        return x

    with pytest.raises(StudyError, match="implementation names repeat: a"):
        Study("s", [Implementation("a", "", f), Implementation("a", "", f)], lambda *a: a)
    with pytest.raises(StudyError, match=r"size \(4, 0\) is not a tuple of positive ints"):
        Study("s", [Implementation("a", "", f)], lambda *a: a, sizes=[(4, 0)])
    with pytest.raises(StudyError, match="must be letters"):
        Study("s", [Implementation("a b", "", f)], lambda *a: a)
    listed = Study("s", [Implementation("a", "", f)], lambda *a: a, sizes=[[4, 8]])  # type: ignore[list-item]
    assert listed.sizes == ((4, 8),)


def test_load_study_by_module_name() -> None:
    from nprof_report.capture.rmsnorm import STUDY
    from nprof_report.capture.study import load_study

    study, source = load_study("nprof_report.capture.rmsnorm:STUDY")
    assert study is STUDY and source == "nprof_report.capture.rmsnorm:STUDY"
    assert load_study(None)[0] is STUDY


def _headline(median: float, iqr: float) -> dict[str, Any]:
    """A constructed headline: un-profiled median and IQR only (the profiled keys left out)."""
    return {"unprofiled_median_us": median, "unprofiled_iqr_us": iqr}


# constructed numbers: naive grows slower with size than fused does not; (naive, fused) per size
CONSTRUCTED = {
    (4, 512): ((10.0, 2.0), (9.5, 2.0)),  # 0.5 us apart, half-IQRs sum to 2: noise
    (16, 1024): ((20.0, 2.0), (19.0, 2.0)),  # noise
    (64, 4096): ((200.0, 10.0), (80.0, 10.0)),  # fused faster
    (256, 8192): ((2000.0, 50.0), (600.0, 40.0)),  # fused faster
}


def _points(table: dict[tuple[int, int], Any]) -> list[dict[str, Any]]:
    from nprof_report.report.figures.summary import compare

    return [
        {
            "size": list(s),
            "size_label": "×".join(map(str, s)),
            **compare(_headline(*b), _headline(*o)),
        }
        for s, (b, o) in table.items()
    ]


def test_crossover_from_constructed_numbers() -> None:
    from nprof_report.report.figures.sweep import crossover, crossover_title, sweep_findings

    points = _points(CONSTRUCTED)
    cross = crossover(points)
    assert cross["verdicts"] == ["within noise", "within noise", "faster", "faster"]
    assert cross["from_size"] == [64, 4096] and cross["below"] == "within noise"
    comp = {"baseline": "naive", "label": "fused", "points": points, **cross}
    assert crossover_title(comp) == (
        "fused beats naive from 64×4096 on; below it the difference is within noise"
    )
    (finding,) = sweep_findings({"comparisons": [comp], "series": []})
    assert finding["rule"] == "size-crossover" and finding["severity"] == "medium"
    assert "64×4096 0.4x (faster)" in finding["evidence"]

    # faster everywhere: one info finding; slower from some size on; back and forth: mixed
    everywhere = _points({s: ((100.0, 1.0), (50.0, 1.0)) for s in CONSTRUCTED})
    comp = {"baseline": "naive", "label": "fused", "points": everywhere, **crossover(everywhere)}
    assert crossover_title(comp) == "fused beats naive at every size measured (4×512 to 256×8192)"
    slower = dict(CONSTRUCTED)
    slower[(64, 4096)] = ((80.0, 10.0), (200.0, 10.0))
    slower[(256, 8192)] = ((600.0, 40.0), (2000.0, 50.0))
    slower[(4, 512)] = ((20.0, 1.0), (10.0, 1.0))
    points = _points(slower)
    comp = {"baseline": "naive", "label": "fused", "points": points, **crossover(points)}
    assert crossover_title(comp) == (
        "fused is slower than naive from 64×4096 on; below it the result changes from size to size"
    )


def test_device_overtakes_dispatch_from_constructed_numbers() -> None:
    from nprof_report.report.figures.sweep import sweep_findings

    series = {
        "label": "fused",
        "points": [
            {"size_label": "4×512", "device_per_step_us": 2.0, "dispatch_per_step_us": 10.0},
            {"size_label": "64×4096", "device_per_step_us": 30.0, "dispatch_per_step_us": 11.0},
            {"size_label": "256×8192", "device_per_step_us": 400.0, "dispatch_per_step_us": 12.0},
        ],
    }
    (finding,) = sweep_findings({"comparisons": [], "series": [series]})
    assert finding["title"] == "fused: device time per step exceeds host dispatch from 64×4096 on"


def test_manifests_of_format_minor_0_and_of_a_newer_minor_are_read(tmp_path: Path) -> None:
    from nprof_report.bundle import FORMAT_MINOR, Manifest

    old = {
        "format": "nprof-run",
        "format_version": 1,
        "run_id": "r",
        "created_utc": "2026-11-30T00:00:00+00:00",
        "command": ["nprof-report", "capture"],
        "backend": "cpu",
        "device": "CPU",
        "host": {},
        "versions": {},
        "workload": {"name": "rmsnorm", "shape": [4, 512], "dtype": "bfloat16"},
        "schedule": {"wait": 2, "warmup": 1, "active": 8, "repeat": 1},
        "profiler": {},
        "environment": {},
        "implementations": [{"name": "naive", "description": "d", "status": "ok"}],
        "files": [],
        "tool_version": "0.1.0",
    }
    manifest = Manifest.from_json(json.dumps(old), path=tmp_path / "manifest.json")
    assert manifest.format_minor == 0 and manifest.sizes == [[4, 512]]
    assert manifest.implementations[0].size is None and manifest.implementations[0].check is None
    newer = {**old, "format_minor": FORMAT_MINOR + 1, "future": 1}
    newer["implementations"] = [{**old["implementations"][0], "future": 2}]  # type: ignore[index]
    assert Manifest.from_json(json.dumps(newer), path=tmp_path).run_id == "r"
    from nprof_report.errors import InputError

    with pytest.raises(InputError, match="unexpected fields"):  # same minor: a typo, not a future
        Manifest.from_json(json.dumps({**old, "future": 1}), path=tmp_path)


@pytest.mark.capture
def test_rmsnorm_default_checks_numerics_and_says_so(cpu_report: Path) -> None:
    summary = read_summary(cpu_report / "summary.json")
    assert "sweep" not in summary  # one size: the report as before
    checks = {c["label"]: c["status"] for c in summary["numerical_check"]}
    assert checks == {"naive": "reference", "fused": "pass", "compiled": "pass"}
    assert not [f for f in summary["findings"] if f["rule"] == "numerical-mismatch"]
    html = (cpu_report / "report.html").read_text()
    assert "Numerical check: every output matches naive&#39;s within tolerance" in html


def test_the_readme_example_study_loads(tmp_path: Path) -> None:
    from nprof_report.capture.study import load_study

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme[readme.index("## Writing a study") :]
    code = section[section.index("```python\n") + 10 : section.index("\n```\n")]
    path = tmp_path / "my_study.py"
    path.write_text(code)
    study, _ = load_study(str(path))
    assert [i.name for i in study.implementations] == ["by_hand", "builtin", "compiled"]
    assert len(study.sizes) == 4 and study.implementations[2].compile


@pytest.mark.capture
def test_ops_names_each_size_of_a_sweep(wrong_run: Path) -> None:
    from nprof_report.report.opsview import render_ops

    text, _ = render_ops(wrong_run, fmt="json")
    rows = json.loads(text)
    assert {r["source"] for r in rows} == {
        f"{s}/{n}" for s in ("4x64", "16x256") for n in ("builtin", "by_hand", "wrong")
    } | {"4x64/small_only"}  # it failed at 16×256


def test_scaling_charts_draw_every_implementation_on_log_axes() -> None:
    from nprof_report.report.view import sweepchart

    points = [
        {"elements": n, "size_label": f"{n}", "unprofiled_median_us": n / 10, "step_median_us": n}
        for n in (256, 4096, 65536)
    ]
    svg = sweepchart.scaling_by_implementation(["naive", "fused"], [points, points])
    assert svg.startswith("<svg") and ">naive<" in svg and ">fused<" in svg
    assert "un-profiled call (median)" in svg and "host dispatch" not in svg  # none given
    overlay = sweepchart.scaling_overlay(["naive", "fused"], [points, points], "step_median_us")
    assert "µs per call (log)" in overlay and ">65536<" in overlay

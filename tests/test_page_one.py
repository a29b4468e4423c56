"""Page 1 as a reviewer reads it (issue 28): several runs and backends, failures, constructed
inputs, host dispatch against device time.

The captures are real (CPU, small sizes, two or three active steps). The softmax study below has
two implementations that are wrong on purpose: ``off_by_eps`` (1 % too large) and
``narrow_only`` (raises on rows wider than 64). The Neuron run is the stand-in capture of
tests/neuron_standin.py, whose profiles are the CONSTRUCTED trees of fixtures/neuron/.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import tinyhtml5

from nprof_report.cli import main
from nprof_report.report.figures import read_summary
from tests.conftest import NEURON, PUBLIC
from tests.summary_shape import assert_conforms
from tests.test_report_golden import _check_numbers

HTML_NS = "{http://www.w3.org/1999/xhtml}"

STUDY = """
from nprof_report.capture.study import Implementation, Study

def make_inputs(size, dtype, device):
    import torch
    return (torch.randn(*size, dtype=dtype, device=device),)

def stable(x):
    return x.softmax(-1)

def by_hand(x):
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)

def off_by_eps(x):  # wrong on purpose: 1 % too large
    return x.softmax(-1) * 1.01

def narrow_only(x):  # fails on purpose above 64 wide
    if x.shape[-1] > 64:
        raise RuntimeError("narrow_only supports rows up to 64 wide\\nwhat the kernel said next")
    return x.softmax(-1)

STUDY = Study(
    name="softmax",
    implementations=[
        Implementation("stable", "torch.softmax", stable),
        Implementation("by_hand", "exp / sum", by_hand),
        Implementation("off_by_eps", "1 % off, on purpose", off_by_eps),
        Implementation("narrow_only", "raises above 64 wide, on purpose", narrow_only),
    ],
    make_inputs=make_inputs,
    sizes=[(4, 32), (4, 64), (8, 128)],
    inputs="x = randn(size)",
)
"""

RAISES_AT = 1 + next(n for n, line in enumerate(STUDY.splitlines()) if "raise" in line)
"""The study file's line that raises (capture names it after the error)."""

RANKING_RULES = {
    "size-crossover",
    "step-time-difference",
    "unprofiled-difference",
    "step-time-within-noise",
    "fusion-removed-dispatches",
    "run-difference",
    "backend-difference",
}


def _capture(
    root: Path, *, sizes: tuple[tuple[int, ...], ...] = (), impls: tuple[str, ...] = ()
) -> Path:
    from nprof_report.capture.session import CaptureOptions, run_capture

    study = root / "softmax_study.py"
    if not study.exists():
        study.write_text(STUDY)
    return run_capture(
        CaptureOptions(
            out=root / "runs",
            study=str(study),
            backend="cpu",
            sizes=sizes,
            implementations=impls,
            active=2,
            timing_seconds=0.05,
        )
    )


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three sizes; narrow_only raises at the largest, 8×128."""
    return _capture(tmp_path_factory.mktemp("sweep"))


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two captures of the softmax study, two sizes each."""
    root = tmp_path_factory.mktemp("two")
    sizes = ((4, 32), (4, 64))
    impls = ("stable", "by_hand")
    return [_capture(root, sizes=sizes, impls=impls) for _ in range(2)]


@pytest.fixture(scope="module")
def neuron_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built-in study captured through the stand-in Neuron backend (CONSTRUCTED trees)."""
    from tests.neuron_standin import constructed_neuron_run

    return constructed_neuron_run(tmp_path_factory.mktemp("neuron") / "runs")


def _build(paths: list[Path], out: Path, **kw: Any) -> dict[str, Any]:
    from nprof_report.report.build import build_report

    build_report(paths, out=out, **kw)
    summary: dict[str, Any] = read_summary(out / "summary.json")
    assert_conforms(summary)
    return summary


def _page_one(out: Path) -> str:
    from pypdf import PdfReader

    return " ".join(PdfReader(out / "report.pdf").pages[0].extract_text().split())


def _run_main(args: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(sys, "argv", ["nprof-report", *args])
    with pytest.raises(SystemExit) as exit_info:
        main()
    code = exit_info.value.code
    return code if isinstance(code, int) else 1


# -- several runs of one study ---------------------------------------------------------------


@pytest.mark.capture
@pytest.mark.pdf
def test_two_runs_of_one_study_are_labelled_by_run_and_size_and_compared_like_with_like(
    two_runs: list[Path], tmp_path: Path
) -> None:
    a, b = two_runs
    out = tmp_path / "report"
    summary = _build([a, b], out)
    labels = [i["label"] for i in summary["implementations"]]
    assert labels == [
        f"{run.name}/{impl} @ {size}"
        for run in (a, b)
        for size in ("4×32", "4×64")
        for impl in ("stable", "by_hand")
    ]
    assert len(set(labels)) == len(labels)
    assert [r["name"] for r in summary["runs"]] == [a.name, b.name]

    def run_and_size(label: str) -> tuple[str, str]:
        run, rest = label.split("/", 1)
        return run, rest.split(" @ ")[1]

    # within a run and a size only
    assert summary["comparisons"]
    for c in summary["comparisons"]:
        assert run_and_size(c["label"]) == run_and_size(c["baseline"])
    # across runs: the same implementation at the same size, against the first run
    assert len(summary["across_runs"]) == 4
    for c in summary["across_runs"]:
        assert c["baseline"].split("/", 1)[1] == c["label"].split("/", 1)[1]
        assert c["baseline_run"] == a.name and c["run"] == b.name
        assert c["holds"] in ("faster", "slower", "within noise")
    findings = [f for f in summary["findings"] if f["rule"] == "run-difference"]
    assert len(findings) == 4

    page = _page_one(out)
    assert a.name in page and b.name in page
    assert "softmax study" in page
    # the verdict ranks within a run, and across runs the same implementation and size only
    verdict = page[page.index("Verdict.") : page.index("Headline figures")]
    for sentence in re.split(r"(?<=\.) ", verdict):
        if "than" not in sentence and "within the run-to-run noise of" not in sentence:
            continue
        for clause in sentence.split("; "):
            named = re.findall(r"(\S+)/(\w+) @ (\S+)", clause)
            if len(named) == 2:
                (_, impl1, size1), (_, impl2, size2) = named
                assert (impl1, size1) == (impl2, size2), clause


@pytest.mark.capture
def test_runs_on_different_backends_are_labelled_by_backend(
    cpu_run: Path, neuron_run: Path, tmp_path: Path
) -> None:
    from nprof_report.parse import resolve
    from nprof_report.report.jobs import group_runs

    paths = [cpu_run, neuron_run]
    runs = group_runs(paths, [resolve(p) for p in paths])
    assert [[s.label for s in sources] for _, sources in runs] == [
        ["cpu/naive", "cpu/fused", "cpu/compiled"],
        ["neuron/naive", "neuron/fused", "neuron/compiled"],
    ]
    # one run alone keeps its names; the same backend twice: the runs' names
    alone = group_runs([cpu_run], [resolve(cpu_run)])
    assert [s.label for s in alone[0][1]] == ["naive", "fused", "compiled"]
    twice = group_runs([cpu_run, cpu_run.parent], [resolve(cpu_run), resolve(cpu_run)])
    assert [s.label for s in twice[0][1]] == ["naive", "fused", "compiled"]  # one run


# -- different studies -----------------------------------------------------------------------


@pytest.mark.capture
def test_runs_of_different_studies_exit_2_with_one_line_naming_both(
    cpu_run: Path,
    two_runs: list[Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    other = two_runs[0]
    code = _run_main(["build", str(cpu_run), str(other), "--out", str(tmp_path / "r")], monkeypatch)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1, err
    line = err[0]
    assert line.startswith(f"nprof-report: error: {other}: ")
    assert "softmax study" in line and "RMSNorm study" in line
    assert str(cpu_run) in line and "--allow-mixed" in line
    assert not (tmp_path / "r").exists()  # refused before anything was read or written


@pytest.mark.capture
@pytest.mark.pdf
def test_allow_mixed_gives_each_study_a_section_and_compares_none_across(
    cpu_run: Path, two_runs: list[Path], tmp_path: Path
) -> None:
    other = two_runs[0]
    out = tmp_path / "mixed"
    summary = _build([cpu_run, other], out, allow_mixed=True)
    assert "across_runs" not in summary and "backends" not in summary
    assert [r["study"] for r in summary["runs"]] == ["RMSNorm", "softmax"]
    for c in summary["comparisons"]:
        assert c["label"].split("/")[0] == c["baseline"].split("/")[0]
    html = (out / "report.html").read_text()
    ids = {e.get("id") for e in tinyhtml5.parse(html).iter() if e.get("id")}
    assert "study-softmax" in ids
    page = _page_one(out)
    assert "2 studies" in page and "never compared" in page
    assert (out / "tables" / "headline-softmax.csv").is_file()


# -- failures, wrong outputs -----------------------------------------------------------------


@pytest.mark.capture
@pytest.mark.pdf
def test_a_failure_at_the_largest_size_is_on_page_one_and_stops_the_crossover(
    sweep_run: Path, tmp_path: Path
) -> None:
    out = tmp_path / "sweep"
    summary = _build([sweep_run], out)
    (failure,) = summary["failures"]
    assert failure["label"] == "narrow_only" and failure["sizes"] == ["8×128"]
    assert failure["ran_at"] == ["4×32", "4×64"]
    assert failure["error"] == (
        f"RuntimeError: narrow_only supports rows up to 64 wide (line {RAISES_AT})"
    )

    high = [f for f in summary["findings"] if f["rule"] == "implementation-failed"]
    assert [f["severity"] for f in high] == ["high"]
    assert "narrow_only FAILED at 8×128" in high[0]["title"]
    assert "supports rows up to 64 wide" in high[0]["title"]

    crossover = [
        f
        for f in summary["findings"]
        if f["rule"] == "size-crossover" and f["title"].startswith("narrow_only")
    ]
    for f in crossover:  # never past 4×64, the last size where it ran
        assert "8×128" not in f["title"] and " on;" not in f["title"]
        assert "4×64" in f["title"]

    page = _page_one(out)
    assert "narrow_only (failed at 8×128)" in page  # the question's list
    assert (
        "narrow_only FAILED at 8×128 (RuntimeError: narrow_only supports rows up to 64 wide" in page
    )
    assert "what the kernel said next" not in page  # the first line of the error only
    assert "its figures stop at 4×64" in page


@pytest.mark.capture
def test_an_implementation_with_wrong_output_is_marked_wherever_it_is_ranked(
    sweep_run: Path, tmp_path: Path
) -> None:
    summary = _build([sweep_run], tmp_path / "wrong")
    assert summary["output_wrong"] == ["off_by_eps"]
    ranked = [
        f["title"]
        for f in summary["findings"]
        if f["rule"] in RANKING_RULES and "off_by_eps" in f["title"]
    ]
    assert ranked  # off_by_eps is compared with stable at every size
    for title in ranked:
        assert title.count("off_by_eps") == title.count("off_by_eps (output wrong)"), title
    html = (tmp_path / "wrong" / "report.html").read_text()
    start = html.index('class="verdict"')
    verdict = re.sub(r"<[^>]+>", " ", html[start : html.index("</div>", start)])
    for sentence in re.split(r"(?<=[.;]) ", verdict):
        if "off_by_eps" in sentence and re.search(
            r"fastest|faster|slower|beats|within noise", sentence
        ):
            assert "off_by_eps (output wrong)" in sentence, sentence


def test_the_fastest_sentence_marks_a_wrong_output() -> None:
    from nprof_report.report.view.pageone import fastest

    def record(label: str, us: float) -> Any:
        return {
            "label": label,
            "headline": {"unprofiled_median_us": us, "framework_ops_per_step": 1},
        }

    impls = [record("stable", 10.0), record("off_by_eps", 5.0)]
    comparisons: Any = [
        {"baseline": "stable", "label": "off_by_eps", "unprofiled_exceeds_noise": True}
    ]
    text = fastest(impls, comparisons, ["off_by_eps"])
    assert text.startswith("off_by_eps (output wrong) is fastest by un-profiled time per call")
    assert "exceeds the run-to-run noise" in text


def test_first_line_of_an_error_keeps_the_study_files_line() -> None:
    from nprof_report.report.figures.failures import first_line

    assert first_line("RuntimeError: a\nb (line 19)") == "RuntimeError: a (line 19)"
    assert first_line("ValueError: one line") == "ValueError: one line"
    assert first_line(None) is None


def test_a_crossover_claim_stops_where_both_stopped_running() -> None:
    from nprof_report.report.figures.sweep import crossover, crossover_title

    def point(size: list[int], base: float, other: float) -> Any:
        from nprof_report.report.figures.summary import compare

        h = lambda m: {"unprofiled_median_us": m, "unprofiled_iqr_us": 1.0}  # noqa: E731
        return {"size": size, "size_label": "×".join(map(str, size)), **compare(h(base), h(other))}

    points = [point([4, 32], 10, 10.2), point([4, 64], 20, 40), point([8, 128], 40, 80)]
    comp: Any = {"baseline": "stable", "label": "slow", "points": points, **crossover(points)}
    assert crossover_title(comp, [8, 128]) == (
        "slow is slower than stable from 4×64 on; below it the difference is within noise"
    )
    cut: Any = {
        "baseline": "stable",
        "label": "slow",
        "points": points[:2],
        **crossover(points[:2]),
    }
    assert crossover_title(cut, [8, 128]) == (
        "slow is slower than stable at 4×64, the last size where both ran; below it the "
        "difference is within noise"
    )
    both: Any = {
        "baseline": "stable",
        "label": "slow",
        "points": points[1:],
        **crossover(points[1:]),
    }
    assert crossover_title(both, [16, 256], ["slow"]) == (
        "slow (output wrong) is slower than stable at every size both ran (4×64 to 8×128; no "
        "claim beyond 8×128)"
    )


# -- backends, constructed inputs, dispatch against device ----------------------------------


@pytest.mark.capture
@pytest.mark.pdf
def test_a_cpu_run_and_a_constructed_neuron_run_side_by_side(
    cpu_run: Path, neuron_run: Path, tmp_path: Path
) -> None:
    out = tmp_path / "backends"
    summary = _build([cpu_run, neuron_run], out)
    assert [i["label"] for i in summary["implementations"]] == [
        f"{b}/{n}" for b in ("cpu", "neuron") for n in ("naive", "fused", "compiled")
    ]
    backends = summary["backends"]
    assert backends["backends"] == ["cpu", "neuron"]
    by_impl = {c["implementation"]: c for c in backends["comparisons"]}
    assert set(by_impl) == {"naive", "fused", "compiled"}
    naive = by_impl["naive"]
    assert [o["op"] for o in naive["ops"]] == [
        "aten::mul",
        "aten::mean",
        "aten::add",
        "aten::rsqrt",
    ]
    for op in naive["ops"]:
        assert op["baseline"] is not None and op["other"] is not None
        assert op["baseline"]["calls_per_step"] == op["other"]["calls_per_step"]
        assert op["baseline"]["device_per_call_us"] is None  # the CPU has no device
        assert op["other"]["device_per_call_us"] is not None
    # the device work of the constructed tree, grouped under the op that launched it
    mul = naive["ops"][0]["other"]
    assert mul["device_per_call_us"] == pytest.approx(39.92)
    assert [o["op"] for o in by_impl["fused"]["ops"]] == ["aten::rms_norm"]

    found = [f for f in summary["findings"] if f["rule"] == "backend-difference"]
    assert len(found) == 3
    for f in found:
        assert re.match(
            r"^(naive|fused|compiled): (neuron is [\d.]+× (faster|slower) than cpu|neuron and cpu "
            r"are within the run-to-run noise)",
            f["title"],
        ), f["title"]
        assert ("beyond the run-to-run noise" in f["title"]) == (f["severity"] == "medium")

    html = (out / "report.html").read_text()
    section = next(e for e in tinyhtml5.parse(html).iter() if e.get("id") == "backends")
    assert len(list(section.iter(f"{HTML_NS}table"))) == 3
    _check_numbers(out)  # every number of every table, the backends' included, in summary.json
    page = _page_one(out)
    assert page.startswith("CONSTRUCTED, NOT CAPTURED: neuron/naive, neuron/fused, neuron/compiled")
    assert (
        "neuron/naive is dispatch-bound: 306.420us of host dispatch per step (6 framework ops) for 147.420us of device work"
        in page
    )


@pytest.mark.capture
@pytest.mark.pdf
def test_page_one_of_the_constructed_neuron_run(neuron_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "neuron"
    summary = _build([neuron_run], out)
    assert {c["label"] for c in summary["constructed"]} == {"naive", "fused", "compiled"}
    page = _page_one(out)
    assert page.startswith(
        "CONSTRUCTED, NOT CAPTURED: every input of this report is a constructed trace"
    )
    for impl in summary["implementations"]:
        h = impl["headline"]
        assert h["bound_by"] == "dispatch"
        assert h["dispatch_per_step_us"] > h["device_per_step_us"]
    expected = {
        "naive": ("306.420us", "6 framework ops", "147.420us"),
        "fused": ("92.820us", "1 framework op", "61.320us"),
        "compiled": ("89.520us", "2 framework ops", "59.020us"),
    }
    for name, (dispatch, ops, device) in expected.items():
        assert (
            f"{name} is dispatch-bound: {dispatch} of host dispatch per step ({ops}) for "
            f"{device} of device work"
        ) in page
    assert "Host dispatch / step" in page and "Bound by" in page
    assert "NOT LIKE WITH LIKE" not in page


@pytest.mark.pdf
def test_constructed_trees_say_so_at_the_top_of_page_one(tmp_path: Path) -> None:
    out = tmp_path / "trees"
    _build([NEURON / "eager_naive", NEURON / "fused"], out)
    assert _page_one(out).startswith("CONSTRUCTED, NOT CAPTURED: every input of this report")
    html = (out / "report.html").read_text()
    assert html.index('class="constructed"') < html.index("<h1>")


@pytest.mark.pdf
def test_traces_of_different_workloads_and_devices_are_not_compared_silently(
    tmp_path: Path,
) -> None:
    """A CUDA benchmark whose profiled window is its one step, beside a CONSTRUCTED Neuron
    tree with three ProfilerStep#N steps: page 1 says, before any ratio, that they measure
    different spans on different devices (before this, only '335809.25x faster')."""
    out = tmp_path / "unlike"
    add = PUBLIC / "kineto-cuda-simple-add-benchmark.json"
    _build([add, NEURON / "fused"], out)
    page = _page_one(out)  # (the PDF's text breaks the long label across lines)
    warning = page.index("NOT LIKE WITH LIKE: these traces do not measure the same thing.")
    assert warning < page.index("fused is fastest")
    for said in ("the whole profiled window is one step", "fused, the 3 ProfilerStep#N"):
        assert warning < page.index(said) < page.index("fused is fastest")
    html = (out / "report.html").read_text()
    assert html.index("NOT LIKE WITH LIKE") < html.index("is fastest by")
    assert (
        "Steps: kineto-cuda-simple-add-benchmark, no ProfilerStep#N annotations: the whole "
        "profiled window is one step; fused, the 3 ProfilerStep#N annotations." in html
    )
    assert (
        "Device time from: kineto-cuda-simple-add-benchmark, device activities in trace.json; "
        "fused, Neuron system trace." in html
    )


@pytest.mark.capture
@pytest.mark.pdf
def test_a_cpu_run_says_what_the_split_means_there(cpu_report: Path) -> None:
    summary = read_summary(cpu_report / "summary.json")
    assert all(i["headline"]["bound_by"] is None for i in summary["implementations"])
    page = _page_one(cpu_report)
    assert (
        "On the CPU there is no device: each op computes on the thread that dispatches it" in page
    )
    for impl in summary["implementations"]:
        from nprof_report.textout import format_time_us

        assert format_time_us(impl["headline"]["dispatch_per_step_us"]) in page
    assert "NOT LIKE WITH LIKE" not in page


def test_the_new_tables_read_keys_of_their_records() -> None:
    from nprof_report.report.figures import summary_types as st
    from nprof_report.report.view import columns

    assert {c.key for c in columns.ACROSS_RUNS_COLUMNS} <= set(
        st.RunComparison.__annotations__
    ) | set(st.Comparison.__annotations__) | set(st.ComparisonFigures.__annotations__)
    assert {k for _, k, _ in columns.BACKEND_OP_FIGURES} <= set(st.BackendOpSide.__annotations__)


def test_a_study_is_the_same_study_whatever_the_case_of_its_name() -> None:
    from nprof_report.bundle import Manifest
    from nprof_report.errors import InputError
    from nprof_report.report.figures import RunGroup
    from nprof_report.report.jobs import refuse_mixed

    def run(name: str, study: str) -> Any:
        manifest = Manifest(name, "", [], "cpu", "", {}, {}, {"name": study}, {}, {}, {})
        return (RunGroup(name, f"runs/{name}", manifest, ()), [])

    refuse_mixed([run("old", "rmsnorm"), run("new", "RMSNorm")])  # format_minor 0 wrote it so
    with pytest.raises(InputError, match="softmax study and runs/old a run of the rmsnorm study"):
        refuse_mixed([run("old", "rmsnorm"), run("new", "softmax")])

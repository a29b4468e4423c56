"""The Ray engine (parse/engine_ray.py) on a local cluster of 2 CPUs, started once for the module:
the same summary and report as the local pool on 8 generated ranks, errors naming the rank's
file, ``--keep-going``, the memory each task declares."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nprof_report.errors import InputError
from nprof_report.parse.inputs import Source
from nprof_report.parse.parallel import estimated_peak, uncompressed_size
from nprof_report.report.build import summarise_inputs
from nprof_report.report.figures import json_pieces
from nprof_report.report.jobs import Engine
from nprof_report.report.view.model import build_model
from nprof_report.report.view.render import render_html
from tests.test_ranks import make_job

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A local Ray instance for this module; the engine uses it as it finds it."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield "auto"
    ray.shutdown()


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """8 CONSTRUCTED ranks, rank 5 planted as a straggler."""
    folder = tmp_path_factory.mktemp("job") / "ranks"
    make_job().make_job(folder, 8, straggler=5, delay_ms=30.0, seed=2)
    return folder


def _summary(paths: list[Path], engine: Engine, cache: Path) -> dict[str, Any]:
    os.environ["NPROF_CACHE_DIR"] = str(cache)
    return summarise_inputs(paths, engine)[1]


@pytest.fixture
def own_cache_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NPROF_CACHE_DIR", "unset")  # restored after the test
    monkeypatch.delenv("NPROF_NO_CACHE", raising=False)


@pytest.mark.slow
@pytest.mark.usefixtures("own_cache_env")
def test_ray_gives_the_local_pools_summary_and_report(
    cluster: str, job: Path, tmp_path: Path
) -> None:
    local = _summary([job], Engine(jobs=2), tmp_path / "local-cache")
    on_ray = _summary([job], Engine(ray=cluster), tmp_path / "ray-cache")
    # the documents as written (an op series is a frame: compared by its rows)
    assert b"".join(json_pieces(on_ray)) == b"".join(json_pieces(local))
    assert render_html(build_model(on_ray)) == render_html(build_model(local))
    assert [s["rank"] for s in on_ray["ranks"]["stragglers"]] == [5]
    # the tasks parsed into the cache the driver named, one Parquet entry per rank
    entries = list((tmp_path / "ray-cache").iterdir())
    assert len(entries) == 8
    assert all(list(e.glob("*.parquet")) for e in entries)


@pytest.mark.usefixtures("own_cache_env")
def test_corrupt_rank_on_ray_is_an_error_naming_it_or_a_caveat(
    cluster: str, job: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "ranks"
    folder.mkdir()
    for rank in (0, 1, 2):
        shutil.copy(job / f"rank{rank}.pt.trace.json", folder)
    bad = folder / "rank1.pt.trace.json"
    bad.write_bytes(b'{"traceEvents": [ {"ph": "X", nonsense')
    with pytest.raises(InputError) as failed:
        _summary([folder], Engine(ray=cluster), tmp_path / "cache")
    assert failed.value.path == bad
    summary = _summary([folder], Engine(ray=cluster, keep_going=True), tmp_path / "cache")
    skipped = [c for c in summary["caveats"] if c.startswith("skipped (--keep-going)")]
    assert len(skipped) == 1 and str(bad) in skipped[0]
    assert [r["rank"] for r in summary["ranks"]["ranks"]] == [0, 2]


def test_each_task_declares_the_local_schedulers_memory_estimate(cluster: str, job: Path) -> None:
    from nprof_report.parse import engine_ray

    trace = job / "rank0.pt.trace.json"
    source = Source("rank0", trace, job)
    notes: list[str] = []
    expected = estimated_peak(uncompressed_size(trace))
    assert engine_ray._declared_memory(source, engine_ray._largest_node_memory(), notes) == expected
    assert notes == []
    small = expected // 2
    assert engine_ray._declared_memory(source, small, notes) == small
    assert len(notes) == 1 and str(trace) in notes[0]


@pytest.mark.usefixtures("own_cache_env")
def test_ops_with_ray_flag_prints_what_the_local_pool_prints(
    cluster: str, job: Path, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from nprof_report.cli import cli

    folder = tmp_path / "ranks"
    folder.mkdir()
    for rank in (0, 5):
        shutil.copy(job / f"rank{rank}.pt.trace.json", folder)
    os.environ["NPROF_CACHE_DIR"] = str(tmp_path / "cache")
    runner = CliRunner()
    local = runner.invoke(cli, ["ops", str(folder), "--format", "csv", "--no-cache"])
    on_ray = runner.invoke(cli, ["ops", str(folder), "--format", "csv", "--no-cache", "--ray"])
    assert local.exit_code == 0 and on_ray.exit_code == 0, on_ray.output
    assert on_ray.output == local.output
    assert not (tmp_path / "cache").exists()  # --no-cache reached the tasks


def test_a_path_after_ray_is_not_taken_for_an_address(job: Path) -> None:
    from click.testing import CliRunner

    from nprof_report.cli import cli

    result = CliRunner().invoke(cli, ["build", "--ray", str(job)])
    assert result.exit_code == 2
    assert "is not a Ray address" in result.output and "put PATHS before --ray" in result.output


@pytest.mark.slow
@pytest.mark.usefixtures("own_cache_env")
def test_a_task_whose_worker_dies_is_retried_then_named(cluster: str, job: Path) -> None:
    from nprof_report.parse import engine_ray

    trace = job / "rank0.pt.trace.json"
    die = lambda source, loaded: os._exit(1)  # noqa: E731 (pickled by value for the workers)
    with pytest.raises(InputError) as failed:
        engine_ray.run_on_ray(die, [Source("rank0", trace, job)], address=cluster, use_cache=False)
    assert failed.value.path == trace
    assert f"after {1 + engine_ray.RETRIES} attempts" in str(failed.value)

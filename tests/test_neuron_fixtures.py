"""The committed Neuron fixtures are exactly what the generator builds (so expected.json, which
the generator computes from its inputs, describes the files the other tests read)."""

from __future__ import annotations

import filecmp
import json
import subprocess
import sys
from pathlib import Path

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "neuron"


def _files(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*") if p.is_file()}


def test_generator_reproduces_the_committed_fixtures(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(FIX / "make_neuron_fixtures.py"), "--out", str(tmp_path)],
        check=True,
        timeout=120,
    )
    committed = _files(FIX) - {
        Path("make_neuron_fixtures.py"),
        Path("from_fingerprint.py"),  # --from-fingerprint's builder, run on demand
        Path("README.md"),
    }
    committed = {p for p in committed if "__pycache__" not in p.parts}
    assert _files(tmp_path) == committed
    diff = [p for p in sorted(committed) if not filecmp.cmp(FIX / p, tmp_path / p, shallow=False)]
    assert diff == []


def test_fixtures_are_small_and_labelled_constructed() -> None:
    big = [p for p in FIX.rglob("*") if p.is_file() and p.stat().st_size > 64_000]
    assert big == []
    exp = json.loads((FIX / "expected.json").read_text())
    assert "CONSTRUCTED" in exp["_note"]
    readme = (FIX / "README.md").read_text()
    assert "CONSTRUCTED" in readme
    assert "not captured" in readme.lower()
    # the raw binary captures are empty placeholders
    pbs = list(FIX.rglob("*.pb"))
    assert pbs
    assert all(p.stat().st_size == 0 for p in pbs)

"""Smoke test of the benchmark suite: every scenario runs with `--quick` (tiny sizes) and
writes its JSON with the figures, same-run baselines and verdicts. Not a timed test: the
values are not asserted, only that each was measured."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow

# Each scenario's quick run, with the backends narrowed where it takes them.
CASES = {
    "throughput": ["--backends", "mariadb"],
    "steady": [],
    "latency": [],
    "dispatch": ["--backends", "mariadb,sqlite"],
    "tick": [],
    "cleanup": [],
    "memory": [],
}
MACHINE_KEYS = {"cpu", "cores_logical", "memory_gb", "python", "mariadb", "redis", "postgresql",
                "dramatiq", "celery"}


@pytest.mark.parametrize("scenario", list(CASES))
def test_scenario_quick_run_writes_its_figures(scenario, tmp_path):
    out = tmp_path / f"{scenario}.json"
    proc = subprocess.run([sys.executable, "-m", f"bench.{scenario}", "--quick", "--out", str(out),
                           *CASES[scenario]], cwd=ROOT, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert data["scenario"] == scenario
    assert MACHINE_KEYS <= set(data["machine"])
    figures = data["figures"]
    assert figures, "no figures"
    for fig in figures:
        assert isinstance(fig["value"], (int, float)), fig
        if fig["baseline"] is not None:
            assert fig["baseline"] > 0 and fig["ratio"] == pytest.approx(
                fig["value"] / fig["baseline"], rel=1e-2, abs=1e-3), fig
        if fig["target"] is not None:
            assert fig["verdict"] in ("PASS", "MISS"), fig
    assert any(f["target"] for f in figures), "no figure of this scenario has a target"
    assert any(f["name"] in line for f in figures for line in proc.stdout.splitlines())


def test_suite_merges_scenarios_into_latest_and_a_dated_copy(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", "tick",
                           "--results", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    latest = json.loads((tmp_path / "latest.json").read_text())
    dated = [p for p in tmp_path.glob("*.json") if p.name != "latest.json"]
    assert len(dated) == 1 and json.loads(dated[0].read_text()) == latest
    assert [s["scenario"] for s in latest["scenarios"]] == ["tick"]
    assert latest["failed"] == [] and MACHINE_KEYS <= set(latest["machine"])
    assert "| tick |" in (tmp_path / "latest.md").read_text()

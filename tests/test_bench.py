"""Smoke test of the benchmark suite: every scenario runs with `--quick` (tiny sizes) and
writes its JSON with the figures, same-run baselines and verdicts (the peers scenario also
its table of systems and guarantees); `python -m bench` merges scenarios into
`latest.json` and a dated copy in `runs/`. Not a timed test: the values are
not asserted, only that each was measured. The quick runs are started together (they
mostly wait for worker start-up) and each test checks one of them."""

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
    "flow": [],
    "families": ["--backends", "mariadb"],
    "rate": [],
    "steady": [],
    "latency": [],
    "dispatch": ["--backends", "mariadb,sqlite"],
    "tick": [],
    "cleanup": [],
    "cli": [],
    "memory": [],
    "peers": [],
}
MACHINE_KEYS = {"cpu", "cores_logical", "memory_gb", "python", "mariadb", "redis", "postgresql",
                "dramatiq", "celery"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """Start every quick run at once; name -> (returncode, output, JSON path or folder)."""
    base = tmp_path_factory.mktemp("bench")
    started = {}
    for name, extra in CASES.items():
        cmd = [sys.executable, "-m", f"bench.{name}", "--quick",
               "--out", str(base / f"{name}.json"), *extra]
        started[name] = (cmd, base / f"{name}.json")
    suite = base / "suite"
    started["suite"] = ([sys.executable, "-m", "bench", "--quick", "--only", "tick",
                         "--results", str(suite)], suite)
    procs = {name: (subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True), out)
             for name, (cmd, out) in started.items()}
    done = {}
    for name, (proc, out) in procs.items():
        try:
            output, _ = proc.communicate(timeout=400)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
        done[name] = (proc.returncode, output, out)
    return done


@pytest.mark.parametrize("scenario", list(CASES))
def test_scenario_quick_run_writes_its_figures(scenario, runs):
    code, output, out = runs[scenario]
    assert code == 0, output
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
    assert any(f["name"] in line for f in figures for line in output.splitlines())


def test_suite_merges_scenarios_into_latest_and_a_dated_copy(runs):
    code, output, folder = runs["suite"]
    assert code == 0, output
    latest = json.loads((folder / "latest.json").read_text())
    dated = list((folder / "runs").glob("*.json"))
    assert [p.name for p in folder.glob("*.json")] == ["latest.json"]
    assert len(dated) == 1 and json.loads(dated[0].read_text()) == latest
    assert [s["scenario"] for s in latest["scenarios"]] == ["tick"]
    assert latest["failed"] == [] and MACHINE_KEYS <= set(latest["machine"])
    assert "| tick |" in (folder / "latest.md").read_text()


def test_peers_quick_run_puts_every_system_in_its_table(runs):
    code, output, out = runs["peers"]
    assert code == 0, output
    data = json.loads(out.read_text())
    (table,) = data["tables"]
    rows = {row[0].split()[0]: row for row in table["rows"]}
    assert set(rows) == {"cronjobs", "oban-py", "procrastinate"}
    assert data["details"]["skipped"] == {}, data["details"]["skipped"]  # 3.12 is on CI
    for name, row in rows.items():
        assert float(row[table["columns"].index("transactions / job (measured)")]) > 0, row
        assert row[-2] and row[-1], f"{name} has no guarantees"
        drains = [r for r in data["details"]["runs"] if r["system"] == name]
        assert {r["config"] for r in drains} == {"1x2", "2x2"}
        assert all(r["done"] > 0 and r["pss_mb"] > 0 for r in drains), drains
    assert "hard timeout" in output and "at-least-once" in output

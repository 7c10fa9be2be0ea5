"""A bench run of some scenarios (`--only`) replaces them in latest.json and keeps the
other scenarios of the last run; a quick run and a full run are never mixed."""

from __future__ import annotations

import json

from bench.__main__ import _merged


def _run(quick: bool, started: str, *names: str) -> dict:
    return {"suite": "cronjobs bench", "quick": quick, "started": started,
            "scenarios": [{"scenario": n, "started": started, "figures": [{"name": n}]}
                          for n in names]}


def test_only_replaces_its_scenarios_and_keeps_the_others(tmp_path):
    latest = tmp_path / "latest.json"
    latest.write_text(json.dumps(_run(False, "T1", "dispatch", "throughput", "peers")))
    merged = _merged(latest, _run(False, "T2", "peers"))
    assert [(s["scenario"], s["started"]) for s in merged["scenarios"]] == [
        ("dispatch", "T1"), ("throughput", "T1"), ("peers", "T2")]
    assert merged["kept"] == {"dispatch": "T1", "throughput": "T1"}
    assert merged["started"] == "T2"


def test_scenarios_keep_the_suite_order(tmp_path):
    latest = tmp_path / "latest.json"
    latest.write_text(json.dumps(_run(False, "T1", "dispatch", "memory")))
    merged = _merged(latest, _run(False, "T2", "throughput"))
    assert [s["scenario"] for s in merged["scenarios"]] == ["dispatch", "throughput", "memory"]


def test_quick_and_full_runs_are_not_mixed(tmp_path):
    latest = tmp_path / "latest.json"
    latest.write_text(json.dumps(_run(False, "T1", "dispatch")))
    quick = _run(True, "T2", "peers")
    assert _merged(latest, quick) == quick


def test_without_an_earlier_file_the_run_stands_alone(tmp_path):
    run = _run(False, "T2", "peers")
    assert _merged(tmp_path / "latest.json", run) == run
    (tmp_path / "broken.json").write_text("{not json")
    assert _merged(tmp_path / "broken.json", run) == run

"""A scenario's own tables (the peers' systems and guarantees) are printed after the
figures, in text and in Markdown; a row of the wrong width is refused."""

from __future__ import annotations

import pytest
from bench import report


def _scenario() -> dict:
    results = report.Results("peers")
    results.add("drain no-op 2x8 postgresql", 2000.0, "jobs/s", baseline=1000.0,
                baseline_name="oban-py 2x8", target=(">=", 1.5, "ratio"))
    results.add_table("systems", ["system", "hard timeout"],
                      [["cronjobs", "yes"], ["procrastinate", "no | none"]])
    return results.to_dict()


def test_text_table_has_the_figures_then_the_scenario_table():
    text = report.table([_scenario()])
    figures, own = text.split("\n\npeers: systems\n")
    assert "drain no-op 2x8 postgresql" in figures and "PASS" in figures
    lines = own.splitlines()
    assert lines[0].split() == ["system", "hard", "timeout"]
    assert lines[2].split() == ["cronjobs", "yes"]
    assert lines[3].split() == ["procrastinate", "no", "|", "none"]


def test_markdown_has_the_scenario_table_with_pipes_escaped():
    md = report.markdown([_scenario()])
    assert "**peers: systems**" in md
    assert "| system | hard timeout |" in md
    assert "| procrastinate | no \\| none |" in md


def test_a_row_of_the_wrong_width_is_refused():
    results = report.Results("peers")
    with pytest.raises(ValueError, match="has 1 cells, not 2"):
        results.add_table("systems", ["system", "hard timeout"], [["cronjobs"]])
    assert results.tables == []

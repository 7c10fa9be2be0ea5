"""The README's five-minute tour, step by step, as a new user types it."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import ROOT, run_cli

EXAMPLE = Path(ROOT) / "docs" / "examples" / "GreetExecute.py"


def test_readme_shows_the_example_handler_verbatim():
    readme = (Path(ROOT) / "README.md").read_text()
    body = EXAMPLE.read_text().split('"""The handler of the README\'s five-minute tour."""\n\n')[1]
    assert body.strip() in readme


def test_tour(tmp_path):
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONJOBS_")}
    env.update(CRONJOBS_DATABASE_URL=f"sqlite:///{tmp_path / 'tour.db'}",
               CRONJOBS_HANDLER_PATHS="docs/examples")
    assert run_cli(["migrate"], env, cwd=ROOT).returncode == 0
    listing = run_cli(["list-handlers"], env, cwd=ROOT)
    line = next(row for row in listing.stdout.splitlines() if row.startswith("tour.greet.execute"))
    assert line.split()[:3] == ["tour.greet.execute", "tour-greet", "GreetExecute"]
    assert "docs/examples/GreetExecute.py" in line
    job_id = int(run_cli(["dispatch", "tour.greet.execute", "--payload", '{"name": "Ada"}'],
                         env, cwd=ROOT).stdout)
    assert run_cli(["run", str(job_id)], env, cwd=ROOT).returncode == 0
    row = json.loads(run_cli(["get", str(job_id)], env, cwd=ROOT).stdout)
    assert row["status"] == "completed"
    assert row["result_payload"] == {"greeting": "Hello, Ada!", "job": job_id}
    bad = run_cli(["dispatch", "tour.greet.execute", "--payload", "not json"], env, cwd=ROOT)
    assert bad.returncode == 2
    assert "Invalid value for --payload: not valid JSON" in bad.stderr

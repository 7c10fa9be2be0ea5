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


def test_the_readme_hint_runs_the_tour_handler_on_a_schedule(tmp_path):
    """The hint as written: add `FREQUENCY = "minute"` to the class, nothing else; the
    tick starts task tour-greet and its scheduled run (payload `{"slot": ...}`) completes."""
    from datetime import datetime

    from cronjobs import queue
    from cronjobs.schedule.scheduler import tick
    from cronjobs.testing import drain, make_test_app

    readme = (Path(ROOT) / "README.md").read_text()
    assert 'To run it on a schedule, add `FREQUENCY = "minute"`' in readme
    folder = tmp_path / "handlers"
    folder.mkdir()
    line = '    TYPE = "tour.greet.execute"'
    source = EXAMPLE.read_text().replace(line, line + '\n    FREQUENCY = "minute"')
    (folder / "GreetExecute.py").write_text(source)
    app = make_test_app(tmp_path / "app", handler_paths=[str(folder)],
                        now=datetime(2027, 1, 1, 12, 0, 5))
    try:
        started = {task: job for task, _, job in tick(app=app).started}
        assert "tour-greet" in started
        drain(app)
        row = queue.get(started["tour-greet"])
        assert row["status"] == "completed", row["error"]
        assert json.loads(row["result_payload"])["greeting"] == "Hello, world!"
    finally:
        app.close()

"""`cronjobs new-handler`: the files of a new handler (or discover/execute pair) and its test.

`files(name, discover)` builds them in memory; `write(folder, files)` writes them all or
nothing (it refuses to overwrite). The generated test passes as generated, so a new
handler starts from green, wherever the folder is: `write_pytest_ini(folder)` gives the
folder a `pytest.ini` of its own (when it has none), which makes it pytest's rootdir, so
the settings of a `pyproject.toml` in a folder above (a cronjobs checkout's asks for
pytest-timeout) do not apply to these tests.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import CronjobsError

NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$")


class ScaffoldError(CronjobsError):
    """A bad handler name, or a file that already exists."""


def class_base(name: str) -> str:
    """`acme.quota_sync` -> `AcmeQuotaSync`."""
    return "".join(part.capitalize() for part in re.split(r"[._]", name) if part)


def files(name: str, discover: bool = False) -> dict[str, str]:
    """File name -> content of the handler(s) and test for type base `name`.

    Args:
        name: the type without its stage, dotted lowercase words (`acme.quota_sync`).
        discover: also write a discover stage that fans out one execute job per target.

    Raises:
        ScaffoldError: `name` is not dotted lowercase words, or ends in a stage.
    """
    if name.rpartition(".")[2] in ("discover", "execute"):
        raise ScaffoldError(f"NAME is the type without its stage: use "
                            f"{name.rpartition('.')[0]!r}, not {name!r}")
    if not NAME.match(name):
        raise ScaffoldError(f"NAME must be lowercase words separated by dots, like "
                            f"'acme.quota_sync', got {name!r}")
    base = class_base(name)
    values = {"name": name, "base": base, "task": name.replace(".", "-")}
    out = {f"{base}Execute.py": _EXECUTE.format(**values)}
    if discover:
        out[f"{base}Discover.py"] = _DISCOVER.format(**values)
    test = _TEST_HEAD + _TEST_EXECUTE + (_TEST_DISCOVER if discover else "")
    out[f"test_{name.replace('.', '_')}.py"] = test.format(**values)
    return out


def write(folder: str | Path, contents: dict[str, str]) -> list[Path]:
    """Write every file into `folder` (created when missing); returns the paths.

    Raises:
        ScaffoldError: one of the files exists already (nothing is written then).
    """
    folder = Path(folder)
    paths = [folder / name for name in contents]
    taken = [str(p) for p in paths if p.exists()]
    if taken:
        raise ScaffoldError(f"refusing to overwrite {', '.join(taken)}")
    folder.mkdir(parents=True, exist_ok=True)
    for path in paths:
        path.write_text(contents[path.name], encoding="utf-8")
    return paths


def write_pytest_ini(folder: str | Path) -> Path | None:
    """Write `folder/pytest.ini` unless it exists; returns its path, or None when kept.

    pytest takes the first folder holding a `pytest.ini` (or a `pyproject.toml`, `tox.ini`,
    `setup.cfg` with its section), from the tests' folder upwards, as its rootdir and reads
    its settings there: this one stops the search at the handler folder.
    """
    path = Path(folder) / PYTEST_INI
    if path.exists():
        return None
    path.write_text(_PYTEST_INI, encoding="utf-8")
    return path


PYTEST_INI = "pytest.ini"
_PYTEST_INI = """# Written by `cronjobs new-handler`: pytest settings for the tests of this folder.
# It makes this folder pytest's rootdir, so `python -m pytest <this folder>/test_x.py` does
# not read the settings of a pyproject.toml or pytest.ini in a folder above (a cronjobs
# checkout's asks for plugins your venv may not have). Add your own settings below.
[pytest]
"""

_EXECUTE = '''"""{name}: does the work for one target (written by `cronjobs new-handler`)."""

from cronjobs import CronJobHandler
from cronjobs.summary import summary_table


class {base}Execute(CronJobHandler):
    """One job = one target. Payload: {{"target": "<what to work on>"}}."""

    TYPE = "{name}.execute"
    MAX_ATTEMPTS = 3      # a failure is retried after 2, then 4 minutes
    MAX_RUNTIME = 120     # seconds; a job running longer is killed and retried
    EXAMPLE_PAYLOAD = {{"target": "example-1"}}  # the dashboard's Run now box shows it

    def handle(self, payload, job):
        target = payload.get("target")
        if not target:
            self.error = "payload needs a target"
            return False  # retried with backoff, then failed with that error
        # The real work for `target` goes here. It may run more than once for the same
        # payload (at-least-once delivery): make it safe to repeat.
        return {{"success": True, "result": {{"target": target, "attempt": job.attempts}}}}

    @staticmethod
    def render_summary(result):
        return summary_table([("Target", result.get("target")),
                              ("Attempt", result.get("attempt"))])
'''

_DISCOVER = '''"""{name}: finds the targets and fans out one execute job per target (written by
`cronjobs new-handler --discover`)."""

from cronjobs import CronJobHandler
from cronjobs.summary import summary_table


class {base}Discover(CronJobHandler):
    """Started by the scheduler; dispatches one `{name}.execute` per target."""

    TYPE = "{name}.discover"
    FREQUENCY = "@hourly"  # or minute, hour, day, month, a cron line like "*/15 * * * *"
    MAX_ATTEMPTS = 3
    MAX_RUNTIME = 60      # seconds

    def targets(self):
        """The targets of this run: replace with a query, a setting, an API call."""
        return ["example-1", "example-2"]

    def handle(self, payload, job):
        targets = self.targets()
        if not targets:
            return {{"success": True, "status": "cancelled", "result": {{"reason": "no-targets"}}}}
        slot = payload.get("slot") or f"manual-{{job.id}}"  # scheduled runs carry their slot
        jobs = [self.dispatch("{name}.execute", {{"target": target}},
                              idempotency_key=f"{name}:{{target}}:{{slot}}")
                for target in targets]
        return {{"success": True, "result": {{"dispatched": len(jobs), "jobs": jobs}}}}

    def on_complete(self, family, job):
        """Runs once, as a row of its own (`{name}.complete`), when this run and every
        job it dispatched have finished (retries included)."""
        return {{"success": True, "result": {{"counts": family.counts,
                                            "seconds": family.duration_seconds}}}}

    @staticmethod
    def render_summary(result):
        return summary_table([("Jobs dispatched", result.get("dispatched"))])
'''

_TEST_HEAD = '''"""Tests of {name} (written by `cronjobs new-handler`). \
Run: python -m pytest THIS_FILE"""

import json
from datetime import datetime
from pathlib import Path

from cronjobs import queue
from cronjobs.testing import drain, make_test_app

HERE = Path(__file__).resolve().parent
'''

_TEST_EXECUTE = '''

def test_execute_completes_with_a_result(tmp_path):
    app = make_test_app(tmp_path, handler_paths=[HERE])
    job_id = queue.dispatch("{name}.execute", {{"target": "example-1"}})
    queue.process(job_id)
    row = queue.get(job_id)
    assert row["status"] == "completed", row["error"]
    assert '"target": "example-1"' in row["result_payload"]
    app.close()


def test_execute_without_target_is_retried_with_the_error(tmp_path):
    app = make_test_app(tmp_path, handler_paths=[HERE])
    job_id = queue.dispatch("{name}.execute", {{}})
    queue.process(job_id)
    row = queue.get(job_id)
    assert (row["status"], row["attempts"]) == ("pending", 1)  # back off, then try again
    assert row["error"] == "payload needs a target"
    app.close()
'''

_TEST_DISCOVER = '''

def test_scheduler_starts_discover_which_fans_out(tmp_path):
    from cronjobs.scheduler import tick

    app = make_test_app(tmp_path, handler_paths=[HERE], now=datetime(2026, 1, 1, 12, 0))
    report = tick()  # one scheduler tick at the frozen clock's time
    started = {{task: job_id for task, _slot, job_id in report.started}}
    assert "{task}" in started
    drain(app)  # runs every due row here and now: the discover row, then its children
    discover = queue.get(started["{task}"])
    assert discover["status"] == "completed", discover["error"]
    children = json.loads(discover["result_payload"])["jobs"]
    assert [queue.get(child)["status"] for child in children] == ["completed", "completed"]
    [callback] = [c for c in queue.children(discover["id"]) if c["type"] == "{name}.complete"]
    assert callback["status"] == "completed", callback["error"]
    assert json.loads(callback["result_payload"])["counts"] == {{"completed": 2}}
    app.close()
'''

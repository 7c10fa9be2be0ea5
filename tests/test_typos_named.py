"""Typos are named: a LIMIT_KEY with spaces around the field name is refused when the
handler loads (class and value in one line); a `[queues.x]` or `[tasks.x]` settings
section that names no known queue or task is warned of, with a "did you mean" hint, by
the worker and the scheduler."""

from __future__ import annotations

import logging
import os

import pytest

from conftest import SAMPLE_HANDLERS, cli_env, run_cli
from cronjobs import CronJobHandler
from cronjobs.errors import HandlerError
from cronjobs.schedule.scheduler import tick
from cronjobs.schedule.tasks import unknown_sections

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

SPACED = """from cronjobs import CronJobHandler


class SpacedExecute(CronJobHandler):
    TYPE = "chat.spaced.execute"
    QUEUE = "broadcast"
    LIMIT_KEY = "{key}"

    def handle(self, payload, job):
        return True
"""


class BroadcastExecute(CronJobHandler):
    TYPE = "chat.broadcast.execute"
    QUEUE = "broadcast"
    LIMIT_KEY = "chat_id"

    def handle(self, payload, job):
        return True


@SQLITE
@pytest.mark.parametrize("key", [" chat_id", "chat_id ", "\tchat_id"])
def test_a_limit_key_with_spaces_is_refused_at_registration(make_app, key):
    app = make_app()
    spaced = type("SpacedExecute", (BroadcastExecute,), {"LIMIT_KEY": key})
    with pytest.raises(HandlerError) as info:
        app.handlers.register("chat.spaced.execute", spaced)
    assert str(info.value).endswith(
        f"SpacedExecute: LIMIT_KEY {key!r} has spaces around the field name: no payload field "
        f"is named that way; write LIMIT_KEY = 'chat_id'")


@SQLITE
def test_cli_refuses_a_spaced_limit_key_in_one_line(db_url, tmp_path):
    folder = tmp_path / "spaced"
    folder.mkdir()
    (folder / "SpacedExecute.py").write_text(SPACED.format(key=" chat_id"))
    env = cli_env(db_url, CRONJOBS_HANDLER_PATHS=f"{SAMPLE_HANDLERS}{os.pathsep}{folder}")
    for args in (["list-handlers"], ["worker", "--burst"]):
        out = run_cli(args, env, cwd=tmp_path)
        assert out.returncode == 2 and out.stdout == "", (args, out.stderr)
        assert out.stderr == ("error: SpacedExecute: LIMIT_KEY ' chat_id' has spaces around "
                              "the field name: no payload field is named that way; write "
                              "LIMIT_KEY = 'chat_id'\n")


@SQLITE
def test_unknown_queue_and_task_sections_are_named_with_a_hint(make_app, caplog):
    app = make_app(queues={"braodcast": {"concurrency": 1}, "broadcast": {"concurrency": 2}},
                   tasks={"http-uptme": {"enabled": False}})
    app.handlers.register(BroadcastExecute.TYPE, BroadcastExecute)
    lines = unknown_sections(app)
    assert len(lines) == 2, lines
    assert lines[0].startswith("[tasks.http-uptme] in the settings names no registered task "
                               "(did you mean http-uptime?) (tasks: ")
    assert lines[1] == ("[queues.braodcast] in the settings names no queue of a registered "
                        "handler (did you mean broadcast?) (queues: broadcast, default, "
                        "maintenance); its limits apply only to rows dispatched to queue "
                        "'braodcast'")
    caplog.set_level(logging.WARNING, "cronjobs.schedule.scheduler")
    tick(app=app)
    tick(app=app)  # once per process
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned.count(lines[1]) == 1 and warned.count(lines[0]) == 1, warned


@SQLITE
def test_worker_warns_of_an_unknown_queue_section(db_url, tmp_path):
    (tmp_path / "cronjobs.toml").write_text("[queues.maintenence]\nconcurrency = 1\n"
                                            "[queues.maintenance]\nconcurrency = 1\n")
    out = run_cli(["worker", "--burst"], cli_env(db_url), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert ("warning: [queues.maintenence] in the settings names no queue of a registered "
            "handler (did you mean maintenance?)") in out.stderr
    assert "[queues.maintenance]" not in out.stderr

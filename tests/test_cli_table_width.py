"""`cronjobs tasks` and `cronjobs list-handlers` fit the terminal's width (COLUMNS=80 and
120 on a pseudo-terminal): the columns that must stay, then the optional ones that fit;
`--wide` and piped output keep every column on one line per row; `--json` is unchanged."""

from __future__ import annotations

import json

import pytest

from conftest import cli_env, run_cli
from cronjobs.cli.table import layout, lines
from tty_helpers import run_on_tty

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

TASKS_ALL = ["TASK", "TYPE", "FREQUENCY", "ENABLED", "AVAILABLE", "SOURCE", "LAST_RUN_AT",
             "LAST_JOB", "LAST_STATUS", "FAMILY", "NEXT_RUN_AT", "LAST_MANUAL_AT", "MANUAL_JOB",
             "MANUAL_STATUS", "AFTER", "OVERLAP", "SKIPPED", "LAST_SKIPPED", "SKIP_REASON",
             "BUFFERED", "LIMITS", "PAUSED", "ZONE"]
HANDLERS_ALL = ["TYPE", "TASK", "CLASS", "SOURCE", "FREQUENCY", "QUEUE", "MAX_ATTEMPTS",
                "MAX_RUNTIME", "LIMITS", "AVAILABLE"]


@SQLITE
@pytest.mark.parametrize("command,must,first", [
    ("tasks", ["TASK", "FREQUENCY", "ENABLED", "LAST_STATUS", "NEXT_RUN_AT"], "cronjobs-cleanup"),
    ("list-handlers", ["TYPE", "FREQUENCY", "QUEUE", "LIMITS", "AVAILABLE"],
     "cronjobs.cleanup.execute"),
])
def test_the_table_fits_the_terminal(db_url, tmp_path, command, must, first):
    assert run_cli(["tick"], cli_env(db_url), cwd=tmp_path).returncode == 0  # runs to show
    wide_header = TASKS_ALL if command == "tasks" else HANDLERS_ALL
    shown = {}
    for width in (80, 120):
        code, out = run_on_tty([command], cli_env(db_url, COLUMNS=str(width)), tmp_path)
        assert code == 0, out
        table = out.rstrip("\n").split("\n")
        assert max(len(line) for line in table) <= width, out
        header = table[0].split()
        assert set(must) <= set(header) and header == [h for h in wide_header if h in header]
        assert any(line.startswith(first + " ") for line in table[1:]), out
        shown[width] = header
    assert len(shown[80]) < len(shown[120]) < len(wide_header), shown
    assert "LAST_RUN_AT" in shown[120] or command != "tasks"

    code, out = run_on_tty([command, "--wide"], cli_env(db_url, COLUMNS="80"), tmp_path)
    assert code == 0 and out.split("\n")[0].split() == wide_header
    assert max(len(line) for line in out.split("\n")) > 120  # every column, however wide
    piped = run_cli([command], cli_env(db_url, COLUMNS="80"), cwd=tmp_path)
    assert piped.stdout.split("\n")[0].split() == wide_header  # scripts see every column
    code, on_tty = run_on_tty([command, "--json"], cli_env(db_url, COLUMNS="80"), tmp_path)
    as_json = run_cli([command, "--json"], cli_env(db_url), cwd=tmp_path).stdout
    assert code == 0 and json.loads(on_tty) == json.loads(as_json)


def test_columns_that_must_stay_wrap_their_widest_cells():
    rows = [{"task": "cronjobs-recoverstale", "limits": "at most 2 running, 30/s per chat_id",
             "note": "x"}]
    shown, widths = layout(rows, ["task", "limits", "note"], 40, optional=["note"],
                           whole=["task"])
    assert shown == ["task", "limits"] and widths == {"task": 21, "limits": 17, "note": 4}
    assert list(lines(rows, shown, widths)) == [
        "TASK                   LIMITS",
        "cronjobs-recoverstale  at most 2",
        "                       running, 30/s per",
        "                       chat_id"]
    assert layout(rows, ["task", "limits", "note"], None, ["note"])[0] == ["task", "limits",
                                                                           "note"]


def test_a_narrow_terminal_never_breaks_a_word_or_a_whole_column():
    rows = [{"type": "cronjobs.cleanup.execute", "frequency": "*/5 * * * *",
             "queue": "maintenance", "limits": "at most 2 running, 30/s per chat_id"}]
    shown, widths = layout(rows, list(rows[0]), 60, whole=["type", "frequency", "queue"])
    table = list(lines(rows, shown, widths))
    assert table[1].split("  ")[:1] == ["cronjobs.cleanup.execute"]
    assert "*/5 * * * *" in table[1] and "maintenance" in table[1], table
    words = " ".join(line[sum(widths[c] + 2 for c in shown[:-1]):] for line in table[1:])
    assert words.split() == rows[0]["limits"].split()  # wrapped at spaces only
    long = [{"limits": "30/s per chat_id_of_the_bot_account"}]
    shown, widths = layout(long, ["limits"], 12)  # a word longer than the terminal is wide
    assert widths["limits"] == len("chat_id_of_the_bot_account")  # whole, not cut at 12
    assert [line.strip() for line in lines(long, shown, widths)][1:] == [
        "30/s per", "chat_id_of_the_bot_account"]


@SQLITE
def test_list_handlers_on_a_narrow_terminal_keeps_cron_lines_and_queues_whole(db_url, tmp_path):
    code, out = run_on_tty(["list-handlers"], cli_env(db_url, COLUMNS="60"), tmp_path)
    assert code == 0, out
    data = json.loads(run_cli(["list-handlers", "--json"], cli_env(db_url), cwd=tmp_path).stdout)
    for handler in data:
        if handler["queue"]:
            assert f" {handler['queue']}" in out, (handler["queue"], out)

"""A bulk retry from the Failed page or `cronjobs failed --retry` is a recorded operation: the
click returns at once, the snapshot's rows are reset once each in batches, progress shows,
a second start of the same selection is refused, a stalled one is resumed."""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from datetime import timedelta

import pytest
import sqlalchemy as sa

from conftest import cli_env, run_cli
from cronjobs import store
from cronjobs.actions import bulk
from cronjobs.errors import OperationRunning
from cronjobs.store.models import cronjob_operation
from cronjobs.store.models import cronjob_queue as q
from dashboard_helpers import TOKEN, add_row, add_rows, login, wait_operation, web_client

KIND = "test.summary.execute"
OTHER = "test.shape.execute"


@pytest.fixture
def app(make_app):
    return make_app(dashboard_token=TOKEN)


def add_failed(app, n: int, job_type: str = KIND, error: str = "HTTP 503 from upstream") -> None:
    add_rows(app, n, type=job_type, status="failed", error=error, attempts=3,
             finished_at=app.clock.now(), process_logs="[old] attempt 3/3 failed\n")


def rows_of(app, job_type: str = KIND) -> list[dict]:
    with app.engine.connect() as conn:
        return [dict(r) for r in conn.execute(
            sa.select(q.c.id, q.c.status, q.c.attempts, q.c.process_logs)
            .where(q.c.type == job_type).order_by(q.c.id)).mappings()]


def operations(app) -> list[dict]:
    with app.engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(cronjob_operation)).mappings()]


def hold_after_first_batch(app) -> threading.Event:
    """The runner thread waits in its first broker send (after batch 1 committed) until the
    returned event is set: the operation is then running at 500 rows, deterministically."""
    gate = threading.Event()

    def on_send(job_id, queue, delay):
        if threading.current_thread().name.startswith("cronjobs-operation"):
            assert gate.wait(60)

    app.broker.listen(on_send)
    return gate


def click(client, csrf: str, **form) -> tuple:
    began = time.perf_counter()
    resp = client.post("/failed/retry", data={"csrf_token": csrf, **form})
    return resp, time.perf_counter() - began


def test_one_click_retries_5000_rows_once_outside_the_request(app):
    add_failed(app, 5000)
    add_failed(app, 3, error="another error")  # another group of the same type: not selected
    pending = add_row(app, type=KIND, error="HTTP 503 from upstream")
    sent = []
    app.broker.listen(lambda job_id, queue, delay: sent.append(queue))
    client = web_client(app)
    csrf = login(client)
    group = max(r["id"] for r in rows_of(app)[:5000])
    resp, seconds = click(client, csrf, job=str(group))
    assert resp.status_code == 303, resp.get_data(as_text=True)[:500]
    assert seconds < 0.5, f"the click took {seconds:.3f} s"
    op_id = int(resp.headers["Location"].rsplit("/", 1)[1])
    text = client.get(resp.headers["Location"]).get_data(as_text=True)
    assert re.search(r"[\d,]+ of 5,000 done", text)  # progress, wherever the thread is
    op = wait_operation(app, op_id)
    assert (op["status"], op["total_rows"], op["done_rows"], op["changed_rows"]) == (
        "done", 5000, 5000, 5000)
    assert op["selection"] == f'failed type={KIND} group="HTTP <n> from upstream"'
    rows = rows_of(app)
    line = f"retried by dashboard (operation {op_id})"
    retried = rows[:5000]
    assert all(r["status"] == "pending" and r["attempts"] == 0 for r in retried)
    assert [r["process_logs"].count(line) for r in retried] == [1] * 5000
    assert [r["status"] for r in rows[5000:5003]] == ["failed"] * 3  # the other group
    assert line not in (rows[-1]["process_logs"] or "") and rows[-1]["id"] == pending
    assert len(sent) == 10 * 16  # each 500-row batch rings its queue 16 times, not 500
    done = client.get(f"/operations/{op_id}").get_data(as_text=True)
    assert "5,000 of 5,000 done" in done and "st-done" in done
    assert 'http-equiv="refresh"' not in done


def test_progress_shows_and_a_second_start_is_refused_while_it_runs(app, db_url, tmp_path):
    add_failed(app, 5000)
    gate = hold_after_first_batch(app)
    client = web_client(app)
    csrf = login(client)
    resp, seconds = click(client, csrf, all="1", type=KIND)
    assert resp.status_code == 303 and seconds < 0.5, seconds
    op_id = int(resp.headers["Location"].rsplit("/", 1)[1])
    deadline = time.monotonic() + 30
    while bulk.get(app, op_id)["done_rows"] < 500:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    page = client.get(f"/operations/{op_id}").get_data(as_text=True)
    assert "500 of 5,000 done" in page and "st-running" in page and 'http-equiv="refresh"' in page
    assert 'value="500"' in page and 'max="5000"' in page  # the <progress> bar
    # a second click on the same selection, from this or any other dashboard: refused
    again, _ = click(client, csrf, all="1", type=KIND)
    text = again.get_data(as_text=True)
    assert again.status_code == 409
    assert (f"A retry of this selection is already running (operation {op_id}, 500 of 5,000 done)."
            in text)
    # `cronjobs failed --retry --type` is the same selection: refused, naming the operation
    cli = run_cli(["failed", "--retry", "--type", KIND], cli_env(db_url), cwd=tmp_path)
    assert cli.returncode == 2, cli.stdout + cli.stderr
    assert cli.stderr.startswith(f"error: a retry of this selection is already running "
                                 f"(operation {op_id}, 500 of 5,000 done, started by dashboard on ")
    assert len(cli.stderr.strip().splitlines()) == 1 and cli.stdout == ""
    gate.set()
    op = wait_operation(app, op_id)
    assert (op["status"], op["changed_rows"]) == ("done", 5000)
    assert len(operations(app)) == 1
    line = f"retried by dashboard (operation {op_id})"
    assert all(r["process_logs"].count(line) == 1 and r["status"] == "pending"
               for r in rows_of(app))


def test_rows_that_stopped_being_failed_meanwhile_are_left_alone(app):
    add_failed(app, 1200)
    ids = [r["id"] for r in rows_of(app)]
    started = bulk.start(app, "retry", bulk.Selection("failed", KIND), who="cli")
    assert started.operation["total_rows"] == 1200
    changed = {"pending": ids[0:100], "running": ids[600:650], "completed": ids[1100:1120]}
    gone = ids[700:730]
    with app.engine.begin() as conn:
        for status, some in changed.items():
            conn.execute(q.update().where(q.c.id.in_(some)).values(status=status, attempts=2))
        conn.execute(q.delete().where(q.c.id.in_(gone)))
    add_failed(app, 5)  # failed after the snapshot: not in it
    seen = []
    op = bulk.run(app, started, on_batch=lambda o: seen.append(o["done_rows"]))
    assert seen == [500, 1000, 1200]
    assert (op["status"], op["done_rows"], op["changed_rows"]) == ("done", 1200, 1000)
    rows = {r["id"]: r for r in rows_of(app)}
    line = f"retried by cli (operation {op['id']})"
    for status, some in changed.items():
        assert all(rows[i]["status"] == status and rows[i]["attempts"] == 2
                   and line not in rows[i]["process_logs"] for i in some)
    untouched = {i for some in changed.values() for i in some} | set(gone)
    assert all(rows[i]["status"] == "pending" and rows[i]["process_logs"].count(line) == 1
               for i in ids if i not in untouched)
    assert [r["status"] for r in rows_of(app)[-5:]] == ["failed"] * 5
    with app.engine.connect() as conn:  # the snapshot is gone with the work
        assert conn.execute(sa.text("SELECT COUNT(*) FROM cronjob_operation_batch")).scalar() == 0


class Died(Exception):
    """Stands for a process that dies after its first batch."""


def age_lease(app, op_id: int) -> None:
    """Make operation `op_id`'s lease run out, on the database's clock (as leases are judged)."""
    with app.engine.begin() as conn:
        past = store.database_now(conn) - timedelta(seconds=5)
        conn.execute(cronjob_operation.update().where(cronjob_operation.c.id == op_id)
                     .values(lease_until=past))


def test_a_stalled_operation_is_shown_and_resumed_by_the_next_click(app):
    add_failed(app, 1200)
    first = bulk.start(app, "retry", bulk.Selection("failed", KIND), who="dashboard")
    op_id = first.operation["id"]

    def die(op: dict) -> None:
        raise Died()

    with pytest.raises(Died):
        bulk.run(app, first, on_batch=die)  # batch 1 committed, then the process "died"
    client = web_client(app)
    csrf = login(client)
    live = client.get(f"/operations/{op_id}").get_data(as_text=True)
    assert "500 of 1,200 done" in live and "st-running" in live and "Stalled" not in live
    assert click(client, csrf, all="1", type=KIND)[0].status_code == 409  # its lease is live
    age_lease(app, op_id)
    stalled = client.get(f"/operations/{op_id}").get_data(as_text=True)
    assert "st-stalled" in stalled and "Stalled: no batch was written" in stalled
    assert 'http-equiv="refresh"' not in stalled and "button" in stalled and "resume" in stalled
    resp, _ = click(client, csrf, all="1", type=KIND)  # the next click takes it over
    assert resp.status_code == 303 and resp.headers["Location"] == f"/operations/{op_id}"
    op = wait_operation(app, op_id)
    assert (op["status"], op["done_rows"], op["changed_rows"]) == ("done", 1200, 1200)
    assert len(operations(app)) == 1
    # the first runner wakes up late: it holds nothing any more and writes nothing
    late = bulk.run(app, first)
    assert late["status"] == "done" and late["changed_rows"] == 1200
    line = f"retried by dashboard (operation {op_id})"
    assert [r["process_logs"].count(line) for r in rows_of(app)] == [1] * 1200
    resp = client.post(f"/operations/{op_id}/resume", data={"csrf_token": csrf})
    assert resp.status_code == 400 and "only a stalled operation" in resp.get_data(as_text=True)
    assert client.post("/operations/999/resume", data={"csrf_token": csrf}).status_code == 404


def test_the_resume_button_takes_over_a_stalled_operation(app):
    add_failed(app, 700)
    first = bulk.start(app, "retry", bulk.Selection("failed"), who="cli")
    op_id = first.operation["id"]
    client = web_client(app)
    csrf = login(client)
    resp = client.post(f"/operations/{op_id}/resume", data={"csrf_token": csrf})
    assert resp.status_code == 409 and "already running" in resp.get_data(as_text=True)
    age_lease(app, op_id)
    resp = client.post(f"/operations/{op_id}/resume", data={"csrf_token": csrf})
    assert resp.status_code == 303
    op = wait_operation(app, op_id)
    assert (op["status"], op["changed_rows"]) == ("done", 700)
    assert all(r["status"] == "pending" for r in rows_of(app))


def test_concurrent_starters_make_one_operation(app):
    add_failed(app, 1000)
    barrier = threading.Barrier(6)
    results: list = []

    def starter(i: int) -> None:
        barrier.wait()
        try:
            results.append(bulk.start(app, "retry", bulk.Selection("failed", KIND), who=f"t{i}"))
        except OperationRunning as exc:
            results.append(exc)

    threads = [threading.Thread(target=starter, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    won = [r for r in results if isinstance(r, bulk.Started)]
    refused = [r for r in results if isinstance(r, OperationRunning)]
    assert len(won) == 1 and len(refused) == 5
    assert {e.operation["id"] for e in refused} == {won[0].operation["id"]}
    assert len(operations(app)) == 1
    op = bulk.run(app, won[0])
    assert (op["done_rows"], op["changed_rows"]) == (1000, 1000)


def test_cli_retry_runs_the_batches_here(app, db_url, tmp_path):
    add_failed(app, 1200)
    add_failed(app, 2, job_type=OTHER)
    out = run_cli(["failed", "--retry", "--type", KIND], cli_env(db_url), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"retried 1200 failed row(s) of type {KIND}\n"
    # piped: the operation it started, then its final line (the bar is for a terminal)
    assert out.stderr.splitlines() == [
        f"started operation 1: retry failed type={KIND} (0 of 1,200 done)"]
    assert all(r["status"] == "pending" and "retried by cli (operation 1)" in r["process_logs"]
               for r in rows_of(app))
    assert [r["status"] for r in rows_of(app, OTHER)] == ["failed", "failed"]
    empty = run_cli(["failed", "--retry", "--type", KIND], cli_env(db_url), cwd=tmp_path)
    assert empty.returncode == 0 and empty.stdout == f"retried 0 failed row(s) of type {KIND}\n"
    assert bulk.get(app, 2)["status"] == "done"  # an empty snapshot is done at once


def test_a_runner_that_lost_its_operation_writes_nothing(app):
    add_failed(app, 600)
    first = bulk.start(app, "retry", bulk.Selection("failed"), who="cli")
    age_lease(app, first.operation["id"])  # its process hung past the lease
    second = bulk.start(app, "retry", bulk.Selection("failed"), who="cli")
    assert second.resumed and second.operation["id"] == first.operation["id"]
    late = bulk.run(app, first)  # the hung runner wakes: its first batch is rolled back
    assert (late["status"], late["done_rows"], late["owner"]) == ("running", 0, second.owner)
    assert all(r["status"] == "failed" and "retried by" not in r["process_logs"]
               for r in rows_of(app))
    op = bulk.run(app, second)
    assert (op["status"], op["done_rows"], op["changed_rows"]) == ("done", 600, 600)
    assert [r["process_logs"].count("retried by cli") for r in rows_of(app)] == [1] * 600


def test_an_error_in_a_batch_fails_the_operation_and_frees_its_selection(app, monkeypatch):
    add_failed(app, 1200)
    calls = []

    def retry_then_break(conn, ids, now, who):
        calls.append(len(ids))
        if len(calls) == 2:
            raise ValueError("boom in batch 2")
        return store.actions.retry_failed(conn, ids, now, who)

    monkeypatch.setitem(bulk.ACTIONS, "retry", dataclasses.replace(
        bulk.ACTIONS["retry"], apply=retry_then_break, ring=False))
    started = bulk.start(app, "retry", bulk.Selection("failed"), who="cli")
    with pytest.raises(ValueError):
        bulk.run(app, started)
    op = bulk.get(app, started.operation["id"])
    assert (op["status"], op["done_rows"], op["error"]) == (
        "failed", 500, "ValueError: boom in batch 2")
    assert [r["status"] for r in rows_of(app)].count("pending") == 500  # batch 2 rolled back
    page = web_client(app).get(f"/operations/{op['id']}",
                               headers={"Authorization": f"Bearer {TOKEN}"})
    assert "ValueError: boom in batch 2" in page.get_data(as_text=True)
    monkeypatch.undo()
    again = bulk.start(app, "retry", bulk.Selection("failed"), who="cli")  # the selection is free
    assert again.operation["id"] != op["id"] and again.operation["total_rows"] == 700
    assert bulk.run(app, again)["changed_rows"] == 700

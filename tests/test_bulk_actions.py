"""Bulk retry, cancel and delete from the Queue and Failed pages: ticked rows or all rows
matching the page's filter, confirmed on a page of their own before anything changes, run as
one recorded operation per selection (a canonical key, refused with 409 while it runs), a
snapshot of at most 100,000 rows; a cancel keeps the rows as cancelled, a delete never
removes a row that still has a child, so never one above a pending or running row."""

from __future__ import annotations

import re
import threading
import time

import pytest
import sqlalchemy as sa

from cronjobs import store
from cronjobs.actions import bulk
from cronjobs.actions.selection import Selection
from cronjobs.schedule.scheduler import task_infos
from cronjobs.store.db import run_in_transaction
from cronjobs.store.models import cronjob_operation, cronjob_runtime
from cronjobs.store.models import cronjob_queue as q
from dashboard_helpers import TOKEN, add_row, add_rows, login, row, wait_operation, web_client

KIND = "test.summary.execute"
OTHER = "test.shape.execute"
HOUSEKEEPING = ["cronjobs.recoverstale.execute", "cronjobs.cleanup.execute",
                "cronjobs.health.execute", "http.uptime.*"]


@pytest.fixture
def app(make_app):
    return make_app(dashboard_token=TOKEN)


def confirm(client, csrf: str, **form):
    return client.post("/operations/confirm", data={"csrf_token": csrf, **form})


def start(client, csrf: str, **form) -> int:
    """Post the fields of a confirmation page's button; the operation's id."""
    resp = client.post("/operations", data={"csrf_token": csrf, **form})
    assert resp.status_code == 303, resp.get_data(as_text=True)[:800]
    return int(resp.headers["Location"].rsplit("/", 1)[1])


def hidden_fields(html: str) -> list[tuple[str, str]]:
    """The fields the confirmation page's form posts (its CSRF token left out)."""
    form = html[html.index('id="confirm-form"'):]
    form = form[:form.index("</form>")]
    return [(n, v) for n, v in re.findall(r'name="([^"]+)" value="([^"]*)"', form)
            if n != "csrf_token"]


def operations(app) -> list[dict]:
    with app.engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(cronjob_operation)).mappings()]


def statuses(app, ids: list[int]) -> list[str | None]:
    return [(row(app, i) or {}).get("status") for i in ids]


def test_bulk_cancel_of_ticked_pending_rows_keeps_them_cancelled(app):
    pending = [add_row(app, title=f"p{i}") for i in range(4)]
    running = add_row(app, status="running", attempts=1)
    failed = add_row(app, status="failed", error="boom", attempts=3)
    task_infos(app)
    with app.engine.begin() as conn:  # the task's last run is one of the ticked rows
        conn.execute(cronjob_runtime.update().where(cronjob_runtime.c.task == "test-count")
                     .values(last_job_id=pending[1], last_status="pending"))
    client = web_client(app)
    csrf = login(client)
    ticked = {"action": "cancel", "scope": "ticked", "source": "queue", "title": "p",
              "id": [str(pending[2]), str(pending[1]), str(running), str(failed)]}
    page = confirm(client, csrf, **ticked)
    text = page.get_data(as_text=True)
    assert page.status_code == 200 and 'id="confirm"' in text
    assert "2 row(s)" in text and "A running row is not stopped." in text
    assert f'<code id="selection">ids={pending[1]},{pending[2]},{running},{failed}</code>' in text
    assert 'href="/queue?title=p" id="back"' in text
    assert operations(app) == [] and statuses(app, pending[1:3]) == ["pending"] * 2  # nothing yet
    fields = hidden_fields(text)
    clicked = app.clock.now()
    op_id = start(client, csrf, **{n: [v for k, v in fields if k == n] for n, _ in fields})
    op = wait_operation(app, op_id)
    assert (op["action"], op["status"], op["total_rows"], op["changed_rows"]) == (
        "cancel", "done", 2, 2)
    assert statuses(app, pending) == ["pending", "cancelled", "cancelled", "pending"]
    assert statuses(app, [running, failed]) == ["running", "failed"]
    for job in pending[1:3]:
        cancelled = row(app, job)
        assert clicked <= cancelled["finished_at"] <= app.clock.now()
        assert cancelled["process_logs"].count(f"cancelled by dashboard (operation {op_id})") == 1
    with app.engine.connect() as conn:
        last = conn.execute(sa.select(cronjob_runtime.c.last_status).where(
            cronjob_runtime.c.task == "test-count")).scalar_one()
    assert last == "cancelled"


def test_bulk_delete_never_removes_a_row_above_a_live_one(app):
    now = app.clock.now()
    done = {"status": "completed", "attempts": 1, "finished_at": now}
    parent = add_row(app, type="test.count.discover", **done)
    kid_pending = add_row(app, parent_id=parent)
    kid_done = add_row(app, parent_id=parent, **done)
    kid_failed = add_row(app, parent_id=parent, status="failed", error="x", finished_at=now)
    top = add_row(app, type="test.count.discover", **done)  # live grandchild, finished child
    middle = add_row(app, parent_id=top, **done)
    grandchild = add_row(app, parent_id=middle, status="running", attempts=1)
    tree = add_row(app, type="test.count.discover", status="failed", error="x", finished_at=now)
    add_rows(app, 600, parent_id=tree, status="cancelled", finished_at=now)  # two batches
    with app.engine.connect() as conn:
        tree_kids = [r[0] for r in conn.execute(sa.select(q.c.id).where(q.c.parent_id == tree))]
    client = web_client(app)
    csrf = login(client)
    alone = start(client, csrf, action="delete", scope="ticked", source="queue", id=str(tree))
    op = wait_operation(app, alone)  # a parent alone is kept with its children
    assert (op["total_rows"], op["changed_rows"]) == (1, 0) and row(app, tree) is not None
    everything = {"action": "delete", "scope": "all", "source": "queue"}
    text = confirm(client, csrf, **everything).get_data(as_text=True)
    assert "606 row(s)" in text and "A row that still has a child is kept" in text
    op = wait_operation(app, start(client, csrf, **everything))
    assert op["selection"] == "any not=" + ",".join(sorted(HOUSEKEEPING))
    assert (op["status"], op["total_rows"], op["changed_rows"]) == ("done", 606, 603)
    assert statuses(app, [parent, kid_pending]) == ["completed", "pending"]  # kept: live child
    assert statuses(app, [kid_done, kid_failed]) == [None, None]  # its finished siblings went
    assert statuses(app, [top, middle, grandchild]) == ["completed", "completed", "running"]
    assert statuses(app, [tree, *tree_kids]) == [None] * 601  # a whole finished tree, leaves first


@pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True)
def test_a_child_inserted_during_a_delete_keeps_its_parent(app):
    """As prune: the candidate is locked, so a child's foreign-key check (here: a child
    inserted but not committed before) orders the two; the parent is kept."""
    parent = add_row(app, status="completed", attempts=1, finished_at=app.clock.now())
    result: list = []

    def delete() -> None:
        result.append(run_in_transaction(app.engine, lambda c: store.actions.delete_finished(
            c, [parent], app.clock.now())))

    deleter = threading.Thread(target=delete)
    with app.engine.connect() as inserter:
        with inserter.begin():
            inserter.execute(q.insert().values(
                type=KIND, queue="default", status="pending", priority=5, payload="{}",
                attempts=0, parent_id=parent, created_at=app.clock.now(),
                updated_at=app.clock.now()))
            deleter.start()
            waited = wait_for_a_lock_wait(app)
    deleter.join(30)
    assert waited and result == [[]] and row(app, parent)["status"] == "completed"


def wait_for_a_lock_wait(app, timeout: float = 20.0) -> bool:
    """Wait until the deleter's locking read is under way (it waits for the inserter's
    lock: MariaDB may wait during its optimizer's lookup of the row, in state
    `Statistics`, not listed as a lock wait); False after `timeout`."""
    sql = ("SELECT COUNT(*) FROM information_schema.processlist WHERE db = DATABASE() "
           "AND info LIKE 'SELECT %%FOR UPDATE'"
           if app.engine.dialect.name in ("mysql", "mariadb") else
           "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
           "AND datname = current_database()")
    deadline = time.monotonic() + timeout
    with app.engine.connect() as conn:
        while not conn.exec_driver_sql(sql).scalar():
            conn.rollback()
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
    return True


def test_retry_from_the_queue_takes_the_failed_rows_of_the_filter(app):
    add_rows(app, 3, type=KIND, status="failed", error="boom", attempts=3)
    pending = add_row(app, type=KIND)
    completed = add_row(app, type=KIND, status="completed", attempts=1)
    other = add_row(app, type=OTHER, status="failed", error="boom")
    sent = []
    app.broker.listen(lambda job_id, queue, delay: sent.append(job_id))
    client = web_client(app)
    csrf = login(client)
    form = {"action": "retry", "scope": "all", "source": "queue", "type": KIND}
    assert "3 row(s)" in confirm(client, csrf, **form).get_data(as_text=True)
    op = wait_operation(app, start(client, csrf, **form))
    assert (op["selection"], op["total_rows"], op["changed_rows"]) == (f"any type={KIND}", 3, 3)
    with app.engine.connect() as conn:
        kinds = conn.execute(sa.select(q.c.status, sa.func.count()).where(q.c.type == KIND)
                             .group_by(q.c.status)).all()
    assert dict(kinds) == {"pending": 4, "completed": 1}
    assert statuses(app, [pending, completed, other]) == ["pending", "completed", "failed"]
    deadline = time.monotonic() + 10  # the queue is rung after the batch's commit
    while len(sent) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(sent) == 3 and pending not in sent
    nothing = confirm(client, csrf, **dict(form, action="retry", status="pending"))
    text = nothing.get_data(as_text=True)
    assert "Nothing to do" in text and 'id="confirm"' not in text


def test_an_operation_with_nothing_to_do_ends_done_and_warns_of_no_takeover(app, caplog):
    """`cronjobs failed --retry` with no failed row: the empty snapshot is done at once,
    and running it reports that, not "taken over by another runner"."""
    add_row(app, type=KIND, status="completed", attempts=1)
    started = bulk.start(app, "retry", Selection("failed", types=(KIND,)), "cli")
    assert started.operation["status"] == "done" and started.operation["total_rows"] == 0
    with caplog.at_level("INFO", logger="cronjobs.actions.bulk"):
        ended = bulk.run(app, started)
    assert ended["status"] == "done" and ended["changed_rows"] == 0
    assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text


def test_a_title_filter_is_read_in_windows_of_ids(app, monkeypatch):
    monkeypatch.setattr(store.selection, "TITLE_WINDOW", 4)
    monkeypatch.setattr(bulk, "SNAPSHOT_MAX_ROWS", 6)
    for i in range(20):  # every third row has the text; a window holds 4 ids
        add_row(app, status="failed", error="boom", title=f"needle {i}" if i % 3 == 0 else "hay")
    client = web_client(app)
    csrf = login(client)
    form = {"action": "retry", "scope": "all", "source": "queue", "title": "needle"}
    text = confirm(client, csrf, **form).get_data(as_text=True)
    assert "more than 6" in text  # 7 rows: the count stops after the cap
    monkeypatch.setattr(bulk, "SNAPSHOT_MAX_ROWS", 7)
    assert "7 row(s)" in confirm(client, csrf, **form).get_data(as_text=True)
    op = wait_operation(app, start(client, csrf, **form))
    assert (op["selection"], op["total_rows"], op["changed_rows"]) == (
        'any title="needle" not=' + ",".join(sorted(HOUSEKEEPING)), 7, 7)
    with app.engine.connect() as conn:
        left = conn.execute(sa.select(q.c.title, q.c.status).order_by(q.c.id)).all()
    assert [s for t, s in left if t.startswith("needle")] == ["pending"] * 7
    assert {s for t, s in left if t == "hay"} == {"failed"}


def test_the_same_selection_is_refused_while_its_operation_runs(app):
    add_rows(app, 5000, type=KIND, status="failed", error="HTTP 503", attempts=3)
    gate = threading.Event()
    app.broker.listen(lambda job_id, queue, delay: threading.current_thread().name.startswith(
        "cronjobs-operation") and gate.wait(60))
    client = web_client(app)
    csrf = login(client)
    queue_all = {"action": "retry", "scope": "all", "source": "queue", "status": "failed",
                 "type": KIND}
    began = time.perf_counter()
    op_id = start(client, csrf, **queue_all)
    assert time.perf_counter() - began < 1.0
    deadline = time.monotonic() + 30
    while bulk.get(app, op_id)["done_rows"] < 500:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    message = (f"A retry of this selection is already running (operation {op_id}, "
               "500 of 5,000 done).")
    # the Failed page's "all failed rows of KIND" is the same selection, so is a delete of it
    for form in (queue_all, dict(queue_all, action="delete"),
                 {"action": "retry", "scope": "all", "source": "failed", "type": KIND}):
        for path in ("/operations/confirm", "/operations"):
            again = client.post(path, data={"csrf_token": csrf, **form})
            assert again.status_code == 409 and message in again.get_data(as_text=True), path
    gate.set()
    op = wait_operation(app, op_id)
    assert (op["status"], op["total_rows"], op["changed_rows"]) == ("done", 5000, 5000)
    assert len(operations(app)) == 1
    with app.engine.connect() as conn:
        logs = [r[0] for r in conn.execute(sa.select(q.c.process_logs).where(q.c.type == KIND))]
    line = f"retried by dashboard (operation {op_id})"
    assert len(logs) == 5000 and all(text.count(line) == 1 for text in logs)


def test_ticked_ids_make_one_selection_whatever_their_order(app):
    ids = [add_row(app, status="failed", error="boom") for _ in range(3)]
    first = Selection(ids=(ids[2], ids[0], ids[1], ids[0]))
    assert first.key() == "ids=" + ",".join(map(str, ids))
    started = bulk.start(app, "retry", first, who="cli")  # runs nowhere: stays running
    client = web_client(app)
    csrf = login(client)
    # the same rows, ticked in another order, one of them twice through the page's box
    resp = confirm(client, csrf, action="delete", scope="ticked", source="failed",
                   id=[str(ids[1])], page=f"{ids[2]},{ids[0]},{ids[1]}")
    assert resp.status_code == 409 and f"operation {started.operation['id']}" in (
        resp.get_data(as_text=True))


def test_selection_keys_are_canonical():
    assert Selection("failed", types=("x",)).key() == Selection("failed", "x").key() == (
        "failed type=x")
    assert Selection(types=("b", "a", "b")) == Selection(types=("a", "b"))
    assert Selection(types=("b", "a")).key() == "any type=a,b"
    assert Selection("failed", "a,b").key() == 'failed type="a,b"'  # not two types
    assert Selection(title="  x ").key() == Selection(title="x").key() == 'any title="x"'
    assert Selection(title="   ") == Selection()
    assert Selection(hide=("z", "y")).key() == "any not=y,z"
    assert Selection(parent=7, status="pending").key() == "pending parent=7"
    assert Selection("failed", "x", "HTTP <n>\nbody", unmarked=("b", "a", "b")).key() == (
        'failed type=x group="HTTP <n>\\nbody"')  # the texts of unmarked rows: not in the key
    with pytest.raises(ValueError, match="either ticked ids or a filter"):
        Selection("failed", ids=(1,))


def test_a_selection_over_the_cap_is_refused_and_nothing_recorded(app, monkeypatch):
    add_rows(app, 120, type=KIND, status="failed", error="boom")
    monkeypatch.setattr(bulk, "SNAPSHOT_MAX_ROWS", 100)
    client = web_client(app)
    csrf = login(client)
    form = {"action": "retry", "scope": "all", "source": "failed", "type": KIND}
    text = confirm(client, csrf, **form).get_data(as_text=True)
    assert "more than 100" in text and 'id="confirm"' not in text
    assert "this selection has more than 100 rows to retry; one operation takes at most 100" in text
    resp = client.post("/operations", data={"csrf_token": csrf, **form})
    assert resp.status_code == 400 and "narrow the filter" in resp.get_data(as_text=True)
    assert operations(app) == []
    with app.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT COUNT(*) FROM cronjob_operation_batch")).scalar() == 0
    cli = bulk.run(app, bulk.start(app, "retry", bulk.Selection("failed", KIND), who="cli"))
    assert cli["changed_rows"] == 120  # the CLI takes any number (its own foreground run)
    too_many = {"action": "retry", "scope": "ticked", "source": "queue",
                "page": ",".join(str(i) for i in range(1, 502))}
    resp = confirm(client, csrf, **too_many)
    assert resp.status_code == 400 and "501 rows are ticked; at most 500" in (
        resp.get_data(as_text=True))


def test_bad_bulk_forms_are_400_and_change_nothing(app):
    job = add_row(app, status="failed", error="boom")
    client = web_client(app)
    csrf = login(client)
    for form, why in (({"action": "explode", "scope": "all"}, "action must be one of"),
                      ({"action": "retry", "scope": "some"}, "scope ticked or all"),
                      ({"action": "retry", "scope": "ticked"}, "No row is ticked"),
                      ({"action": "retry", "scope": "ticked", "id": "12x"}, "must be a row id"),
                      ({"action": "retry", "scope": "all", "status": "lost"},
                       "status must be one of"),
                      ({"action": "retry", "scope": "all", "task": "nope"}, "unknown task")):
        for path in ("/operations/confirm", "/operations"):
            resp = client.post(path, data={"csrf_token": csrf, "source": "queue", **form})
            assert resp.status_code == 400 and why in resp.get_data(as_text=True), (path, form)
    gone = {"action": "retry", "scope": "all", "source": "failed", "group": "999999"}
    assert confirm(client, csrf, **gone).status_code == 404
    assert operations(app) == [] and row(app, job)["status"] == "failed"


def test_every_bulk_post_needs_the_csrf_token_and_get_changes_nothing(app):
    job = add_row(app, status="failed", error="boom")
    client = web_client(app)
    login(client)
    form = {"action": "retry", "scope": "ticked", "source": "queue", "id": str(job)}
    for path in ("/operations/confirm", "/operations"):
        assert client.post(path, data=form).status_code == 403
        assert client.post(path, data={**form, "csrf_token": "forged"}).status_code == 403
        assert client.get(path, query_string=form).status_code == 405
    assert operations(app) == [] and row(app, job)["status"] == "failed"
    anonymous = web_client(app)
    assert anonymous.post("/operations", data=form).status_code == 401


def test_the_lists_carry_boxes_to_tick_and_the_bulk_forms(app, monkeypatch):
    rows = [add_row(app, status="failed", error="boom", title=f"t{i}") for i in range(3)]
    client = web_client(app)
    login(client)
    queue = client.get("/queue?status=failed").get_data(as_text=True)
    live = client.get("/api/queue?status=failed").get_json()["html"]
    for html in (queue, live):
        for job in rows:
            assert (f'<input type="checkbox" class="select-row" name="id" value="{job}" '
                    'form="bulk-ticked"') in html
        assert f'name="page" value="{rows[2]},{rows[1]},{rows[0]}" form="bulk-ticked"' in html
    assert 'id="bulk-ticked"' in queue and 'id="bulk-all"' in queue
    assert '<input type="hidden" name="status" value="failed">' in queue
    failed = client.get(f"/failed?group={rows[0]}").get_data(as_text=True)
    assert 'id="failed-rows"' in failed and "Retry all 3 failed rows of this group" in failed
    assert f'name="page" value="{rows[2]},{rows[1]},{rows[0]}"' in failed
    assert f'<input type="hidden" name="group" value="{rows[0]}">' in failed
    assert client.get("/failed?group=999999").status_code == 404
    newest = store.views.failed_groups  # a group older than the newest rows grouped: no count
    monkeypatch.setattr(store.views, "failed_groups",
                        lambda conn, t=None, **_: newest(conn, t, scan=0))
    older = client.get(f"/failed?group={rows[0]}").get_data(as_text=True)
    assert "Retry all failed rows of this group" in older and 'id="failed-rows"' in older
    assert client.get("/failed?before=x").status_code == 400

"""The Pauses & blocks page lists pauses (who, when, why, until), blocks (type, key, until,
reason) and the rows they hold; Pause, Resume and Unblock work through a confirmation page,
refuse bad input with a 400 naming it (nothing written), answer 404 for what is not there,
403 without the CSRF token and 405 to a GET; the Tasks pages show each task's limits,
overlap policy, skipped slots and pause state."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cronjobs import CronJobHandler, store
from cronjobs.flow import state as flowstate
from dashboard_helpers import BEARER, TOKEN, add_row, csrf_of, login, web_client

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
KIND = "test.summary.execute"
ACTIONS = ("/flow/confirm", "/flow/pause", "/flow/resume", "/flow/unblock")


class ChatSendExecute(CronJobHandler):
    """Sends to one chat: 2 at once and 10 a second per chat."""

    TYPE = "test.chatsend.execute"
    QUEUE = "broadcast"
    CONCURRENCY = 2
    RATE_LIMIT = "10/s"
    LIMIT_KEY = "chat_id"

    def handle(self, payload, job):
        return True


def pauses(app) -> list[dict]:
    with app.engine.connect() as conn:
        return store.flow.list_pauses(conn, app.clock.now())


def blocks(app) -> list[dict]:
    with app.engine.connect() as conn:
        return store.flow.list_blocks(conn, app.clock.now())


def flow_app(make_app, **settings):
    app = make_app(dashboard_token=TOKEN, **settings)
    app.handlers.register(ChatSendExecute.TYPE, ChatSendExecute)
    return app


@SQLITE
def test_the_page_lists_pauses_blocks_and_held_rows_and_its_buttons_lift_them(make_app):
    app = flow_app(make_app)
    now = app.clock.now()
    with app.engine.begin() as conn:
        store.flow.pause(conn, "queue", "default", now=now, reason="incident 42", by="ops@host1")
        store.flow.block(conn, ChatSendExecute.TYPE, "4711", now=now,
                         until=now + timedelta(minutes=10), reason="FloodWait 37 s")
    for _ in range(3):
        add_row(app)
    for key in ("4711", "4711", "4712"):
        add_row(app, type=ChatSendExecute.TYPE, queue="broadcast", limit_key=key)
    client = web_client(app)
    csrf = login(client)
    page = client.get("/flow").get_data(as_text=True)
    for text in ("incident 42", "ops@host1", "4711", "FloodWait 37 s"):
        assert text in page
    held = page[page.index('id="held"'):]
    assert 'data-reason="paused"' in held and 'data-reason="blocked"' in held
    assert "4712" not in page  # an unblocked key is never listed; held rows are per type

    confirm = client.post("/flow/confirm", data={"csrf_token": csrf, "action": "resume",
                                                 "scope": "queue", "name": "default"})
    assert confirm.status_code == 200 and pauses(app)  # the confirmation changes nothing
    body = confirm.get_data(as_text=True)
    assert 'action="/flow/resume"' in body and "in their order" in body
    done = client.post("/flow/resume", data={"csrf_token": csrf_of(body), "scope": "queue",
                                             "name": "default"})
    assert done.status_code == 303 and pauses(app) == []

    block_id = blocks(app)[0]["id"]
    confirm = client.post("/flow/confirm", data={"csrf_token": csrf, "action": "unblock",
                                                 "block": str(block_id)})
    assert confirm.status_code == 200 and blocks(app)
    done = client.post("/flow/unblock", data={"csrf_token": csrf, "block": str(block_id)})
    assert done.status_code == 303 and blocks(app) == []


@SQLITE
def test_pause_from_the_form_with_a_duration_and_a_reason(make_app):
    app = flow_app(make_app, queues={"broadcast": {"rate_limit": "30/s"}})
    client = web_client(app)
    csrf = login(client)
    form = {"csrf_token": csrf, "action": "pause", "scope": "queue", "name": "broadcast",
            "for": "30m", "reason": "wrong link"}
    confirm = client.post("/flow/confirm", data=form)
    body = confirm.get_data(as_text=True)
    assert confirm.status_code == 200 and pauses(app) == []
    assert "Pause queue broadcast for 30m (wrong link)." in " ".join(body.split())
    assert client.post("/flow/pause", data=form).status_code == 303
    [made] = pauses(app)
    assert (made["scope"], made["name"], made["reason"]) == ("queue", "broadcast", "wrong link")
    assert made["until"] == made["created_at"] + timedelta(minutes=30)
    assert made["created_by"].startswith("dashboard@")
    page = client.get("/flow").get_data(as_text=True)
    assert 'data-scope="queue" data-name="broadcast"' in page
    limits = " ".join(page[page.index('id="limits"'):].split())
    assert "<td>queue <code>broadcast</code></td><td></td><td>30/s</td>" in limits
    assert "<td><code>test.chatsend.execute</code></td><td>2</td><td>10/s</td><td>chat_id</td>" \
        in limits


@SQLITE
def test_a_name_no_handler_here_has_is_paused_after_a_warning(make_app):
    """As `cronjobs pause` does: the workers that run it may have handlers this dashboard
    has not (an incident's queue must be pausable); the confirmation page warns."""
    app = flow_app(make_app)
    client = web_client(app)
    csrf = login(client)
    form = {"csrf_token": csrf, "action": "pause", "scope": "queue", "name": "elsewhere"}
    confirm = client.post("/flow/confirm", data=form)
    body = " ".join(confirm.get_data(as_text=True).split())
    assert confirm.status_code == 200 and pauses(app) == []
    assert 'id="unknown-target"' in body and "queue elsewhere (a typo?)" in body
    assert client.post("/flow/pause", data=form).status_code == 303
    assert [(p["scope"], p["name"]) for p in pauses(app)] == [("queue", "elsewhere")]
    known = client.post("/flow/confirm", data=dict(form, name="default"))
    assert 'id="unknown-target"' not in known.get_data(as_text=True)


@SQLITE
@pytest.mark.parametrize(("form", "says"), [
    ({"action": "pause", "scope": "planet", "name": "default"},
     "scope must be queue, type or task"),
    ({"action": "pause", "scope": "queue", "name": "no such"},
     "queue name &#39;no such&#39; may only contain"),
    ({"action": "pause", "scope": "type", "name": "x" * 200}, "job type is 200 characters"),
    ({"action": "pause", "scope": "queue", "name": "default", "for": "soon"},
     "duration must be such as 90s, 30m, 2h or 1d"),
    ({"action": "pause", "scope": "queue", "name": "default", "for": "0m"}, "more than 0"),
    ({"action": "pause", "scope": "queue", "name": "default", "for": "367d"}, "at most a year"),
    ({"action": "pause", "scope": "queue", "name": "default", "reason": "x" * 600},
     "reason is 600 bytes"),
    ({"action": "explode"}, "action must be pause, resume or unblock"),
    ({"action": "unblock", "block": "abc"}, "block must be a block id"),
])
def test_bad_input_is_a_400_naming_it_and_nothing_is_written(make_app, form, says):
    app = flow_app(make_app)
    client = web_client(app)
    csrf = login(client)
    resp = client.post("/flow/confirm", data={"csrf_token": csrf, **form})
    assert resp.status_code == 400 and says in resp.get_data(as_text=True)
    if form["action"] == "pause":
        resp = client.post("/flow/pause", data={"csrf_token": csrf, **form})
        assert resp.status_code == 400 and says in resp.get_data(as_text=True)
    assert pauses(app) == [] and blocks(app) == []


@SQLITE
def test_lifting_what_is_not_there_is_a_404(make_app):
    app = flow_app(make_app)
    client = web_client(app)
    csrf = login(client)
    resp = client.post("/flow/resume", data={"csrf_token": csrf, "scope": "queue",
                                             "name": "default"})
    assert resp.status_code == 404 and "No pause of queue default." in resp.get_data(as_text=True)
    resp = client.post("/flow/unblock", data={"csrf_token": csrf, "block": "999"})
    assert resp.status_code == 404 and "No block #999" in resp.get_data(as_text=True)


@SQLITE
def test_every_action_needs_a_post_with_the_csrf_token(make_app):
    app = flow_app(make_app)
    now = app.clock.now()
    with app.engine.begin() as conn:
        store.flow.pause(conn, "queue", "default", now=now, by="ops@host1")
        block_id = store.flow.block(conn, KIND, "4711", now=now,
                                    until=now + timedelta(minutes=5))["id"]
    client = web_client(app)
    login(client)
    forged = {"action": "pause", "scope": "queue", "name": "broadcast", "block": str(block_id)}
    for path in ACTIONS:
        for form in (forged, {**forged, "action": "resume", "name": "default"}):
            assert client.post(path, data=form).status_code == 403, path
        assert client.get(path).status_code == 405, path
    assert [p["name"] for p in pauses(app)] == ["default"] and len(blocks(app)) == 1
    # a Bearer request (no cookie a forged page could ride on) needs no CSRF token
    bearer = web_client(app)
    resp = bearer.post("/flow/unblock", data={"block": str(block_id)}, headers=BEARER)
    assert resp.status_code == 303 and blocks(app) == []


@SQLITE
def test_the_tasks_pages_show_limits_overlap_and_pause_state(make_app):
    app = flow_app(make_app)
    client = web_client(app)
    login(client)
    task = "test-chatsend"
    page = client.get("/tasks").get_data(as_text=True)
    row = page[page.index(f'data-task="{task}"'):]
    row = row[:row.index("</tr>")]
    assert "at most 2 running, 10/s starts per chat_id" in " ".join(row.split())
    assert "paused" not in row
    with app.engine.begin() as conn:
        store.flow.pause(conn, "queue", "broadcast", now=app.clock.now(), reason="incident",
                         by="ops@host1")
    page = client.get("/tasks").get_data(as_text=True)
    row = page[page.index(f'data-task="{task}"'):]
    assert 'class="badge warn paused"' in row[:row.index("</tr>")]
    one = " ".join(client.get(f"/tasks/{task}").get_data(as_text=True).split())
    assert "queue broadcast (incident)" in one
    assert "<code>test.chatsend.execute</code></th><td>at most 2 running, 10/s starts per " \
           "chat_id" in one
    # a scheduled task: its overlap policy and its skipped slots, on both pages
    client.get("/tasks")  # makes the runtime rows
    with app.engine.begin() as conn:
        store.record_skips(conn, [("test-count", "202612011200")], "paused", app.clock.now())
    page = client.get("/tasks").get_data(as_text=True)
    row = page[page.index('data-task="test-count"'):]
    row = " ".join(row[:row.index("</tr>")].split())
    assert "overlap: allow" in row and "last: 202612011200, paused" in row
    one = " ".join(client.get("/tasks/test-count").get_data(as_text=True).split())
    assert '<td class="overlap">allow</td>' in one
    assert '<td class="skipped">1; last 202612011200 (paused)</td>' in one
    tr = client.get("/flow?lang=tr").get_data(as_text=True)
    assert "Duraklatmalar ve engeller" in tr and "kuyruk" in tr


@SQLITE
def test_rows_held_by_a_full_queue_or_type_limit_are_counted_per_reason(make_app):
    app = flow_app(make_app, queues={"parked": {"concurrency": 1}})
    add_row(app, queue="parked", status="running")
    for _ in range(2):
        add_row(app, queue="parked")
    for key, status in (("A", "running"), ("A", "running"), ("A", "pending"), ("B", "pending"),
                        (None, "pending")):
        add_row(app, type=ChatSendExecute.TYPE, queue="broadcast", limit_key=key, status=status)
    with app.engine.connect() as conn:
        held = flowstate.held_now(app, conn, app.clock.now(), [], [])
    assert [(h["queue"], h["type"], h["reason"], h["rows"]) for h in held] == [
        ("broadcast", ChatSendExecute.TYPE, "limited", 1),  # key A has its 2 running
        ("parked", KIND, "limited", 2)]


@SQLITE
def test_the_job_page_says_what_holds_a_pending_row(make_app):
    """A pending row's page names the pauses and blocks holding it (with a link to the
    Pauses & blocks page); the start and worker of an earlier attempt read as the last."""
    from cronjobs import queue
    from cronjobs.store.models import cronjob_queue as q

    app = flow_app(make_app)
    client = web_client(app)
    login(client)
    row = queue.dispatch(ChatSendExecute.TYPE, {"chat_id": 7})
    other = queue.dispatch(ChatSendExecute.TYPE, {"chat_id": 8})
    now = app.clock.now()
    with app.engine.begin() as conn:
        block = store.block(conn, ChatSendExecute.TYPE, "7", now=now,
                            until=now + timedelta(minutes=5), reason="FloodWait 300")
        store.flow.pause(conn, "queue", "broadcast", now=now, until=None, reason=None,
                         by="test@host")
        conn.execute(q.update().where(q.c.id == row).values(  # as an earlier attempt left it
            started_at=now - timedelta(seconds=30), worker_id="w1"))
    page = " ".join(client.get(f"/jobs/{row}").get_data(as_text=True).split())
    held = page[page.index('id="held-by"'):].split("</td>")[0]
    assert "pause of queue broadcast</a> until resumed" in held
    assert f"block #{block['id']} of key 7</a> ends <time" in held and "in 5 min.</time>" in held
    assert "<th>Last started</th>" in page and "<th>Last worker</th>" in page
    page = " ".join(client.get(f"/jobs/{other}").get_data(as_text=True).split())
    held = page[page.index('id="held-by"'):].split("</td>")[0]
    assert "pause of queue broadcast" in held and "block #" not in held  # key 8: not held
    with app.engine.begin() as conn:
        whole = store.block(conn, ChatSendExecute.TYPE, None, now=now,
                            until=now + timedelta(minutes=1), reason="FloodWait 60")
    page = " ".join(client.get(f"/jobs/{other}").get_data(as_text=True).split())
    assert f"block #{whole['id']} of the whole type</a>" in page
    assert "<th>Started</th>" in page and "Last started" not in page

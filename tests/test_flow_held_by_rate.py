"""Rows held by a rate limit are counted as the claim decides them: a bucket's due rows
beyond the starts its rate admits now are `rate_limited` — for a type, per limit key, and
for a queue's `rate_limit` — and a claim at the same instant starts exactly the others. A
full concurrency limit still counts as `limited` (never twice). The Job page of a row a
rate limit holds says so and when the next start is, and a claim at that time starts one.
On SQLite, MariaDB and PostgreSQL, with a frozen clock."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest

from cronjobs import queue
from cronjobs.clock import FrozenClock
from cronjobs.flow import state as flowstate
from cronjobs.handler import CronJobHandler
from cronjobs.job.executor import Executor
from cronjobs.store.models import cronjob_queue, cronjob_worker
from dashboard_helpers import TOKEN, add_row, db_now, login, web_client

T0 = datetime(2026, 6, 6, 6, 0, 0)
BACKENDS = pytest.mark.parametrize("backend", ["sqlite", "mariadb", "postgresql"],
                                   indirect=True)


class ChatExecute(CronJobHandler):
    """Five starts a second, all chats together."""

    TYPE = "held.chat.execute"
    QUEUE = "flow"
    RATE_LIMIT = "5/s"

    def handle(self, payload, job):
        return True


class PerChatExecute(CronJobHandler):
    """Two starts a second and two running per chat."""

    TYPE = "held.perchat.execute"
    QUEUE = "flow"
    RATE_LIMIT = "2/s"
    CONCURRENCY = 2
    LIMIT_KEY = "chat"

    def handle(self, payload, job):
        return True


class BulkExecute(CronJobHandler):
    """No limit of its own; its queue `bulk` has a rate_limit (3/s)."""

    TYPE = "held.bulk.execute"
    QUEUE = "bulk"

    def handle(self, payload, job):
        return True


def held_app(make_app, **settings):
    clock = FrozenClock(T0)
    app = make_app(clock=clock, dashboard_token=TOKEN, queues={"bulk": {"rate_limit": "3/s"}},
                   **settings)
    for cls in (ChatExecute, PerChatExecute, BulkExecute):
        app.handlers.register(cls.TYPE, cls)
    live_worker(app, "flow,bulk")
    return app, clock


def live_worker(app, queues: str) -> None:
    """A live worker's heartbeat (by the database's clock) that takes `queues`."""
    seen = db_now(app)
    with app.engine.begin() as conn:
        conn.execute(cronjob_worker.insert().values(
            id="host-a:11", host="host-a", pid=11, queues=queues, status="running",
            started_at=seen, last_seen_at=seen, jobs_done=0, current_jobs="", slots=8))


def claim(app, clock, name: str, limit: int = 100, *, finish: bool = True) -> list[dict]:
    """Claim what the claim takes now; `finish`: the rows complete at once (their
    starts stay in the rate's window, their slots are free)."""
    with app.engine.begin() as conn:
        rows = Executor(app, "test:1").claim_rows(conn, clock.now(), queue=name,
                                                  limit=limit).rows
        if finish and rows:
            conn.execute(cronjob_queue.update().where(cronjob_queue.c.id.in_(
                [r["id"] for r in rows])).values(status="completed"))
    return rows


def held(app, clock) -> dict[tuple[str, str, str], int]:
    with app.engine.connect() as conn:
        rows = flowstate.held_now(app, conn, clock.now(), [], [])
    return {(h["queue"], h["type"], h["reason"]): h["rows"] for h in rows}


def taken(rows: list[dict]) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for row in rows:
        out[(row["queue"], row["type"])] = out.get((row["queue"], row["type"]), 0) + 1
    return out


@BACKENDS
def test_rate_limited_rows_are_the_due_rows_a_claim_now_would_not_start(make_app):
    app, clock = held_app(make_app)
    queue.dispatch_many([{"type": ChatExecute.TYPE} for _ in range(24)])
    queue.dispatch_many([{"type": PerChatExecute.TYPE, "payload": {"chat": chat}}
                         for chat in "a" * 9 + "bbc"])
    queue.dispatch_many([{"type": BulkExecute.TYPE} for _ in range(14)])
    due = {("flow", ChatExecute.TYPE): 24, ("flow", PerChatExecute.TYPE): 12,
           ("bulk", BulkExecute.TYPE): 14}
    for rounds in range(3):  # what is held, and what a claim at that instant starts
        counted = held(app, clock)
        assert {r for _, _, r in counted} == {"rate_limited"}, counted
        started = taken(claim(app, clock, "flow") + claim(app, clock, "bulk"))
        assert started, rounds  # each bucket admits a start after the pause below
        for bucket, n in due.items():
            assert counted.get((*bucket, "rate_limited"), 0) == n - started.get(bucket, 0), (
                rounds, bucket, counted, started)
            due[bucket] = n - started.get(bucket, 0)
        # the claim took all the rates admit at this instant: every due row is held now
        assert held(app, clock) == {(*b, "rate_limited"): n for b, n in due.items() if n}
        clock.advance(1.05)  # past the window of those starts
        for name in ("flow", "bulk"):  # a start in between: the rates admit fewer
            for row in claim(app, clock, name, limit=1):
                due[(row["queue"], row["type"])] -= 1
        clock.advance(0.3)
    assert all(due.values()), due  # every bucket still had a backlog at the last round


@BACKENDS
def test_a_full_concurrency_limit_is_limited_not_rate_limited(make_app):
    app, clock = held_app(make_app)
    for _ in range(2):
        add_row(app, type=PerChatExecute.TYPE, queue="flow", limit_key="a", status="running")
    for chat in ("a", "a", "a", "b", "b", "b"):
        add_row(app, type=PerChatExecute.TYPE, queue="flow", limit_key=chat)
    with app.engine.connect() as conn:
        entries = flowstate.held_now(app, conn, clock.now(), [], [])
    counted = {h["reason"]: h["rows"] for h in entries}
    started = claim(app, clock, "flow")  # chat b's rows the rate admits now
    assert counted == {"limited": 3,  # chat a: 2 running, its 3 due rows wait for them
                       "rate_limited": 3 - len(started)}  # chat b: beyond the rate
    assert {r["limit_key"] for r in started} == {"b"}
    [entry] = [h for h in entries if h["reason"] == "rate_limited"]
    assert entry["limiters"] == [f"type:{PerChatExecute.TYPE}"]
    assert flowstate.held_text(entries) == (
        f"{3 - len(started)} rate-limited (2/s per chat on {PerChatExecute.TYPE}), 3 limited "
        f"(2 at once per chat on {PerChatExecute.TYPE}), 0 paused, 0 blocked")
    assert flowstate.held_totals(entries) == {"rate_limited": 3 - len(started), "limited": 3,
                                              "paused": 0, "blocked": 0}


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_job_page_says_which_rate_it_waits_for_and_when_it_starts(make_app):
    app, clock = held_app(make_app)
    ids = queue.dispatch_many([{"type": ChatExecute.TYPE} for _ in range(8)])
    started = [r["id"] for r in claim(app, clock, "flow")]
    clock.advance(0.05)
    assert started and claim(app, clock, "flow") == []  # the rate admits none now
    waiting = [i for i in ids if i not in started]
    client = web_client(app)
    login(client)
    page = " ".join(client.get(f"/jobs/{waiting[-1]}").get_data(as_text=True).split())
    said = page[page.index('id="waits-for"'):].split("</td>")[0]
    found = re.search(r"the rate limit 5/s of held\.chat\.execute</a>, next start in "
                      r"~(\d+\.\d) s, (\d+) due rows ahead", said)
    assert found and int(found[2]) == len(waiting) - 1, said
    next_in = float(found[1])
    assert 0 < next_in <= 1.0
    if next_in >= 0.15:  # not yet, by the claim's own rule
        clock.advance(next_in - 0.1)
        assert claim(app, clock, "flow") == []
        clock.advance(0.15)
    else:
        clock.advance(next_in + 0.05)
    assert claim(app, clock, "flow")  # by then it is
    # a row of a free bucket waits for a slot; a row of a full concurrency limit says so
    add_row(app, type=PerChatExecute.TYPE, queue="flow", limit_key="a", status="running")
    add_row(app, type=PerChatExecute.TYPE, queue="flow", limit_key="a", status="running")
    full = add_row(app, type=PerChatExecute.TYPE, queue="flow", limit_key="a")
    free = add_row(app, type=PerChatExecute.TYPE, queue="flow", limit_key="b")
    page = " ".join(client.get(f"/jobs/{full}").get_data(as_text=True).split())
    said = page[page.index('id="waits-for"'):].split("</td>")[0]
    assert "the concurrency limit 2 at once per chat of held.perchat.execute</a>, 2 running" \
        in said
    page = " ".join(client.get(f"/jobs/{free}").get_data(as_text=True).split())
    assert '<td id="waits-for">a free worker slot</td>' in page


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_overview_and_the_flow_page_say_why_due_rows_wait(make_app):
    app, clock = held_app(make_app)
    queue.dispatch_many([{"type": ChatExecute.TYPE} for _ in range(10)])
    queue.dispatch_many([{"type": BulkExecute.TYPE} for _ in range(5)])  # no start yet
    due = 10 - len(claim(app, clock, "flow", limit=3))
    clock.advance(0.2)
    counted = held(app, clock)[("flow", ChatExecute.TYPE, "rate_limited")]
    assert 0 < counted <= due
    client = web_client(app)
    login(client)
    page = " ".join(client.get("/").get_data(as_text=True).split())
    why = page[page.index('data-held="flow"'):].split("</tr>")[0]
    free = f", {due - counted} waiting for a slot" if due > counted else ""
    assert f"{due} due:</a> {counted} rate-limited (5/s on held.chat.execute){free}</td>" \
        in why, why
    why = page[page.index('data-held="bulk"'):].split("</tr>")[0]
    bulk = held(app, clock)[("bulk", BulkExecute.TYPE, "rate_limited")]  # 5 beyond 3/s
    assert f"5 due:</a> {bulk} rate-limited (3/s on queue bulk), {5 - bulk} waiting for a " \
           f"slot</td>" in why, why
    data = client.get("/api/overview").get_json()
    [flow] = [q for q in data["queues"] if q["queue"] == "flow"]
    assert flow["free"] == due - counted
    assert [(h["reason"], h["rows"]) for h in flow["held"]] == [("rate_limited", counted)]
    page = " ".join(client.get("/flow").get_data(as_text=True).split())
    held_table = page[page.index('id="held"'):].split("</table>")[0]
    assert 'data-reason="rate_limited"' in held_table
    assert '<td class="why">rate-limited (5/s)</td>' in held_table  # the type's own limit
    assert f'<td class="rows">{counted}</td>' in held_table
    assert '<td class="why">rate-limited (3/s on queue bulk)</td>' in held_table


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_health_warns_about_rows_a_rate_limit_held_too_long(make_app):
    from cronjobs.health import run_health

    app, clock = held_app(make_app, health_held_warn_seconds=900)
    for _ in range(8):
        add_row(app, type=ChatExecute.TYPE, queue="flow", created_at=T0 - timedelta(minutes=20))
    claim(app, clock, "flow")
    clock.advance(0.1)
    left = held(app, clock)[("flow", ChatExecute.TYPE, "rate_limited")]
    assert left > 0
    [flow] = [c for c in run_health(app).checks if c.name == "flow"]
    assert flow.message == (f"0 pause(s), 0 block(s); held rows: {left} rate-limited (5/s on "
                            f"{ChatExecute.TYPE}), 0 limited, 0 paused, 0 blocked")
    [problem] = [p for p in flow.problems if p.key.startswith("held:")]
    assert problem.key == f"held:flow:{ChatExecute.TYPE}:rate_limited"
    assert problem.message.startswith(
        f"{left} due row(s) of {ChatExecute.TYPE} in queue 'flow' are rate-limited (5/s on "
        f"{ChatExecute.TYPE}); the oldest has waited 1200 s")


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_rows_of_a_queue_no_live_worker_takes_say_so_first(make_app):
    app, clock = held_app(make_app)
    ids = queue.dispatch_many([{"type": ChatExecute.TYPE, "queue": "lonely"} for _ in range(4)])
    client = web_client(app)
    login(client)
    page = " ".join(client.get("/").get_data(as_text=True).split())
    why = page[page.index('data-held="lonely"'):].split("</tr>")[0]
    assert 'href="/workers">4 due:</a> no live worker takes queue lonely</td>' in why, why
    page = " ".join(client.get(f"/jobs/{ids[-1]}").get_data(as_text=True).split())
    assert '<td id="waits-for">a worker: no live worker takes queue lonely</td>' in page
    # a queue a live worker takes: its rows are explained by their limits, as before
    queue.dispatch_many([{"type": ChatExecute.TYPE} for _ in range(4)])  # queue flow
    clock.advance(10)  # past the Overview's cached numbers
    page = " ".join(client.get("/").get_data(as_text=True).split())
    why = page[page.index('data-held="flow"'):].split("</tr>")[0]
    assert "rate-limited (5/s on held.chat.execute)" in why and "no live worker" not in why

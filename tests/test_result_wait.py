"""Results you can wait for: `queue.wait` on SQLite, MariaDB and PostgreSQL, and
`GET /api/jobs/ID/result?wait=` (status codes, answered <= 1 s after the row ends, 200
waiting requests against a real dashboard server: pages quick, one shared poll)."""

from __future__ import annotations

import http.client
import threading
import time
from datetime import UTC
from decimal import Decimal
from fractions import Fraction

import pytest
import sqlalchemy as sa

from cronjobs import queue, testing
from cronjobs.errors import InvalidJob, JobNotFound
from cronjobs.store.models import cronjob_queue
from cronjobs.web.results import ResultWaiter
from cronjobs.web.server import open_server
from cronjobs.web.view import web_engine
from dashboard_helpers import BEARER, TOKEN, add_row, add_rows, web_client


def _drain_later(app, delay: float, ended: list) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        testing.drain(app)
        ended.append(time.monotonic())

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_wait_on_every_backend(make_app):
    app = make_app()
    done = queue.dispatch("test.shape.execute", {"shape": "dict_ok"})
    with pytest.raises(TimeoutError, match=rf"job {done} is still pending after waiting 0.2 s"):
        queue.wait(done, timeout=0.2)
    ended: list[float] = []
    thread = _drain_later(app, 0.3, ended)
    result = queue.wait(done, timeout=10)
    woke = time.monotonic()
    thread.join()
    assert (result.status, result.result, result.error) == ("completed", {"answer": 42}, None)
    assert result.finished_at.tzinfo is UTC and result.id == done
    assert woke - ended[0] < 1.5  # the poll backs off to 1 s at most
    start = time.monotonic()  # final already: at once, with timeout 0 as well
    assert queue.wait(done, timeout=0, app=app) == result
    assert time.monotonic() - start < 0.2
    # a row that will be retried is not final: the timeout names the status it saw
    retried = queue.dispatch("test.shape.execute", {"shape": "dict_fail"})
    testing.drain(app)
    with pytest.raises(TimeoutError, match=rf"job {retried} is still pending"):
        queue.wait(retried, timeout=0.1)
    failed = queue.dispatch("test.shape.execute", {"shape": "dict_fail_no_retry"})
    testing.drain(app)
    outcome = queue.wait(failed, timeout=1)
    assert outcome.status == "failed" and "bad input" in outcome.error
    with pytest.raises(JobNotFound, match="no job with id 999999"):
        queue.wait(999999, timeout=1)
    for bad in (-1, float("nan"), "5", True):
        with pytest.raises(InvalidJob, match="timeout must be"):
            queue.wait(done, timeout=bad)


def test_wait_refuses_what_is_no_row_id_and_takes_any_real_timeout(make_app):
    app = make_app()
    first = queue.dispatch("test.shape.execute", {"shape": "dict_ok"})
    testing.drain(app)
    for bad in (1.9, True, False, "7x", "1", None, 0, -1, 2**63, Decimal(1)):
        with pytest.raises(InvalidJob, match=rf"^job id must be an int from 1 to {2**63 - 1}, "):
            queue.wait(bad, timeout=0)
    with pytest.raises(JobNotFound):
        queue.wait(2**63 - 1, timeout=0)
    assert queue.wait(first, timeout=Decimal("0.2")).status == "completed"
    assert queue.wait(first, timeout=Fraction(1, 5)).status == "completed"
    for bad in (Decimal("NaN"), Decimal("sNaN"), Decimal("-0.1"), Decimal("Infinity")):
        with pytest.raises(InvalidJob, match="timeout must be"):
            queue.wait(first, timeout=bad)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_result_route_status_codes(make_app):
    app = make_app(dashboard_token=TOKEN)
    client = web_client(app)
    pending = add_row(app)
    done = add_row(app, status="completed", result_payload={"n": 1},
                   finished_at=app.clock.now())
    assert client.get(f"/api/jobs/{done}/result").status_code == 401
    resp = client.get(f"/api/jobs/{done}/result?wait=20", headers=BEARER)
    body = resp.get_json()
    assert resp.status_code == 200 and body["status"] == "completed" and body["result"] == {"n": 1}
    assert body["id"] == done and body["error"] is None and body["finished_at"].endswith("Z")
    resp = client.get(f"/api/jobs/{pending}/result", headers=BEARER)
    assert (resp.status_code, resp.get_json()) == (202, {"id": pending, "status": "pending"})
    start = time.monotonic()
    resp = client.get(f"/api/jobs/{pending}/result?wait=0.3", headers=BEARER)
    assert resp.status_code == 202 and resp.get_json()["status"] == "pending"
    assert 0.3 <= time.monotonic() - start < 1.5
    resp = client.get("/api/jobs/999999/result?wait=1", headers=BEARER)
    assert resp.status_code == 404 and "999999" in resp.get_json()["error"]
    # plain decimals only: not what float() also takes ("1_0", " 1", an Arabic-Indic 1)
    for bad, text in [(v, v) for v in ("abc", "-1", "61", "nan", "inf", "1_0", "1e1")] + [
            ("%201", " 1"), ("%D9%A1", "\u0661")]:
        resp = client.get(f"/api/jobs/{pending}/result?wait={bad}", headers=BEARER)
        assert resp.status_code == 400, bad
        assert resp.get_json()["error"] == (f"wait must be a number of seconds from 0 to 60, "
                                            f"got {text!r}")


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_result_route_answers_soon_after_the_end(make_app):
    app = make_app(dashboard_token=TOKEN)
    client = web_client(app)
    job = queue.dispatch("test.shape.execute", {"shape": "dict_ok"})
    ended: list[float] = []
    thread = _drain_later(app, 0.5, ended)
    resp = client.get(f"/api/jobs/{job}/result?wait=20", headers=BEARER)
    answered = time.monotonic()
    thread.join()
    assert resp.status_code == 200 and resp.get_json()["result"] == {"answer": 42}
    assert answered - ended[0] <= 1.0


def _get(port: int, path: str, timeout: float = 30) -> tuple[int, float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        start = time.monotonic()
        conn.request("GET", path, headers=BEARER)
        resp = conn.getresponse()
        resp.read()
        return resp.status, time.monotonic() - start
    finally:
        conn.close()


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_two_hundred_waiters_share_one_poll(make_app):
    app = make_app(dashboard_token=TOKEN)
    add_rows(app, 200)
    with app.engine.connect() as conn:
        ids = list(conn.execute(sa.select(cronjob_queue.c.id)).scalars())
    assert len(ids) == 200
    statements = []
    sa.event.listen(web_engine(app), "before_cursor_execute",
                    lambda *args: statements.append(time.monotonic()))
    server, url, _ = open_server(app, "127.0.0.1", 0)
    port = int(url.rsplit(":", 1)[1])
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    answers: list[tuple[int, float]] = []
    clients = [threading.Thread(target=lambda i=i: answers.append(
        (_get(port, f"/api/jobs/{i}/result?wait=30")[0], time.monotonic()))) for i in ids]
    try:
        assert _get(port, "/")[0] == 200  # the Overview's snapshot warmed up
        for client in clients:
            client.start()
        waiter: ResultWaiter | None = None
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            waiter = server.app.extensions.get("cronjobs_result_waiter")
            if waiter is not None and waiter.awaited == 200:
                break
            time.sleep(0.05)
        assert waiter is not None and waiter.awaited == 200
        window_start, before = time.monotonic(), len(statements)
        time.sleep(2.0)  # every request waits: only the shared poll reads
        per_waiter = (len(statements) - before) / (time.monotonic() - window_start) / 200
        assert 0 < per_waiter < 2, per_waiter
        pages = sorted(_get(port, "/")[1] for _ in range(5))
        assert pages[2] < 0.1, pages  # the median Overview page under 100 ms
        with app.engine.begin() as conn:
            conn.execute(sa.update(cronjob_queue).where(cronjob_queue.c.id.in_(ids)).values(
                status="completed", finished_at=app.clock.now(), result_payload='{"ok": 1}'))
        finished = time.monotonic()
        for client in clients:
            client.join(10)
    finally:
        server.shutdown()
        server.server_close()
    assert sorted(code for code, _ in answers) == [200] * 200
    late = sorted(at - finished for _, at in answers)
    assert late[100] <= 1.0 and late[-1] <= 1.5, (late[100], late[-1])

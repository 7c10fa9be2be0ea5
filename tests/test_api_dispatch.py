"""POST /api/jobs and POST /api/jobs:batch: every answer, the limits, all-or-nothing
batches and 20 clients racing for one Idempotency-Key against a real dashboard process."""

from __future__ import annotations

import http.client
import io
import json
import threading
from datetime import datetime
from urllib.parse import urlsplit

import pytest

from conftest import REDIS, cli_env
from cronjobs import limits
from cronjobs.clock import utcnow
from cronjobs.store import tokens
from dashboard_helpers import BEARER, TOKEN, count, row, web_client
from dashboard_process import Dashboard

JSON = {"Content-Type": "application/json"}
AUTH = {**BEARER, **JSON}
TYPE = "test.record.execute"
DEEP = "[" * 100_000 + "]" * 100_000  # deeper than Python's parser goes
DEEPER = "[" * 100 + "]" * 100  # with the payload's object: 101 levels


def _post(base: str, body: dict, headers: dict) -> tuple[int, dict]:
    """POST `body` as JSON to a real server's /api/jobs: (status, decoded answer)."""
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        conn.request("POST", "/api/jobs", json.dumps(body), headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def post(client, body, path: str = "/api/jobs", headers: dict | None = None):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return client.post(path, data=data, headers=headers or AUTH)


def test_one_job_every_answer(make_app):
    app = make_app(dashboard_token=TOKEN)
    client = web_client(app)
    rung: list[int] = []
    app.broker.listen(lambda job_id, queue, delay: rung.append(job_id))
    made = post(client, {"type": TYPE, "payload": {"tag": "a"}, "key": "k1", "priority": 3,
                         "at": "2030-01-02T03:04:05+02:00", "title": "first",
                         "max_attempts": 4})
    assert made.status_code == 201, made.get_json()
    job_id = made.get_json()["id"]
    assert made.get_json() == {"id": job_id, "created": True}
    stored = row(app, job_id)
    assert (stored["type"], json.loads(stored["payload"]), stored["idempotency_key"],
            stored["priority"], stored["title"], stored["max_attempts"], stored["scheduled_at"]
            ) == (TYPE, {"tag": "a"}, "k1", 3, "first", 4, datetime(2030, 1, 2, 1, 4, 5))
    # the header is the key; the same key and payload (keys in another order) -> the row
    again = post(client, {"type": TYPE, "payload": {"tag": "a"}},
                 headers={**AUTH, "Idempotency-Key": "k1"})
    assert (again.status_code, again.get_json()) == (200, {"id": job_id, "created": False})
    other = post(client, {"type": TYPE, "payload": {"tag": "b"}, "key": "k1"})
    assert other.status_code == 409 and other.get_json()["id"] == job_id
    assert f"job {job_id}" in other.get_json()["error"]
    other_type = post(client, {"type": "test.summary.execute", "payload": {"tag": "a"},
                               "key": "k1"})
    assert other_type.status_code == 409 and "type" in other_type.get_json()["error"]
    both = post(client, {"type": TYPE, "key": "k2"}, headers={**AUTH, "Idempotency-Key": "k3"})
    assert both.status_code == 400 and "differ" in both.get_json()["error"]
    child = post(client, {"type": TYPE, "parent": job_id})
    assert child.status_code == 201 and row(app, child.get_json()["id"])["parent_id"] == job_id
    after = post(client, {"type": TYPE, "depends_on": [job_id]})
    assert after.status_code == 201 and row(app, after.get_json()["id"])["status"] == "waiting"
    hooked = post(client, {"type": TYPE, "callback_url": "https://hooks.example/done"})
    assert hooked.status_code == 201
    assert row(app, hooked.get_json()["id"])["callback_url"] == "https://hooks.example/done"
    assert count(app) == 4
    # new pending rows only, once each
    assert rung == [job_id, child.get_json()["id"], hooked.get_json()["id"]]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
def test_one_job_refusals_write_nothing(make_app):
    app = make_app(dashboard_token=TOKEN)
    client = web_client(app)
    answers = {
        "typo": post(client, {"type": "test.recod.execute"}),
        "field": post(client, {"type": TYPE, "paylod": {}}),
        "no type": post(client, {"payload": {}}),
        "priority": post(client, {"type": TYPE, "priority": "high"}),
        "at": post(client, {"type": TYPE, "at": "tomorrow"}),
        "at type": post(client, {"type": TYPE, "at": 5}),
        "payload": post(client, {"type": TYPE, "payload": [1]}),
        "parent": post(client, {"type": TYPE, "parent": 999}),
        "key": post(client, {"type": TYPE, "key": "x" * 192}),
        "array": post(client, [{"type": TYPE}]),
        "deep": post(client, f'{{"type": "{TYPE}", "payload": {DEEP}}}'),
        "deep payload": post(client, {"type": TYPE, "payload": {"a": json.loads(DEEPER)}}),
        "callback": post(client, {"type": TYPE, "callback_url": "ftp://hooks.example/x"}),
        "private callback": post(client, {"type": TYPE,
                                          "callback_url": "http://169.254.169.254/latest"}),
    }
    assert {name: a.status_code for name, a in answers.items()} == dict.fromkeys(answers, 422)
    errors = {name: a.get_json()["error"] for name, a in answers.items()}
    assert "did you mean 'test.record.execute'?" in errors["typo"]
    assert "unknown field 'paylod' (did you mean 'payload'?)" in errors["field"]
    assert "at is not an ISO 8601 time: 'tomorrow'" in errors["at"]
    assert "parent job 999 does not exist" in errors["parent"]
    assert all("\n" not in e for e in errors.values()), errors
    assert post(client, "{not json").status_code == 400
    assert post(client, b'{"type": "\xff"}').status_code == 400
    plain = post(client, "{}", headers={**BEARER, "Content-Type": "text/plain"})
    assert plain.status_code == 415 and "application/json" in plain.get_json()["error"]
    assert count(app) == 0


def test_sizes_by_token(make_app):
    app = make_app(dashboard_token=TOKEN)
    client = web_client(app)
    big = {"type": TYPE, "payload": {"s": "a" * 100_000}}
    assert post(client, big, headers=JSON).status_code == 401  # no token: 64 KB, not read
    assert post(client, big).status_code == 201
    fits = {"type": TYPE, "payload": {"s": "a" * (limits.PAYLOAD_MAX_BYTES - 20)}}
    assert post(client, fits).status_code == 201
    over = post(client, {"type": TYPE, "payload": {"s": "a" * limits.PAYLOAD_MAX_BYTES}})
    assert over.status_code == 422
    assert "the limit is 1,000,000 bytes" in over.get_json()["error"]
    huge = post(client, {"type": TYPE, "payload": {"s": "a" * limits.STDIN_LINE_MAX_BYTES}})
    assert huge.status_code == 413 and "2,000,000" in huge.get_json()["error"]
    assert count(app) == 2


@pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True)
def test_batch_in_order_and_all_or_nothing(make_app):
    app = make_app(dashboard_token=TOKEN)
    client = web_client(app)
    path = "/api/jobs:batch"
    first = post(client, {"type": TYPE, "key": "held", "payload": {"n": 0}})
    held = first.get_json()["id"]
    jobs = [{"type": TYPE, "payload": {"n": i}} for i in range(5)]
    jobs[0]["key"] = "held"
    made = post(client, {"jobs": jobs}, path)
    assert made.status_code == 201, made.get_json()
    answer = made.get_json()["jobs"]
    assert answer[0] == {"id": held, "created": False}
    assert [a["created"] for a in answer[1:]] == [True] * 4
    assert [json.loads(row(app, a["id"])["payload"])["n"] for a in answer] == list(range(5))
    assert post(client, {"jobs": jobs[:1]}, path).status_code == 200  # none created
    before = count(app)
    rung: list[int] = []
    app.broker.listen(lambda job_id, queue, delay: rung.append(job_id))
    bad_rows = {2: {"type": "test.recod.execute"}, 3: {"type": TYPE, "parent": 10**9},
                1: {"type": TYPE, "key": "held", "payload": {"n": 9}}}
    for index, bad in bad_rows.items():
        rows = [{"type": TYPE}] * 4
        rows[index] = bad
        refused = post(client, {"jobs": rows}, path)
        assert refused.status_code == (409 if index == 1 else 422), refused.get_json()
        assert refused.get_json()["error"].startswith(f"jobs[{index}]: ")
        assert refused.get_json()["index"] == index
    assert post(client, {"jobs": [{"type": TYPE}] * 1_001}, path).status_code == 422
    assert post(client, {"jobs": []}, path).status_code == 422
    assert post(client, {"jobs": [{"type": TYPE}], "x": 1}, path).status_code == 422
    assert post(client, {"jobs": [{"type": TYPE}]}, path,
                {**AUTH, "Idempotency-Key": "k"}).status_code == 400
    assert count(app) == before and rung == []  # nothing written, nothing sent
    thousand = post(client, {"jobs": [{"type": TYPE, "payload": {"i": i}} for i in range(1_000)]},
                    path)
    assert thousand.status_code == 201 and len(thousand.get_json()["jobs"]) == 1_000
    assert count(app) == before + 1_000
    assert set(rung) <= {a["id"] for a in thousand.get_json()["jobs"]} and rung


@pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True)
def test_twenty_clients_one_key_one_row(db_url, namespace, tmp_path, make_app):
    app = make_app()
    with app.engine.begin() as conn:  # stored tokens, as `cronjobs tokens create` makes
        scoped = {scope: tokens.create(conn, f"t-{scope}", scope, utcnow())
                  for scope in ("read", "dispatch")}
    env = cli_env(db_url, namespace, REDIS, CRONJOBS_DASHBOARD_TOKEN=TOKEN)
    dashboard = Dashboard(env, tmp_path).wait_ready()
    answers: list = []
    start = threading.Barrier(20)

    def client() -> None:
        start.wait()
        answers.append(_post(dashboard.url, {"type": TYPE, "payload": {}},
                             {**AUTH, "Idempotency-Key": "race"}))

    def bearer(scope: str) -> dict:
        return {**JSON, "Authorization": f"Bearer {scoped[scope]}"}

    try:
        threads = [threading.Thread(target=client) for _ in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        # the answers of the real server, by a stored token's scope
        job = {"type": TYPE, "payload": {"n": 1}, "key": "real"}
        codes = [_post(dashboard.url, job, JSON)[0],
                 _post(dashboard.url, job, bearer("read"))[0],
                 _post(dashboard.url, job, bearer("dispatch"))[0],
                 _post(dashboard.url, job, bearer("dispatch"))[0],
                 _post(dashboard.url, {**job, "payload": {"n": 2}}, bearer("dispatch"))[0],
                 _post(dashboard.url, {"type": "test.recod.execute"}, bearer("dispatch"))[0]]
    finally:
        assert dashboard.stop() == 0
    assert codes == [401, 403, 201, 200, 409, 422]
    assert sorted(status for status, _ in answers) == [200] * 19 + [201]
    ids = {body["id"] for _, body in answers}
    assert len(ids) == 1 and count(app) == 2 and count(app, idempotency_key="race") == 1


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_openapi_documents_both_routes(make_app):
    from cronjobs.web import dispatchapi

    web = web_client(make_app(dashboard_token=TOKEN)).application
    rules = {(r.rule, m.lower()) for r in web.url_map.iter_rules()
             if r.endpoint.startswith("dispatchapi.") for m in r.methods - {"OPTIONS"}}
    documented = {(path, method) for path, ops in dispatchapi.OPENAPI.items() for method in ops}
    assert rules == documented == {("/api/jobs", "post"), ("/api/jobs:batch", "post")}
    for ops in dispatchapi.OPENAPI.values():
        assert {"201", "409", "422"} <= set(ops["post"]["responses"])
        assert all(r["description"] for r in ops["post"]["responses"].values())


def test_odd_bodies_headers_and_batch_keys(make_app):
    app = make_app(dashboard_token=TOKEN)
    client = web_client(app)
    batch = "/api/jobs:batch"
    digits = json.dumps({"type": TYPE, "payload": {"n": 0}}).replace("0", "1" + "0" * 5000)
    for path, body in (("/api/jobs", digits), (batch, '{"jobs": [' + digits + "]}")):
        resp = post(client, body, path)  # over Python's int-digit limit: bad JSON, not 500
        assert resp.status_code == 400 and "not valid JSON" in resp.get_json()["error"], path
    null = post(client, "null")
    assert null.status_code == 422 and null.get_json()["error"].startswith(
        "the body must be a JSON object") and null.get_json()["error"].endswith("got null")
    remote = post(client, {"type": "test.recod.execute"}).get_json()["error"]
    assert "did you mean" in remote and "CRONJOBS_REMOTE_TYPES" in remote
    assert "known_type" not in remote and "--remote" not in remote
    # a chunked body (no Content-Length) over the limit: 413, not its prefix parsed
    chunked = f'{{"type": "{TYPE}"}}'.encode() + b" " * limits.STDIN_LINE_MAX_BYTES + b"xx"
    resp = client.post("/api/jobs", input_stream=io.BytesIO(chunked), headers=AUTH,
                       environ_overrides={"wsgi.input_terminated": True})
    assert resp.status_code == 413, resp.get_data(as_text=True)[:200]
    # the header is UTF-8 (WSGI hands it over as latin-1): the same key as the body's
    made = post(client, {"type": TYPE, "key": "fatura-ş"})
    again = post(client, {"type": TYPE}, headers={
        **AUTH, "Idempotency-Key": "fatura-ş".encode().decode("latin-1")})
    assert again.status_code == 200 and again.get_json()["id"] == made.get_json()["id"]
    for key, words in (("\xff\xfe", "not UTF-8"), ("a,b", "give one Idempotency-Key")):
        resp = post(client, {"type": TYPE}, headers={**AUTH, "Idempotency-Key": key})
        assert resp.status_code == 400 and words in resp.get_json()["error"], key
    twice = client.post("/api/jobs", data=json.dumps({"type": TYPE}), headers=[
        *AUTH.items(), ("Idempotency-Key", "a"), ("Idempotency-Key", "b")])
    assert twice.status_code == 400, twice.get_json()
    # a batch: one key twice with one payload is one row; with another, 422 naming both
    same = post(client, {"jobs": [{"type": TYPE, "key": "d", "payload": {"a": 1}},
                                  {"type": TYPE, "key": "d", "payload": {"a": 1}}]}, batch)
    first, second = same.get_json()["jobs"]
    assert same.status_code == 201 and first["id"] == second["id"]
    assert (first["created"], second["created"]) == (True, False)
    before = count(app)
    clash = post(client, {"jobs": [{"type": TYPE}, {"type": TYPE, "key": "e", "payload": {}},
                                   {"type": TYPE, "key": "e", "payload": {"a": 2}}]}, batch)
    answer = clash.get_json()
    assert clash.status_code == 422 and "id" not in answer
    assert (answer["index"], answer["other_index"]) == (2, 1)
    assert "jobs[2]" in answer["error"] and "jobs[1]" in answer["error"]
    for index, bad in ((1, {"payload": {}}), (0, {"type": 5}), (1, {"type": TYPE, "x": 1}),
                       (1, None)):
        rows = [{"type": TYPE}] * 2
        rows[index] = bad
        refused = post(client, {"jobs": rows}, batch)
        assert refused.status_code == 422 and refused.get_json()["index"] == index, bad
    assert count(app) == before

"""The Job page, its Results tab and /api/jobs/ID answer 200 for any stored row (lone
surrogates, 10,000-deep JSON, multi-MB payload, result and log) with a bounded page, and
each text downloads whole as an attachment behind the token."""

from __future__ import annotations

import hashlib
import html
import json

import pytest
import sqlalchemy as sa
from flask.testing import FlaskClient

from cronjobs import limits
from cronjobs.app import App
from cronjobs.store.models import cronjob_queue
from dashboard_helpers import BEARER, TOKEN, add_row, web_client

SURROGATE = b"caf\xe9 \xff".decode("utf-8", "surrogateescape")  # as subprocess gives it
DEEP = "[" * 10_000 + "]" * 10_000
PAGE_MAX = 4 * limits.DISPLAY_MAX_BYTES + 64_000  # four texts shown, and the page around them


@pytest.fixture
def app(make_app):
    return make_app(dashboard_token=TOKEN)


def utf8_page(client: FlaskClient, path: str) -> str:
    resp = client.get(path, headers=BEARER)
    assert resp.status_code == 200, (path, resp.get_data()[:2000])
    return resp.get_data().decode("utf-8")  # strict: the page is valid UTF-8


def big(n: int, fill: str) -> str:
    """A JSON object of about `n` bytes of UTF-8."""
    return json.dumps({"blob": fill * (n // len(fill.encode()))}, ensure_ascii=False)


def append(app: App, job_id: int, column: str, text: str, chunk: int = 4_000_000) -> None:
    """Store `text` in `column` piecewise (one statement stays below MariaDB's packet)."""
    q = cronjob_queue
    with app.engine.begin() as conn:
        conn.execute(sa.update(q).where(q.c.id == job_id).values({column: text[:chunk]}))
        for i in range(chunk, len(text), chunk):
            conn.execute(sa.update(q).where(q.c.id == job_id)
                         .values({column: q.c[column] + text[i:i + chunk]}))


def test_lone_surrogates_render_as_replacement_characters(app):
    result = json.dumps({"mode": "markup", "text": SURROGATE})  # escaped: \udce9 \udcff
    job = add_row(app, status="completed", payload=json.dumps({"out": SURROGATE}),
                  result_payload=result, title="stored")
    plain = add_row(app, status="completed",
                    result_payload=json.dumps({"mode": "plain", "text": SURROGATE}))
    client = web_client(app)
    text = utf8_page(client, f"/jobs/{job}")
    assert "caf\ufffd \ufffd" in text and text.count("\ufffd") >= 4  # payload and result
    assert ('id="trusted-summary">caf\ufffd \ufffd</b>'
            in utf8_page(client, f"/jobs/{job}?tab=results"))
    assert ("&lt;b&gt;plain&lt;/b&gt; caf\ufffd \ufffd"
            in utf8_page(client, f"/jobs/{plain}?tab=results"))
    resp = client.get(f"/api/jobs/{job}", headers=BEARER)
    assert resp.status_code == 200 and json.loads(resp.get_data())["result_payload"] == result
    raw = client.get(f"/jobs/{job}/raw/result", headers=BEARER)
    assert raw.status_code == 200 and raw.get_data().decode("ascii") == result  # as stored


def test_json_nested_10000_deep_is_shown_as_stored(app):
    job = add_row(app, status="completed", payload=DEEP, result_payload=DEEP)
    client = web_client(app)
    text = utf8_page(client, f"/jobs/{job}")
    assert f'<pre class="json" id="payload">{DEEP}</pre>' in text
    assert f'<pre class="json" id="result">{DEEP}</pre>' in text
    tab = utf8_page(client, f"/jobs/{job}?tab=results")
    assert len(tab.encode()) < 16_000 and 'id="payload"' not in tab
    assert "the result cannot be read as JSON: RecursionError" in tab
    resp = client.get(f"/api/jobs/{job}", headers=BEARER)
    assert resp.status_code == 200 and json.loads(resp.get_data())["payload"] == DEEP


def test_multi_megabyte_texts_show_their_first_64_kb_and_download_whole(app, backend):
    # MariaDB's default max_allowed_packet (16 MiB) bounds what one row may hold there
    log_size = 15_000_000 if backend == "mariadb" else 30_000_000
    payload, result = big(5_000_000, "p"), big(15_000_000, "é")  # é: 2 bytes, 1 character
    line = "a line of the process log ✓\n"
    log = line * (log_size // len(line.encode()))
    job = add_row(app, status="failed", payload="{}", error="E" * 40_000)
    for column, text in (("payload", payload), ("result_payload", result), ("process_logs", log)):
        append(app, job, column, text)
    client = web_client(app)
    text = utf8_page(client, f"/jobs/{job}")  # the Results tab shows the summary alone
    assert len(text.encode()) < PAGE_MAX, len(text.encode())
    for name, stored in (("payload", payload), ("result", result), ("log", log)):
        size = len(stored.encode())
        assert f"The first 64 KB of {size:,} bytes." in text, name
        assert f'href="/jobs/{job}/raw/{name}" download' in text
        shown = html.unescape(text.split(f'id="{name}">', 1)[1].split("</pre>", 1)[0])
        assert stored.startswith(shown)
        assert limits.DISPLAY_MAX_BYTES - 3 <= len(shown.encode()) <= limits.DISPLAY_MAX_BYTES
    assert "40,000 bytes." in text  # the error: under the limit, shown whole
    tab = utf8_page(client, f"/jobs/{job}?tab=results")
    assert len(tab.encode()) < 16_000 and 'id="payload"' not in tab
    assert (f"The result is {len(result.encode()):,} bytes; summaries are made of results "
            "up to 1,000,000 bytes.") in tab
    for name, stored in (("payload", payload), ("result", result), ("log", log)):
        raw = client.get(f"/jobs/{job}/raw/{name}", headers=BEARER)
        assert raw.status_code == 200 and raw.is_streamed
        assert raw.headers["Content-Disposition"] == (
            f'attachment; filename="job-{job}-{name}.{"log" if name == "log" else "json"}"')
        assert (hashlib.sha256(raw.get_data()).hexdigest()
                == hashlib.sha256(stored.encode()).hexdigest())
    api = client.get(f"/api/jobs/{job}", headers=BEARER)
    assert api.status_code == 200
    body = json.loads(api.get_data())
    assert body["cut"]["result_payload"] == {"bytes": len(result.encode()),
                                             "download": f"/jobs/{job}/raw/result"}
    assert set(body["cut"]) == {"payload", "result_payload", "process_logs"}
    assert result.startswith(body["result_payload"])
    assert len(body["result_payload"].encode()) <= limits.API_TEXT_MAX_BYTES


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_download_needs_the_token_and_is_404_for_a_missing_row(app):
    job = add_row(app, status="completed", result_payload='{"ok": true}')
    empty = add_row(app, status="pending")
    client = web_client(app)
    resp = client.get(f"/jobs/{job}/raw/result")
    assert resp.status_code == 401 and 'name="token"' in resp.get_data(as_text=True)
    assert client.get(f"/jobs/{job}/raw/result",
                      headers={"Authorization": "Bearer x"}).status_code == 401
    assert client.get(f"/jobs/{job + 100}/raw/result", headers=BEARER).status_code == 404
    assert client.get(f"/jobs/{job}/raw/secrets", headers=BEARER).status_code == 404
    resp = client.get(f"/jobs/{empty}/raw/result", headers=BEARER)
    assert resp.status_code == 200 and resp.get_data() == b""  # NULL: an empty file
    resp = client.get(f"/jobs/{job}/raw/result", headers=BEARER)
    assert resp.get_data() == b'{"ok": true}' and resp.mimetype == "application/json"
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    page = utf8_page(client, f"/jobs/{job}")
    assert "12 bytes." in page and "The first" not in page  # small: shown whole, size given


def test_a_download_in_progress_does_not_hold_up_writers(app):
    from cronjobs import store

    text = "x" * (3 * store.fields.CHUNK_CHARS)
    job = add_row(app, status="running", payload="{}")
    append(app, job, "process_logs", text)
    other = add_row(app, status="pending")
    chunks = store.fields.field_chunks(app.engine, job, "process_logs")
    first = next(chunks)  # the download has begun and is waiting for its reader
    with app.engine.begin() as conn:  # a worker's write goes through meanwhile
        conn.execute(sa.update(cronjob_queue).where(cronjob_queue.c.id == other)
                     .values(status="running"))
    rest = b"".join(chunks)
    assert first + rest == text.encode()
    assert list(store.fields.field_chunks(app.engine, other, "process_logs")) == []  # NULL
    assert list(store.fields.field_chunks(app.engine, other + 1, "payload")) == []  # no row

"""Every dashboard route that takes a row id answers 404 (never 500) for an id that is
negative, zero, beyond 64 bits, not ASCII digits or not a number, on GET and POST alike;
a form's row id out of range is refused the same way."""

from __future__ import annotations

import pytest

from dashboard_helpers import BEARER, TOKEN, add_row, csrf_of, login, row, web_client

BAD_IDS = ["99999999999999999999", "9223372036854775808", str(2**64), "-1", "-9223372036854775809",
           "0", "00000000000000000000001", "1e3", "0x10", "%EF%BC%91", "١", "1.0", "+1", " 1"]
GET_ROUTES = ["/jobs/{id}", "/jobs/{id}?tab=results", "/api/jobs/{id}", "/jobs/{id}/raw/payload",
              "/jobs/{id}/raw/result", "/jobs/{id}/raw/error", "/jobs/{id}/raw/log"]
POST_ROUTES = ["/jobs/{id}/retry", "/jobs/{id}/cancel"]


@pytest.fixture
def app(make_app):
    return make_app(dashboard_token=TOKEN)


def test_ids_out_of_range_are_404_on_every_route(app):
    job = add_row(app, status="failed", error="boom")
    client = web_client(app)
    for bad in BAD_IDS:
        for route in GET_ROUTES:
            resp = client.get(route.format(id=bad), headers=BEARER)
            assert resp.status_code == 404, (route, bad, resp.status_code)
        for route in POST_ROUTES:
            resp = client.post(route.format(id=bad), headers=BEARER)
            assert resp.status_code == 404, (route, bad, resp.status_code)
    # the largest id is a valid one that merely does not exist
    biggest = str(2**63 - 1)
    for route in GET_ROUTES:
        assert client.get(route.format(id=biggest), headers=BEARER).status_code == 404
    for route in POST_ROUTES:
        assert client.post(route.format(id=biggest), headers=BEARER).status_code == 404
    assert client.get(f"/api/jobs/{biggest}", headers=BEARER).get_json() == {
        "error": f"no job with id {biggest}"}
    assert row(app, job)["status"] == "failed"  # nothing changed
    assert client.get(f"/jobs/{job}", headers=BEARER).status_code == 200


def test_a_logged_in_post_with_a_bad_id_is_404_and_the_group_retry_form_too(app):
    job = add_row(app, status="failed", error="boom")
    client = web_client(app)
    csrf = login(client)
    for bad in ("99999999999999999999", "-1", "0"):
        assert client.post(f"/jobs/{bad}/retry", data={"csrf_token": csrf}).status_code == 404
        resp = client.post("/failed/retry", data={"csrf_token": csrf, "job": bad})
        assert resp.status_code == 404, (bad, resp.status_code)
    assert client.post("/failed/retry", data={"csrf_token": csrf, "job": "x"}).status_code == 400
    assert row(app, job)["status"] == "failed"
    assert csrf_of(client.get("/failed").get_data(as_text=True))

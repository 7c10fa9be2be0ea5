"""After logging in, `next` leads only to a path of this dashboard: hostile values
(control characters, backslashes, `//`, encoded slashes, absolute and `javascript:` URLs)
fall back to the home page, with or without a proxy's URL prefix."""

from __future__ import annotations

import pytest
from werkzeug.test import TestResponse

from cronjobs.app import App
from cronjobs.web import create_app
from cronjobs.web.auth import safe_next
from dashboard_helpers import TOKEN, csrf_of, web_client

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

HOSTILE = [
    "/\t/evil.example/phish",   # browsers drop the tab: //evil.example
    "/\n/evil.example",
    "/\r\n/evil.example",
    "\t//evil.example",
    " //evil.example",
    "//evil.example",
    "///evil.example",
    "//evil.example/%2F..",
    "/\\evil.example",
    "\\/evil.example",
    "\\\\evil.example",
    "/%2F/evil.example",
    "/%2f%2fevil.example",
    "%2F%2Fevil.example",
    "/%252F/evil.example",       # encoded twice
    "/%5Cevil.example",
    "/%5cevil.example",
    "/%09/evil.example",
    "/%0a/evil.example",
    "/%00/evil.example",
    "/\x00/evil.example",
    "/\x7f/evil.example",
    "/\u3000/evil.example",     # a non-ASCII space
    "https://evil.example/",
    "http:evil.example",
    "http:/evil.example",
    "HTTPS://evil.example",
    "//evil.example:443@x",
    "javascript:alert(1)",
    "JavaScript:alert(document.cookie)",
    "java\tscript:alert(1)",
    "data:text/html,<script>alert(1)</script>",
    "evil.example",
    "jobs/1",
    "",
    "   ",
    "/..//evil.example",         # under a mount: /jobs/..//evil.example is //evil.example
    "/../../logout",             # the host's /logout
    "/%2e%2e/%2e%2e/logout",
    "/%2E%2E//evil.example",
    "/%252e%252e/logout",
    "/queue/../../logout",
    "/./queue",
    "/queue/.",
]
def log_in(app: App, target: str, prefix: str) -> tuple[str, TestResponse]:
    """GET the login form with `?next=target`, POST it with `next=target`; returns
    (the form's HTML, the POST's response). Cookies are carried by hand: under a prefix
    the session cookie's path is the prefix, which the test client's paths lack."""
    client = create_app(app).test_client(use_cookies=False)
    headers = {"X-Forwarded-Prefix": prefix} if prefix else {}
    form = client.get("/login", query_string={"next": target}, headers=headers)
    cookie = form.headers["Set-Cookie"].split(";", 1)[0]
    html = form.get_data(as_text=True)
    resp = client.post("/login", headers={**headers, "Cookie": cookie}, data={
        "token": TOKEN, "next": target, "csrf_token": csrf_of(html)})
    return html, resp


SAFE = ["/", "/jobs/5", "/jobs/5?tab=results", "/queue?status=failed&type=a.b.execute",
        "/queue?title=a%2Fb", "/failed"]


@pytest.mark.parametrize("target", HOSTILE, ids=repr)
def test_hostile_next_falls_back_to_the_home_page(make_app, target):
    assert safe_next(target) == "/"
    app = make_app(dashboard_token=TOKEN, dashboard_proxy=1)
    for prefix in ("", "/cronjobs"):
        form, resp = log_in(app, target, prefix)
        assert 'name="next" value="/"' in form
        assert resp.status_code == 303 and resp.headers["Location"] == prefix + "/", (
            prefix, resp.headers.get("Location"))


def test_paths_of_the_dashboard_are_kept(make_app):
    app = make_app(dashboard_token=TOKEN, dashboard_proxy=1)
    for target in SAFE:
        assert safe_next(target) == target
        for prefix in ("", "/cronjobs"):
            _form, resp = log_in(app, target, prefix)
            assert resp.status_code == 303 and resp.headers["Location"] == prefix + target


def test_the_login_page_of_a_protected_page_returns_there(make_app):
    app = make_app(dashboard_token=TOKEN)
    client = web_client(app)
    page = client.get("/queue?status=failed").get_data(as_text=True)
    assert 'name="next" value="/queue?status=failed"' in page
    resp = client.post("/login", data={"token": TOKEN, "next": "/queue?status=failed",
                                       "csrf_token": csrf_of(page)})
    assert resp.headers["Location"] == "/queue?status=failed"


def test_a_next_with_the_mounts_path_loses_it_once(make_app):
    app = make_app(dashboard_token=TOKEN, dashboard_proxy=1)
    for target, lands in [("/cronjobs/queue?status=failed", "/cronjobs/queue?status=failed"),
                          ("/cronjobs/failed", "/cronjobs/failed"),
                          ("/cronjobs/cronjobs/queue", "/cronjobs/cronjobs/queue"),
                          ("/cronjobs", "/cronjobs/cronjobs"),
                          ("/jobs/5", "/cronjobs/jobs/5")]:
        _form, resp = log_in(app, target, "/cronjobs")
        assert (resp.status_code, resp.headers["Location"]) == (303, lands), target
    web = create_app(app)
    with web.test_request_context("/login", environ_base={"SCRIPT_NAME": "/jobs"}):
        assert safe_next("/jobs/queue", "/jobs") == "/queue"
        assert safe_next("/jobs/5", "/jobs") == "/jobs/5"  # a job's page as it is
        assert safe_next("/jobs/jobs/5", "/jobs") == "/jobs/5"
        assert safe_next("/jobs/..//evil.example", "/jobs") == "/"

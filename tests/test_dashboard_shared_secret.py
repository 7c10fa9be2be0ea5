"""Without a configured token, dashboards on one database print the same generated token
(kept in the database) and accept each other's session cookies and CSRF tokens; a
restarted dashboard keeps it."""

from __future__ import annotations

import sqlalchemy as sa

from conftest import cli_env
from cronjobs.store.models import cronjob_runtime, cronjob_secret
from dashboard_helpers import csrf_of
from dashboard_process import Dashboard, cookie_pair, request


def log_in(base: str, token: str) -> str:
    """Log in through the form of the dashboard at `base`; returns the session cookie."""
    form = request(base + "/login?next=/queue")
    assert form.status == 200
    cookie = cookie_pair(form.cookies()["cronjobs_session"])
    done = request(base + "/login", "POST", cookie=cookie,
                   data={"token": token, "csrf_token": csrf_of(form.text), "next": "/queue"})
    assert done.status == 303 and done.headers["Location"] == "/queue", done.text
    return cookie_pair(done.cookies()["cronjobs_session"])


def test_two_dashboards_on_one_database_share_the_generated_token(db_url, tmp_path):
    env = cli_env(db_url)  # no CRONJOBS_DASHBOARD_TOKEN: each would once have made its own
    first, second = Dashboard(env, tmp_path, "a"), Dashboard(env, tmp_path, "b")  # racing
    third = None
    try:
        first.wait_ready(), second.wait_ready()
        assert first.token and len(first.token) >= 20 and second.token == first.token
        cookie = log_in(first.url, first.token)
        page = request(second.url + "/queue", cookie=cookie)  # the other process
        assert page.status == 200 and "<h1>Queue</h1>" in page.text, page.text[:500]
        # an action on the second with the CSRF token of a page of the first
        home = request(first.url + "/", cookie=cookie)  # the session gains a CSRF token
        cookie, csrf = cookie_pair(home.cookies()["cronjobs_session"]), csrf_of(home.text)
        switched = request(second.url + "/tasks/test-count/enabled", "POST", cookie=cookie,
                           data={"enabled": "0", "csrf_token": csrf})
        assert switched.status == 303 and switched.headers["Location"] == "/tasks"
        engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
        with engine.connect() as conn:
            enabled = conn.execute(sa.select(cronjob_runtime.c.enabled)
                                   .where(cronjob_runtime.c.task == "test-count")).scalar_one()
            kept = conn.execute(sa.select(cronjob_secret.c.value)).scalars().all()
        engine.dispose()
        assert enabled is False and kept == [first.token]
        # a wrong cookie is still refused, by both
        for base in (first.url, second.url):
            assert request(base + "/queue", cookie="cronjobs_session=forged").status == 401
        assert first.stop() == 0
        third = Dashboard(env, tmp_path, "c").wait_ready()  # restarted: the same token
        assert third.token == first.token
        assert request(third.url + "/queue", cookie=cookie).status == 200
    finally:
        for proc in (first, second, third):
            if proc is not None and proc.proc.poll() is None:
                proc.stop()

"""The dashboard behind a reverse proxy that serves it under `/cronjobs/`: with
CRONJOBS_DASHBOARD_PROXY=1 every href, src, form action and Location header carries the
prefix (Chromium through a real HTTPS proxy, and a plain HTTP client), the session cookie
is Secure exactly when the proxy reports https; without the setting the X-Forwarded-*
headers are ignored."""

from __future__ import annotations

import ipaddress
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from playwright.sync_api import Page

from conftest import cli_env
from cronjobs.store.models import cronjob_queue
from dashboard_helpers import BEARER, TOKEN, add_row, csrf_of, web_client
from dashboard_process import Dashboard, PrefixProxy, cookie_pair, request

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("backend", ["sqlite"], indirect=True)]
PREFIX = "/cronjobs"
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
URL_ATTR = re.compile(r'\b(?:href|src|action)="([^"]*)"')
LINKS = ("a[href]", "link[href]", "script[src]", "img[src]", "form[action]")


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (PEM files)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1)).not_valid_after(now + timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


def insert(db_url: str, **values: object) -> int:
    now = datetime.now(UTC).replace(tzinfo=None)
    row = {"type": "test.summary.execute", "queue": "default", "status": "failed",
           "priority": 5, "payload": "{}", "attempts": 1, "max_attempts": 1,
           "created_at": now, "updated_at": now, "finished_at": now, **values}
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        job = conn.execute(cronjob_queue.insert().values(**row)).inserted_primary_key[0]
    engine.dispose()
    return job


def urls_in(html: str) -> list[str]:
    return URL_ATTR.findall(html)


def prefixed(urls: list[str]) -> list[str]:
    """The URLs that do not start with the prefix (should be none)."""
    return [u for u in urls if not u.startswith(PREFIX + "/")]


@pytest.fixture
def behind_proxy(db_url, tmp_path):
    """A real `cronjobs dashboard` with CRONJOBS_DASHBOARD_PROXY=1, rows to show, and a
    factory of proxies in front of it: `behind_proxy(tls=True) -> (proxy, ids)`."""
    env = cli_env(db_url, CRONJOBS_DASHBOARD_TOKEN=TOKEN, CRONJOBS_DASHBOARD_PROXY="1")
    parent = insert(db_url, type="test.count.discover", status="completed")
    ids = {"parent": parent,
           "failed": insert(db_url, parent_id=parent, error="boom", title="failed child"),
           "pending": insert(db_url, status="pending", finished_at=None, parent_id=parent),
           "done": insert(db_url, status="completed", result_payload='{"text": "ok"}'),
           "failed2": insert(db_url, error="another")}
    dashboard = Dashboard(env, tmp_path).wait_ready()
    proxies: list[PrefixProxy] = []

    def start(tls: bool) -> tuple[PrefixProxy, dict]:
        proxy = PrefixProxy(dashboard.url, PREFIX, self_signed(tmp_path) if tls else None)
        proxies.append(proxy)
        return proxy, ids

    yield start
    for proxy in proxies:
        proxy.close()
    assert dashboard.stop() == 0


def page_urls(page: Page) -> list[str]:
    """Every href, src and form action of the page, as written in it."""
    found = []
    for selector in LINKS:
        attr = "action" if selector.startswith("form") else ("src" if "src" in selector else "href")
        found += page.eval_on_selector_all(selector,
                                           f"els => els.map(e => e.getAttribute('{attr}'))")
    return found


def test_login_and_navigation_in_chromium_stay_under_the_prefix(behind_proxy, tmp_path):
    from playwright.sync_api import sync_playwright

    proxy, ids = behind_proxy(tls=True)
    base = proxy.url
    with sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=FLAGS,
            ignore_https_errors=True)
        try:
            page = browser.new_page()
            seen_urls: list[str] = []

            def visit_check() -> None:
                urls = page_urls(page)
                assert urls and prefixed(urls) == [], (page.url, prefixed(urls))
                seen_urls.extend(urls)
                sheet = page.evaluate("document.styleSheets.length"
                                      " && document.styleSheets[0].cssRules.length")
                assert sheet > 0, page.url  # the stylesheet loaded through the proxy

            page.goto(base + f"/jobs/{ids['failed']}")  # not logged in: the login form
            assert page.locator("input[name=token]").is_visible()
            visit_check()
            page.fill("input[name=token]", TOKEN)
            page.click("form.login button")
            page.wait_for_url(base + f"/jobs/{ids['failed']}")  # back where it started
            visit_check()
            cookie = next(c for c in browser.cookies() if c["name"] == "cronjobs_session")
            assert cookie["secure"] and cookie["httpOnly"] and cookie["path"] == PREFIX
            for nav, heading in (("Queue", "Queue"), ("Workers", "Workers"), ("Failed", "Failed"),
                                 ("Tasks", "Tasks")):
                page.click(f"header nav a:text-is('{nav}')")
                page.wait_for_url(re.compile(re.escape(base) + "/.*"))
                assert page.locator("h1").inner_text() == heading
                visit_check()
            page.click("a.brand")
            page.wait_for_url(base + "/")
            page.click("header nav a:text-is('Queue')")
            page.click(f"td a:text-is('#{ids['parent']}')")
            page.wait_for_url(base + f"/jobs/{ids['parent']}")
            visit_check()
            page.click("#results-tab")
            page.wait_for_url(base + f"/jobs/{ids['parent']}?tab=results")
            page.click("a[lang=tr]")
            page.wait_for_url(base + f"/jobs/{ids['parent']}?tab=results&lang=tr")
            assert page.locator("header nav a").nth(1).inner_text() == "Görevler"
            page.click("a[lang=en]")
            page.goto(base + f"/jobs/{ids['failed']}")
            page.click("button.retry")  # a POST form; its redirect keeps the prefix
            page.wait_for_url(base + f"/jobs/{ids['failed']}")
            assert page.locator("h1 .status").inner_text() == "pending"
            page.click("form.logout button")
            page.wait_for_url(base + "/login")
            visit_check()
        finally:
            browser.close()
    outside = [p for p in proxy.seen if not p.startswith(PREFIX + "/") and p != "/favicon.ico"]
    assert outside == [] and f"{PREFIX}/static/style.css" in proxy.seen
    assert len(seen_urls) > 50


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_every_url_and_redirect_carries_the_prefix(behind_proxy, tls):
    proxy, ids = behind_proxy(tls=tls)
    base = proxy.url
    form = request(base + "/login")
    assert prefixed(urls_in(form.text)) == []
    set_cookie = form.cookies()["cronjobs_session"]
    assert ("; Secure" in set_cookie) is tls and f"Path={PREFIX}" in set_cookie
    target = f"/jobs/{ids['done']}?tab=results"
    done = request(base + "/login", "POST", cookie=cookie_pair(set_cookie), data={
        "token": TOKEN, "csrf_token": csrf_of(form.text), "next": target},
        headers={"Referer": base + "/login"})
    assert done.status == 303 and done.headers["Location"] == PREFIX + target
    cookie = cookie_pair(done.cookies()["cronjobs_session"])
    assert ("; Secure" in done.cookies()["cronjobs_session"]) is tls
    pages = ["/", "/tasks", "/tasks/test-count", "/queue", f"/queue?parent={ids['parent']}",
             "/queue?limit=1", "/workers",
             "/failed", f"/jobs/{ids['parent']}", f"/jobs/{ids['done']}?tab=results",
             f"/jobs/{ids['failed']}", f"/jobs/{ids['pending']}", "/no/such/page", "/jobs/0"]
    for path in pages:
        answer = request(base + path, cookie=cookie)
        assert answer.status in (200, 404), (path, answer.status)
        urls = urls_in(answer.text)
        assert urls and prefixed(urls) == [], (path, prefixed(urls))
    assert f'href="{PREFIX}/jobs/{ids["done"]}/raw/result"' in request(
        base + f"/jobs/{ids['done']}", cookie=cookie).text

    def post(path: str, **data: str) -> str:
        answer = request(base + path, "POST", headers=BEARER, data=data)
        assert answer.status == 303, (path, answer.status, answer.text[:300])
        return answer.headers["Location"]

    assert post(f"/jobs/{ids['pending']}/cancel") == f"{PREFIX}/jobs/{ids['pending']}"
    assert post(f"/jobs/{ids['failed']}/retry") == f"{PREFIX}/jobs/{ids['failed']}"
    assert post("/tasks/test-count/enabled", enabled="1") == f"{PREFIX}/tasks"
    assert re.fullmatch(re.escape(PREFIX) + r"/jobs/\d+", post("/tasks/test-count/run"))
    assert re.fullmatch(re.escape(PREFIX) + r"/operations/\d+",
                        post("/failed/retry", job=str(ids["failed2"])))
    home = request(base + "/", cookie=cookie)  # the session gains its CSRF token
    cookie = cookie_pair(home.cookies().get("cronjobs_session", cookie))
    logout = request(base + "/logout", "POST", cookie=cookie, headers={"Referer": base + "/"},
                     data={"csrf_token": csrf_of(home.text)})
    assert logout.status == 303 and logout.headers["Location"] == f"{PREFIX}/login"
    assert request(proxy.origin + "/login").status == 404  # nothing outside the prefix


def test_without_the_setting_forwarded_headers_are_ignored(make_app):
    app = make_app(dashboard_token=TOKEN)
    job = add_row(app, status="failed", error="boom")
    client = web_client(app)
    forged = {**BEARER, "X-Forwarded-Prefix": "/elsewhere", "X-Forwarded-Proto": "https",
              "X-Forwarded-Host": "evil.example"}
    text = client.get(f"/jobs/{job}", headers=forged).get_data(as_text=True)
    assert f'href="/jobs/{job}?tab=results"' in text and "/elsewhere" not in text
    resp = client.post(f"/jobs/{job}/retry", headers=forged)
    assert resp.headers["Location"] == f"/jobs/{job}"
    login = web_client(app).get("/login", headers={"X-Forwarded-Proto": "https"})
    assert "Secure" not in login.headers["Set-Cookie"] and "Path=/;" in login.headers["Set-Cookie"]

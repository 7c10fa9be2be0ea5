"""Smoke test of `make run` from the repository root: migrate, serve, real uptime work, clean stop.

`make run` runs `cronjobs migrate` and then `exec cronjobs serve`, so the serve process is
make's child. The test points it at a SQLite file in a temporary directory, lets it pick a
free port, waits for the built-in uptime task (which checks serve's own /health when no
URL is configured) to complete, then stops serve with SIGTERM and expects exit status 0
from make (which passes serve's status on).
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow

URL_LINE = re.compile(r"cronjobs is running: dashboard at (http://127\.0\.0\.1:\d+)/")
TOKEN_LINE = re.compile(r"log in at http://127\.0\.0\.1:\d+/login with the token (\S+)")


def _children(pid: int) -> list[int]:
    """Pids whose parent is `pid` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces, so split after the last ')'.
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _fetch(url: str, token: str | None = None) -> tuple[int, str, str]:
    request = urllib.request.Request(
        url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()


def test_make_run_serves_dashboard_does_uptime_work_and_stops_cleanly(tmp_path: Path) -> None:
    assert (ROOT / ".venv" / ".installed").exists(), "run `make test` (it builds the venv)"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CRONJOBS_") and k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env.update(CRONJOBS_DATABASE_URL=f"sqlite:///{tmp_path / 'run.db'}",
               CRONJOBS_DASHBOARD_PORT="0")
    stderr = open(tmp_path / "stderr.log", "wb")
    make = subprocess.Popen(["make", "--no-print-directory", "-C", str(ROOT), "run"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=stderr, text=True, start_new_session=True)
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:  # keeps reading so serve never blocks on a full pipe
        for line in make.stdout:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    output: list[str] = []

    def log() -> str:
        return ("".join(output) + "\n--- stderr ---\n"
                + (tmp_path / "stderr.log").read_text()[-4000:])

    try:
        # 1. the URL line (make may first reinstall when pyproject.toml changed)
        base = None
        deadline = time.monotonic() + 120
        while base is None and time.monotonic() < deadline:
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                continue
            assert line is not None, "make run ended before serving:\n" + log()
            output.append(line)
            if m := URL_LINE.search(line):
                base = m[1]
        assert base, "no dashboard URL line within 120 s:\n" + log()
        # 1b. the next line says how to log in: a token generated for this run
        token = None
        while token is None and time.monotonic() < deadline:
            line = lines.get(timeout=10)
            assert line is not None, log()
            output.append(line)
            if m := TOKEN_LINE.search(line):
                token = m[1]
        assert token and len(token) >= 20, log()
        try:
            _fetch(base + "/api/jobs")
            raise AssertionError("the API answered without the token")
        except urllib.error.HTTPError as exc:
            assert exc.code == 401
        assert any("database at revision" in line for line in output), log()  # migrate ran

        # 2. /health
        status, ctype, body = _fetch(base + "/health")
        assert status == 200 and "json" in ctype
        assert json.loads(body) in ({"status": "ok"}, {"status": "warn"})  # only the status

        # 3. the uptime task fires at the first tick: its execute row completes with a 200
        done = None
        deadline = time.monotonic() + 150
        while done is None and time.monotonic() < deadline:
            _, _, body = _fetch(base + "/api/jobs?type=http.uptime.execute", token)
            for job in json.loads(body):
                assert job["type"] == "http.uptime.execute"
                assert job["status"] in ("pending", "running", "completed"), job
                if job["status"] == "completed":
                    done = job
            if done is None:
                assert make.poll() is None, "make run exited early:\n" + log()
                time.sleep(0.5)
        assert done, "no completed http.uptime.execute row within 150 s:\n" + log()
        _, _, body = _fetch(f"{base}/api/jobs/{done['id']}", token)  # the whole row
        done = json.loads(body)
        result = json.loads(done["result_payload"])
        assert result["status_code"] == 200, result
        assert isinstance(result["latency_ms"], (int, float)) and result["latency_ms"] >= 0
        assert result["url"] == base + "/health" and result["error"] is None
        assert done["parent_id"], done  # dispatched by the http.uptime.discover row
        _, _, body = _fetch(f"{base}/api/jobs/{done['parent_id']}", token)
        parent = json.loads(body)
        assert (parent["type"], parent["status"]) == ("http.uptime.discover", "completed")

        # 4. the Tasks page lists the task
        status, ctype, page = _fetch(base + "/tasks", token)
        assert status == 200 and ctype.startswith("text/html")
        assert "<table" in page and 'data-task="http-uptime"' in page

        # 4b. a job dispatched by another process (the CLI) is delivered within seconds:
        # the in-process broker cannot reach it, the embedded sweep (every 2 s) does
        cli = subprocess.run([str(ROOT / ".venv" / "bin" / "cronjobs"), "dispatch",
                              "http.uptime.execute", "--payload",
                              json.dumps({"url": base + "/health"})],
                             env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert cli.returncode == 0, cli.stderr
        job_id = int(cli.stdout)
        sent = time.monotonic()
        while time.monotonic() - sent < 10:
            _, _, body = _fetch(f"{base}/api/jobs/{job_id}", token)
            if json.loads(body)["status"] == "completed":
                break
            time.sleep(0.2)
        assert json.loads(body)["status"] == "completed", body
        assert time.monotonic() - sent < 8, "delivered by the embedded sweep within seconds"

        # 5. SIGTERM to serve (make's child, thanks to `exec`): make exits with serve's 0
        serve = [pid for pid in _children(make.pid) if "cronjobs" in _cmdline(pid)]
        assert len(serve) == 1, [(p, _cmdline(p)) for p in _children(make.pid)]
        assert "serve" in _cmdline(serve[0])
        os.kill(serve[0], signal.SIGTERM)
        try:
            code = make.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("make run did not stop within 30 s of SIGTERM:\n" + log())
        assert code == 0, f"exit status {code}:\n" + log()
        assert "stopping" in (tmp_path / "stderr.log").read_text()
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
            make.wait()
        reader.join(timeout=10)
        make.stdout.close()
        stderr.close()

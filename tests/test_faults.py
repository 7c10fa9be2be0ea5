"""Fault injection with real processes: kill -9 of a worker, Redis restarted and
flushed, MariaDB restarted, recycling under a real supervisord. Each run prints one line:
jobs, faults injected, lost, duplicated-concurrent, stuck — and asserts the last three are 0.

Execution modes: the runs use job processes (the default `--isolation handler`
with a process handler); Redis restarted and flushed also run with `--isolation process`,
and kill -9 also runs with thread-isolated jobs (`ISOLATION = "thread"`: the job dies
with its worker).

Servers that a fault stops are the test's own (Redis on another port, a MariaDB instance in
a temporary folder), so the shared servers are never disturbed. `make test-faults` runs
only this file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa

import registry
from conftest import REDIS, SAMPLE_HANDLERS, cli_env, effects, new_database
from cronjobs import queue
from cronjobs.app import App, use
from cronjobs.config import Settings
from cronjobs.migrate import upgrade
from cronjobs.store.models import cronjob_queue
from test_worker_e2e import _tail

pytestmark = [pytest.mark.slow, pytest.mark.faults]
SLOW = "test.slow.execute"
THREAD_SLOW = "test.threadslow.execute"
THREAD_HANDLERS = str(Path(__file__).parent / "thread_handlers")


# -- servers of our own --------------------------------------------------------------------

def _wait(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


class OwnRedis:
    """redis-server on 127.0.0.1:6390 that keeps nothing on disk (a restart empties it)."""

    port = 6390

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind",
                                      "127.0.0.1", "--save", "", "--appendonly", "no",
                                      "--dir", str(self.folder)], stdout=subprocess.DEVNULL)
        _wait(self.ping, 20, "redis to start")

    def ping(self) -> bool:
        out = subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True,
                             text=True)
        return out.stdout.strip() == "PONG"

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(20)

    def flush(self) -> None:
        subprocess.run(["redis-cli", "-p", str(self.port), "flushall"], check=True,
                       capture_output=True)


class OwnMariaDB:
    """A MariaDB server of this test in a temporary folder, on 127.0.0.1:3307."""

    port = 3307

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.proc: subprocess.Popen | None = None
        subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={folder}/data",
                        "--user=root", "--auth-root-authentication-method=normal",
                        "--skip-test-db"], check=True, capture_output=True)

    def url(self, db: str) -> str:
        return f"mysql+pymysql://root@127.0.0.1:{self.port}/{db}?charset=utf8mb4"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["mariadbd", "--no-defaults", f"--datadir={self.folder}/data", f"--port={self.port}",
             "--bind-address=127.0.0.1", f"--socket={self.folder}/sock", "--user=root",
             f"--log-error={self.folder}/err.log", "--innodb-buffer-pool-size=64M"])
        _wait(self.ping, 60, "mariadb to start")

    def ping(self) -> bool:
        return subprocess.run(["mariadb", "-uroot", "-h127.0.0.1", f"-P{self.port}", "-e",
                               "select 1"], capture_output=True).returncode == 0

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(60)


@pytest.fixture
def own_redis(tmp_path):
    server = OwnRedis(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def own_mariadb(tmp_path):
    server = OwnMariaDB(tmp_path / "mariadb")
    server.start()
    yield server
    server.stop()


# -- the system under test -----------------------------------------------------------------

_APPS: list[App] = []


@pytest.fixture(autouse=True)
def _close_apps():
    """Close every App a test made (its engine and its broker's Redis connections)."""
    yield
    while _APPS:
        _APPS.pop().close()


def make_system(db_url: str, broker_url: str, namespace: str) -> App:
    """Migrated database with `test_effects`, and an App on it (installed as current;
    closed after the test)."""
    settings = Settings(database_url=db_url, broker_url=broker_url, broker_namespace=namespace,
                        handler_paths=(SAMPLE_HANDLERS, THREAD_HANDLERS))
    registry.reset()
    registry.load(settings)
    app = App(settings, handlers=registry)
    _APPS.append(app)
    upgrade(app.engine)
    effects.metadata.create_all(app.engine)
    use(app)
    return app


@pytest.fixture
def mariadb_database(tmp_path):
    """A fresh database on the shared MariaDB (dropped afterwards)."""
    url, drop = new_database("mariadb", tmp_path)
    yield url
    drop()
    registry.reset()
    use(None)


FAULT_ENV = {"CRONJOBS_LEASE_GRACE_SECONDS": "2", "CRONJOBS_SWEEP_AFTER_SECONDS": "3",
             "CRONJOBS_SWEEP_INTERVAL_SECONDS": "1", "CRONJOBS_LOG_LEVEL": "WARNING"}


@contextmanager
def workers(db_url: str, broker_url: str, namespace: str, log: Path, count: int = 1,
            threads: int = 4, isolation: str = "handler"):
    """`count` worker processes (each its own session); all stopped at the end."""
    procs: list[subprocess.Popen] = []
    env = cli_env(db_url, namespace, broker_url=broker_url, **FAULT_ENV,
                  CRONJOBS_HANDLER_PATHS=f"{SAMPLE_HANDLERS}:{THREAD_HANDLERS}")

    def start() -> subprocess.Popen:
        out = open(log, "ab")
        proc = subprocess.Popen([sys.executable, "-m", "cronjobs", "worker", "--queues",
                                 "default", "--threads", str(threads), "--isolation",
                                 isolation], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        procs.append(proc)
        return proc

    for _ in range(count):
        start()
    try:
        yield procs, start
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def counts(app: App) -> dict[str, int]:
    q = cronjob_queue
    with app.engine.connect() as conn:
        return dict(conn.execute(sa.select(q.c.status, sa.func.count()).group_by(q.c.status)).all())


def wait_all_done(app: App, total: int, timeout: float, log: Path, recover: bool = False) -> None:
    """Poll until every row is completed; with `recover`, act as the every-minute
    recover-stale task would (lease expired -> back to pending)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = counts(app)
            if last.get("completed", 0) == total:
                return
            if recover:
                queue.recover_stale(0, app=app)
        except sa.exc.OperationalError:
            pass  # our own database may be restarting
        time.sleep(1)
    raise AssertionError(f"not all {total} jobs completed in {timeout} s: {last}\n{_tail(log)}")


def report(app: App, name: str, jobs: int, faults: str) -> tuple[int, int, int]:
    """Print and return (lost, duplicated-concurrent, stuck) for the run."""
    c = counts(app)
    stuck = c.get("running", 0)
    with app.engine.connect() as conn:
        ids = {r[0] for r in conn.execute(sa.select(cronjob_queue.c.id))}
        runs = conn.execute(sa.select(effects.c.job_id, effects.c.started, effects.c.ended)).all()
    by_job = defaultdict(list)
    for job_id, started, ended in runs:
        by_job[job_id].append((started, ended))
    lost = jobs - len(ids & set(by_job)) + (jobs - len(ids))
    overlapping = 0
    for spans in by_job.values():
        spans.sort()
        overlapping += sum(1 for a, b in zip(spans, spans[1:], strict=False) if b[0] < a[1])
    again = sum(len(s) - 1 for s in by_job.values())
    print(f"\nfault run {name}: jobs={jobs} faults={faults} lost={lost} "
          f"duplicated-concurrent={overlapping} stuck={stuck} (run again after a fault: {again})")
    return lost, overlapping, stuck


def dispatch_slow(app: App, n: int, seconds: float, job_type: str = SLOW) -> None:
    for start in range(0, n, 500):
        queue.dispatch_many([{"type": job_type, "payload": {"seconds": seconds}}] *
                            min(500, n - start), app=app)


def wait_completed_at_least(app: App, n: int, timeout: float) -> None:
    _wait(lambda: counts(app).get("completed", 0) >= n, timeout, f"{n} completed jobs")


# -- the runs ------------------------------------------------------------------------------

def test_kill_9_of_a_worker_in_the_middle(mariadb_database, own_redis, tmp_path):
    """2,000 jobs of 1 s, 2 workers x 4 threads; one worker is killed with SIGKILL and
    started again. Every row ends completed; no job ran twice at the same time."""
    ns = "cjf-" + uuid.uuid4().hex[:8]
    app = make_system(mariadb_database, own_redis.url, ns)
    log = tmp_path / "workers.log"
    dispatch_slow(app, 2000, 1.0)
    with workers(mariadb_database, own_redis.url, ns, log, count=2) as (procs, start):
        wait_completed_at_least(app, 400, 180)
        victim = procs[0]
        os.killpg(victim.pid, signal.SIGKILL)  # the worker and its job processes
        victim.wait(10)
        start()
        wait_all_done(app, 2000, 420, log, recover=True)
    assert report(app, "kill-9", 2000, "1 SIGKILL") == (0, 0, 0)


def test_kill_9_of_a_worker_running_thread_jobs(mariadb_database, own_redis, tmp_path):
    """600 thread-isolated jobs of 0.3 s, 2 workers x 4 threads; one worker (and the job
    threads in it) is killed with SIGKILL and started again. Every row ends completed; no
    job ran twice at the same time."""
    ns = "cjf-" + uuid.uuid4().hex[:8]
    app = make_system(mariadb_database, own_redis.url, ns)
    log = tmp_path / "workers.log"
    dispatch_slow(app, 600, 0.3, THREAD_SLOW)
    with workers(mariadb_database, own_redis.url, ns, log, count=2) as (procs, start):
        wait_completed_at_least(app, 150, 120)
        victim = procs[0]
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait(10)
        start()
        wait_all_done(app, 600, 240, log, recover=True)
    assert report(app, "kill-9-thread-jobs", 600, "1 SIGKILL") == (0, 0, 0)


@pytest.mark.parametrize("isolation", ["handler", "process"])
@pytest.mark.parametrize("fault", ["restart", "flush"])
def test_redis_restarted_or_flushed(mariadb_database, own_redis, tmp_path, fault, isolation):
    ns = "cjf-" + uuid.uuid4().hex[:8]
    app = make_system(mariadb_database, own_redis.url, ns)
    log = tmp_path / "workers.log"
    dispatch_slow(app, 1000, 0.02)
    with workers(mariadb_database, own_redis.url, ns, log, count=1,
                 isolation=isolation) as (procs, _):
        wait_completed_at_least(app, 250, 120)
        if fault == "restart":
            own_redis.stop()
            time.sleep(2)
            own_redis.start()
        else:
            own_redis.flush()
        wait_all_done(app, 1000, 180, log)
        assert procs[0].poll() is None, "the worker survived"
    assert procs[0].returncode == 0, _tail(log)
    assert report(app, f"redis-{fault}-{isolation}", 1000, f"1 redis {fault}") == (0, 0, 0)


def test_mariadb_restarted(own_mariadb, own_redis, tmp_path):
    ns = "cjf-" + uuid.uuid4().hex[:8]
    engine = sa.create_engine(own_mariadb.url("mysql"), poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE DATABASE cjf CHARACTER SET utf8mb4")
    url = own_mariadb.url("cjf")
    app = make_system(url, own_redis.url, ns)
    log = tmp_path / "workers.log"
    dispatch_slow(app, 1000, 0.02)
    try:
        with workers(url, own_redis.url, ns, log, count=1) as (procs, _):
            wait_completed_at_least(app, 250, 120)
            own_mariadb.stop()
            time.sleep(3)
            own_mariadb.start()
            wait_all_done(app, 1000, 240, log, recover=True)
            assert procs[0].poll() is None, "the worker survived"
        assert procs[0].returncode == 0, _tail(log)
        assert report(app, "mariadb-restart", 1000, "1 mariadb restart") == (0, 0, 0)
    finally:
        app.close()
        registry.reset()
        use(None)


def test_max_jobs_under_supervisord(mariadb_database, tmp_path):
    """--max-jobs 50 under a real supervisord: each worker exits 0 after 50 jobs, supervisor
    logs it as expected and starts a new one; all 500 jobs complete. (`startsecs=0`: a
    worker that starts and runs its 50 jobs within a second is a success too.)"""
    ns = "cjf-" + uuid.uuid4().hex[:8]
    app = make_system(mariadb_database, REDIS, ns)
    dispatch_slow(app, 500, 0.01)
    env = cli_env(mariadb_database, ns, broker_url=REDIS, **FAULT_ENV)
    environment = ",".join(f'{k}="{v}"' for k, v in env.items()
                           if k.startswith("CRONJOBS_") or k in ("PATH", "HOME"))
    worker = (f"{sys.executable} -m cronjobs worker --queues default --threads 2 "
              "--max-jobs 50 --shutdown-timeout 10")
    conf = tmp_path / "supervisord.conf"
    conf.write_text(f"""
[supervisord]
logfile={tmp_path}/supervisord.log
pidfile={tmp_path}/supervisord.pid
childlogdir={tmp_path}
nodaemon=false
[unix_http_server]
file={tmp_path}/supervisor.sock
[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface
[supervisorctl]
serverurl=unix://{tmp_path}/supervisor.sock
[program:cronjobs-worker-default]
command={worker}
directory={Path.cwd()}
environment={environment}
autostart=true
autorestart=true
exitcodes=0
startsecs=0
stopsignal=TERM
stopwaitsecs=30
redirect_stderr=true
stdout_logfile={tmp_path}/worker.log
""")
    subprocess.run(["supervisord", "-c", str(conf)], check=True)
    try:
        wait_all_done(app, 500, 300, tmp_path / "worker.log")
    finally:
        subprocess.run(["supervisorctl", "-c", str(conf), "shutdown"], capture_output=True)
        _wait(lambda: not Path(f"{tmp_path}/supervisord.pid").exists(), 60, "supervisord to end")
    sup_log = (tmp_path / "supervisord.log").read_text()
    expected = sup_log.count("exited: cronjobs-worker-default (exit status 0; expected)")
    assert expected >= 9, sup_log  # 500 jobs / 50 per worker
    assert "not expected" not in sup_log, sup_log
    assert report(app, "supervisord-max-jobs", 500, f"{expected} recycles") == (0, 0, 0)

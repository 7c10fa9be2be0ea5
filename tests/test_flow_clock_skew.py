"""Flow control on the database's clock, with real `cronjobs worker` processes whose clocks
are off (a preloaded wall-clock shift), on MariaDB and PostgreSQL (Redis broker).

One normal worker and four skewed ones (-60 s, -10 s, +10 s, +60 s) run together:
- a 20 s FloodWait met by a skewed worker, and one met by the normal worker, holds its
  key 20 s (+- 1 s) for every worker: the key's first start after the block (its row put
  back, or a second row any of the five may claim) comes 20 s after the block was
  written;
- `pause --queue Q --for 30s` typed on a skewed host (and one on the normal host) holds
  the queue 30 s (+- 1 s) for every worker;
- a `10/s` rate never admits more than 10 starts in a rolling second across the five
  (the start log, written on the database's clock, read as it fills).
The offsets run at the same time, so the test lasts about as long as the pause.

The workers' wall clocks are off and their monotonic clocks are not (as on a host whose
clock is wrong): `tests/clockshift/clockshift.c`, preloaded, moves the wall clock only.
(Debian's libfaketime cannot do that for Python: with its monotonic clock left alone,
`time.sleep` fails with EINVAL — a worker's consumer thread died at its first back-off and
its claim loop at its first retried deadlock — and with it faked, every timed wait blocks
for years.) Every hold exists before the workers start: each rings its queues at start and
a queue whose rows are held stays rung. Without the database's clock the test fails
(blocks written by the normal worker are pruned by the one 60 s ahead, those written 60 s
behind end at once, ...).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from conftest import REDIS, cli_env
from cronjobs import queue, store
from cronjobs.clock import utcnow
from cronjobs.store.models import cronjob_block as b
from cronjobs.store.models import cronjob_flow_start as fs
from cronjobs.store.models import cronjob_pause as p
from cronjobs.store.models import cronjob_queue as q

pytestmark = [pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True),
              pytest.mark.slow]

FLOW_HANDLERS = str(Path(__file__).parent / "flow_handlers")
CLOCKSHIFT = Path(__file__).parent / "clockshift" / "clockshift.c"
ENV = {"CRONJOBS_HANDLER_PATHS": FLOW_HANDLERS, "CRONJOBS_LEASE_GRACE_SECONDS": "2"}
FLOOD, RATED, KEYONLY = "flow.flood.execute", "flow.rated.execute", "flow.keyonly.execute"
OFFSETS = {"m60": -60, "m10": -10, "p10": 10, "p60": 60}  # role -> seconds off
BLOCK_SECONDS, PAUSE_SECONDS, RATED_ROWS = 20, 30, 40
PAUSED = [f"pq_{role}" for role in (*OFFSETS, "n")]  # paused from that role's host
SHARED = ["skew", "rate", *PAUSED]


@pytest.fixture
def app(make_app):
    return make_app(handler_paths=(FLOW_HANDLERS,), lease_grace_seconds=2)


@pytest.fixture(scope="module")
def shift(tmp_path_factory) -> Callable[[int], dict[str, str]]:
    """`shift(seconds)`: the environment that runs a process `seconds` off the real wall
    clock (its monotonic clock untouched), built once per module with the system's C
    compiler."""
    lib = tmp_path_factory.mktemp("clockshift") / "clockshift.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(lib), str(CLOCKSHIFT), "-ldl"],
                   check=True, capture_output=True, timeout=60)

    def env(seconds: int) -> dict[str, str]:
        return {"LD_PRELOAD": str(lib), "CLOCKSHIFT_SECONDS": str(seconds)} if seconds else {}

    shown = subprocess.run([sys.executable, "-c", "import time; t = time.monotonic(); "
                            "time.sleep(0.01); print(time.time())"], env={**os.environ, **env(60)},
                           check=True, capture_output=True, text=True, timeout=60).stdout
    assert 59 < float(shown) - time.time() < 61, "the shift is not in effect"
    return env


@contextmanager
def skewed_worker(db_url: str, namespace: str, log: Path, role: str, skew: dict[str, str],
                  pids: dict[int, str]) -> Iterator[subprocess.Popen]:
    """A `cronjobs worker` for the shared queues and `m_<role>` (its own), its wall clock
    shifted by `skew` (`shift(seconds)`); SIGTERM on exit, which must exit 0.
    `pids[worker's pid] = role` once it stops."""
    cmd = [sys.executable, "-m", "cronjobs", "worker", "--slots", "4",
           "--queues", ",".join([*SHARED, f"m_{role}"])]
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, env=cli_env(db_url, namespace, broker_url=REDIS, **ENV,
                                                 **skew),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        pids[proc.pid] = role
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
            code = None
    assert code == 0, f"{role} worker exited with {code}:\n{log.read_text()[-3000:]}"


def db_time(app) -> float:
    """The database's clock minus this process's, seconds."""
    with app.engine.connect() as conn:
        return (store.database_now(conn) - utcnow()).total_seconds()


def busiest_second(times: list[datetime]) -> int:
    """The most of `times` within any rolling second (half-open)."""
    times = sorted(times)
    return max((sum(1 for t in times[i:] if t - s < timedelta(seconds=1))
                for i, s in enumerate(times)), default=0)


def test_blocks_pauses_and_rates_hold_on_the_database_clock(app, db_url, namespace, tmp_path,
                                                            shift):
    offset = timedelta(seconds=db_time(app))
    log = tmp_path / "workers.log"
    env = cli_env(db_url, namespace, **ENV)
    # Every hold exists before the workers start: each worker rings all its queues at
    # start, and a queue whose rows are held stays rung (its claims go on, at the end of
    # the soonest hold), so all five claim from the shared queues throughout, doorbell or
    # not. The sentinel row keeps `skew` held for longer than the test.
    with app.engine.begin() as conn:
        store.block(conn, KEYONLY, "sentinel", now=store.database_now(conn),
                    until=store.database_now(conn) + timedelta(minutes=5), reason="sentinel")
    queue.dispatch(KEYONLY, {"chat": "sentinel"}, queue="skew")
    pauses = {}
    for name in PAUSED:  # typed on the host of `role`
        role = name.removeprefix("pq_")
        made = subprocess.run([sys.executable, "-m", "cronjobs", "pause", "--queue", name,
                               "--for", f"{PAUSE_SECONDS}s"],
                              env={**env, **shift(OFFSETS.get(role, 0))}, capture_output=True,
                              text=True, timeout=60)
        assert made.returncode == 0 and "until" in made.stdout, made.stderr
        with app.engine.connect() as conn:
            created, until = conn.execute(sa.select(p.c.created_at, p.c.until_at).where(
                p.c.scope == "queue", p.c.name == name)).one()
        pauses[name] = (created, until, queue.dispatch(KEYONLY, {"chat": name}, queue=name))
    floods = {f"{meet}:{role}": queue.dispatch(FLOOD, {"chat": f"{meet}:{role}",
                                                       "flood": BLOCK_SECONDS},
                                               queue=f"m_{meet}")
              for role in OFFSETS for meet in (role, "n")}  # met by the skewed or the normal
    rated = queue.dispatch_many([{"type": RATED, "queue": "rate"} for _ in range(RATED_ROWS)])
    with ExitStack() as stack:
        starts = StartLog(app)
        stack.callback(starts.stop)
        pids: dict[int, str] = {}
        for role, seconds in {**OFFSETS, "n": 0}.items():
            stack.enter_context(skewed_worker(db_url, namespace, log, role, shift(seconds),
                                              pids))
        blocks = _wait_for_blocks(app, set(floods), log)
        nexts = {key: queue.dispatch(FLOOD, {"chat": key}, queue="skew") for key in floods}
        seen = _watch(app, [*floods.values(), *nexts.values(),
                            *(v[2] for v in pauses.values())], offset, log)
        _wait_done(app, [*floods.values(), *rated], log)
        starts.stop()
    for key, job in nexts.items():  # the key's first start after its block: either row
        created, until = blocks[key]
        assert until - created == timedelta(seconds=BLOCK_SECONDS), key
        held = (min(seen[job], seen[floods[key]]) - created).total_seconds()
        assert BLOCK_SECONDS - 1 <= held <= BLOCK_SECONDS + 1, (key, held)
    for name, (created, until, job) in pauses.items():
        assert until - created == timedelta(seconds=PAUSE_SECONDS), name
        held = (seen[job] - created).total_seconds()
        assert PAUSE_SECONDS - 1 <= held <= PAUSE_SECONDS + 1, (name, held)
    print("held (s):", {k: round((min(seen[j], seen[floods[k]]) - blocks[k][0])
                                 .total_seconds(), 2) for k, j in nexts.items()},
          {n: round((seen[j] - c).total_seconds(), 2) for n, (c, _, j) in pauses.items()},
          "busiest second:", busiest_second(list(starts.seen.values())))
    assert len(starts.seen) == RATED_ROWS
    assert busiest_second(list(starts.seen.values())) <= 10
    with app.engine.connect() as conn:  # skewed and normal workers took part
        claimers = {pids.get(int(w.rsplit(":", 1)[1])) for (w,) in conn.execute(
            sa.select(q.c.worker_id).where(q.c.id.in_(
                [*rated, *nexts.values(), *(v[2] for v in pauses.values())])))}
    assert len(claimers - {None}) >= 3, claimers


def _wait_for_blocks(app, keys: set[str], log: Path) -> dict[str, tuple[datetime, datetime]]:
    """The (created_at, until) of the blocks of `keys`, once all are written."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with app.engine.connect() as conn:
            found = {k: (c, u) for k, c, u in conn.execute(
                sa.select(b.c.limit_key, b.c.created_at, b.c.until_at))}
        if keys <= set(found):
            return found
        time.sleep(0.1)
    raise AssertionError(f"blocks of {sorted(keys - set(found))} not written\n"
                         f"{log.read_text()[-3000:]}")


def _watch(app, jobs: list[int], offset: timedelta, log: Path) -> dict[int, datetime]:
    """Poll every 50 ms until every row of `jobs` has left `pending`; returns when each
    was first seen so, on the database's clock."""
    seen: dict[int, datetime] = {}
    deadline = time.monotonic() + PAUSE_SECONDS + 30
    with app.engine.connect() as conn:
        while len(seen) < len(jobs) and time.monotonic() < deadline:
            at = utcnow() + offset
            for job_id, status in conn.execute(sa.select(q.c.id, q.c.status).where(
                    q.c.id.in_([j for j in jobs if j not in seen]))):
                if status != "pending":
                    seen[job_id] = at
            conn.rollback()
            time.sleep(0.05)
    missing = [j for j in jobs if j not in seen]
    assert not missing, f"rows {missing} never started\n{log.read_text()[-3000:]}"
    return seen


class StartLog(threading.Thread):
    """Reads the rated type's start log every 50 ms (an entry lives a second at least):
    `seen` is `{entry id: started_at}`, on the database's clock."""

    def __init__(self, app) -> None:
        super().__init__(daemon=True)
        self.app, self.seen, self.done = app, {}, threading.Event()
        self.start()

    def run(self) -> None:
        stmt = sa.select(fs.c.id, fs.c.started_at).where(fs.c.limiter == f"type:{RATED}")
        with self.app.engine.connect() as conn:
            while not self.done.is_set():
                self.seen.update(conn.execute(stmt).all())
                conn.rollback()
                time.sleep(0.05)

    def stop(self) -> None:
        self.done.set()
        self.join(5)


def _wait_done(app, jobs: list[int], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with app.engine.connect() as conn:
            left = conn.execute(sa.select(sa.func.count()).where(
                q.c.id.in_(jobs), q.c.status != "completed")).scalar_one()
        if not left:
            return
        time.sleep(0.2)
    raise AssertionError(f"{left} rows not completed\n{log.read_text()[-3000:]}")

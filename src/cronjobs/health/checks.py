"""The health checks. Each is `fn(app, check)`: it fills in the `Check` it is given."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

from sqlalchemy.engine import make_url

from .. import store
from ..app import App
from ..flow.state import held_now, held_text, held_totals, limit_text
from ..schedule.scheduler import slot_error
from ..schedule.slots import current_slot
from ..schedule.tasks import task_infos
from ..store.engines import backend_name, sqlite_file
from ..worker import heartbeat
from . import expectations
from .check import Check


def database(app: App, check: Check) -> None:
    """Connect and run `SELECT 1`; data: `response_ms`."""
    started = time.monotonic()
    with app.engine.connect() as conn:
        store.views.ping(conn)
    ms = (time.monotonic() - started) * 1000
    check.data = {"response_ms": round(ms, 1), "backend": backend_name(app.engine)}
    check.message = f"{backend_name(app.engine)} answered in {ms:.0f} ms"


def broker(app: App, check: Check) -> None:
    """Ping the broker (Redis PING / an AMQP connection); Redis: also `maxmemory-policy`."""
    url = app.settings.broker_url
    # A broker answers PING in milliseconds; 1 s (below the report's deadline) tells a hung
    # one apart while leaving `cronjobs health` room to start and finish within 5 s.
    timeout = max(0.2, min(1.0, app.settings.health.timeout_seconds - 0.5))
    if app.settings.embedded_broker:
        check.message = "in-process broker (memory://)"
        check.data = {"kind": "memory"}
    elif url.startswith(("amqp://", "amqps://")):
        _ping_rabbitmq(url, timeout, check)
    else:
        _ping_redis(url, timeout, check)


def _ping_rabbitmq(url: str, timeout: float, check: Check) -> None:
    """Open and close one AMQP connection within `timeout` seconds."""
    import pika  # lazy: only the configured broker's client is imported (CLI start-up time)

    safe = _hide_password(url)
    params = pika.URLParameters(url)
    params.socket_timeout = params.blocked_connection_timeout = timeout
    params.connection_attempts, params.retry_delay = 1, 0
    try:
        pika.BlockingConnection(params).close()
    except Exception as exc:
        check.message = f"cannot reach {safe}: {type(exc).__name__}"
        check.problem("broker", "fail", f"broker {safe} does not answer ({type(exc).__name__})")
        return
    check.message, check.data = f"{safe} answered", {"kind": "rabbitmq"}


def _ping_redis(url: str, timeout: float, check: Check) -> None:
    """PING within `timeout` seconds; warn about a `maxmemory-policy` that evicts messages."""
    import redis  # lazy: only the configured broker's client is imported (CLI start-up time)

    safe = _hide_password(url)
    client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        started = time.monotonic()
        client.ping()
        ms = (time.monotonic() - started) * 1000
        check.data = {"kind": "redis", "response_ms": round(ms, 1)}
        check.message = f"{safe} answered in {ms:.0f} ms"
        try:
            policy = client.config_get("maxmemory-policy").get("maxmemory-policy")
        except redis.RedisError:  # CONFIG disabled (managed Redis): say so, do not fail
            policy = None
        check.data["maxmemory_policy"] = policy
        if policy is None:
            check.message += "; maxmemory-policy unreadable (CONFIG disabled)"
        elif policy.startswith("allkeys-"):
            check.problem("broker-policy", "warn",
                          f"Redis maxmemory-policy is {policy}: it evicts queue messages "
                          f"(use noeviction)")
    except redis.RedisError as exc:
        check.message = f"cannot reach {safe}: {type(exc).__name__}"
        check.problem("broker", "fail", f"broker {safe} does not answer ({type(exc).__name__}: "
                                        f"{str(exc)[:200]})")
    finally:
        client.close()


def queues(app: App, check: Check) -> None:
    """Due rows per queue and their oldest due age; failed rows (in the last hour)."""
    now = app.clock.now()
    with app.engine.connect() as conn:
        due = store.queues.due_by_queue(conn, now)
        counts = store.views.failed_counts(conn, now - timedelta(hours=1))
    (failed, failed_capped), (recent, _) = counts["total"], counts["since"]
    check.data = {"due": {name: {"due": d["due"], "capped": d["capped"],
                                 "oldest_due_age_seconds": _age(now, d["oldest_due_at"])}
                          for name, d in sorted(due.items())},
                  "failed": failed, "failed_capped": failed_capped, "failed_last_hour": recent}
    total = sum(d["due"] for d in due.values())
    check.message = (f"{total} due row(s) in {len(due)} queue(s); {failed}"
                     f"{'+' if failed_capped else ''} failed, {recent} in the last hour")
    if recent >= app.settings.health.failed_warn_per_hour:
        check.problem("failed", "warn", f"{recent} rows failed in the last hour")


def workers(app: App, check: Check) -> None:
    """Live workers per queue; queues with due rows and no live worker; stuck workers;
    stalled ones (their job processes fail to start: `heartbeat.STALLED`)."""
    now = app.clock.now()
    # live: heartbeat under 30 s old (the same view as `cronjobs workers`)
    seen = heartbeat.view(app)
    with app.engine.connect() as conn:
        due = store.queues.due_by_queue(conn, now)
    live = seen.live
    per_queue: dict[str, list[str]] = {}
    for row in live:
        for name in filter(None, row["queues"].split(",")):
            per_queue.setdefault(name, []).append(row["id"])
    names = sorted(set(app.queues()) | set(due))
    check.data = {"live": len(live), "dead": len(seen.dead),
                  "per_queue": {n: len(per_queue.get(n, [])) for n in names}}
    check.message = f"{len(live)} live worker(s)"
    for row in live:
        if row["status"] == heartbeat.STALLED:
            check.problem(f"stalled:{row['id']}", "fail",
                          f"worker {row['id']}: its job processes fail to start (see its log)")
    stuck_after = app.settings.health.stuck_seconds
    held = _held_since(app, now) if any(
        d["oldest_due_at"] and _age(now, d["oldest_due_at"]) > stuck_after
        for d in due.values()) else {}
    for name in names:
        waiting = due.get(name)
        age = _age(now, waiting["oldest_due_at"]) if waiting else None
        if not per_queue.get(name):
            if waiting:
                check.problem(f"workers:{name}", "fail",
                              f"queue {name!r} has {waiting['due']} due row(s) and no live worker")
            elif name in app.queues():
                check.problem(f"workers:{name}", "warn", f"queue {name!r} has no live worker")
        elif age is not None and age > stuck_after and not (
                name in held and held[name] <= waiting["oldest_due_at"]):
            check.problem(f"stuck:{name}", "fail",
                          f"queue {name!r}: due rows waiting {age:.0f} s while "
                          f"{len(per_queue[name])} worker(s) are live (not taking rows?)")


def scheduler(app: App, check: Check) -> None:
    """The scheduler's last tick that started work (`cronjob_runtime.last_run_at`), and the
    tasks whose latest slot started nothing because its job row could not be made (skip
    reason `error`): each fails until a slot of the task starts. Data: `failed_slots`,
    task -> that slot's key."""
    now = app.clock.now()
    scheduled = _scheduled(app)
    periods = [_period(i.frequency, now, i.timezone) for i in scheduled]
    failed = _failed_slots(app, scheduled)
    with app.engine.connect() as conn:
        last = store.views.last_tick_at(conn)
    if not periods:
        check.message = "no scheduled task is enabled"
        return
    limit = max(180.0, 2 * min(periods))
    age = _age(now, last)
    check.data = {"last_tick_at": last.isoformat() + "Z" if last else None,
                  "age_seconds": age, "limit_seconds": limit,
                  "failed_slots": {task: slot for task, (slot, _) in failed.items()}}
    for task, (slot, text) in failed.items():
        check.problem(f"slot-error:{task}", "fail",
                      f"task {task}: slot {slot} started nothing: its job row could not be "
                      f"made ({text}); the other tasks run")
    if last is None:
        check.message = "the scheduler has never started a task"
        check.problem("scheduler", "fail", "the scheduler has never started a task "
                                           "(is `cronjobs scheduler` running?)")
    elif age > limit:
        check.message = f"last tick {age:.0f} s ago"
        check.problem("scheduler", "fail", f"the scheduler's last tick was {age:.0f} s ago "
                                           f"(limit {limit:.0f} s)")
    else:
        check.message = f"last tick {age:.0f} s ago"
    if failed:
        check.message += f"; {len(failed)} task(s) whose last slot failed"


def _failed_slots(app: App, scheduled: list) -> dict[str, tuple[str, str]]:
    """Task -> `(slot key, error)` for each task whose latest slot was skipped for
    `error` after its last start. The error is made again from the handler as it is now
    (the database keeps the reason word, not the text); the scheduler's log has it too."""
    failed = {}
    for info in scheduled:
        rt = info.runtime
        if rt.get("last_skip_reason") != "error" or rt.get("last_skipped_at") is None:
            continue
        if rt.get("last_run_at") is not None and rt["last_run_at"] >= rt["last_skipped_at"]:
            continue  # a later slot started
        slot = rt["last_skipped_slot"]
        text = slot_error(app, info, slot) or "it can be made now: the next slot starts"
        failed[info.task] = (slot, text)
    return failed


def overdue(app: App, check: Check) -> None:
    """Tasks whose last successful scheduled run is older than 2x (warn) / 5x (fail) their
    period, or (fail) than their `EXPECT` `success_within`; a task's last run outside its
    `EXPECT` duration (`too_fast:` / `too_slow:`); `AUTO_PAUSE_AFTER_FAILURES` reached
    (`failing:`). See `expectations`."""
    now = app.clock.now()
    late = {}
    scheduled = _scheduled(app)
    expects = expectations.expects_of(app, scheduled)
    with app.engine.connect() as conn:
        for info in scheduled:
            since = (info.runtime.get("last_success_at")
                     or store.views.first_slot_at(conn, info.task))
            if since is None:
                continue  # never started: the scheduler check speaks for it
            period = _period(info.frequency, now, info.timezone)
            age = _age(now, since)
            late[info.task] = round(age / period, 2)
            if expectations.success_within(check, info.task, expects.get(info.task), age):
                continue
            _late(check, info, age, period)
        expectations.durations(conn, scheduled, expects, check)
        expectations.failing(app, conn, scheduled, now, check)
    check.data = {"periods_since_success": late}
    check.message = f"{len(check.problems)} overdue task(s) of {len(late)}"


def _late(check: Check, info, age: float, period: float) -> None:
    """`overdue:<task>`: warn past 2x its period (seconds), fail past 5x."""
    ago = ("last successful run" if info.runtime.get("last_success_at")
           else "first run started")
    for times, status in ((5, "fail"), (2, "warn")):
        if age > times * period:
            check.problem(f"overdue:{info.task}", status,
                          f"task {info.task}: {ago} {age:.0f} s ago, over {times}x its "
                          f"frequency ({info.frequency})")
            return


def flow(app: App, check: Check) -> None:
    """Pauses left on longer than `health_pause_warn_seconds`; due rows that waited longer
    than `health_held_warn_seconds` behind a block, a full concurrency limit or a rate
    limit. Data: the live pauses and blocks, and the held rows per reason (`rate_limited`,
    `limited`, `paused`, `blocked`; counts capped per statement)."""
    now, s = app.clock.now(), app.settings
    with app.engine.connect() as conn:
        now = store.flow.flow_now(conn, app.clock)  # what the claims judge with
        pauses = store.flow.list_pauses(conn, now)
        blocks = store.flow.list_blocks(conn, now)
        held = held_now(app, conn, now, pauses, blocks)
    check.data = {"pauses": len(pauses), "blocks": len(blocks), "held_rows": held_totals(held)}
    check.message = (f"{len(pauses)} pause(s), {len(blocks)} block(s); held rows: "
                     + held_text(held))
    for p in pauses:
        age = _age(now, p["created_at"])
        if age > s.health.pause_warn_seconds:
            why = f" ({p['reason'][:100]})" if p["reason"] else ""
            check.problem(f"pause:{p['scope']}:{p['name']}", "warn",
                          f"{p['scope']} {p['name']!r} has been paused for {age:.0f} s by "
                          f"{p['created_by']}{why} (warn after {s.health.pause_warn_seconds:g} s)")
    for h in held:
        age = _age(now, h["oldest_due_at"])
        if h["reason"] != "paused" and age is not None and age > s.health.held_warn_seconds:
            limits = ", ".join(limit_text(lm, h["reason"]) for lm in h.get("limits", ()))
            check.problem(f"held:{h['queue']}:{h['type']}:{h['reason']}", "warn",
                          f"{h['rows']}{'+' if h['capped'] else ''} due row(s) of {h['type']} "
                          f"in queue {h['queue']!r} are {h['reason'].replace('_', '-')}"
                          f"{f' ({limits})' if limits else ''}; the oldest has waited "
                          f"{age:.0f} s (warn after {s.health.held_warn_seconds:g} s)")


def resources(app: App, check: Check) -> None:
    """Disk use (of the SQLite file's folder, else the log folder or the working folder) and
    memory."""
    import psutil

    s = app.settings
    url = app.engine.url
    database_file = sqlite_file(url)
    path = Path(database_file).resolve().parent if database_file else Path(s.log_dir or ".")
    disk = psutil.disk_usage(str(path)).percent
    memory = psutil.virtual_memory().percent
    check.data = {"disk_percent": disk, "disk_path": str(path), "memory_percent": memory}
    check.message = f"disk {disk:.0f} % used, memory {memory:.0f} % used"
    for key, value, warn, fail in (("disk", disk, s.health.disk_warn_percent,
                                    s.health.disk_fail_percent),
                                   ("memory", memory, s.health.memory_warn_percent,
                                    s.health.memory_fail_percent)):
        if value >= fail:
            check.problem(key, "fail", f"{key} {value:.0f} % used (fail at {fail:g} %)")
        elif value >= warn:
            check.problem(key, "warn", f"{key} {value:.0f} % used (warn at {warn:g} %)")


ALL = [("database", database), ("broker", broker), ("queues", queues), ("workers", workers),
       ("scheduler", scheduler), ("overdue", overdue), ("flow", flow), ("resources", resources)]


def _scheduled(app: App) -> list:
    """Enabled, available tasks with a frequency that are not idle (a handler's `idle`:
    no slot of it starts, so it is neither overdue nor a measure of the scheduler)."""
    return [i for i in task_infos(app)
            if i.frequency and i.enabled and i.available and not i.idle]


def _period(frequency: str, now, tz: str) -> float:
    """Seconds between two slots of `frequency` (the current one and the next)."""
    slot = current_slot(frequency, now, tz)
    return max(60.0, (slot.next_at - slot.at).total_seconds())


def _held_since(app: App, now) -> dict:
    """`{queue: the oldest due time of its rows held by a pause, block or limit}`: a queue
    whose oldest due row is held is waiting on purpose, not stuck."""
    with app.engine.connect() as conn:
        now = store.flow.flow_now(conn, app.clock)
        pauses = store.flow.list_pauses(conn, now)
        held = held_now(app, conn, now, pauses, store.flow.list_blocks(conn, now))
    out: dict = {}
    for h in held:
        if h["oldest_due_at"] is not None:
            out[h["queue"]] = min(out.get(h["queue"], h["oldest_due_at"]), h["oldest_due_at"])
    return out


def _age(now, then) -> float | None:
    return None if then is None else max(0.0, (now - then).total_seconds())


def _hide_password(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url.split("@")[-1]

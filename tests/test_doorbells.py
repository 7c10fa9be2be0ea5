"""A new row's message leaves from a background thread of the process: a queue rung many
times while a send is under way gets one message per 8 rings (at most 16), a queue rung
fast gets one batch per 2 ms and one rung after a quiet gap at once, a delayed message
keeps its own time, `flush`/`close` send what is left, a broker that is down costs a logged line and
never an exception; listeners still hear every ring in the calling thread. A worker whose
pool is rung already passes a doorbell on, at most every 0.25 s per queue."""

from __future__ import annotations

import logging
import threading
import time

from cronjobs.broker import DOORBELLS_PER_QUEUE, RING_GAP_SECONDS, ROWS_PER_RING, Broker, Doorbells

CLOSED = "redis://127.0.0.1:1/0"  # nothing listens on port 1


def test_messages_rung_during_a_send_are_coalesced_per_queue_and_delayed_ones_kept():
    sent: list[tuple[int, str, float]] = []
    first_started, release = threading.Event(), threading.Event()

    def put(job_id: int, queue: str, delay: float) -> None:
        if not sent:
            first_started.set()
            release.wait(10)
        sent.append((job_id, queue, delay))

    bells = Doorbells(put)
    bells.put(1, "a", 0)
    assert first_started.wait(10)
    for job_id in range(2, 102):  # while the first send is under way
        bells.put(job_id, "a", 0)
    bells.put(500, "b", 0)
    bells.put(600, "a", 30)
    release.set()
    assert bells.flush(10)

    assert sent[0] == (1, "a", 0)
    a_due = [j for j, q, d in sent[1:] if q == "a" and d == 0]
    rings = -(-100 // ROWS_PER_RING)  # 100 rung meanwhile: 13 messages, for the latest rows
    assert rings < DOORBELLS_PER_QUEUE and a_due == list(range(102 - rings, 102))
    assert (500, "b", 0) in sent
    [(_, _, delay)] = [s for s in sent if s[0] == 600]
    assert 25 < delay <= 30


def test_a_queue_rung_fast_gets_few_messages_and_one_rung_after_a_gap_goes_at_once():
    sent: list[tuple[int, float]] = []
    arrived = threading.Event()

    def put(job_id: int, queue: str, delay: float) -> None:
        sent.append((job_id, time.monotonic()))
        arrived.set()

    bells = Doorbells(put)
    for job_id in range(1, 201):  # 200 rings in a tight loop, then one every ms for 0.1 s
        bells.put(job_id, "c", 0)
    for job_id in range(201, 301):
        bells.put(job_id, "c", 0)
        time.sleep(0.001)
    assert bells.flush(10)
    ids = [j for j, _ in sent]
    assert ids[-1] == 300 and ids == sorted(ids)  # the newest row rings last
    # one message per 8 rings, one batch per gap: 300 rings, well under 100 messages
    assert len(sent) < 100, len(sent)
    time.sleep(RING_GAP_SECONDS * 10)
    arrived.clear()
    rung = time.monotonic()
    bells.put(301, "c", 0)
    assert arrived.wait(5) and sent[-1][0] == 301
    assert sent[-1][1] - rung < 0.5  # no gap to wait out: sent at once


def test_ring_never_raises_with_the_broker_down_and_listeners_hear_it_at_once(caplog):
    broker = Broker(CLOSED, "cjt-doorbells")
    heard: list[tuple[int, str]] = []
    broker.listen(lambda job_id, queue, delay: heard.append((job_id, threading.current_thread()
                                                              .name)))
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="cronjobs.broker"):
        broker.ring(7, "default")
        assert heard == [(7, threading.current_thread().name)]
        assert time.monotonic() - started < 0.5  # the caller did not wait for Redis
        assert broker.flush(20)
    broker.close()
    assert any("could not send job 7" in r.getMessage() for r in caplog.records)


def test_the_memory_broker_is_rung_before_ring_returns():
    broker = Broker("memory://", "cjt-doorbells")
    broker.declare(["default"])
    broker.ring(3, "default")
    assert broker.dramatiq.queues["default"].qsize() == 1
    assert broker.flush(0)
    broker.close()


def test_a_worker_rung_already_passes_a_doorbell_on_at_most_every_quarter_second(
        monkeypatch):
    # A doorbell for a queue this worker's pool is rung for already (its slots busy, or a
    # burst's doorbells arriving before its claim) adds nothing here: it goes back to the
    # broker for a worker with idle slots, once per PASS_ON_SECONDS per queue, so that
    # doorbells do not circle fast between workers that are all busy. One that comes
    # sooner is passed on when that time is up, not dropped: this worker's own consumer
    # often takes back the doorbell it passed on, and dropping it left an idle worker
    # without any (`test_two_processes_share_the_work...` failed 4 in 10 runs alone).
    from types import SimpleNamespace

    from cronjobs import worker

    now, sent, rung, timers = [100.0], [], set(), []
    monkeypatch.setattr(worker.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(worker.dispatching, "send", lambda app, job_id, queue: sent.append(
        (job_id, queue)))

    class Timer:  # fired by the test
        def __init__(self, wait, function, args):
            self.wait, self.function, self.args, self.daemon = wait, function, args, False

        def start(self):
            timers.append(self)

    monkeypatch.setattr(worker.threading, "Timer", Timer)

    def ring(queue: str) -> bool:
        new = queue not in rung
        rung.add(queue)
        return new

    accepting, failed = threading.Event(), threading.Event()
    accepting.set()
    me = SimpleNamespace(accepting=accepting, pool=SimpleNamespace(
                             failed=failed, ring=ring, is_rung=lambda queue: queue in rung),
                         _passed={}, _pass_lock=threading.Lock(), _pass_later=set(),
                         app=SimpleNamespace(settings=SimpleNamespace(embedded_broker=False)))
    me._pass_on = lambda queue, job_id: worker.WorkerProcess._pass_on(me, queue, job_id)
    me._pass_on_later = lambda queue, job_id: worker.WorkerProcess._pass_on_later(
        me, queue, job_id)

    def message(queue: str, job_id: int) -> None:
        worker.WorkerProcess.on_message(me, queue, job_id)

    message("a", 1)  # rings the pool: kept
    message("a", 2)  # rung already: passed on
    message("a", 3)  # within the quarter second: passed on when it is up
    message("a", 4)  # one is due already: it stands for this one
    message("b", 5)  # another queue, newly rung: kept
    message("b", 6)  # its own limit: passed on
    assert sent == [(2, "a"), (6, "b")]
    assert [(t.wait, t.args) for t in timers] == [(worker.PASS_ON_SECONDS, ("a", 3))]
    assert timers[0].daemon
    now[0] += worker.PASS_ON_SECONDS
    timers[0].function(*timers[0].args)
    assert sent == [(2, "a"), (6, "b"), (3, "a")]
    message("a", 7)  # right after: waits for the next quarter second
    assert len(timers) == 2 and sent[-1] == (3, "a")
    rung.discard("a")  # drained by a claim meanwhile: nobody needs it, not sent
    now[0] += worker.PASS_ON_SECONDS
    timers[1].function(*timers[1].args)
    assert sent == [(2, "a"), (6, "b"), (3, "a")]
    now[0] += worker.PASS_ON_SECONDS  # the next doorbell rings it again, kept
    message("a", 8)
    assert sent == [(2, "a"), (6, "b"), (3, "a")]
    me.app.settings.embedded_broker = True  # `memory://`: no other worker
    now[0] += worker.PASS_ON_SECONDS
    message("a", 9)
    assert sent == [(2, "a"), (6, "b"), (3, "a")] and len(timers) == 2

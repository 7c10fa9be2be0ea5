"""Where a no-op job's time goes: CPU per job by process, connections opened per job, and
py-spy profiles of `cronjobs worker` draining no-op rows (MariaDB + Redis).

Usage: python -m bench.profile_worker [--rows 8000] [--threads 8] [--seconds 12]
    [--out bench/results/profile]

1. `--rows` no-op rows are dispatched; the worker starts; after the first completion a
   window of `--seconds` without the profiler measures jobs done, CPU seconds of the
   worker process, of its job processes, of mariadbd and of redis-server (psutil), and
   MariaDB's `Connections` counter (connections opened).
2. `py-spy record --subprocesses` (CPU samples) and `py-spy record --idle` (wall-clock
   samples of every worker thread, idle or not) for `--seconds` each; the collapsed
   stacks are saved and summarised by category (`CATEGORIES`), per process.
Experiments (`--no-pyspy` for the accounting only): `--log-level INFO` turns on the
per-job log lines, `--prefetch N` sets the consumer's prefetch. Not part of `make bench`
(docs/performance.md shows its output); the profiles it writes are not kept in git.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import sqlalchemy as sa

from . import procs, stores

# First match wins: (category, substrings of the collapsed stack, any of which matches).
CATEGORIES = [
    ("open a new MariaDB connection (TLS context, handshake)",
     ("load_default_certs", "create_default_context", "_request_authentication",
      "pymysql/connections.py:__init__", "__init__ (pymysql/connections.py", "_connect (pymysql")),
    # The pool loop (issue 8's engine): one transaction per turn = finishes + batched claim.
    ("finish: outcomes written in the loop's transaction (finish_many)",
     ("finish_many", "write_all (cronjobs/job/executor.py", "_one_by_one")),
    ("claim: batched SELECT ... SKIP LOCKED + UPDATE in the loop's transaction",
     ("claim_jobs", "_candidates (cronjobs/store/claim.py", "_take (cronjobs/store/claim.py")),
    ("loop transaction: BEGIN/COMMIT, pool check-out", ("_transaction (cronjobs/worker/pool.py",)),
    ("loop: pipes to job processes (send job, read outcome, pickling)",
     ("_dispatch (cronjobs/worker/pool.py", "_read (cronjobs/worker/pool.py",
      "_wait (cronjobs/worker/pool.py")),
    # The first engine (one thread per slot).
    ("claim: SELECT ... FOR UPDATE SKIP LOCKED + UPDATE + COMMIT", ("Executor.claim ",)),
    ("finish: UPDATE + COMMIT", ("finish (cronjobs/job/executor.py", "_retry_while_down")),
    ("job process: receive job, run handler, send outcome", ("_child_main", "jobprocess.py")),
    ("broker: Redis (fetch, ack, send)", ("redis/", "dramatiq/brokers/redis")),
    ("logging", ("logging/",)),
    ("housekeeping (leases, heartbeat, sweep)", ("housekeeping.py",)),
    ("dramatiq worker loop (consumer, queues)", ("dramatiq/worker.py",)),
    ("pool loop, other", ("pool.py",)),
    ("interpreter start-up / imports", ("<module>", "_find_and_load")),
]


def _category(stack: str) -> str:
    for name, needles in CATEGORIES:
        if any(n in stack for n in needles):
            return name
    return "other"


def summarise(path: Path) -> dict:
    """Samples per process and per category from a py-spy `--format raw` file."""
    per_proc: dict = collections.defaultdict(collections.Counter)
    top: dict = collections.defaultdict(collections.Counter)
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue  # a frame name with a newline in it (py-spy prints it as is)
        frames = stack.split(";")
        spawned = ("spawn" in frames[0] or "_child_main" in stack or "forkserver" in stack
                   or "jobprocess.py" in stack)
        key = "job processes" if spawned else "worker process"
        per_proc[key][_category(stack)] += int(count)
        top[key][frames[-1]] += int(count)
    out = {}
    for key, counter in per_proc.items():
        total = sum(counter.values())
        out[key] = {"samples": total,
                    "categories": {k: round(100 * v / total, 1) for k, v in counter.most_common()},
                    "top_frames": [(f, round(100 * c / total, 1))
                                   for f, c in top[key].most_common(12)]}
    return out


def _server(name: str) -> psutil.Process | None:
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] and proc.info["name"].startswith(name):
            return proc
    return None


def _cpu(proc: psutil.Process | None) -> float:
    if proc is None:
        return 0.0
    t = proc.cpu_times()
    return t.user + t.system


def _connections(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.exec_driver_sql("SHOW GLOBAL STATUS LIKE 'Connections'").one()[1])


def cpu_window(app, worker: psutil.Process, seconds: float) -> dict:
    """Jobs done and CPU ms per job of each process over `seconds`."""
    servers = {"mariadbd": _server("mariadbd"), "redis-server": _server("redis-server")}
    admin = sa.create_engine(stores.MARIADB + "/test", poolclass=sa.pool.NullPool)

    def snap() -> dict:
        kids = worker.children(recursive=True)
        return {"done": stores.count_rows(app.engine, "completed"), "t": time.monotonic(),
                "worker": _cpu(worker), "job processes": sum(_cpu(k) for k in kids),
                **{k: _cpu(v) for k, v in servers.items()}, "connections": _connections(admin)}

    a = snap()
    time.sleep(seconds)
    b = snap()
    admin.dispose()
    jobs = b["done"] - a["done"]
    out = {"jobs": jobs, "seconds": round(b["t"] - a["t"], 2),
           "jobs_per_s": round(jobs / (b["t"] - a["t"]), 1),
           "connections_opened_per_job": round(
               (b["connections"] - a["connections"] - 2) / max(jobs, 1), 3),
           "cpu_ms_per_job": {}}
    for key in ("worker", "job processes", "mariadbd", "redis-server"):
        out["cpu_ms_per_job"][key] = round((b[key] - a[key]) * 1000 / max(jobs, 1), 2)
    out["cpu_ms_per_job"]["total"] = round(sum(out["cpu_ms_per_job"].values()), 2)
    return out


def pyspy(pid: int, seconds: float, out: Path, *extra: str) -> Path:
    """Record `seconds` of py-spy samples of `pid` in collapsed-stack form."""
    exe = Path(sys.executable).with_name("py-spy")
    subprocess.run([str(exe), "record", "--pid", str(pid), "--duration", str(int(seconds)),
                    "--format", "raw", "--output", str(out), "--nonblocking", *extra],
                   check=True, capture_output=True)
    return out


def main(argv: list[str] | None = None) -> None:
    """Run the measurement and print/save the summary."""
    parser = argparse.ArgumentParser(prog="python -m bench.profile_worker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=8000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=12)
    parser.add_argument("--prefetch", type=int, default=None)
    parser.add_argument("--log-level", default="WARNING", help="the worker's CRONJOBS_LOG_LEVEL")
    parser.add_argument("--no-pyspy", action="store_true", help="only the CPU accounting")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "profile")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with stores.database("mariadb") as url, stores.redis_namespace() as ns:
        app = stores.make_app(url, ns)
        stores.dispatch_rows(app, args.rows)
        env = stores.worker_env(url, ns)
        env["CRONJOBS_LOG_LEVEL"] = args.log_level
        running = procs.cronjobs_worker(env, args.threads, 1, args.prefetch)
        with running:
            procs.wait_for(lambda: stores.count_rows(app.engine, "completed"), 1, running,
                           max_seconds=0)
            time.sleep(2)
            worker = psutil.Process(running[0].pid)
            result = {"settings": {"threads": args.threads,
                                   "log_level": args.log_level,
                                   "prefetch": args.prefetch or "default"},
                      "cpu": cpu_window(app, worker, args.seconds)}
            if args.no_pyspy:
                running.check()
                print(json.dumps(result, indent=2))
                (args.out / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
                app.close()
                return
            cpu = pyspy(running[0].pid, args.seconds, args.out / "cpu.txt", "--subprocesses")
            wall = pyspy(running[0].pid, args.seconds, args.out / "wall.txt", "--idle")
            result["cpu_profile"] = summarise(cpu)
            result["wall_profile"] = summarise(wall)
            running.check()
        app.close()
    (args.out / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

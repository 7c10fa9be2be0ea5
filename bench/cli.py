"""CLI start-up: `cronjobs --help`, `get`, `dispatch`, `tick` and `health`, start to exit.

Each command runs as a new process (`.venv/bin/cronjobs ...`, as a shell or a system
cron line runs it) on a fresh SQLite and MariaDB database with the bench handlers and
Redis (as in production: `dispatch` and `tick` send their doorbells to it, `health`
pings it). The runs are interleaved (round robin over the commands) and the figure is
the median of `--runs` runs. `tick` is given the next minute each run (`--now`), so every
run starts the minute tasks and sends their doorbells, as a `* * * * *` cron line does.
`health` exits 1 or 2 here (no worker runs): only its time is measured.

Python writes bytecode caches as an installed wheel has them: a first run of each command
(on the first backend) is not measured (`PYTHONDONTWRITEBYTECODE` is removed from the
children's environment).

Baseline (same run): `python -c pass`, the interpreter's own start. The floor of any
command that reads the database is shown too: `python -c "import sqlalchemy, click; from
pydantic import BaseModel"` (the libraries every such command needs: the SQL, the command
line, the settings). Target: <= 300 ms each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

from . import report, stores

CRONJOBS = str(Path(sys.executable).with_name("cronjobs"))
TARGET_MS = 300
FLOOR = "import sqlalchemy, click; from pydantic import BaseModel"


def _env(url: str, ns: str) -> dict:
    env = stores.worker_env(url, ns)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _time_ms(cmd: list[str], env: dict) -> float:
    """Wall time of one run of `cmd`, in ms (its output is discarded)."""
    start = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=stores.ROOT, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return (time.perf_counter() - start) * 1000


def _commands(job_id: int) -> dict[str, object]:
    """Name -> argv, or a function of the run's number returning argv (`tick`)."""
    at = datetime(2030, 1, 1, 0, 0)
    return {
        "get": [CRONJOBS, "get", str(job_id)],
        "dispatch": [CRONJOBS, "dispatch", stores.NOOP, "--payload", '{"n": 1}'],
        "tick": lambda i: [CRONJOBS, "tick", "--now",
                           (at + timedelta(minutes=i)).isoformat(timespec="minutes")],
        "health": [CRONJOBS, "health", "--timeout", "5"],
    }


def _measure(commands: dict, env: dict, runs: int, warm_up: bool = True
             ) -> dict[str, list[float]]:
    """Each command once unmeasured (bytecode caches) unless not `warm_up`, then `runs`
    interleaved rounds."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    for i in range(0 if warm_up else 1, runs + 1):
        for name, cmd in commands.items():
            argv = cmd(i) if callable(cmd) else cmd
            ms = _time_ms(argv, env)
            if i:
                times[name].append(ms)
    return times


def _add(results: report.Results, name: str, times: list[float], base: float,
         target: bool = True) -> None:
    results.add(name, statistics.median(times), "ms", baseline=base,
                baseline_name="python -c pass", note="runs: " + ", ".join(
                    f"{t:.0f}" for t in times) + " ms",
                target=("<=", TARGET_MS, "value") if target else None)


def run(args: argparse.Namespace, results: report.Results) -> None:
    """Measure the baseline, the floor, `--help`, then each command per backend."""
    runs = 2 if args.quick else args.runs
    backends = ["sqlite"] if args.quick else ["sqlite", "mariadb"]
    results.params = {"runs": runs, "backends": backends, "broker": "redis",
                      "target_ms": TARGET_MS}
    env0 = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    first = _measure({"pass": [sys.executable, "-c", "pass"],
                      "floor": [sys.executable, "-c", FLOOR],
                      "help": [CRONJOBS, "--help"]}, env0, runs)
    base = statistics.median(first["pass"])
    results.details = {"pass_ms": first["pass"]}
    _add(results, f'floor: python -c "{FLOOR}"', first["floor"], base, target=False)
    _add(results, "cronjobs --help", first["help"], base)
    for backend in backends:
        with stores.database(backend) as url, stores.redis_namespace() as ns:
            app = stores.make_app(url, ns)
            job_id = stores.dispatch_rows(app, 1)[0]
            app.close()
            times = _measure(_commands(job_id), _env(url, ns), runs,
                             warm_up=backend == backends[0])
        for name, values in times.items():
            _add(results, f"cronjobs {name} ({backend})", values, base)
        results.details[backend] = times


def add_args(parser: argparse.ArgumentParser) -> None:
    """Options of this scenario."""
    parser.add_argument("--runs", type=int, default=5, help="measured runs (%(default)s)")


def main(argv: list[str] | None = None) -> dict:
    """Run the scenario from the command line."""
    return report.scenario_main("cli", __doc__, run, add_args, argv)


if __name__ == "__main__":
    main()

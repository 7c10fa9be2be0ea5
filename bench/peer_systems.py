"""The systems `bench.peers` runs on one PostgreSQL: cronjobs and the Python peers that
also keep their jobs in a table, each as a user installs and starts it.

- cronjobs: `cronjobs worker --processes P --slots 8`, Redis carrying the doorbells.
- Oban-py (`oban` 0.7.0, needs Python >= 3.12): a venv of its own under `bench/.venvs/`
  (git-ignored), made on first use from a Python 3.12 interpreter; P processes of
  `python -m oban start --queues default:8`.
- Procrastinate 3.10 (the project's `bench` extra): P processes of `python -m
  procrastinate worker --concurrency 8`.

For each: how to fill a database with N no-op jobs (the system's own bulk call), how to
start P x 8 workers, the SQL that counts finished jobs and reads their completion times
(epoch seconds), and what it guarantees.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from cronjobs.app import use

from . import procs, stores
from .stores import ROOT

OBAN_VERSION = "0.7.0"
VENVS = Path(__file__).parent / ".venvs"


class Unavailable(RuntimeError):
    """A peer cannot run on this machine; the message says why (one line)."""


def libpq_dsn(url: str) -> str:
    """The libpq form of a SQLAlchemy PostgreSQL URL (`postgresql+psycopg://` -> `postgresql://`)."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


class System:
    """One system under test. Subclasses fill in the class attributes and the two methods.

    Attributes:
        name: `cronjobs`, `oban-py`, `procrastinate`.
        version: the installed version, as shown in the table.
        done_sql: counts the jobs finished so far.
        times_sql: epoch seconds of every finished job.
        hard_timeout, at_least_once: what the system guarantees, in a few words.
        copyable: its filled database is all its state (no broker), so the drains may
            run on copies of one filled database (`bench.peers.filled`).
    """

    name = ""
    version = ""
    done_sql = ""
    times_sql = ""
    copyable = False
    hard_timeout = ""
    at_least_once = ""

    def prepare(self, url: str, ns: str, jobs: int) -> None:
        """Install the system's tables in the empty database of `url` and insert `jobs`
        no-op jobs (`ns`: this run's Redis prefix, used by cronjobs only)."""
        raise NotImplementedError

    def start(self, url: str, ns: str, slots: int, processes: int) -> procs.Procs:
        """Start `processes` x `slots` workers on the database of `url`."""
        raise NotImplementedError


class Cronjobs(System):
    """cronjobs on PostgreSQL with the Redis broker, as `bench.throughput` runs it."""

    name = "cronjobs"
    done_sql = "SELECT count(*) FROM cronjob_queue WHERE status = 'completed'"
    times_sql = ("SELECT EXTRACT(EPOCH FROM finished_at AT TIME ZONE 'UTC')::float8 "
                 "FROM cronjob_queue WHERE status = 'completed'")
    hard_timeout = "yes: the job process is killed at MAX_RUNTIME"
    at_least_once = ("leased rows, lease renewed while the job runs; a dead worker's rows go "
                     "back to pending after the lease (recover-stale)")

    def __init__(self) -> None:
        self.version = version("cronjobs")

    def prepare(self, url: str, ns: str, jobs: int) -> None:
        stores.migrate_to_head(url)
        app = stores.make_app(url, ns)
        stores.dispatch_rows(app, jobs, stores.NOOP)
        app.close()
        use(None)

    def start(self, url: str, ns: str, slots: int, processes: int) -> procs.Procs:
        return procs.cronjobs_worker(stores.worker_env(url, ns), slots, processes)


class _Peer(System):
    """A peer: set up by `python -m bench.peer_apps` under its own interpreter."""

    peer = ""
    python = sys.executable
    copyable = True

    def prepare(self, url: str, ns: str, jobs: int) -> None:
        cmd = [self.python, "-m", "bench.peer_apps", self.peer, "--dsn", libpq_dsn(url),
               "--jobs", str(jobs)]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"{self.name} set-up failed ({done.returncode}):\n"
                               f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
        json.loads(done.stdout.strip().splitlines()[-1])  # its result line, or an error

    def env(self) -> dict:
        """The worker's environment: ours, without variables of the peer's own."""
        return {k: v for k, v in os.environ.items()
                if not k.startswith(("OBAN_", "PROCRASTINATE_"))}


class ObanPy(_Peer):
    """Oban for Python in a venv of its own (Python 3.12)."""

    name = "oban-py"
    peer = "oban"
    done_sql = "SELECT count(*) FROM oban_jobs WHERE state = 'completed'"
    times_sql = ("SELECT EXTRACT(EPOCH FROM completed_at AT TIME ZONE 'UTC')::float8 "
                 "FROM oban_jobs WHERE state = 'completed'")
    hard_timeout = "no: asyncio.timeout, fires at the job's next await only"
    at_least_once = ("lifeline (leader, every 60 s) puts back jobs executing for over 300 s, "
                     "even if they still run")

    def __init__(self) -> None:
        self.python, self.version = oban_venv()

    def start(self, url: str, ns: str, slots: int, processes: int) -> procs.Procs:
        cmd = [self.python, "-m", "oban", "start", "--dsn", libpq_dsn(url), "--queues",
               f"default:{slots}", "--log-level", "WARNING"]
        return procs.Procs(procs.Proc(cmd, f"oban-py {i + 1}/{processes}", self.env())
                           for i in range(processes))


class Procrastinate(_Peer):
    """Procrastinate from the project's venv (the `bench` extra)."""

    name = "procrastinate"
    peer = "procrastinate"
    done_sql = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
    times_sql = ("SELECT EXTRACT(EPOCH FROM at)::float8 FROM procrastinate_events "
                 "WHERE type = 'succeeded'")
    hard_timeout = "no: no per-job timeout"
    at_least_once = ("a dead worker's jobs stay doing unless the app schedules "
                     "retry_stalled_jobs")

    def __init__(self) -> None:
        if importlib.util.find_spec("procrastinate") is None:
            raise Unavailable("procrastinate is not installed in this venv: "
                              "pip install -e '.[bench]'")
        try:
            self.version = version("procrastinate")
        except PackageNotFoundError as exc:
            raise Unavailable(f"procrastinate has no package metadata: {exc}") from exc

    def start(self, url: str, ns: str, slots: int, processes: int) -> procs.Procs:
        cmd = [self.python, "-m", "procrastinate", "--log-level", "warning", "--app",
               "bench.peer_apps.procrastinate_noop.app", "worker", "--queues", "default",
               "--concurrency", str(slots)]
        env = dict(self.env(), BENCH_PEER_DSN=libpq_dsn(url))
        return procs.Procs(procs.Proc(cmd, f"procrastinate {i + 1}/{processes}", env)
                           for i in range(processes))


def find_python312() -> str:
    """A Python 3.12 interpreter: `$BENCH_PYTHON312`, `python3.12` on PATH, or pyenv's.

    Raises:
        Unavailable: none of them exists or is 3.12.
    """
    pyenv = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    candidates = [os.environ.get("BENCH_PYTHON312"), shutil.which("python3.12"),
                  *sorted(glob.glob(f"{pyenv}/versions/3.12.*/bin/python"), reverse=True)]
    for path in filter(None, candidates):
        try:
            out = subprocess.run([path, "-c", "import sys; print(sys.version_info[:2])"],
                                 capture_output=True, text=True, timeout=30).stdout
        except OSError:
            continue
        if out.strip() == "(3, 12)":
            return path
    raise Unavailable(f"no Python 3.12 found: looked for $BENCH_PYTHON312, python3.12 on "
                      f"PATH and {pyenv}/versions/3.12.*/bin/python")


def _imports_oban(python: Path) -> bool:
    """Whether `python` runs and imports oban (a kept venv whose base Python went away
    does not)."""
    try:
        return subprocess.run([str(python), "-c", "import oban"], capture_output=True,
                              timeout=60).returncode == 0
    except OSError:
        return False


def oban_venv() -> tuple[str, str]:
    """The Oban venv's Python and `oban <version>, Python <version>`; the venv is made on
    first use under `bench/.venvs/` (`pip install oban==0.7.0`) and kept.

    Raises:
        Unavailable: no Python 3.12, or the venv or the install failed (the last line of
            pip's output says why).
    """
    venv = VENVS / f"oban-{OBAN_VERSION}-py3.12"
    python, stamp = venv / "bin" / "python", venv / ".installed"
    if not stamp.exists() or not _imports_oban(python):
        base = find_python312()
        shutil.rmtree(venv, ignore_errors=True)
        print(f"oban-py: making {venv.relative_to(ROOT)} with {base} "
              f"(pip install oban=={OBAN_VERSION})", flush=True)
        for cmd in ([base, "-m", "venv", str(venv)],
                    [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                     f"oban=={OBAN_VERSION}"]):
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                lines = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
                raise Unavailable(f"{' '.join(cmd[1:4])} failed: {lines[-1]}")
        probe = ("import oban, platform; "
                 "print(f'{oban.__version__}, Python {platform.python_version()}')")
        out = subprocess.run([str(python), "-c", probe], capture_output=True, text=True,
                             timeout=60)
        if out.returncode != 0:
            raise Unavailable(f"oban does not import in {venv}: {out.stderr.strip()[-300:]}")
        stamp.write_text(out.stdout.strip() + "\n")
    return str(python), stamp.read_text().strip()


def available() -> tuple[list[System], dict[str, str]]:
    """cronjobs and every peer that can run here, and `{peer: why not}` for the others.

    A peer that cannot run is announced with one line: `oban-py: skipped (...)`.
    """
    systems: list[System] = [Cronjobs()]
    skipped: dict[str, str] = {}
    for name, make in (("oban-py", ObanPy), ("procrastinate", Procrastinate)):
        try:
            systems.append(make())
        except Unavailable as exc:
            skipped[name] = str(exc)
            print(f"{name}: skipped ({exc})", flush=True)
    return systems, skipped

"""deploy/: the supervisor and systemd files name the same commands and flags (a queue's
systemd drop-in the same slots too), restart on exit, treat exit 0 as expected, and wait
longer than the worker's shutdown timeout; the example settings load, and each queue they
limit has a worker program of its own; the dashboard runs from both, its token read from
an environment file that neither names a value in (the supervisor line, run as supervisor
runs it, serves the pages with the token of that file)."""

from __future__ import annotations

import configparser
import shlex
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

DEPLOY = ROOT / "deploy"


def supervisor_programs() -> dict[str, dict]:
    conf = configparser.RawConfigParser()
    conf.read(DEPLOY / "supervisor" / "cronjobs.conf")
    return {s.removeprefix("program:"): dict(conf[s]) for s in conf.sections()
            if s.startswith("program:")}


def systemd_unit(name: str) -> dict:
    conf = configparser.RawConfigParser(strict=False)
    conf.optionxform = str
    conf.read(DEPLOY / "systemd" / name)
    return dict(conf["Service"])


def dropin_exec_start(queue: str) -> str | None:
    """The ExecStart a queue's drop-in sets (after its `ExecStart=` reset), or None."""
    folder = DEPLOY / "systemd" / f"cronjobs-worker@{queue}.service.d"
    if not folder.is_dir():
        return None
    lines = [line.strip() for path in sorted(folder.glob("*.conf"))
             for line in path.read_text().splitlines()]
    starts = [line.removeprefix("ExecStart=") for line in lines if line.startswith("ExecStart=")]
    assert starts[0] == "", f"{folder}: reset ExecStart= first"
    return starts[-1]


def cronjobs_args(command: str) -> list[str]:
    """The arguments of the `cronjobs` a command line starts (directly, or as the `exec` of
    a `/bin/sh -c` that reads an environment file first)."""
    argv = shlex.split(command)
    if argv[:2] == ["/bin/sh", "-c"]:
        argv = shlex.split(argv[2].rpartition("exec ")[2])
    assert argv[0].endswith("/cronjobs"), argv
    return argv[1:]


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_workers_and_scheduler_are_in_step():
    programs = supervisor_programs()
    worker_unit = systemd_unit("cronjobs-worker@.service")
    scheduler_unit = systemd_unit("cronjobs-scheduler.service")
    workers = {n: p for n, p in programs.items() if n.startswith("cronjobs-worker-")}
    assert set(workers) == {"cronjobs-worker-default", "cronjobs-worker-maintenance",
                            "cronjobs-worker-broadcast"}
    for name, program in workers.items():
        queue = name.removeprefix("cronjobs-worker-")
        args = cronjobs_args(program["command"])
        dropin = dropin_exec_start(queue)
        if dropin is not None:
            assert cronjobs_args(dropin) == args, (name, dropin)
        unit_args = cronjobs_args(worker_unit["ExecStart"].replace("%i", queue))
        same = [a for a in args if a not in ("--slots", flag(args, "--slots"))]
        unit_same = [a for a in unit_args if a not in ("--slots", flag(unit_args, "--slots"))]
        assert same == unit_same, (name, args, unit_args)
        timeout = float(flag(args, "--shutdown-timeout"))
        assert float(program["stopwaitsecs"]) > timeout
        assert float(worker_unit["TimeoutStopSec"]) > timeout
        assert program["autorestart"] == "true" and program["exitcodes"] == "0"
    assert cronjobs_args(programs["cronjobs-scheduler"]["command"]) == \
        cronjobs_args(scheduler_unit["ExecStart"]) == ["scheduler"]
    for unit in (worker_unit, scheduler_unit):
        assert unit["Restart"] == "always" and unit["KillMode"] == "mixed"


def test_deployed_commands_parse():
    """Every command line the files name is accepted by the CLI (`--help` after it)."""
    commands = [p["command"] for p in supervisor_programs().values()]
    commands.append(systemd_unit("cronjobs-worker@.service")["ExecStart"].replace("%i", "default"))
    commands.append(dropin_exec_start("broadcast"))
    commands.append(systemd_unit("cronjobs-dashboard.service")["ExecStart"])
    for command in commands:
        args = cronjobs_args(command)
        out = subprocess.run([sys.executable, "-m", "cronjobs", args[0], "--help"],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        for option in (a for a in args if a.startswith("--")):
            assert option in out.stdout, (option, args[0])


def test_the_example_settings_load_and_limited_queues_have_their_worker():
    from cronjobs.config import Settings

    settings = Settings.load({"CRONJOBS_CONFIG": str(DEPLOY / "cronjobs.toml")})
    assert settings.queue_settings("broadcast").rate_limit == "30/s"
    programs = supervisor_programs()
    for queue in settings.queues:
        args = cronjobs_args(programs[f"cronjobs-worker-{queue}"]["command"])
        assert flag(args, "--queues") == queue
        assert dropin_exec_start(queue) is not None, queue


DASHBOARD_ENV = "/etc/cronjobs/dashboard.env"


def test_the_dashboard_runs_from_both_with_its_token_from_an_environment_file():
    program = supervisor_programs()["cronjobs-dashboard"]
    unit = systemd_unit("cronjobs-dashboard.service")
    args = cronjobs_args(program["command"])
    assert args == cronjobs_args(unit["ExecStart"]) == [
        "dashboard", "--host", "127.0.0.1", "--port", "8080"]
    assert unit["EnvironmentFile"] == DASHBOARD_ENV
    assert f". {DASHBOARD_ENV} && exec " in program["command"]
    assert program["autorestart"] == "true" and program["stopsignal"] == "TERM"
    assert unit["Restart"] == "always" and unit["KillMode"] == "mixed"
    for path in (DEPLOY / "supervisor" / "cronjobs.conf",
                 DEPLOY / "systemd" / "cronjobs-dashboard.service"):
        for line in path.read_text().splitlines():  # a value only in a comment's example
            assert "DASHBOARD_TOKEN" not in line or line.lstrip().startswith((";", "#")), line


def test_the_supervisor_dashboard_line_serves_with_the_token_of_its_file(tmp_path):
    """The program's command run as supervisor runs it (split, then exec'd; this venv's
    cronjobs, a file of our own and port 0 in place of the deployed paths and port): the
    dashboard starts with the file's token, answers it, refuses another, and ends 0 on TERM."""
    import signal

    from conftest import cli_env

    token = "deploy-test-token-" + "x" * 20
    env_file = tmp_path / "dashboard.env"
    env_file.write_text(f"CRONJOBS_DASHBOARD_TOKEN={token}\n")
    command = (supervisor_programs()["cronjobs-dashboard"]["command"]
               .replace(DASHBOARD_ENV, str(env_file))
               .replace("/opt/cronjobs/.venv/bin/cronjobs",
                        str(Path(sys.executable).parent / "cronjobs"))
               .replace("--port 8080", "--port 0"))
    env = cli_env(f"sqlite:///{tmp_path / 'cj.db'}")
    assert subprocess.run([sys.executable, "-m", "cronjobs", "migrate", "--quiet"], env=env,
                          cwd=tmp_path).returncode == 0
    log = tmp_path / "dashboard.log"
    with log.open("w") as stderr, subprocess.Popen(shlex.split(command), env=env, cwd=tmp_path,
                                                   text=True, stdout=subprocess.PIPE,
                                                   stderr=stderr) as proc:
        try:
            served(proc, token)
        finally:
            proc.send_signal(signal.SIGTERM)  # the shell exec'd the dashboard: TERM reaches it
            assert proc.wait(timeout=30) == 0, log.read_text()


def served(proc: subprocess.Popen, token: str) -> None:
    """The dashboard `proc` printed its address, answers `token` and refuses another."""
    first = proc.stdout.readline()
    url = first.split("dashboard at ", 1)[1].split()[0].rstrip("/")
    assert answer(url + "/api/overview", token) == 200
    assert answer(url + "/api/overview", "not-" + token) == 401


def answer(url: str, bearer: str) -> int:
    """The HTTP status of GET `url` with `bearer` as its token."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {bearer}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code

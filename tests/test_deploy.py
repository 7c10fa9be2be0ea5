"""deploy/: the supervisor and systemd files name the same commands and flags (a queue's
systemd drop-in the same slots too), restart on exit, treat exit 0 as expected, and wait
longer than the worker's shutdown timeout; the example settings load, and each queue they
limit has a worker program of its own."""

from __future__ import annotations

import configparser
import shlex
import subprocess
import sys

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
    argv = shlex.split(command)
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

"""Run `cronjobs` with its standard output and error on a pseudo-terminal (as in a shell),
or piped, and capture what it wrote."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

from conftest import run_cli


def run_on_tty(args: list[str], env: dict, cwd: Path, stdin: bytes | None = None,
               timeout: float = 120) -> tuple[int, str]:
    """Run `cronjobs ARGS` with stdout and stderr on one pseudo-terminal (`pty.openpty`);
    `stdin` is written to a pipe (None: no input). The terminal does not turn `\\n` into
    `\\r\\n`, so every carriage return in the text is the program's own.

    Returns:
        (exit status, everything written to the terminal, decoded).
    """
    master, slave = pty.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.ONLCR  # output flags: keep "\n" as it is
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    proc = subprocess.Popen([sys.executable, "-m", "cronjobs", *args], env=env, cwd=cwd,
                            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                            stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    writer = None
    if stdin is not None:
        writer = threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True)
        writer.start()
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the program closed the terminal's last writer
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(max(1.0, deadline - time.monotonic()))
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if writer is not None:
        writer.join(10)
    return code, b"".join(chunks).decode("utf-8", "replace")


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
    except BrokenPipeError:  # it stopped reading (a bad line): fine
        pass
    finally:
        try:
            pipe.close()
        except BrokenPipeError:
            pass


def run_piped(args: list[str], env: dict, cwd: Path, stdin: bytes | None = None,
              timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `cronjobs ARGS` with stdout and stderr piped (text), `stdin` as its input."""
    if stdin is None:
        return run_cli(args, env, timeout=timeout, cwd=cwd)
    done = subprocess.run([sys.executable, "-m", "cronjobs", *args], env=env, cwd=cwd,
                          input=stdin, capture_output=True, timeout=timeout)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(),
                                       done.stderr.decode())

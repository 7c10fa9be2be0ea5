"""The fork server started fresh: `python -m cronjobs.worker.preload FD` (`forkserver.ForkServer
.spawn`), where forking it from the worker cannot be done (the worker runs threads). FD is
its end of the socket pair; it preloads the App and serves until the worker's end closes
(`jobprocess.run_server`), then exits."""

from __future__ import annotations

import socket
import sys

from .jobprocess import run_server


def main(argv: list[str]) -> int:
    """Run the fork server on the socket descriptor `argv[1]`; returns the exit code."""
    run_server(socket.socket(fileno=int(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""Set up a peer's database: `python -m bench.peer_apps oban|procrastinate --dsn DSN --jobs N`.

Installs the peer's schema in the (empty) database of DSN and inserts N no-op jobs with
the peer's own bulk call, then prints one JSON line: the peer, its version, the Python
version, the jobs inserted and the seconds the insert took. Run with the peer's Python.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import platform
import time

MODULES = {"oban": "bench.peer_apps.oban_noop",
           "procrastinate": "bench.peer_apps.procrastinate_noop"}


def main() -> None:
    """Parse the command line, set the database up, print the JSON line."""
    parser = argparse.ArgumentParser(prog="python -m bench.peer_apps", description=__doc__)
    parser.add_argument("peer", choices=sorted(MODULES))
    parser.add_argument("--dsn", required=True, help="postgresql://user@host:port/database")
    parser.add_argument("--jobs", type=int, required=True, help="no-op jobs to insert")
    args = parser.parse_args()
    # imported by name: each peer lives in its own interpreter, the other is not installed
    module = importlib.import_module(MODULES[args.peer])
    start = time.monotonic()
    asyncio.run(module.setup(args.dsn, args.jobs))
    print(json.dumps({"peer": args.peer, "version": module.VERSION,
                      "python": platform.python_version(), "jobs": args.jobs,
                      "seconds": round(time.monotonic() - start, 3)}), flush=True)


if __name__ == "__main__":
    main()

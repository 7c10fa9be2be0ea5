"""`make bench`: run every scenario, then write `bench/results/latest.json`, `latest.md`
(the table in Markdown) and a dated copy in `bench/results/runs/` (git-ignored: only the
latest run and the before/after sets a note cites are committed), and print the table.

Usage: python -m bench [--quick] [--only a,b] [--results DIR]
(`make bench BENCH_ARGS="--only peers"`: one section; its figures replace theirs in
`latest.json`, the other scenarios are kept from the last run; the dated copy holds
this run only.)
Each scenario runs as its own process (`python -m bench.<scenario>`), one after the
other; a scenario that fails is reported and the others still run (exit status 1).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from . import report

SCENARIOS = ("dispatch", "tick", "schedules", "latency", "throughput", "flow", "families",
             "rate", "steady", "memory", "cleanup", "cli", "peers")


def main(argv: list[str] | None = None) -> int:
    """Run the suite; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    parser.add_argument("--only", help=f"comma-separated subset of {', '.join(SCENARIOS)}")
    parser.add_argument("--results", type=Path, default=report.RESULTS,
                        help="folder for latest.json and the dated copy (%(default)s)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",")] if args.only else list(SCENARIOS)
    unknown = set(names) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario {sorted(unknown)[0]!r}; choose from {', '.join(SCENARIOS)}")
    started = datetime.now(UTC)
    start = time.monotonic()
    scenarios, failed = [], []
    with tempfile.TemporaryDirectory(prefix="cjbench-") as tmp:
        for name in names:
            out = Path(tmp) / f"{name}.json"
            cmd = [sys.executable, "-m", f"bench.{name}", "--out", str(out)]
            print(f"== {name}", flush=True)
            t = time.monotonic()
            code = subprocess.call(cmd + (["--quick"] if args.quick else []))
            print(f"== {name}: {time.monotonic() - t:.0f} s", flush=True)
            if code != 0 or not out.exists():
                failed.append(name)
                continue
            scenarios.append(json.loads(out.read_text()))
    data = {"suite": "cronjobs bench", "quick": args.quick,
            "started": started.isoformat(timespec="seconds"),
            "seconds": round(time.monotonic() - start, 1), "machine": report.machine(),
            "failed": failed,
            "scenarios": [{k: v for k, v in s.items() if k != "machine"} for s in scenarios]}
    stamp = started.strftime("%Y-%m-%dT%H%M%SZ")
    report.write_json(args.results / "runs" / f"{stamp}.json", data)
    latest = _merged(args.results / "latest.json", data) if args.only else data
    report.write_json(args.results / "latest.json", latest)
    (args.results / "latest.md").write_text(report.markdown(latest["scenarios"]) + "\n")
    print()
    print(report.table(data["scenarios"]))
    print(f"\nsuite: {data['seconds']:.0f} s; results in {args.results}/latest.json and "
          f"runs/{stamp}.json" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def _merged(path: Path, data: dict) -> dict:
    """`data` of a run with `--only`, merged into the `latest.json` at `path`.

    The scenarios run now replace theirs; the others are kept from the earlier run (each
    scenario has its own `started`), listed in `kept`. Without an earlier file, or when
    one run is `--quick` and the other is not, `data` alone.
    """
    try:
        previous = json.loads(path.read_text())
    except (OSError, ValueError):
        return data
    if previous.get("quick") != data["quick"]:
        return data
    now = {s["scenario"]: s for s in data["scenarios"]}
    kept = [s for s in previous.get("scenarios", []) if s["scenario"] not in now]
    order = {name: i for i, name in enumerate(SCENARIOS)}
    scenarios = sorted(kept + data["scenarios"], key=lambda s: order.get(s["scenario"], 99))
    return dict(data, scenarios=scenarios,
                kept={s["scenario"]: s["started"] for s in kept})


if __name__ == "__main__":
    sys.exit(main())

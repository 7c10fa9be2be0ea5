"""Figures, same-run baselines, targets (PASS/MISS), the machine, JSON and the table.

A scenario builds a `Results`, adds `Figure`s (a value, optionally a baseline measured in
the same run and the ratio value/baseline, optionally a target on the value or the
ratio), optionally tables of its own (`add_table`, printed after the figures) and
details (raw measurements, kept in the JSON only), and calls `main()` through
`scenario_main()`, which parses `--quick` and `--out`, times the run, records the
machine's load before and after, writes the JSON and prints the table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
OPS = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b}


@dataclass
class Figure:
    """One measured figure.

    Attributes:
        name: what was measured (`drain no-op 2x8 mariadb`).
        value: the measurement, in `unit` (None when it could not be measured).
        unit: `jobs/s`, `ms`, `MB`, `rows/s`, `%`, `s`.
        baseline_name: what it is compared with (measured in the same run).
        baseline: the baseline's value, in the same unit.
        ratio: value / baseline.
        target: e.g. `[">=", 1.0, "ratio"]` or `["<=", 25, "value"]`.
        verdict: `PASS`, `MISS` or None (no target).
        note: context (sizes, caps hit, why something is missing).
    """

    name: str
    value: float | None
    unit: str
    baseline_name: str | None = None
    baseline: float | None = None
    ratio: float | None = None
    target: list | None = None
    verdict: str | None = None
    note: str = ""

    def target_text(self) -> str:
        """The target as text: `>= 1.0 x` (ratio) or `<= 25 ms` (value)."""
        if not self.target:
            return ""
        op, limit, on = self.target
        return f"{op} {limit:g} x" if on == "ratio" else f"{op} {limit:g} {self.unit}"


@dataclass
class Results:
    """The figures of one scenario run."""

    scenario: str
    params: dict = field(default_factory=dict)
    figures: list[Figure] = field(default_factory=list)
    started: str = ""
    seconds: float = 0.0
    load_before: list = field(default_factory=list)
    load_after: list = field(default_factory=list)
    tables: list[dict] = field(default_factory=list)
    details: dict = field(default_factory=dict)

    def add_table(self, title: str, columns: list[str], rows: list[list[str]]) -> None:
        """Add a table of text cells, printed (and written to `latest.md`) after the figures.

        Args:
            title: one line above the table.
            columns: the header cells.
            rows: lists of cells, as many as `columns`.

        Raises:
            ValueError: a row has another number of cells than `columns`.
        """
        for row in rows:
            if len(row) != len(columns):
                raise ValueError(f"table {title!r}: row {row!r} has {len(row)} cells, "
                                 f"not {len(columns)}")
        self.tables.append({"title": title, "columns": list(columns),
                            "rows": [[str(c) for c in row] for row in rows]})

    def add(self, name: str, value: float | None, unit: str, *, baseline: float | None = None,
            baseline_name: str | None = None, target: tuple | None = None,
            note: str = "") -> Figure:
        """Add a figure; the ratio and the verdict are computed here.

        Args:
            target: `(op, limit, on)` with op `>=` or `<=` and on `value` or `ratio`.
        """
        ratio = None
        if value is not None and baseline:
            ratio = value / baseline
        verdict = None
        if target is not None:
            op, limit, on = target
            subject = ratio if on == "ratio" else value
            verdict = "MISS" if subject is None else ("PASS" if OPS[op](subject, limit) else "MISS")
        fig = Figure(name, _round(value), unit, baseline_name, _round(baseline), _round(ratio, 3),
                     list(target) if target else None, verdict, note)
        self.figures.append(fig)
        return fig

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return {"scenario": self.scenario, "started": self.started,
                "seconds": round(self.seconds, 1),
                "load_before": self.load_before, "load_after": self.load_after,
                "params": self.params, "figures": [asdict(f) for f in self.figures],
                "tables": self.tables, "details": self.details}


def _round(value: float | None, digits: int = 2) -> float | None:
    """`digits` decimals, but at least 4 significant digits (a 0.38 s baseline rounded to
    2 decimals would move its ratio by up to 1.3 %)."""
    if value is None:
        return None
    if value == 0 or abs(value) >= 1e6:
        return round(float(value))
    return round(float(value), max(digits, 3 - math.floor(math.log10(abs(value)))))


def _version(module: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(module)
    except PackageNotFoundError:
        return None


def _server_versions() -> dict:
    import sqlalchemy as sa

    from .stores import MARIADB, POSTGRES, REDIS

    out: dict = {}
    for key, url, sql in (("mariadb", MARIADB + "/test", "SELECT VERSION()"),
                          ("postgresql", POSTGRES + "/test", "SHOW server_version")):
        try:
            engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
            with engine.connect() as conn:
                out[key] = conn.exec_driver_sql(sql).scalar()
            engine.dispose()
        except Exception as exc:  # a server that is down is reported, not fatal here
            out[key] = f"unavailable ({type(exc).__name__})"
    try:
        import redis

        client = redis.Redis.from_url(REDIS)
        out["redis"] = client.info("server")["redis_version"]
        client.close()
    except Exception as exc:
        out["redis"] = f"unavailable ({type(exc).__name__})"
    import sqlite3

    out["sqlite"] = sqlite3.sqlite_version
    return out


def machine() -> dict:
    """The machine and the versions the figures depend on."""
    import psutil

    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores_logical": os.cpu_count(),
        "cores_physical": psutil.cpu_count(logical=False),
        "memory_gb": round(psutil.virtual_memory().total / 1e9, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        **_server_versions(),
        **{name: _version(name) for name in ("dramatiq", "celery", "kombu", "SQLAlchemy",
                                             "PyMySQL", "psycopg", "redis")},
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def _fixed(rows: list) -> str:
    """Rows of text cells (the first is the header) as a fixed-width table."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def table(scenarios: list[dict]) -> str:
    """The figures of `scenarios` (dicts as saved) as a fixed-width text table, then the
    scenarios' own tables."""
    head = ("scenario", "figure", "value", "baseline (same run)", "ratio", "target", "")
    rows = [head]
    for sc in scenarios:
        for f in sc["figures"]:
            value = "-" if f["value"] is None else f"{f['value']:g} {f['unit']}"
            base = "" if f["baseline"] is None else f"{f['baseline']:g} {f['baseline_name']}"
            ratio = "" if f["ratio"] is None else f"{f['ratio']:.3f}"
            fig = Figure(**f)
            rows.append((sc["scenario"], f["name"], value, base, ratio, fig.target_text(),
                         f["verdict"] or ""))
    out = [_fixed(rows)]
    for sc in scenarios:
        for t in sc.get("tables", []):
            out.append(f"{sc['scenario']}: {t['title']}\n" + _fixed([t["columns"], *t["rows"]]))
    return "\n\n".join(out)


def markdown(scenarios: list[dict]) -> str:
    """The same table in Markdown (for docs/performance.md)."""
    out = ["| scenario | figure | value | baseline (same run) | ratio | target | |",
           "|---|---|---|---|---|---|---|"]
    for sc in scenarios:
        for f in sc["figures"]:
            fig = Figure(**f)
            value = "–" if f["value"] is None else f"{f['value']:g} {f['unit']}"
            base = "" if f["baseline"] is None else f"{f['baseline']:g} ({f['baseline_name']})"
            ratio = "" if f["ratio"] is None else f"{f['ratio']:.3f}"
            out.append(f"| {sc['scenario']} | {f['name']} | {value} | {base} | {ratio} | "
                       f"{fig.target_text()} | {f['verdict'] or ''} |")
    for sc in scenarios:
        for t in sc.get("tables", []):
            out += ["", f"**{sc['scenario']}: {t['title']}**", "",
                    "| " + " | ".join(t["columns"]) + " |",
                    "|" + "---|" * len(t["columns"])]
            out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |"
                    for row in t["rows"]]
    return "\n".join(out)


def write_json(path: Path, data: dict) -> None:
    """Write `data` as indented JSON to `path` (folders created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")


def scenario_main(name: str, doc: str, run: Callable[[argparse.Namespace, Results], None],
                  add_args: Callable[[argparse.ArgumentParser], None] | None = None,
                  argv: list[str] | None = None) -> dict:
    """Parse the command line, run one scenario, save and print its figures.

    Every scenario takes `--quick` (small sizes: a smoke run of a few seconds) and
    `--out FILE` (default `bench/results/scenario-<scenario>.json`).

    Returns:
        The saved dict: `{"machine": {...}, **results}`.
    """
    parser = argparse.ArgumentParser(prog=f"python -m bench.{name}", description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    parser.add_argument("--out", type=Path, default=RESULTS / f"scenario-{name}.json",
                        help="JSON file to write (default: %(default)s)")
    if add_args:
        add_args(parser)
    args = parser.parse_args(argv)
    results = Results(name, started=datetime.now(UTC).isoformat(timespec="seconds"))
    results.load_before = [round(x, 2) for x in os.getloadavg()]
    start = time.monotonic()
    run(args, results)
    results.seconds = time.monotonic() - start
    results.load_after = [round(x, 2) for x in os.getloadavg()]
    data = {"machine": machine(), **results.to_dict()}
    write_json(args.out, data)
    print(table([data]))
    print(f"({name}: {results.seconds:.0f} s; JSON in {args.out})", file=sys.stderr)
    return data

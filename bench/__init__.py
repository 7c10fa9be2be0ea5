"""The cronjobs benchmark suite (`make bench`; docs/performance.md).

Every scenario is a module run as `python -m bench.<scenario> [--quick] [--out FILE]` from
the repository root; `python -m bench` runs them all and writes `bench/results/latest.json`
and a dated copy (in `bench/results/runs/`, not committed). Shared helpers: `bench.stores`
(databases, Redis namespaces, Apps), `bench.procs` (worker processes, waiting for
completions, memory of a process tree) and `bench.report` (figures, baselines, targets,
JSON, the table).
"""

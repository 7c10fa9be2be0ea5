"""No import cycle among the modules of src/ (`cronjobs`, `handlers`, `registry`), counting
imports inside functions: the import-linter contracts check cycles within each package,
this checks every module against every other, across the three."""

from __future__ import annotations

import grimp

ROOTS = ("cronjobs", "handlers", "registry")

# Imports that may close a cycle on purpose, as (importer, imported), each with its reason.
# Empty: every cycle found so far was broken by moving code (tasks.py out of the
# scheduler, health/check.py under the report and the checks). A lazy import for start-up
# time (the CLI's per-command imports, `cronjobs.__getattr__`) goes from a higher module
# down, which is no cycle.
ALLOWED: set[tuple[str, str]] = set()


def _graph() -> dict[str, set[str]]:
    graph = grimp.build_graph(*ROOTS, include_external_packages=False, cache_dir=None)
    ours = {m for m in graph.modules if m.split(".")[0] in ROOTS}
    return {m: {i for i in graph.find_modules_directly_imported_by(m)
                if i in ours and (m, i) not in ALLOWED} for m in ours}


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_the_cycle_finder_finds_a_cycle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(edges) == [["a", "b", "c"]]


def test_no_import_cycle_among_the_modules_of_src():
    edges = _graph()
    assert {"cronjobs.worker.loop", "registry", "handlers.HealthCheck"} <= set(edges)
    assert "cronjobs.job.executor" in edges["cronjobs.queue"]  # imported inside a function
    assert _cycles(edges) == []

# cronjobs — the two commands: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The package alone: what `make run` needs.
RUN_STAMP := $(VENV)/.installed-run
# With the test and bench extras: what `make test` needs.
STAMP := $(VENV)/.installed
# The second Python of `make test`: the newest CPython on the machine, in a venv of its own
# with the test extras, runs the core subset (pytest -m core; docs/development.md). It is
# found as ~/.pyenv/versions/$(NEWEST).*/bin/python3 or python$(NEWEST) on PATH;
# `make test PYTHON_NEWEST=/path/to/python3.13` names it.
NEWEST := 3.13
PYTHON_NEWEST ?=
VENV_NEWEST := .venv$(subst .,,$(NEWEST))
BIN_NEWEST := $(VENV_NEWEST)/bin
STAMP_NEWEST := $(VENV_NEWEST)/.installed
PYTEST := python -m pytest -p no:cacheprovider
# `make bench`'s venv: the package and the bench extra, no test tools.
BENCH_VENV := .venv-bench
BENCH_BIN := $(BENCH_VENV)/bin
BENCH_STAMP := $(BENCH_VENV)/.installed
# The core subset: the tests marked `core`, collected from the files that mark them only
# (collecting every file would import the bench's tools, not installed there).
CORE_TESTS = -m core $(shell grep -l 'pytest\.mark\.core' tests/test_*.py)

.PHONY: run test test-core test-faults bench services clean docs docs-reference

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# An editable install is not byte-compiled (pip compiles the wheels it installs): compile
# the package's own modules, so that a process started where PYTHONDONTWRITEBYTECODE is set
# (container images often set it) does not compile them again at every start.
$(RUN_STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e .
	$(BIN)/python -m compileall -q src > /dev/null
	touch $(RUN_STAMP)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e ".[test,bench]"
	$(BIN)/python -m compileall -q src > /dev/null
	touch $(STAMP) $(RUN_STAMP)

$(BIN_NEWEST)/python:
	@py="$(PYTHON_NEWEST)"; \
	[ -n "$$py" ] || py=$$(ls -d $$HOME/.pyenv/versions/$(NEWEST).*/bin/python3 2>/dev/null \
	                       | grep -E '/$(subst .,\.,$(NEWEST))\.[0-9]+/bin/' | sort -V | tail -n 1); \
	[ -n "$$py" ] || py=$$(command -v python$(NEWEST) || true); \
	if [ -z "$$py" ] || [ "$$("$$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' \
	                            2>/dev/null)" != "$(NEWEST)" ]; then \
	  echo "make test: no Python $(NEWEST) found (looked for ~/.pyenv/versions/$(NEWEST).*/bin/python3" \
	       "and python$(NEWEST) on PATH). Install it (pyenv install $(NEWEST)) or name it:" \
	       "make test PYTHON_NEWEST=/path/to/python$(NEWEST)" >&2; \
	  exit 1; \
	fi; \
	echo "$$py -m venv $(VENV_NEWEST)"; "$$py" -m venv $(VENV_NEWEST)
	$(BIN_NEWEST)/pip install --quiet --upgrade pip

# The same package on the newest Python, with the test extras (not the bench ones).
$(STAMP_NEWEST): $(BIN_NEWEST)/python pyproject.toml
	$(BIN_NEWEST)/pip install --quiet -e ".[test]"
	$(BIN_NEWEST)/python -m compileall -q src > /dev/null
	touch $(STAMP_NEWEST)

$(BENCH_STAMP): pyproject.toml
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_BIN)/pip install --quiet --upgrade pip
	$(BENCH_BIN)/pip install --quiet -e ".[bench]"
	$(BENCH_BIN)/python -m compileall -q src > /dev/null
	touch $(BENCH_STAMP)

## run: install (the package alone, no test or bench tools), migrate the embedded SQLite
## database, start scheduler + worker + dashboard
run: $(RUN_STAMP)
	$(BIN)/cronjobs migrate
	exec $(BIN)/cronjobs serve

## test: install with test and bench extras, make sure MariaDB/PostgreSQL/Redis/RabbitMQ are up,
## lint (ruff, the rules of pyproject.toml), check the import contracts (import-linter, the
## [tool.importlinter] contracts of pyproject.toml), run every test on Python 3.11 (.venv),
## then the core subset on the newest Python (make test-core); fails if either run fails
test: $(STAMP) $(STAMP_NEWEST) services
	$(BIN)/ruff check src tests bench scripts migrations
	$(BIN)/lint-imports --no-cache
	$(BIN)/$(PYTEST) -n 3 --dist loadfile $(PYTEST_ARGS)
	$(BIN_NEWEST)/$(PYTEST) -n 3 --dist loadfile $(CORE_TESTS) $(PYTEST_ARGS)

## test-core: only the core subset (the worker, its job processes, the fork server, the
## claim: the tests marked core), on the newest Python
test-core: $(STAMP_NEWEST) services
	$(BIN_NEWEST)/$(PYTEST) -n 3 --dist loadfile $(CORE_TESTS) $(PYTEST_ARGS)

## test-faults: only the fault-injection runs (make test runs them too)
test-faults: $(STAMP) services
	$(BIN)/python -m pytest -p no:cacheprovider -m faults -s tests/test_faults.py

## bench: the benchmark suite (< 12 min): figures against same-run baselines, PASS/MISS,
## bench/results/latest.json and a dated copy in bench/results/runs/ (docs/performance.md);
## one section: make bench BENCH_ARGS="--only peers". It runs in a venv of its own with the
## package and the bench extra only (.venv-bench): what a user installs, without the test
## tools (the test extra brings `cryptography`, which PyMySQL imports when it finds it)
bench: $(BENCH_STAMP) services
	$(BENCH_BIN)/python -m bench $(BENCH_ARGS)

services:
	bash scripts/services.sh

## docs: build the documentation site into site/ (MkDocs, offline; make test builds it too)
docs: $(STAMP)
	$(BIN)/mkdocs build --strict

## docs-reference: regenerate docs/reference/configuration.md and cli.md from the code
docs-reference: $(STAMP)
	$(BIN)/python scripts/gen_reference.py

clean:
	rm -rf $(VENV) $(BENCH_VENV) $(VENV_NEWEST) site cronjobs.db cronjobs.db-wal cronjobs.db-shm

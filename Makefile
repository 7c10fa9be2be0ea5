# cronjobs — the two commands: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The package alone: what `make run` needs.
RUN_STAMP := $(VENV)/.installed-run
# With the test and bench extras: what `make test` needs.
STAMP := $(VENV)/.installed

.PHONY: run test test-faults bench services clean docs docs-reference

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

## run: install (the package alone, no test or bench tools), migrate the embedded SQLite
## database, start scheduler + worker + dashboard
run: $(RUN_STAMP)
	$(BIN)/cronjobs migrate
	exec $(BIN)/cronjobs serve

## test: install with test and bench extras, make sure MariaDB/PostgreSQL/Redis/RabbitMQ are up,
## lint (ruff, the rules of pyproject.toml), check the import contracts (import-linter, the
## [tool.importlinter] contracts of pyproject.toml), run every test
test: $(STAMP) services
	$(BIN)/ruff check src tests bench scripts migrations
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest -p no:cacheprovider -n 3 --dist loadfile $(PYTEST_ARGS)

## test-faults: only the fault-injection runs (make test runs them too)
test-faults: $(STAMP) services
	$(BIN)/python -m pytest -p no:cacheprovider -m faults -s tests/test_faults.py

## bench: the benchmark suite (< 12 min): figures against same-run baselines, PASS/MISS,
## bench/results/latest.json and a dated copy in bench/results/runs/ (docs/performance.md);
## one section: make bench BENCH_ARGS="--only peers"
bench: $(STAMP) services
	$(BIN)/python -m bench $(BENCH_ARGS)

services:
	bash scripts/services.sh

## docs: build the documentation site into site/ (MkDocs, offline; make test builds it too)
docs: $(STAMP)
	$(BIN)/mkdocs build --strict

## docs-reference: regenerate docs/reference/configuration.md and cli.md from the code
docs-reference: $(STAMP)
	$(BIN)/python scripts/gen_reference.py

clean:
	rm -rf $(VENV) site cronjobs.db cronjobs.db-wal cronjobs.db-shm

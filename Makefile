# The project's checks, one command for people and CI (.ci/run calls `make check`):
#   make check        lint, format, typecheck, imports, test, then the start-up figure
#   make -k check     the same, going on after a failure (every result in one go)
# Each step runs alone too (`make lint`, `make typecheck`, ...). Tools come from the venv the
# README's install makes; VENV=path for another one. PYTEST_ARGS passes options to pytest
# (e.g. make test PYTEST_ARGS='tests/kb -x').

VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
STARTUP_RUNS ?= 10

.PHONY: check lint format typecheck imports test startup

check: lint format typecheck imports test startup

lint:
	$(BIN)/ruff check .

format:
	$(BIN)/ruff format --check .

typecheck:
	$(BIN)/mypy

imports:
	$(BIN)/lint-imports

test:
	$(BIN)/pytest $(PYTEST_ARGS)

# A figure, not a pass/fail timer: fresh processes of `autoresearch --help` (and two subcommands).
startup:
	$(BIN)/python benchmarks/bench_startup.py --runs $(STARTUP_RUNS)

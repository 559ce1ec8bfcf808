# The project's checks, one command for people and CI (.ci/run calls `make check`):
#   make check        lint, format, typecheck, imports, test, then the start-up figure
#   make -k check     the same, going on after a failure (every result in one go)
#   make test-fast    the quick tier for a developer's loop: every test but the slow, Slurm and
#                     opt-in ones (a few minutes; docs/testing.md lists the tiers)
# Each step runs alone too (`make lint`, `make typecheck`, ...) and says how long it took
# (scripts/timed.sh: `time: lint 2.1 s`). Tools come from the venv the README's install makes;
# VENV=path for another one. PYTEST_ARGS passes options to pytest (e.g. make test
# PYTEST_ARGS='tests/kb -x'; CI adds --durations).

VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
STARTUP_RUNS ?= 10
TIMED := scripts/timed.sh
FAST := not slow and not slurm and not llamacpp

.PHONY: check lint format typecheck imports test test-fast startup

check: lint format typecheck imports test startup

lint:
	$(TIMED) $@ $(BIN)/ruff check .

format:
	$(TIMED) $@ $(BIN)/ruff format --check .

typecheck:
	$(TIMED) $@ $(BIN)/mypy

imports:
	$(TIMED) $@ $(BIN)/lint-imports

test:
	$(TIMED) $@ $(BIN)/pytest $(PYTEST_ARGS)

test-fast:
	$(TIMED) $@ $(BIN)/pytest -m '$(FAST)' $(PYTEST_ARGS)

# A figure, not a pass/fail timer: fresh processes of `autoresearch --help` (and two subcommands).
startup:
	$(TIMED) $@ $(BIN)/python benchmarks/bench_startup.py --runs $(STARTUP_RUNS)

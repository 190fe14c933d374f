# Two commands on a fresh machine:  `make demo`  and  `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

.PHONY: demo test test-slow bench install clean browser

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	# the CPU build of torch first (a local wheel here); an unpinned torch pulls GBs of CUDA
	$(BIN)/python -m pip install --quiet torch==2.13.0 || $(BIN)/python -m pip install --quiet torch --index-url https://download.pytorch.org/whl/cpu
	$(BIN)/python -m pip install --quiet -e ".[test,rl,ray]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/planner plan

# the suite but its slowest checks (marked `slow`); `make test-slow` runs those, CI (.ci/run) runs both
test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

bench: $(STAMP)
	$(BIN)/python benchmarks/evaluator.py

# optional: a headless browser for the HTML report's browser tests (tests/presentation/test_html_report.py
# skips them without one); Debian's chromium package, as root. `make test` does not need it.
browser:
	command -v chromium >/dev/null || { apt-get update && apt-get install -y chromium; }

clean:
	rm -rf $(VENV) .pytest_cache

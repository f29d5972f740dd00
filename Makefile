# Set-up is part of every target: a fresh machine needs only `make demo` or `make test`.
# `make demo` installs what wiretape needs to run; `make test` adds the test and lint tools.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
BASE := $(VENV)/.installed-base
TOOLS := $(VENV)/.installed-test

.PHONY: demo test test-slow test-agents agents lint bench system system-test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(BASE): pyproject.toml | $(BIN)/python
	@$(MAKE) --no-print-directory system
	$(BIN)/python -m pip install -q -e '.[demo]'
	touch $(BASE)

$(TOOLS): pyproject.toml $(BASE)
	@$(MAKE) --no-print-directory system-test
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(TOOLS)

# System packages wiretape drives for real, installed with apt-get when missing:
# curl (required) and faketime (libfaketime, for `--clock recorded`; without it
# that option says so, so a user who is not root only gets a note).
system:
	@command -v curl >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq curl; \
	  else echo "curl is missing: install it (apt-get install curl)"; exit 1; fi; }
	@command -v faketime >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq faketime; \
	  else echo "note: faketime is missing, --clock recorded will not work (apt-get install faketime)"; fi; }

# What only the tests need: chromium, in which the HTML report test opens the
# page (skipped, with a note, without it).
system-test:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium; \
	  else echo "note: chromium is missing, the report test will be skipped (apt-get install chromium)"; fi; }

demo: $(BASE)
	$(BIN)/wiretape demo

# The gates: style and bugs (ruff), types (mypy --strict), the layering of
# docs/DESIGN.md (import-linter contracts in pyproject.toml).
lint: $(TOOLS)
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy
	PYTHONPATH=src $(BIN)/lint-imports --no-cache

# The everyday tier (under 10 minutes on 2 cores); the slow tier holds the
# long trials (real-time stalls, kill -9 crash trials) and the longest
# scenarios, marked `slow`.
test: lint
	$(BIN)/python -m pytest -n 4 -q -m "not slow and not agents"

test-slow: $(TOOLS)
	$(BIN)/python -m pytest -n 4 -q -m slow; status=$$?; [ $$status -eq 5 ] || exit $$status

# The real coding agents (Claude Code, Codex, gemini-cli; npm packages pinned in
# tests/agents/agent_install.py) in a cache shared by every checkout:
# $(XDG_CACHE_HOME or ~/.cache)/wiretape-agents/<hash of the pins>, installed once
# (needs node >= 20 and npm), then reused. `test-agents` runs the tests marked
# `agents` against them (nanobot comes with the test tools).
agents:
	@command -v npm >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq nodejs npm; \
	  else echo "node and npm are missing: install Node.js 20 or newer"; exit 1; fi; }
	$(PYTHON) tests/agents/agent_install.py

test-agents: $(TOOLS) agents
	$(BIN)/python -m pytest -n 2 -q -m agents tests/agents

# The benchmark (bench/README.md) compares with mitmproxy, installed into a
# venv of its own: its pins conflict with the project's. Without it the bench
# says so and measures the rest. BENCH_ARGS: e.g. --quick, --json FILE.
BENCH_VENV := .venv-bench
BENCH_ARGS ?=

$(BENCH_VENV)/.installed:
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q --upgrade pip
	@$(BENCH_VENV)/bin/python -m pip install -q 'mitmproxy>=11,<12' && touch $@ || \
	  echo "note: mitmproxy could not be installed into $(BENCH_VENV); make bench goes on without it"

bench: $(BASE) $(BENCH_VENV)/.installed
	$(BIN)/python bench/agents.py --mitmdump $(BENCH_VENV)/bin/mitmdump $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(BENCH_VENV) .wiretape

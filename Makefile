# Set-up is part of every target: a fresh machine needs only `make demo` or `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench system clean

$(STAMP): pyproject.toml
	@$(MAKE) --no-print-directory system
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

# System packages the tests drive for real (curl); installed with apt-get when missing.
system:
	@command -v curl >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq curl; \
	  else echo "curl is missing: install it (apt-get install curl)"; exit 1; fi; }

demo: $(STAMP)
	$(BIN)/wiretape demo

test: $(STAMP)
	$(BIN)/python -m pytest -n 4 -q

bench: $(STAMP)
	$(BIN)/python bench/latency.py

clean:
	rm -rf $(VENV) .wiretape

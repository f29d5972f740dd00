# Set-up is part of every target: a fresh machine needs only `make demo` or `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench system system-test clean

$(STAMP): pyproject.toml
	@$(MAKE) --no-print-directory system
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

# System packages the tests drive for real, installed with apt-get when missing:
# curl (required) and faketime (libfaketime, for `--clock recorded`; without it
# those tests skip, so a user who is not root only gets a note).
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

demo: $(STAMP)
	$(BIN)/wiretape demo

test: $(STAMP) system-test
	@$(MAKE) --no-print-directory system
	$(BIN)/python -m pytest -n 4 -q

bench: $(STAMP)
	$(BIN)/python bench/latency.py

clean:
	rm -rf $(VENV) .wiretape

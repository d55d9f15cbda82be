# Two commands: `make run` (start Tollgate embedded) and `make test` (the whole suite).
SHELL := /bin/bash
ifdef VIRTUAL_ENV
PY := python
else
PY := .venv/bin/python
endif

.PHONY: run stop test bench bench-peer bench-instructions lint install install-dev

# What the service runs on (requirements.lock), and on top of it the test, bench and lint tools.
install: var/.installed

install-dev: var/.installed-dev

# A current pip first: one before 23.3 warns that lxml has no `html_clean` extra (justext
# asks for it so spelt; lxml names it html-clean, the same extra once normalised: PEP 685).
var/.installed: requirements.lock
	@if [ -z "$$VIRTUAL_ENV" ] && [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
	@$(PY) -m pip install -q --disable-pip-version-check 'pip>=23.3'
	@$(PY) -m pip install -q --disable-pip-version-check -r requirements.lock
	@mkdir -p var && touch var/.installed

var/.installed-dev: var/.installed requirements-dev.txt
	@$(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	@touch var/.installed-dev

run: install
	@PY=$(PY) scripts/run.sh

stop:
	@scripts/stop.sh

test: install-dev
	@PY=$(PY) scripts/test.sh

# PACED_STREAMS: how many concurrent paced streams the paced-streams scenario opens (0: none).
PACED_STREAMS ?= 1000

bench: install-dev
	@$(PY) bench/run.py --paced-streams $(PACED_STREAMS) $(ARGS)

# The same loads also through LiteLLM's proxy (installed into var/peer-venv on first use).
bench-peer: install-dev
	@$(PY) bench/run.py --peer litellm $(ARGS)

# Instructions per request, counted by valgrind's callgrind rather than timed (bench/instructions.py).
bench-instructions: install-dev
	@$(PY) bench/instructions.py $(ARGS)

lint: install-dev
	@$(PY) -m ruff check .

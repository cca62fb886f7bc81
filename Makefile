# Toolsync - see README.md. Every target builds .venv first when needed.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

PG_URL ?= postgres://postgres@127.0.0.1:5432/toolsync
PG_UP := $(shell $(PYTHON) -c "import socket; s=socket.socket(); s.settimeout(0.5); print(int(s.connect_ex(('127.0.0.1', 5432)) == 0))" 2>/dev/null)
REDIS_UP := $(shell $(PYTHON) -c "import socket; s=socket.socket(); s.settimeout(0.5); print(int(s.connect_ex(('127.0.0.1', 6379)) == 0))" 2>/dev/null)
ifeq ($(PG_UP),1)
TEST_DATABASE_URL ?= $(PG_URL)
endif
ifeq ($(REDIS_UP),1)
TEST_BROKER_URL ?= redis://127.0.0.1:6379/15
endif

.PHONY: help install test lint format run worker beat listen bench clean

help:  ## list targets
	@grep -E '^[a-z]+:.*## ' Makefile | sed 's/:.*## /\t/'

$(STAMP): requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $(STAMP)

install: $(STAMP)  ## build .venv with pinned dependencies

lint: $(STAMP)  ## ruff lint and format check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)  ## apply ruff format and fixes
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

test: $(STAMP) lint  ## the whole suite (PostgreSQL and Redis when reachable)
	DATABASE_URL=$(TEST_DATABASE_URL) TOOLSYNC_TEST_BROKER_URL=$(TEST_BROKER_URL) \
	  $(PY) -m pytest $(PYTEST_ARGS)

run: $(STAMP)  ## demo: migrate, demo MCP server, first refresh, web + worker + beat + listener
	DEBUG=1 $(PY) manage.py run_demo

worker: $(STAMP)  ## a Celery worker
	$(VENV)/bin/celery -A project worker -l info

beat: $(STAMP)  ## Celery beat (database scheduler)
	$(VENV)/bin/celery -A project beat -l info

listen: $(STAMP)  ## the notification listener
	$(PY) manage.py listen

bench: $(STAMP)  ## benchmarks; figures go to bench/results.md
	DATABASE_URL=$(or $(TEST_DATABASE_URL),$(PG_URL)) $(PY) -m bench $(BENCH_ARGS)

clean:  ## remove the virtualenv and local state
	rm -rf $(VENV) var

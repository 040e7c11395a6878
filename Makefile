# Two commands do everything on a fresh machine (see README.md):
#   make book   - create the environment if needed, build the HTML book
#   make test   - create the environment if needed, run every test
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
JB := $(VENV)/bin/jupyter-book
EXECUTE ?= 0
NB ?=
# Same settings for nbval, the execute script and the benchmarks.
export PYTHONHASHSEED := 0
export OMP_NUM_THREADS := 2
export MKL_NUM_THREADS := 2
export MPLBACKEND := Agg
export PYDEVD_DISABLE_FILE_VALIDATION := 1

.PHONY: env assets book book-fast execute test test-unit test-notebooks test-browser bench catalog clean

env: $(STAMP)

$(STAMP): requirements.txt constraints.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c constraints.txt -r requirements.txt
	$(PY) -m pip install --quiet -c constraints.txt --no-deps -e .
	touch $(STAMP)

assets:
	./scripts/fetch_assets.sh

execute: env
	$(PY) scripts/execute_notebooks.py $(NB)

ifeq ($(EXECUTE),1)
book: env assets execute
else
book: env assets
endif
	$(JB) build . --all -W -n --keep-going
	@echo "The book is at $(CURDIR)/_build/html/index.html"

test: env assets
	$(JB) build . --all -W -n --keep-going
	CI=$${CI:-} $(PY) -m pytest -n 2 --dist loadfile tests chapters \
	  --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg

test-unit: env
	$(PY) -m pytest -n 2 tests --ignore=tests/browser

test-notebooks: env
	$(PY) -m pytest -n 2 --dist loadfile chapters --nbval --nbval-current-env \
	  --nbval-sanitize-with tests/nbval_sanitize.cfg

test-browser: env
	$(PY) -m pytest tests/browser

bench: env
	$(PY) benchmarks/run_all.py

catalog: env
	$(PY) -m attnsurvey.catalog

clean:
	rm -rf _build

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
# Every test, notebook execution and nbval kernel runs in the pinned numeric
# environment of src/attnsurvey/numeric_env.py, whatever the caller's
# environment holds: PINNED runs a command with it, and notebooks start in the
# 'attnsurvey' Jupyter kernel, whose kernel spec carries the same settings.
# Benchmarks are exempt: they measure native speed.
PINNED := $(PY) -m attnsurvey.numeric_env exec --
NBVAL := --nbval --nbval-kernel-name attnsurvey --nbval-sanitize-with tests/nbval_sanitize.cfg
export PYDEVD_DISABLE_FILE_VALIDATION := 1
# The environment is installed without byte-compiling (scripts/install_env.py): Python writes a module's
# bytecode into .venv (and src/, git-ignored) the first time a command imports it, so later processes
# (test workers, notebook kernels) load it compiled. A caller's PYTHONDONTWRITEBYTECODE would make every
# process compile every import again (about 2 s more per kernel start), so the project's commands drop it.
unexport PYTHONDONTWRITEBYTECODE
export MPLBACKEND := Agg

.PHONY: env assets book execute test test-unit test-notebooks test-browser bench catalog lint clean

KERNEL := $(VENV)/share/jupyter/kernels/attnsurvey/kernel.json

env: $(STAMP) $(KERNEL)

$(STAMP): requirements.txt constraints.txt pyproject.toml scripts/install_env.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) scripts/install_env.py  # uv where it can be had (about 3x faster), else pip
	touch $(STAMP)

$(KERNEL): src/attnsurvey/numeric_env.py $(STAMP)
	$(PY) -m attnsurvey.numeric_env install-kernel --prefix $(VENV)

assets:
	./scripts/fetch_assets.sh

execute: env
	$(PINNED) $(PY) scripts/execute_notebooks.py $(NB)

ifeq ($(EXECUTE),1)
book: env assets execute
else
book: env assets
endif
	$(JB) build . --all -W -n --keep-going
	@echo "The book is at $(CURDIR)/_build/html/index.html"

test: env assets
	$(JB) build . --all -W -n --keep-going
	CI=$${CI:-} $(PINNED) $(PY) -m pytest -n 2 --dist loadfile --no-loadscope-reorder tests chapters book/*.ipynb $(NBVAL) --durations=15

test-unit: env
	$(PINNED) $(PY) -m pytest -n 2 tests --ignore=tests/browser

test-notebooks: env
	$(PINNED) $(PY) -m pytest -n 2 --dist loadfile chapters book/*.ipynb $(NBVAL)

test-browser: env
	$(PINNED) $(PY) -m pytest tests/browser

bench: env  # native speed: deliberately not pinned
	$(PY) benchmarks/run_all.py

# Lint: ruff (rules and format in pyproject.toml) over the package, tests, benchmarks,
# scripts and the book's Sphinx extensions; codespell over the prose, notebooks' cell sources and code
# (tools/spelling.py); mypy (config in pyproject.toml) over the package.
LINT_PATHS := conftest.py src tests tools benchmarks scripts book/_ext
lint: env
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(PY) -m tools.spelling
	$(VENV)/bin/mypy

catalog: env
	$(PY) -m attnsurvey.catalog

clean:
	rm -rf _build

# The student version of every chapter (nbgrader format: solutions
# replaced by stubs, outputs cleared) and the whole book as one PDF.
.PHONY: student pdf test-grading feedback
test-grading: env  # autograde every chapter's instructor and student versions (two runs each)
	ATTNSURVEY_GRADE_ALL=1 $(PINNED) $(PY) -m pytest -n 2 tests/test_grading.py
student: env
	$(PY) scripts/student.py --out _build/student
	@echo "Student notebooks are in $(CURDIR)/_build/student (grade with scripts/autograde.py)"
# Grade every notebook under SUBMISSIONS against its released version in chapters/ and write
# an offline HTML feedback page per notebook (and grades.json) into _build/feedback.
SUBMISSIONS ?= _build/student
feedback: env
	$(PINNED) $(PY) scripts/feedback.py $(SUBMISSIONS) --out _build/feedback
	@echo "Feedback pages are in $(CURDIR)/_build/feedback"

pdf: env assets
	$(PY) scripts/build_pdf.py

# One offline reveal.js deck per chapter, from the chapters' tagged cells (scripts/slides.py).
.PHONY: slides
slides: env assets
	$(PY) scripts/slides.py
	@echo "The slides are in $(CURDIR)/_build/slides (one .html per chapter)"

# JupyterLab on the chapters in the project's environment (the chapters name the 'attnsurvey'
# kernel, and their first cell pins any kernel), and the built site served on 127.0.0.1, where its search
# shows excerpts (under file:// the browser refuses the page fetches that excerpts need: titles only).
.PHONY: lab serve
PORT ?= 8000
lab: env
	$(VENV)/bin/jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.root_dir=$(CURDIR) --LabApp.default_url=/lab/tree/chapters $(LAB_ARGS)
serve:
	@test -f _build/html/index.html || { echo "no built site: run make book first"; exit 1; }
	@echo "Serving the book at http://127.0.0.1:$(PORT)/ (Ctrl-C stops it)"
	$(PY) -m http.server $(PORT) --bind 127.0.0.1 --directory _build/html

# The unit tests under another torch, in an environment of their own (made by scripts/compat_env.py:
# that torch, the rest of requirements.txt, this checkout editable): `make test-compat TORCH=2.15.0`.
# Left out: what holds only for the pinned torch of constraints.txt (the stored outputs: nbval, the
# plain-kernel chapter runs, the built book, its PDF and browser checks). PyPI's torch for x86-64 Linux
# is a CUDA build (some GB); not part of .ci/run. See README ("Other torch versions") for what was run.
.PHONY: test-compat
TORCH ?=
COMPAT_VENV ?= _build/compat/torch-$(TORCH)
COMPAT_IGNORE := --ignore=tests/browser --ignore=tests/test_any_kernel.py --ignore=tests/test_pdf.py
test-compat:
	@test -n "$(TORCH)" || { echo "usage: make test-compat TORCH=<version> (e.g. TORCH=2.15.0)"; exit 2; }
	PIP_CONSTRAINT= $(PYTHON) scripts/compat_env.py $(TORCH) $(COMPAT_VENV)
	$(COMPAT_VENV)/bin/python -m attnsurvey.numeric_env exec -- $(COMPAT_VENV)/bin/python -m pytest -n 2 tests $(COMPAT_IGNORE) $(PYTEST_ARGS)

# The two notebooks that need more than the package (Triton; transformers and x-transformers), each in a
# new environment under FRESH_DIR made by its install cell alone, as on a hosted notebook, then checked
# by nbval against its stored outputs (scripts/fresh_env.py). Downloads packages: not part of .ci/run.
.PHONY: test-fresh-env
FRESH_DIR ?= /tmp/attnsurvey-fresh
FRESH_NOTEBOOKS ?= chapters/ch06_tiled_attention.ipynb book/conformance.ipynb
test-fresh-env: env
	$(PY) scripts/fresh_env.py --dir $(FRESH_DIR) $(FRESH_NOTEBOOKS)

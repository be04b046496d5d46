# Build and test the course book.
#   make venv      create .venv and install requirements.txt (re-runs only when it changes)
#   make chromium  install Debian's chromium-headless-shell (the browser tests' Chromium) if missing; a Chromium
#                  named by the environment's CHROMIUM (an executable path) is used instead, as the tests do
#   make node      install Debian's nodejs (the build typesets the math with it) if missing
#   make book      execute every notebook and build the HTML site, failing on any warning
#   make test      unit, property, CLI and doctest tests + strict nbval (each notebook executed once), then
#                  the site built from the outputs nbval has just verified, then the browser checks
#   make check     the inner loop (14-18 s): unit and property tests, a fifth of the hypothesis examples; no browser,
#                  notebooks, torch runs or rendered figures
#   make node_modules  ESLint and its config packages (package.json, pinned by package-lock.json) by `npm ci`
#                  (re-runs only when package-lock.json changes; installs Debian's npm if there is none)
#   make lint      ruff (lint and format), mypy, import-linter (the library's layers) and ESLint (the widgets' page
#                  scripts, lib/meshplan/widgets/static/*.js, and their Node tests, tests/js)
#   make serve     serve the built site on http://127.0.0.1:8000/ (the live planner needs HTTP, not file://)
#   make lab       JupyterLab on 127.0.0.1 with live widgets (opens the evolution map)
#   make clean     remove build outputs; `make distclean` also removes .venv

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

# Python writes its bytecode caches (the gitignored __pycache__ beside each source; `make clean` removes them) even
# where the environment says not to (this machine's does): pytest's two workers, the twelve notebook kernels and the
# CLI's processes then compile the library and rewrite the tests' asserts once, not once each (part 1 of `make test`
# measured 60.1 s with PYTHONDONTWRITEBYTECODE=1, 56.4 s without).
unexport PYTHONDONTWRITEBYTECODE

PYTHON   ?= python3
VENV     := .venv
VENV_BIN := $(VENV)/bin
STAMP    := $(VENV)/.requirements.stamp
# The browser tests' Chromium; a CHROMIUM from the environment or the command line wins, as in tests/browser.py.
CHROMIUM ?= /usr/bin/chromium-headless-shell
NODE     := node
BUILD_LOG := _build/book.log

PYTEST   := $(VENV_BIN)/python -m pytest
LAB_NOTEBOOK ?= notebooks/00_evolution_map.ipynb
# Strict nbval, each notebook in a plain kernel of this environment (the venv's Python).
NBVAL    := --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-current-env --nbval-cell-timeout=300
STORED_CONFIG := _build/config-stored.yml

.PHONY: venv chromium node book book-stored serve test check lint clean distclean

venv: $(STAMP)

# Reinstall only when requirements.txt (or the library's metadata) changes.
$(STAMP): requirements.txt requirements-torchtitan.txt $(wildcard lib/pyproject.toml)
	@test -x $(VENV_BIN)/python || $(PYTHON) -m venv $(VENV)
	$(VENV_BIN)/python -m pip install -r requirements.txt
	$(VENV_BIN)/python -m pip check
	rm -rf $(VENV)/engines/torchtitan-0.3.0
	$(VENV_BIN)/python -m pip install --no-deps --target $(VENV)/engines/torchtitan-0.3.0 -r requirements-torchtitan.txt
	@touch $@

chromium:
	@if [ -x "$(CHROMIUM)" ]; then \
	  echo "chromium present: $$("$(CHROMIUM)" --version 2>/dev/null || echo "$(CHROMIUM)")"; \
	elif [ "$(origin CHROMIUM)" != file ]; then \
	  echo "chromium: CHROMIUM=$(CHROMIUM) (from the $(origin CHROMIUM)) is not an executable" >&2; exit 1; \
	else \
	  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update; \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium-headless-shell; \
	  test -x "$(CHROMIUM)"; \
	fi

node:
	@if command -v $(NODE) >/dev/null 2>&1; then \
	  echo "node present: $$($(NODE) --version)"; \
	else \
	  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update; \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y nodejs; \
	  command -v $(NODE) >/dev/null; \
	fi

# Every page's math is typeset once, at build time, by the site's own MathJax under Node (scripts/typeset_math.js):
# readers' browsers run no MathJax, and a TeX error fails the build.
TYPESET_MATH := $(NODE) scripts/typeset_math.js _build/html
# The live planner (book/planner.md): the library as a wheel and Pyodide's runtime (node_modules/pyodide, pinned by
# package-lock.json), copied into the built site's _static/ (scripts/build_planner_assets.py).
PLANNER_ASSETS := $(VENV_BIN)/python scripts/build_planner_assets.py _build/html
# The built site over HTTP on 127.0.0.1 (the planner's WebAssembly worker does not start from file://).
SERVE_PORT ?= 8000

# --all: fresh Sphinx environment, so every notebook is re-executed (execute_notebooks: force)
# and every warning is re-emitted. -W --keep-going: report all warnings, then exit non-zero.
# MESHPLAN_STATIC=1: exercises emit only their static HTML (answers for every slider combination and
# plain JavaScript), no live widget, so the pages carry no widget state.
book: venv node node_modules
	@mkdir -p _build
	MESHPLAN_STATIC=1 $(VENV_BIN)/jupyter-book build -W -n --keep-going --all . 2>&1 | tee $(BUILD_LOG)
	@if grep -q 'build finished with problems' $(BUILD_LOG); then \
	  echo "book: the build emitted warnings (see $(BUILD_LOG))" >&2; exit 1; fi
	$(TYPESET_MATH)
	$(PLANNER_ASSETS)

# The same site without executing the notebooks: their stored outputs, which strict nbval verifies against a
# fresh run in `make test` just before (so each notebook executes once per `make test`).
book-stored: venv node node_modules
	@mkdir -p _build
	sed 's/^  execute_notebooks: force$$/  execute_notebooks: "off"/' _config.yml > $(STORED_CONFIG)
	@grep -q 'execute_notebooks: "off"' $(STORED_CONFIG)
	MESHPLAN_STATIC=1 $(VENV_BIN)/jupyter-book build -W -n --keep-going --all --config $(STORED_CONFIG) . 2>&1 \
	  | tee $(BUILD_LOG)
	@if grep -q 'build finished with problems' $(BUILD_LOG); then \
	  echo "book: the build emitted warnings (see $(BUILD_LOG))" >&2; exit 1; fi
	$(TYPESET_MATH)
	$(PLANNER_ASSETS)

serve:
	@test -f _build/html/_static/planner/manifest.json || { echo "serve: build the site first (make book)" >&2; exit 1; }
	@echo "serving _build/html on http://127.0.0.1:$(SERVE_PORT)/ (the planner: /book/planner.html); Ctrl+C stops"
	$(VENV_BIN)/python -m http.server $(SERVE_PORT) --bind 127.0.0.1 --directory _build/html

# 1. everything but the browser tests, and strict nbval (every notebook executed once); 2. the site from those
# outputs; 3. the browser tests: the built site (offline, layout, each chapter), the widget pages, JupyterLab.
# (Playwright's sync API cannot share a process with nbval's kernel clients, hence a run of its own.) JupyterLab's
# test runs last and alone: beside the other browser worker (Pyodide in Chromium) on 2 cores, its kernel once took
# over a minute to grade an answer in CI.
test: venv chromium node
	$(PYTEST) $(NBVAL) -m "not browser" tests notebooks
	$(MAKE) --no-print-directory book-stored
	$(PYTEST) -p no:nbval -m browser --ignore=tests/test_jupyterlab.py tests
	$(PYTEST) -p no:nbval -m browser -n0 tests/test_jupyterlab.py

check: venv
	MESHPLAN_HYPOTHESIS_SCALE=0.2 $(PYTEST) -p no:nbval -m "not browser and not slow" tests

lint: venv node_modules
	$(VENV_BIN)/ruff check lib tests scripts
	$(VENV_BIN)/ruff check --select F --ignore F811 notebooks  # pyflakes only; a visible cell may re-import
	$(VENV_BIN)/ruff format --check lib tests scripts
	$(VENV_BIN)/mypy
	$(VENV_BIN)/lint-imports --no-cache  # the library's layers (.importlinter)
	node_modules/.bin/eslint --max-warnings 0 eslint.config.js lib/meshplan/widgets/static book/_static tests/js  # eslint.config.js says how

# ESLint from npm, the versions package-lock.json pins: `npm ci` installs exactly that tree, again only when the lock
# changes (the stamp, inside node_modules/, goes when npm ci empties it). Debian's nodejs comes without npm (bookworm:
# node 18.20, npm 9.2), so Debian's npm is installed where there is none, as `node` installs nodejs.
.PHONY: node_modules
NPM_STAMP := node_modules/.package-lock.stamp
node_modules: $(NPM_STAMP)

$(NPM_STAMP): package-lock.json | node
	@if ! command -v npm >/dev/null 2>&1; then \
	  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update; \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y npm; \
	  command -v npm >/dev/null; \
	fi
	npm ci --no-audit --no-fund
	@touch $@

# Take the course in JupyterLab: every exercise is a live widget that calls the library as you move it.
# Serves this folder on 127.0.0.1 and opens the evolution map, the course's entry point, in your browser (the
# chapters are in notebooks/; LAB_NOTEBOOK=notebooks/01_one_gpu.ipynb opens another).
# More options through LAB_ARGS, e.g. `make lab LAB_ARGS="--no-browser --port=8899"`. (As root, in a container,
# JupyterLab refuses to start without --allow-root.)
.PHONY: lab
lab: venv
	env -u MESHPLAN_STATIC $(VENV_BIN)/jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.root_dir=. \
	  $$([ "$$(id -u)" = 0 ] && echo --allow-root) $(LAB_NOTEBOOK) $(LAB_ARGS)

clean:
	rm -rf _build .pytest_cache .hypothesis
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
	find . -path ./$(VENV) -prune -o -name .ipynb_checkpoints -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) node_modules

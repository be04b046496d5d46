# Build and test the course book.
#   make venv      create .venv and install requirements.txt (re-runs only when it changes)
#   make chromium  install Debian's chromium (headless browser tests) if missing
#   make book      execute every notebook and build the HTML site, failing on any warning
#   make test      book + unit tests + strict nbval + site/browser checks
#   make clean     remove build outputs; `make distclean` also removes .venv

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

PYTHON   ?= python3
VENV     := .venv
VENV_BIN := $(VENV)/bin
STAMP    := $(VENV)/.requirements.stamp
CHROMIUM := /usr/bin/chromium
BUILD_LOG := _build/book.log

.PHONY: venv chromium book test clean distclean

venv: $(STAMP)

# Reinstall only when requirements.txt (or the library's metadata) changes.
$(STAMP): requirements.txt $(wildcard lib/pyproject.toml)
	@test -x $(VENV_BIN)/python || $(PYTHON) -m venv $(VENV)
	$(VENV_BIN)/python -m pip install -r requirements.txt
	$(VENV_BIN)/python -m pip check
	@touch $@

chromium:
	@if [ -x $(CHROMIUM) ]; then \
	  echo "chromium present: $$($(CHROMIUM) --version 2>/dev/null || echo $(CHROMIUM))"; \
	else \
	  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update; \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; \
	  test -x $(CHROMIUM); \
	fi

# --all: fresh Sphinx environment, so every notebook is re-executed (execute_notebooks: force)
# and every warning is re-emitted. -W --keep-going: report all warnings, then exit non-zero.
# MESHPLAN_STATIC=1: exercises emit only their static HTML (answers for every slider combination and
# plain JavaScript), no live widget, so the pages carry no widget state.
book: venv
	@mkdir -p _build
	MESHPLAN_STATIC=1 $(VENV_BIN)/jupyter-book build -W -n --keep-going --all . 2>&1 | tee $(BUILD_LOG)
	@if grep -q 'build finished with problems' $(BUILD_LOG); then \
	  echo "book: the build emitted warnings (see $(BUILD_LOG))" >&2; exit 1; fi

test: venv chromium book
	$(VENV_BIN)/python -m pytest

# Take the course in JupyterLab: every exercise is a live widget that calls the library as you move it.
# Serves this folder on 127.0.0.1 and opens chapter 1 in your browser (the other chapters are in notebooks/).
# More options through LAB_ARGS, e.g. `make lab LAB_ARGS="--no-browser --port=8899"`. (As root, in a container,
# JupyterLab refuses to start without --allow-root.)
.PHONY: lab
lab: venv
	env -u MESHPLAN_STATIC $(VENV_BIN)/jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.root_dir=. \
	  $$([ "$$(id -u)" = 0 ] && echo --allow-root) notebooks/01_one_gpu.ipynb $(LAB_ARGS)

clean:
	rm -rf _build .pytest_cache .hypothesis
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
	find . -path ./$(VENV) -prune -o -name .ipynb_checkpoints -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)

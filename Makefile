# GPU Memory Lab. A learner needs two commands:
#   make lab    set up .venv (first time only) and open JupyterLab on my-notebooks/, your own
#               working copy of notebooks/ (made on first run, never overwritten)
#   make test   set up .venv (first time only) and run the test suite
# Instructor: make release (solutions/ -> notebooks/), make env-check; grading commands are
# in autograder/README.md.
#
# The install runs again only when requirements.txt or pyproject.toml change (.venv/.stamp).
# Override the interpreter with `make PYTHON=/path/to/python3.11 ...`.

SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.stamp
KERNEL_DISPLAY_NAME := Python 3 (GPU Memory Lab)
# Jupyter refuses to start as root without --allow-root (CI containers run as root).
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)
# nbgrader's gradebook runs the `alembic` executable from PATH: put the venv's bin/ first.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: lab instructor-lab reset releases test test-all test-fast release env-check help grade-class gpu-check test-compat

help:
	@echo "make lab        open JupyterLab on my-notebooks/, your working copy (sets up .venv the"
	@echo "                first time; copies new releases in, never overwrites your work)"
	@echo "                LAB_ARGS='--port=8899 --no-browser' passes JupyterLab's own options"
	@echo "make reset NB=03  replace your copy of notebook 03 with its release (keeps a backup)"
	@echo "make releases   which releases in notebooks/ are newer than your working copy"
	@echo "make instructor-lab  JupyterLab on the whole course with nbgrader's tools (Formgrader)"
	@echo "make test       the contributor's tier: unit tests, one nbgrader pipeline per assignment,"
	@echo "                import contracts, ruff (sets up .venv the first time; ~8 min on 2 cores)"
	@echo "make test-all   both tiers (+ mutation/hostile corpora, cheats, browser, class scale),"
	@echo "                then make test-compat: what CI runs"
	@echo "make test-fast  the inner loop: no nbgrader runs, no browser, no GPU (about a minute)"
	@echo "make release    regenerate notebooks/ from solutions/ (nbgrader generate_assignment)"
	@echo "make env-check  print [OK]/[FAIL] for each part of the environment"
	@echo "make grade-class SUBMISSIONS=class.zip   grade a whole class (see autograder/README.md)"
	@echo "make test-compat  the course as a hosted runtime runs it: Python 3.12 + torch $(COMPAT_TORCH)"
	@echo "                in .venv-compat, README's install, library tests, every solution notebook"
	@echo "make gpu-check  on a CUDA machine: run every solution notebook and the gpu tests,"
	@echo "                write docs/gpu-report-<date>-<gpu>.md/.json (exit 2 without CUDA)"

# Learners: no nbgrader instructor extensions, no news toast (src/memlab/tools/lab.py says how).
lab: $(STAMP)
	$(PY) -m memlab.tools.lab learner $(LAB_ARGS)

instructor-lab: $(STAMP)
	$(PY) -m memlab.tools.lab instructor $(LAB_ARGS)

reset: $(STAMP)
	@test -n "$(NB)" || { echo "usage: make reset NB=03   (replaces my-notebooks/03_... with its release; keeps a backup)"; exit 2; }
	$(PY) -m memlab.tools.lab reset "$(NB)"

releases: $(STAMP)
	@$(PY) -m memlab.tools.lab releases

# Two tiers (tests/conftest.py): `make test` is the contributor's tier (unit tests of every
# module, one real nbgrader pipeline per assignment, the import contracts and ruff; target 8 min on
# 2 cores); `make test-all` adds the full tier (mutation and hostile corpora, the pipeline's
# cheats, the browser, class-scale grading) and then make test-compat: what CI runs.
# -n auto: one pytest-xdist worker per core; tests sharing an nbgrader course stay on one worker
# (tests/conftest.py). PYTEST_ARGS='-n 0' runs serially.
test: $(STAMP)
	$(PY) -m pytest -n auto --dist loadgroup -m "not full" $(PYTEST_ARGS)

test-all: $(STAMP)
	@start=$$(date +%s); $(PY) -m pytest -n auto --dist loadgroup $(PYTEST_ARGS); rc=$$?; \
	echo "make test-all: pytest, both tiers: $$(( $$(date +%s) - start )) s wall, exit $$rc"; \
	test $$rc = 0
	$(MAKE) --no-print-directory test-compat

release: $(STAMP)
	$(PY) -m memlab.autograde release

env-check: $(STAMP)
	$(PY) -m memlab.tools.envcheck

# SUBMISSIONS: a folder or .zip of <student>/<assignment>/<notebook>.ipynb;
# GRADE_ARGS: e.g. --workers 4 --cell-timeout 120 --memory-mb 4096 --out report/
grade-class: $(STAMP)
	@test -n "$(SUBMISSIONS)" || { echo "usage: make grade-class SUBMISSIONS=path/to/class.zip [GRADE_ARGS='--workers 4']"; exit 2; }
	$(PY) -m memlab.autograde grade-class "$(SUBMISSIONS)" $(GRADE_ARGS)

# Needs a CUDA GPU (README.md, "Run on a GPU"); stops with exit 2 and a message without one.
gpu-check: $(STAMP)
	$(PY) -m memlab.tools.gpucheck $(GPU_CHECK_ARGS)

$(PY):
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found: install Python 3.11 or run make PYTHON=/path/to/python3.11"; exit 1; }
	$(PYTHON) -m venv $(VENV)

$(STAMP): requirements.txt pyproject.toml | $(PY)
	@$(PY) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || { echo "$(VENV) is not Python 3.11: remove it and run make again"; exit 1; }
	$(PY) -m pip install -r requirements.txt
	$(PY) -m pip install -e . --no-deps
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "$(KERNEL_DISPLAY_NAME)"
	@# Build matplotlib's font cache now, not on stderr inside a graded notebook.
	$(PY) -c "import matplotlib.pyplot"
	touch $@

# The inner loop: everything but the real nbgrader runs, the browser and the GPU (< 90 s idle).
test-fast: $(STAMP)
	$(PY) -m pytest -n auto -m "not slow and not gpu and not full" -q $(PYTEST_ARGS)

# ---------------------------------------------------------------------------- make test-compat
# The hosted-runtime path (README.md, "Hosted notebook"), proven on the newest torch these machines
# install: a second venv, .venv-compat, on Python 3.12 with torch $(COMPAT_TORCH) installed FIRST
# (as a hosted runtime has it), then the README's own `%pip install ... memlab[hosted] ...` line
# run literally (its repository URL replaced by this checkout), then a Jupyter stand-in (ipykernel,
# nbclient, pytest: a hosted runtime has Jupyter). Then the library tests, and every solution
# notebook top to bottom with its graded tests (memlab.tools.hostedcheck). Prints its own wall time.
# Cached: the venv and torch are made once per COMPAT_TORCH; the course install runs again only
# when README.md, pyproject.toml or src/ change.
COMPAT_TORCH := 2.14.1
COMPAT_VENV := .venv-compat
COMPAT_PY := $(COMPAT_VENV)/bin/python
COMPAT_KERNEL := memlab-compat
# Python 3.12: on PATH, or from pyenv (these machines: /root/.pyenv/versions/3.12.*).
COMPAT_PYTHON ?= $(shell for c in python3.12 $$(pyenv root 2>/dev/null)/versions/3.12*/bin/python3.12; do \
	"$$c" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' >/dev/null 2>&1 && { echo "$$c"; break; }; done)
# The library tests that exercise torch (the rubric/interview tests are pure Python: the notebook
# runs below cover them on this interpreter).
COMPAT_TESTS ?= tests/measure tests/lessons/test_accumulation.py tests/lessons/test_amp.py \
	tests/lessons/test_checkpointing.py tests/lessons/test_distributed.py tests/lessons/test_oom.py
COMPAT_SRC := $(shell find src -name '*.py' -not -path '*/__pycache__/*' 2>/dev/null)

test-compat:
	@start=$$(date +%s); rc=0; \
	{ $(MAKE) --no-print-directory $(COMPAT_VENV)/.course-stamp \
	  && echo "== library tests ($(COMPAT_PY), installed memlab)" \
	  && $(COMPAT_PY) -m pytest -q -p no:cacheprovider $(COMPAT_TESTS) \
	  && echo "== every solution notebook (memlab.tools.hostedcheck)" \
	  && $(COMPAT_PY) -m memlab.tools.hostedcheck --root . --expect-torch $(COMPAT_TORCH); } || rc=$$?; \
	echo "make test-compat: $$(( $$(date +%s) - start )) s wall, exit $$rc"; exit $$rc

$(COMPAT_VENV)/.torch-$(COMPAT_TORCH):
	@test -n "$(COMPAT_PYTHON)" || { echo "make test-compat needs Python 3.12 (python3.12 on PATH, or pyenv), or COMPAT_PYTHON=/path/to/python3.12"; exit 1; }
	rm -rf $(COMPAT_VENV)
	$(COMPAT_PYTHON) -m venv $(COMPAT_VENV)
	@# What a hosted runtime has before the course: its Python and its own CUDA build of torch.
	$(COMPAT_PY) -m pip install -q torch==$(COMPAT_TORCH)
	touch $@

$(COMPAT_VENV)/.course-stamp: $(COMPAT_VENV)/.torch-$(COMPAT_TORCH) README.md pyproject.toml $(COMPAT_SRC)
	@# README.md's hosted install line, literally; only its repository URL becomes this checkout.
	@# (build/ goes first: setuptools' in-tree build would ship stale modules left in build/lib.)
	@line=$$(grep -m1 -E '^ *%pip install .*memlab\[hosted\]' README.md) \
	  || { echo "README.md has no '%pip install ... memlab[hosted] ...' line (section Hosted notebook)"; exit 1; }; \
	cmd=$$(printf '%s\n' "$$line" | sed -e 's|^ *%pip|$(COMPAT_PY) -m pip|' -e 's|git+[a-z]*://[^" ]*|file://$(CURDIR)|'); \
	echo "README step: $$line"; echo "run:         $$cmd"; \
	$(COMPAT_PY) -m pip uninstall -q -y memlab >/dev/null 2>&1; rm -rf build; eval "$$cmd"
	@# The hosted runtime's Jupyter, stood in for: a kernel, a notebook runner, pytest.
	$(COMPAT_PY) -m pip install -q pytest==9.2.0 pyyaml ipykernel nbclient nbformat
	$(COMPAT_PY) -m ipykernel install --sys-prefix --name $(COMPAT_KERNEL) --display-name "Python 3 (compat)"
	$(COMPAT_PY) -c "import matplotlib.pyplot"
	touch $@

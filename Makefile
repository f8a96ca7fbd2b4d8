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

.PHONY: lab instructor-lab reset releases test test-fast release env-check help grade-class gpu-check

help:
	@echo "make lab        open JupyterLab on my-notebooks/, your working copy (sets up .venv the"
	@echo "                first time; copies new releases in, never overwrites your work)"
	@echo "make reset NB=03  replace your copy of notebook 03 with its release (keeps a backup)"
	@echo "make releases   which releases in notebooks/ are newer than your working copy"
	@echo "make instructor-lab  JupyterLab on the whole course with nbgrader's tools (Formgrader)"
	@echo "make test       run the test suite (sets up .venv the first time)"
	@echo "make test-fast  the inner loop: no nbgrader runs, no browser, no GPU (about a minute)"
	@echo "make release    regenerate notebooks/ from solutions/ (nbgrader generate_assignment)"
	@echo "make env-check  print [OK]/[FAIL] for each part of the environment"
	@echo "make grade-class SUBMISSIONS=class.zip   grade a whole class (see autograder/README.md)"
	@echo "make gpu-check  on a CUDA machine: run every solution notebook and the gpu tests,"
	@echo "                write docs/gpu-report-<date>-<gpu>.md/.json (exit 2 without CUDA)"

# Learners: no nbgrader instructor extensions, no news toast (src/memlab/tools/lab.py says how).
lab: $(STAMP)
	$(PY) -m memlab.tools.lab learner

instructor-lab: $(STAMP)
	$(PY) -m memlab.tools.lab instructor

reset: $(STAMP)
	@test -n "$(NB)" || { echo "usage: make reset NB=03   (replaces my-notebooks/03_... with its release; keeps a backup)"; exit 2; }
	$(PY) -m memlab.tools.lab reset "$(NB)"

releases: $(STAMP)
	@$(PY) -m memlab.tools.lab releases

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

release: $(STAMP)
	$(PY) -m memlab.grading.instructor release

env-check: $(STAMP)
	$(PY) -m memlab.tools.envcheck

# SUBMISSIONS: a folder or .zip of <student>/<assignment>/<notebook>.ipynb;
# GRADE_ARGS: e.g. --workers 4 --cell-timeout 120 --memory-mb 4096 --out report/
grade-class: $(STAMP)
	@test -n "$(SUBMISSIONS)" || { echo "usage: make grade-class SUBMISSIONS=path/to/class.zip [GRADE_ARGS='--workers 4']"; exit 2; }
	$(PY) -m memlab.grading.instructor grade-class "$(SUBMISSIONS)" $(GRADE_ARGS)

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
	$(PY) -m pytest -m "not slow and not gpu" --ignore=tests/notebooks/test_browser.py -q $(PYTEST_ARGS)

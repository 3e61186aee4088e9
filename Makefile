# Transformer Katas. `make help` lists the targets.
# Set-up is automatic: the first target that needs Python creates .venv with the
# pinned requirements. To use an interpreter you already have (say, one with a
# CUDA build of torch), pass it: make grade PYTHON=python3
.DEFAULT_GOAL := help
.PHONY: help setup grade check test stubs watch hint reset diff mock interview next progress

VENV        ?= .venv
BASE_PYTHON ?= python3
PYTHON      ?= $(VENV)/bin/python
ARGS        ?=
KATA        ?=

ifeq ($(PYTHON),$(VENV)/bin/python)
SETUP := $(VENV)/.installed
else
SETUP := check-python
endif

# The lines make prints before Python can, in the learner's language (judge/language.py's rule:
# KATAS_LANG=zh or en, else the locale).
ifneq ($(filter zh%,$(or $(filter en zh,$(KATAS_LANG)),$(LC_ALL),$(LC_MESSAGES),$(LANG))),)
SAY_OLD_PYTHON = 错误：需要 Python 3.11 或更新的版本（试过 $(BASE_PYTHON)）；请传入 BASE_PYTHON=python3.12 之类
SAY_SETTING_UP = 正在创建 $(VENV)（只在第一次运行时，不到一分钟）……
SAY_LACKS      = 错误：$(PYTHON) 缺少依赖；请这样装上其余的：$(PYTHON) -m pip install numpy pytest pytest-timeout
else
SAY_OLD_PYTHON = error: Python 3.11 or newer is needed (tried $(BASE_PYTHON)); pass BASE_PYTHON=python3.12 or similar
SAY_SETTING_UP = Setting up $(VENV) (first run only, under a minute)...
SAY_LACKS      = error: $(PYTHON) lacks a dependency; install the rest with: $(PYTHON) -m pip install numpy pytest pytest-timeout
endif

help: ## list the targets
	@$(BASE_PYTHON) -m judge.make_help Makefile "$(PYTHON)"

setup: $(SETUP) ## create .venv with the pinned dependencies (done automatically)

# pip compiles no module (--no-compile); judge.warm then compiles those grading imports: most of
# torch's and sympy's are never imported (pip compiling everything took 25-37 s), on both cores
# (9.4-9.8 s, against 14.4-15.6 s on one, here on 2026-11-29). The venv gets no pip of its own
# where $(BASE_PYTHON)'s pip can install into it (pip 22.3+: --python): ensurepip was 3.3 s of
# the venv's 3.7. `.venv/bin/python -m ensurepip` adds one. Set-up here, fresh clones,
# 2026-11-28/29: 16-41 s (venv 0.1, judge.warm 7-10, pip 7-18: it writes 1.2 GB).
PIP_INTO_VENV = $(BASE_PYTHON) -m pip --python $(VENV)/bin/python
$(VENV)/.installed: requirements.txt
	@$(BASE_PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
		|| { echo "$(SAY_OLD_PYTHON)"; exit 1; }
	@echo "$(SAY_SETTING_UP)"
	@$(BASE_PYTHON) -m venv --without-pip $(VENV)
	@if $(PIP_INTO_VENV) --version >/dev/null 2>&1; then pip="$(PIP_INTO_VENV)"; \
	else $(VENV)/bin/python -m ensurepip --default-pip >/dev/null || exit 1; pip="$(VENV)/bin/python -m pip"; fi; \
	$$pip install --quiet --no-compile --disable-pip-version-check -r requirements.txt $(PIP_ARGS)
	@$(VENV)/bin/python -m judge.warm
	@touch $@

check-python:
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ needed"; import torch, numpy, pytest, pytest_timeout' \
		|| { echo "$(SAY_LACKS)"; exit 1; }

# grader.py exits 1 when some kata does not pass yet: a normal outcome here, not a make error
# (the table ends with what to do next). Exit 2 (the grader could not run) stays an error.
SEED_ARG = $(if $(SEED),--seed $(SEED))
GRADER   = KATAS_VIA_MAKE=1 $(PYTHON) grader.py

grade: $(SETUP) ## grade every kata under katas/ (ARGS="--impl solutions" etc.) [SEED=n]
	@$(GRADER) $(SEED_ARG) $(ARGS) || { status=$$?; test $$status -eq 1 || exit $$status; }

check: $(SETUP) ## grade one kata: make check KATA=causal_mask [SEED=n]
	@$(GRADER) --kata "$(KATA)" $(SEED_ARG) $(ARGS) || { status=$$?; test $$status -eq 1 || exit $$status; }

test: $(SETUP) ## (maintainers) the whole suite, 4-5 min: solutions pass, stubs are todo, mutants are rejected
	@KATAS_LANG=en $(PYTHON) -m pytest tests --impl solutions $(ARGS)

stubs: $(SETUP) ## (maintainers) regenerate katas/ from solutions/ where the stub is untouched
	@$(PYTHON) grader.py stubs --write

# The practice loop (practice.py). Empty variables mean "not given".
watch: $(SETUP) ## re-grade each kata you save, within a second (KATA=name: only that one; NEXT=1: follow your path)
	@$(PYTHON) practice.py watch --kata "$(KATA)" --seed "$(SEED)" $(if $(NEXT),--next) $(ARGS)

hint: $(SETUP) ## one more hint each time: make hint KATA=causal_mask
	@$(PYTHON) practice.py hint --kata "$(KATA)"

reset: $(SETUP) ## keep your attempt under .katas/attempts/, then restore the stub: make reset KATA=name
	@$(PYTHON) practice.py reset --kata "$(KATA)"

diff: $(SETUP) ## your file against the reference solution, then whether it passes: make diff KATA=name
	@$(PYTHON) practice.py diff --kata "$(KATA)" --seed "$(SEED)"

mock: $(SETUP) ## a timed mock interview of bare stubs in .katas/mock/: [N=3] [MINUTES=total] [SEED=n]
	@$(PYTHON) practice.py mock --n "$(N)" --minutes "$(MINUTES)" --seed "$(SEED)" $(ARGS)

interview: $(SETUP) ## one kata from a bare stub, timed, the math graded: make interview KATA=mha [MINUTES=m]
	@$(PYTHON) practice.py interview --kata "$(KATA)" --minutes "$(MINUTES)" --seed "$(SEED)" $(ARGS)

next: $(SETUP) ## the next kata of your path, or the review that is due
	@$(PYTHON) practice.py next

progress: $(SETUP) ## per path and kata: passed, next, reviews due; best score, attempts, trend
	@$(PYTHON) practice.py progress

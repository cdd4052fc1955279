# Two commands do all the set-up on a fresh machine:
#   make demo   -- create .venv if missing, install the stack, run the flagship scenario headless
#   make test   -- create .venv if missing, install the stack, run the whole test suite
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint format bench clean install docs

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --prefer-binary -e '.[dev,peers,docs]'   # the venv's own pip (no self-upgrade); peers: pink, mink for tests/test_peers_bench.py; docs: make docs
	$(PY) -m cmstack.warmup   # compile the control-step kernels once (numba cache)
	@touch $(STAMP)

demo: $(STAMP)
	MPLBACKEND=Agg $(VENV)/bin/cmstack run yumi_dual_arm

# ruff's linter and formatter, configured in pyproject.toml ([tool.ruff]); `make format` applies them
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# --durations=25: the 25 slowest tests, so that CI's output shows where the suite's time goes
test: $(STAMP) lint
	MPLBACKEND=Agg $(PY) -m pytest -q -n 2 --dist loadscope --no-loadscope-reorder --durations=25 tests

# the documentation site with its API reference from the docstrings (mkdocs.yml), warnings as errors;
# tests/test_docs_site.py builds it too on every `make test`
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

bench: $(STAMP)
	$(VENV)/bin/cmstack bench

clean:
	rm -rf runs .pytest_cache build site *.egg-info

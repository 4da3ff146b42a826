# The two commands of the README:
#   make demo   set up (venv, deps) and train the French sample end to end on --env local
#   make test   set up (venv, deps, cdktf CLI) and run the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# `make test` runs two pytest workers per core this process may use (taskset -c 0 make test: two on that core), each
# pinned to its core (tests/support/cores.py): while one waits on a server or a simulated cloud, the other computes.
TEST_WORKERS ?= $(shell echo $$((2 * $$(nproc))))
NODE_STAMP := node_modules/.installed-stamp
LINT_VENV  ?= .venv-lint
LINT_STAMP := $(LINT_VENV)/.installed-stamp
CDKTN_VENV ?= .venv-cdktn
CDKTN_STAMP := $(CDKTN_VENV)/.installed-stamp
ENV    ?= local

.PHONY: demo test test-fast test-cdktn bench setup clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $@

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# checkov (tests/synth/test_policy.py) in its own venv: its pins would downgrade torch's/fastai's deps in .venv.
$(LINT_STAMP): requirements-lint.txt
	test -x $(LINT_VENV)/bin/python || $(PYTHON) -m venv $(LINT_VENV)
	$(LINT_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-lint.txt
	touch $@

# CDK Terrain instead of CDKTF, in its own venv (cdktn needs constructs < 10.8, cdktf's venv has 10.8).
$(CDKTN_STAMP): pyproject.toml
	test -x $(CDKTN_VENV)/bin/python || $(PYTHON) -m venv $(CDKTN_VENV)
	$(CDKTN_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -e '.[cli-cdktn]' \
		'pytest>=8' 'gcp-storage-emulator>=2024.8'
	touch $@

setup: $(STAMP) $(NODE_STAMP) $(LINT_STAMP)

demo: $(STAMP)
	$(BIN)/trainctl data push fr data/sample/fr --env $(ENV)
	$(BIN)/trainctl train fr --env $(ENV)

test: $(STAMP) $(NODE_STAMP) $(LINT_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal

# The unit tests alone (tests/unit: seconds each, no model trained, no stack synthesized): under a minute.
test-fast: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest tests/unit -q

# The stacks synthesized by CDK Terrain: the synth, construct and policy tests (not part of `make test`).
test-cdktn: $(CDKTN_STAMP) $(NODE_STAMP) $(LINT_STAMP)
	TRAINSTACK_CDK=cdktn $(CDKTN_VENV)/bin/python -m pytest tests/synth/test_synth.py tests/synth/test_gcp_stacks.py \
		tests/synth/test_constructs.py tests/synth/test_policy.py

bench: $(STAMP)
	$(BIN)/python -m benchmarks.lifecycle
	$(BIN)/python -m benchmarks.tokenize --rows 100000
	$(BIN)/python -m benchmarks.trainer
	$(BIN)/python -m benchmarks.quality

clean:
	rm -rf .trainstack cdktf.out

# The two commands of the README:
#   make demo   set up (venv, deps) and train the French sample end to end on --env local
#   make test   set up (venv, deps, cdktf CLI) and run the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
NODE_STAMP := node_modules/.installed-stamp
ENV    ?= local

.PHONY: demo test bench setup clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $@

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

setup: $(STAMP) $(NODE_STAMP)

demo: $(STAMP)
	$(BIN)/trainctl data push fr data/sample/fr --env $(ENV)
	$(BIN)/trainctl train fr --env $(ENV)

test: $(STAMP) $(NODE_STAMP)
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python -m benchmarks.lifecycle

clean:
	rm -rf .trainstack cdktf.out

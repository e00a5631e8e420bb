# Everything a fresh machine needs: `make demo` runs the main job, `make test` runs the tests, `make test-fast` the
# fast tier of them (the same oracles on fewer cases, under two minutes).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
DATA ?= $(or $(BERTWATCH_DATA),../shared/data)
STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
TEST_ENV = BERTWATCH_DATA=$(abspath $(DATA)) HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1

.PHONY: demo lint test test-fast setup browser clean wheel-check

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e ".[demo,test]"
	touch $(STAMP)

# Biome (formatter and linter of the front end's ES modules and CSS), pinned in package-lock.json; no npm call
# once installed unless package*.json change. `npm install`, not `npm ci`: the lock holds only the Linux builds of
# Biome's per-platform binaries (the registry mirror has no others), which `npm ci` refuses as out of sync.
$(NODE_STAMP): package.json package-lock.json
	npm install --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

setup: $(STAMP) $(NODE_STAMP)

browser: $(STAMP)
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || echo "chromium could not be installed; browser tests will fail"

demo: $(STAMP)
	$(BIN)/bertwatch demo --data $(DATA) --out demo_out

lint: $(STAMP) $(NODE_STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .
	node_modules/.bin/biome ci --colors=off bertwatch/tb

test: lint browser
	$(TEST_ENV) $(BIN)/python -m pytest -q -p no:cacheprovider

test-fast: lint
	$(TEST_ENV) $(BIN)/python -m pytest -q -p no:cacheprovider -m fast --hypothesis-profile=fast

# The package as users get it (CI runs it before the tests): the wheel built and installed, not editable, with its
# [demo] extra in a fresh virtual environment outside the checkout; a short watched training through `bertwatch run`;
# the plugin's page, static files and data routes loaded from that environment's TensorBoard.
wheel-check:
	PY=$(PY) bash .ci/wheel_check.sh

clean:
	rm -rf $(VENV) node_modules demo_out *.egg-info

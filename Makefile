# waitstate: the few commands a newcomer needs. `make demo` and `make test` do all the set-up.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
BROWSER := $(VENV)/.browser
# The MCP conformance suite and the Node it needs, from npm, as conformance/package-lock.json pins
# them; tests/mcp/test_conformance.py runs them (the system's Node may be older than the 22 the
# suite requires, so the suite brings its own).
CONFORMANCE := conformance/node_modules/.installed
APPROVE_AFTER ?= 5
# Test workers: one more than the cores for the quick tier, two more for the whole suite (tests wait
# on servers, retries and timers as much as they compute).
JOBS ?= $(shell echo $$(( $$(nproc) + 1 )))
# Python keeps what it compiles (__pycache__/, and pytest's rewritten tests): the machine may set
# PYTHONDONTWRITEBYTECODE, and then every process would compile every module again.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install lock up down status demo tree-demo mcp-demo test test-fast test-latest chaos bench lint typecheck ui-check clean

# uv installs exactly uv.lock (hashes checked); uv itself comes from PyPI, pinned, into a venv of
# its own (.venv-uv) so that syncing .venv never removes it. Nothing downloads a Python.
UV_VERSION := 0.13.9
UV         := .venv-uv/bin/uv
export UV_PYTHON_DOWNLOADS := never
# Installed modules compiled once (the machine sets PYTHONDONTWRITEBYTECODE, so no process would
# keep what it compiled: every import of every process would compile them again).
export UV_COMPILE_BYTECODE := 1
# The machine's certificate store (a proxy's or a company's root CA is there), as pip uses it,
# rather than uv's own bundle.
export UV_SYSTEM_CERTS := 1

$(UV):
	@echo "installing uv $(UV_VERSION) (from PyPI) into .venv-uv"
	$(PYTHON) -m venv .venv-uv
	.venv-uv/bin/python -m pip install --disable-pip-version-check --progress-bar on uv==$(UV_VERSION)

$(STAMP): pyproject.toml uv.lock $(UV)
	@echo "installing the project and its dev tools from uv.lock into $(VENV)"
	$(UV) sync --locked --extra dev --python $(PYTHON)
	touch $(STAMP)

# Debian's chromium, for the browser tests (Playwright drives it; it downloads no browser): for
# `make test`, not the demo.
$(BROWSER): $(STAMP)
	@command -v chromium >/dev/null || [ "$$(id -u)" != 0 ] \
		|| (echo "installing Debian's chromium (apt) for the browser tests" \
			&& apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)
	@command -v chromium >/dev/null || echo "no chromium (not root: apt-get install chromium): the browser tests will be skipped"
	@touch $(BROWSER)

$(CONFORMANCE): conformance/package.json conformance/package-lock.json
	@if command -v npm >/dev/null; then \
		cd conformance && npm ci --no-audit --no-fund --loglevel=error && touch node_modules/.installed; \
	else echo "no npm (install Node.js and npm): the MCP conformance test will fail"; fi

install: $(STAMP) $(BROWSER) $(CONFORMANCE)  ## create .venv and install the project, its dev tools and the MCP conformance suite

lock: $(UV)  ## resolve pyproject.toml's ranges again, to their newest versions, into uv.lock
	$(UV) lock --upgrade --python $(PYTHON)

# `make up` takes its ports from the environment or the command line, e.g.
# make up TEMPORAL_HTTP_PORT=7243 TEMPORAL_METRICS_PORT=7244: TEMPORAL_ADDRESS (127.0.0.1:7233),
# TEMPORAL_UI_PORT (8233), TEMPORAL_HTTP_PORT and TEMPORAL_METRICS_PORT (the dev server's HTTP
# API and /metrics; free ports when unset), GATEWAY_PORT (8787), DEMO_SYSTEMS_URL (:8790).
up: $(STAMP)  ## start Temporal (Web UI :8233), demo systems, worker and gateway, in the background
	$(PY) scripts/services.py up

down:  ## stop what `make up` started
	$(PY) scripts/services.py down

status:
	$(PY) scripts/services.py status

demo: up  ## run the demo agents to completion and print their answers and Web UI links
	$(VENV)/bin/waitstate run "Export Q3 transactions and file them in the compliance folder" --wait
	@echo
	@echo "A refund over \$$100 needs a person's sign-off; this demo approves it after $(APPROVE_AFTER) s."
	$(VENV)/bin/waitstate run "Issue a refund of \$$420 for claim C-118 if the claim is valid" --wait --auto-approve-after $(APPROVE_AFTER)

tree-demo: up  ## a research lead that starts its researchers at once, one waiting for a webhook, one for approval
	$(PY) scripts/tree_demo.py --approve-after $(APPROVE_AFTER)

mcp-demo: $(STAMP)  ## the demo's MCP server, and an agent using its task tool and its destructive one
	WAITSTATE_DEMO_MCP=1 $(PY) scripts/services.py up
	@echo "The deletion is approved after $(APPROVE_AFTER) s; then the task asks to confirm it: answer with the printed command within 60 s, or it keeps the dataset."
	$(VENV)/bin/waitstate run --agent reporter "Build the EMEA sales report and delete its draft dataset" --wait --auto-approve-after $(APPROVE_AFTER)

# Every test, in parallel by module (each worker starts its own servers on free ports), the
# longest modules first (tests/conftest.py; --no-loadscope-reorder keeps that order, where
# pytest-xdist would hand out the modules with the most tests first and start the chaos suite,
# one test of 7 minutes, last): on 2 cores, 14 minutes where one at a time took 35.
test: $(STAMP) $(BROWSER) $(CONFORMANCE)  ## run every test (each starts its own servers on free ports)
	$(PY) -m pytest -n $$(( $(JOBS) + 1 )) --dist loadfile --no-loadscope-reorder --durations=20

# The tests that need no Temporal server, no process of their own and are not the chaos suite
# (tests/tiers.py marks the others from what they use), on the machine's cores.
FAST := -m "not temporal and not subprocess and not chaos"
test-fast: $(STAMP)  ## run the quick tier: no Temporal server, no process of its own, no chaos suite
	$(PY) -m pytest -p no:cacheprovider -n $(JOBS) $(FAST)

# The quick tier against the newest releases pyproject.toml's ranges allow (not the lock), in a
# venv of its own: what `make lock` would bring, tried before it is a decision.
test-latest: $(STAMP)  ## run the quick tier against the newest versions the ranges allow
	$(UV) venv --allow-existing --python $(PYTHON) .venv-latest
	VIRTUAL_ENV=.venv-latest $(UV) pip install --upgrade --reinstall-package waitstate -e '.[dev]'
	@$(UV) pip list --python $(VENV) --format freeze > .venv-latest/locked.txt
	@$(UV) pip list --python .venv-latest --format freeze > .venv-latest/latest.txt
	@echo "newer than uv.lock:"; diff .venv-latest/locked.txt .venv-latest/latest.txt | sed -n "s/^> /  /p"
	.venv-latest/bin/python -m pytest -p no:cacheprovider -n $(JOBS) $(FAST)

chaos: $(STAMP)  ## the reliability suite: 199 runs under injected faults, then 1,000 concurrent runs
	$(PY) -m chaos --size full
	$(PY) -m chaos --size load

bench: $(STAMP)  ## benchmarks against a raw-Temporal floor; prints a table, writes docs/benchmarks.md
	$(PY) -m bench

ui-check: up  ## screenshot the Web UI's list of runs waiting for approval (headless chromium)
	$(PY) scripts/ui_check.py

lint: $(STAMP)
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

clean: down
	rm -rf .temporal

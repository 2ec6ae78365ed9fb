# `make test` is what CI runs (.ci/run); `make dev` runs the controller locally.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test lint typecheck unit dev apiserver clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

# Builds kube-apiserver and etcd once into ~/.cache/buildrun-controller (minutes the first time).
apiserver:
	hack/localcluster/build >/dev/null

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

test: $(STAMP) apiserver lint
	$(VENV)/bin/pytest -q $(PYTEST_ARGS)

dev: $(STAMP) apiserver
	$(PY) -m devtools.dev

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

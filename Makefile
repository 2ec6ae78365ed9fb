# `make test` is what CI runs (.ci/run); `make dev` runs the controller locally.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test prefetch lint typecheck unit dev apiserver stack node shipwright oracle shp promtool image peer peer-build shipwright-it shipwright-it-test tekton-compat clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

# Starts fetching the Go modules every build below requires (hack/prefetch) and returns
# at once: with an empty module cache the downloads then overlap the compiles before
# them instead of each build waiting for its own (406-682 s of downloads measured here,
# BENCHMARKS-journal.md "Sharing the cold builds"); with a warm one it finds them all there and
# ends in seconds. The first prerequisite of `make test`, so it starts before anything
# else.
prefetch:
	hack/prefetch >/dev/null &

# Builds kube-apiserver and etcd once into ~/.cache/buildrun-controller (minutes the first time).
apiserver:
	hack/localcluster/build >/dev/null

# Builds everything devtools.cluster.stack.TektonStack runs (tests/cluster/test_tekton.py):
# the above plus kube-controller-manager, kube-scheduler, kwok and Tekton's
# controller and webhook, each once (about 0.3 s when cached).
stack:
	hack/build-all >/dev/null

# Builds the stack's real node (devtools/node/realnode.py): the kubelet and kube-proxy
# from the API server's own k8s.io/kubernetes module (hack/kubelet/build,
# hack/kube-proxy/build: 15 s after the kubelet), and every image its pods
# need, from source and Debian packages, in a registry's storage (hack/node-images/build),
# installing containerd, runc, docker-registry, buildah and debootstrap with apt-get when
# missing. Cached by content; about 6 minutes the first time in `make test`'s order on
# two busy cores (Tekton's step tools a link of what `stack` compiled, the kubelet
# mostly of what `apiserver` did; Shipwright's step tools compile what `oracle` and
# `peer-build` then share), about a second after. Exit
# code 3 (this machine cannot hold a real node: not root, no apt-get) lets `make test` go
# on: tests/cluster/test_real_builds.py then skips, saying why.
node:
	hack/node-images/build >/dev/null && hack/kubelet/build >/dev/null && hack/kube-proxy/build >/dev/null || [ $$? -eq 3 ]

# Puts Shipwright's source (the reference for drop-in: CRDs, samples, docs) into the Go
# module cache; devtools/shipwright/source.py finds it there. About 3 s the first time.
# Also Kubernetes' OpenAPI and k8s.io/api, which devtools/crds/crdgen.py reads (about 5 s).
shipwright:
	hack/shipwright/source >/dev/null
	hack/crds/k8s-openapi >/dev/null

# Builds the TaskRun oracle (hack/oracle: Shipwright's own GenerateTaskRun and Tekton's
# own validation) once into ~/.cache/buildrun-controller/oracle; tests/oracle/ runs it.
# About a minute the first time after `make node` (its Shipwright step tools compile most
# of the same packages, static as these), 4-6 minutes alone; instant after.
oracle:
	GOMAXPROCS=2 hack/oracle/build >/dev/null

# Builds Shipwright's CLI, shp (github.com/shipwright-io/cli, pinned in hack/shp/go.mod),
# once into ~/.cache/buildrun-controller/shp; tests/cluster/test_shp.py drives it.
shp:
	hack/shp/build >/dev/null

# Builds prometheus and promtool once into ~/.cache/buildrun-controller/prometheus
# (prometheus 111 s the first time here with a warm Go build cache, promtool 6 s after
# it; without the cloud service discoveries, with Kubernetes': tests/promtools.py), so
# tests/cluster/test_manifests.py and test_in_cluster.py's Prometheus only find them there.
promtool: $(STAMP)
	$(PY) -c 'from tests.promtools import prometheus_binary; prometheus_binary("prometheus"); prometheus_binary("promtool")'

# Builds the container image without Docker into containers-storage and
# build/image/ (buildah from Debian, needs root; 3-6 minutes the first time,
# about a second when nothing changed). Exit code 3 (the tools cannot be had)
# lets `make test` go on: tests/cluster/test_image.py then skips, saying why.
image:
	hack/image/build >/dev/null || [ $$? -eq 3 ]

# Builds Shipwright v0.20.13's own controller (hack/peer/build; seconds the first time
# after the oracle, whose packages it shares, 5 minutes alone; about a second when cached): tests/cluster/test_switchover.py
# switches a cluster between it and ours, and the peer benchmark runs it.
peer-build:
	hack/peer/build >/dev/null

# Builds Shipwright v0.20.13's own integration suite (test/integration, 119 specs) as a
# test binary whose StartBuildControllers starts ours (hack/shipwright-it/build; 18 s with
# a warm Go build cache, a second when cached): tests/cluster/test_shipwright_it.py runs it.
shipwright-it:
	hack/shipwright-it/build >/dev/null

# Runs that suite alone against our controller on a stack of its own; `make test` runs
# it too, with the rest (tests/cluster/test_shipwright_it.py, BENCHMARKS.md for its time).
shipwright-it-test: $(STAMP) stack shipwright-it
	$(VENV)/bin/pytest -q -m shipwright_it tests/cluster/test_shipwright_it.py

# The Tekton-facing tests against another Tekton release than hack/tekton/go.mod pins:
# `make tekton-compat TEKTON_VERSION=v1.3.4`. hack/tekton/build builds that release's
# controller and webhook into the cache first (keyed by the version; minutes the first
# time, well under a second after), then the stack of every test session runs it.
# README "Real parts" ("Other Tekton releases") has what differed on the oldest LTS.
TEKTON_VERSION ?=
TEKTON_TESTS ?= tests/cluster/test_tekton.py tests/cluster/test_pipelinerun_executor.py \
	tests/cluster/test_samples_run.py tests/cluster/test_shipwright_domain_tekton.py \
	tests/cluster/test_buildrun.py tests/cluster/test_switchover.py
tekton-compat: $(STAMP) apiserver shipwright oracle peer-build
	@test -n "$(TEKTON_VERSION)" || { echo "usage: make tekton-compat TEKTON_VERSION=v1.3.4" >&2; exit 2; }
	TEKTON_VERSION=$(TEKTON_VERSION) hack/build-all >/dev/null
	TEKTON_VERSION=$(TEKTON_VERSION) $(VENV)/bin/pytest -q $(TEKTON_TESTS) $(PYTEST_ARGS)

# Bench-only, not part of `make test`: the peer benchmark, ours and Shipwright's
# alternating (bench/e2e/throughput.py --mode peer). PEER_ARGS overrides its N and repeats.
PEER_ARGS ?= --n 10000 --repeat 2
peer: $(STAMP) apiserver shipwright peer-build
	$(PY) -m bench.e2e.throughput --mode controller peer $(PEER_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# hack/test: Shipwright's integration suite beside the rest of the tests (each waits on
# the API server and Tekton far more than it computes); PYTEST_ARGS runs one pytest instead.
test: prefetch $(STAMP) apiserver stack node shipwright oracle shp promtool image peer-build shipwright-it lint
	hack/test $(PYTEST_ARGS)

dev: $(STAMP) stack node
	$(PY) -m devtools.dev.run

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

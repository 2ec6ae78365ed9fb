# syntax=docker/dockerfile:1
#
# docker build -t buildrun-controller:0.1.0 .
#
# Two stages: the builder turns the source into a wheel and installs it, with
# its dependencies, into a virtualenv at /opt/venv; the final stage is plain
# python:3.11-slim with that virtualenv copied in, and nothing else: no compiler,
# no source tree, no pip run. It runs as the numeric non-root user 65532 and
# writes nothing at run time, so readOnlyRootFilesystem: true works.
# tests/test_dockerfile.py checks these properties, lints this file with
# hadolint, and installs the wheel into a fresh virtualenv the same way.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
RUN python -m venv /opt/venv
COPY pyproject.toml README.md ./
COPY controller ./controller
COPY workqueue ./workqueue
# Every runtime dependency ships binary wheels for CPython 3.11, so no compiler
# is needed. Bytecode is compiled here, keyed by content hash rather than
# mtime, so the read-only image never needs to (re)write a .pyc.
RUN /opt/venv/bin/pip wheel --no-deps --wheel-dir /wheels . \
 && /opt/venv/bin/pip install /wheels/*.whl \
 && /opt/venv/bin/pip uninstall --yes pip setuptools \
 && /opt/venv/bin/python -m compileall -q --invalidation-mode unchecked-hash /opt/venv/lib

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="buildrun-controller" \
      org.opencontainers.image.description="Runs Shipwright BuildRuns as Tekton TaskRuns, one try each"
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=builder /opt/venv /opt/venv
USER 65532:65532
# 8080: /metrics, 8081: /healthz and /readyz (see manifests/deployment/).
EXPOSE 8080 8081
ENTRYPOINT ["buildrun-controller"]

"""devtools/fakes/fates.py's `step_fate`: the fate kwok gives a Tekton pod from what
its step commands would do (true, false, sleep); any other command runs
UNKNOWN_STEP_SECONDS and exits 0.

The pods are shaped as Tekton v1.10 and v1.12 make them (every step runs /tekton/bin/entrypoint,
the step's own command after -entrypoint, its arguments after --), as read from a pod
of Shipwright's integration suite's ClusterBuildStrategyNoOp on the session's stack.
"""

from __future__ import annotations

from typing import Any

import pytest

from devtools.fakes.fates import PREFIX, TEKTON_ENTRYPOINT, UNKNOWN_STEP_SECONDS, step_fate

SOURCE = {"name": "step-source-default", "command": [TEKTON_ENTRYPOINT],
          "args": ["-wait_file", "/tekton/downward/ready", "-wait_file_content",
                   "-post_file", "/tekton/run/0/out", "-termination_path",
                   "/tekton/termination", "-step_metadata_dir", "/tekton/run/0/status",
                   "-entrypoint", "/ko-app/git", "--", "--url",
                   "https://github.com/shipwright-io/sample-go", "--target",
                   "/workspace/source"]}


def step(name: str, command: str, *args: str, env: list[dict[str, Any]] | None = None,
         on_error: str = "") -> dict[str, Any]:
    flags = ["-wait_file", "/tekton/run/0/out", "-post_file", "/tekton/run/1/out",
             "-termination_path", "/tekton/termination", "-step_metadata_dir",
             "/tekton/run/1/status", "-results", "shp-image-digest,shp-error-reason"]
    if on_error:
        flags += ["-on_error", on_error]
    container: dict[str, Any] = {"name": f"step-{name}", "command": [TEKTON_ENTRYPOINT],
                                 "args": [*flags, "-entrypoint", command, "--", *args]}
    if env is not None:
        container["env"] = env
    return container


def pod(*steps: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"containers": list(steps)}}


def fate(**values: str) -> dict[str, str]:
    return {PREFIX + k.replace("_", "-"): v for k, v in values.items()}


def ms(seconds: float) -> str:
    """A run-duration annotation's value."""
    return f"{round(seconds * 1000)}ms"


UNKNOWN = UNKNOWN_STEP_SECONDS


@pytest.mark.parametrize(("steps", "expected"), [
    # ClusterBuildStrategyNoOp, exit-command "true" (its default) and "false"
    ([step("step-no-and-op", "true")], {}),
    ([step("step-no-and-op", "false")], fate(fate="fail", exit_code="1")),
    ([step("step-no-and-op", "/bin/false")], fate(fate="fail", exit_code="1")),
    # ClusterBuildStrategySleep30s; ClusterBuildStrategyWithParameters' default "1"
    ([step("sleep30", "sleep", "30s")], fate(run_duration="30000ms")),
    ([step("sleep30", "sleep", "1")], fate(run_duration="1000ms")),
    ([step("s", "sleep", "1.5", "2m", "1h", ".5", "1d")],
     fate(run_duration=f"{(1.5 + 120 + 3600 + .5 + 86400) * 1000:.0f}ms")),
    ([step("s", "sleep", "0")], {}),
    # sleep refuses a missing or malformed operand: exit 1 at once
    ([step("s", "sleep")], fate(fate="fail", exit_code="1")),
    ([step("s", "sleep", "30x")], fate(fate="fail", exit_code="1")),
    ([step("s", "sleep", "-1")], fate(fate="fail", exit_code="1")),
    # steps run in order: what ran before a failure counts, what follows never runs
    ([step("a", "sleep", "2"), step("b", "false"), step("c", "sleep", "60")],
     fate(fate="fail", exit_code="1", run_duration="2000ms")),
    ([step("a", "sleep", "2"), step("b", "true"), step("c", "sleep", "3")],
     fate(run_duration="5000ms")),
    # onError: continue lets the steps after a failed one run, and the pod succeed
    ([step("a", "false", on_error="continue"), step("b", "sleep", "3")],
     fate(run_duration="3000ms")),
    ([step("a", "false", on_error="stopAndFail")], fate(fate="fail", exit_code="1")),
    # any other command runs the stand-in's time and exits 0: a build tool, a shell,
    # Shipwright's git source step (as a pod of its ClusterBuildStrategyNoOp has it)
    ([step("build", "/kaniko/executor", "--skips-tlss-verifys=true")],
     fate(run_duration=ms(UNKNOWN))),
    ([step("bud", "/usr/bin/buildah", "bud"), step("s", "sleep", "4")],
     fate(run_duration=ms(UNKNOWN + 4))),
    ([step("sh", "sh", "-c", "sleep 30; false")], fate(run_duration=ms(UNKNOWN))),
    ([SOURCE, step("step-no-and-op", "true")], fate(run_duration=ms(UNKNOWN))),
    ([SOURCE, step("build", "/kaniko/executor")], fate(run_duration=ms(2 * UNKNOWN))),
    ([SOURCE, step("step-no-and-op", "false")],
     fate(fate="fail", exit_code="1", run_duration=ms(UNKNOWN))),
    # $(NAME) is the kubelet's to expand from the container's env
    ([step("s", "sleep", "$(T)", env=[{"name": "T", "value": "7"}])],
     fate(run_duration="7000ms")),
    ([step("s", "$(CMD)", env=[{"name": "CMD", "value": "false"}])],
     fate(fate="fail", exit_code="1")),
    # ... from a Secret: the value is not in the pod, so the step is not known
    ([step("s", "sleep", "$(T)", env=[{"name": "T", "valueFrom": {"secretKeyRef": {}}}])],
     fate(run_duration=ms(UNKNOWN))),
    # ... undefined: left as written, which sleep refuses
    ([step("s", "sleep", "$(T)")], fate(fate="fail", exit_code="1")),
])
def test_step_fate_is_what_the_commands_would_do(steps: list[dict[str, Any]],
                                                 expected: dict[str, str]) -> None:
    assert step_fate(pod(*steps)) == expected


def test_only_tekton_steps_count() -> None:
    """Sidecars never count; a step container not run by Tekton's entrypoint, or with no
    command of its own (Tekton resolves the image's), is not read, so it runs the
    stand-in's time like any command not emulated."""
    sidecar = {**step("x", "false"), "name": "sidecar-x"}
    plain = {"name": "step-plain", "command": ["false"]}
    no_command = {"name": "step-image", "command": [TEKTON_ENTRYPOINT],
                  "args": ["-post_file", "/tekton/run/0/out", "--", "x"]}
    assert step_fate(pod(sidecar)) == {}
    assert step_fate(pod(sidecar, plain, no_command)) == fate(run_duration=ms(2 * UNKNOWN))
    assert step_fate({"metadata": {}, "spec": {}}) == {}

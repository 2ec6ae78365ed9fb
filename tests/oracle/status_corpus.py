"""The status oracle's corpus, our side of it, and the documented differences.

A case is a TaskRun or PipelineRun as Tekton left it ("run"), the objects a mapping may
read ("objects": its pod, a PipelineRun's TaskRuns and their pods; what is absent is
gone), whether the BuildRun asked for a cancel, and optionally the Build and BuildRun
("build", "buildRun"; else fixtures.build() and a BuildRun of it). Four sources:

* captured: real runs on the stack, one file per Tekton release (v1.3.4, v1.10.3,
  v1.12.0: status_corpus/tekton-*.json, written by capture_statuses.py);
* every reason Tekton v1.3 to v1.12 can set (controller.buildrun.reasons.TEKTON_REASONS),
  on a captured failed TaskRun and PipelineRun, finished and unfinished;
* garbage: statuses nobody's Tekton writes but a hand-made patch or a bug can, as the
  unit tests of outcomes.py and the hostile corpus (tests/cluster/test_bad_input.py) use
  them, each one Go can still decode (a status Go cannot decode stops Shipwright's
  informer, so there is nothing to compare);
* build specs: a captured successful run of a BuildRun that embeds its Build's spec, of
  one that overrides its Build's timeout, output, retention and env, and of a Build
  spelled otherwise than Go writes it (status.buildSpec).

`ours(case)` is the status our controller writes: the start's (status_writes.started,
with plan.snapshot_of), then the change of the row states.decide picks for the run as
observe.py reads it (the executor's children, the pod, its outcome). `theirs(answer)` is
the same fields of Shipwright's answer. DIFFERENCES holds each way they may differ on
purpose, with why; docs/shipwright-api.md "Status from Tekton" says the same.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.buildrun import reasons
from controller.buildrun.buildruns import run_completion
from controller.buildrun.executors import EXECUTORS
from controller.buildrun.outcomes import (
    MESSAGE_MAX,
    REASON_MAX,
    pod_completed,
    run_finished,
)
from controller.buildrun.plan import build_spec_of, snapshot_of
from controller.buildrun.spec import build_name, go_duration, parse_duration
from controller.buildrun.states import Action, Observation, Phase, decide
from controller.buildrun.status_writes import (
    cancel_asked,
    cancel_requested_message,
    finished,
    progressed,
    started,
)
from controller.shipwright.conditions import succeeded_condition
from controller.shipwright.labels import LABEL_BUILDRUN
from devtools.cluster import fixtures
from devtools.shipwright import oracle

JSON = dict[str, Any]
CORPUS = Path(__file__).parent / "status_corpus"
FIELDS = ("condition", "failureDetails", "output", "source", "startTime", "completionTime",
          "buildSpec")
# When our controller looks at a case: after every run in the corpus ended, so a time
# of ours is told apart from the run's.
NOW = "2030-01-01T00:00:00Z"


def captured() -> list[JSON]:
    cases: list[JSON] = []
    for path in sorted(CORPUS.glob("tekton-*.json")):
        cases += json.loads(path.read_text())
    return cases


def _with_condition(case: JSON, case_id: str, status: str, reason: str, message: str,
                    *, canceled: bool = False) -> JSON:
    new = copy.deepcopy(case)
    new["id"] = case_id
    new["canceled"] = canceled
    if status == "Unknown":
        # Tekton sets completionTime only when it ends a run.
        new["run"]["status"].pop("completionTime", None)
    conditions = new["run"]["status"]["conditions"]
    for condition in conditions:
        if condition["type"] == "Succeeded":
            condition.update(status=status, reason=reason, message=message)
    return new


# Reasons Tekton writes on a run still in progress (status Unknown).
UNFINISHED_REASONS = frozenset({
    "Started", "Running", "Pending", "ToBeRetried", "ResolvingTaskRef",
    "ResolvingStepActionRef", "TaskRunPending", "ExceededNodeResources", "PullImageFailed",
    "PipelineRunPending", "PipelineRunStopping", "CancelledRunningFinally",
    "StoppedRunningFinally", "ResolvingPipelineRef"})


def _newest(cases: list[JSON]) -> JSON:
    """The case captured on the newest Tekton release ("v1.12.0" after "v1.3.4")."""
    return max(cases, key=lambda c: tuple(int(n) for n in c["tekton"][1:].split(".")))


def every_reason(base: list[JSON]) -> list[JSON]:
    """Each Tekton reason on the newest captured failed TaskRun and PipelineRun (their
    pods as they were): False with Tekton-like words, Unknown for those Tekton writes while
    a run goes on, and the ones a cancel the BuildRun asked for changes."""
    cases: list[JSON] = []
    for executor in ("TaskRun", "PipelineRun"):
        failed = [c for c in base if c["executor"] == executor and c["id"].endswith("/fail")]
        if not failed:
            continue
        seed = _newest(failed)
        for reason in sorted(reasons.TEKTON_REASONS):
            if reason in ("Succeeded", "Completed"):
                continue
            cases.append(_with_condition(seed, f"reason/{executor}/False/{reason}", "False",
                                         reason, f"Tekton says {reason}"))
            if reason in UNFINISHED_REASONS:
                cases.append(_with_condition(seed, f"reason/{executor}/Unknown/{reason}",
                                             "Unknown", reason, f"Tekton says {reason}"))
        for reason in ("Succeeded", "Completed"):
            cases.append(_with_condition(seed, f"reason/{executor}/True/{reason}", "True",
                                         reason, "All done"))
        for status, reason in (("False", "TaskRunCancelled"), ("False", "Cancelled"),
                               ("False", "PipelineRunCancelled"), ("True", "Succeeded"),
                               ("Unknown", "Running"), ("Unknown", "Started")):
            cases.append(_with_condition(seed, f"reason/{executor}/{status}/{reason}/canceled",
                                         status, reason, "Tekton's words", canceled=True))
    return cases


def _taskrun(status: JSON | None, **spec: Any) -> JSON:
    run: JSON = {"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
                 "metadata": {"name": "garbage-tr", "namespace": "g",
                              "labels": {LABEL_BUILDRUN: "garbage"}},
                 "spec": {"timeout": "1h0m0s", **spec}}
    if status is not None:
        run["status"] = status
    return run


def _failed(reason: str = "Failed", message: str = "it failed", **status: Any) -> JSON:
    return {"conditions": [{"type": "Succeeded", "status": "False", "reason": reason,
                            "message": message}], **status}


def _pod(name: str = "garbage-pod", *containers: JSON, **status: Any) -> JSON:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "g"},
            "spec": {"containers": [{"name": c["name"]} for c in containers]},
            "status": {"containerStatuses": list(containers), **status}}


def _terminated(name: str, code: int, reason: str = "Error") -> JSON:
    return {"name": name, "state": {"terminated": {"exitCode": code, "reason": reason}}}


ENDED: JSON = {"completionTime": "2026-01-01T00:00:00Z"}
DONE: JSON = {**ENDED, "podName": "garbage-pod"}


def garbage() -> list[JSON]:
    """Statuses no Tekton writes on its own, each decodable by Go."""
    def case(case_id: str, run: JSON, *objects: JSON, executor: str = "TaskRun",
             canceled: bool = False) -> JSON:
        return {"id": f"garbage/{case_id}", "executor": executor, "canceled": canceled,
                "run": run, "objects": list(objects)}

    succeeded = {"conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded",
                                 "message": "done"}], **ENDED}
    pr_refs: JSON = {"childReferences": [{"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
                                    "name": "garbage-child"}]}
    pipelinerun = {"apiVersion": "tekton.dev/v1", "kind": "PipelineRun",
                   "metadata": {"name": "garbage-pr", "namespace": "g",
                                "labels": {LABEL_BUILDRUN: "garbage"}},
                   "spec": {"timeouts": {"pipeline": "1h0m0s"}}}
    child = _taskrun(_failed(**DONE))
    child["metadata"]["name"] = "garbage-child"
    return [
        case("no-status", _taskrun(None)),
        case("no-conditions", _taskrun({"conditions": []})),
        case("only-ready", _taskrun({"conditions": [{"type": "Ready", "status": "True"}]})),
        case("status-maybe", _taskrun({"conditions": [
            {"type": "Succeeded", "status": "Maybe", "reason": "Running"}]})),
        case("false-without-reason", _taskrun({"conditions": [
            {"type": "Succeeded", "status": "False"}], **DONE})),
        case("true-without-reason", _taskrun({"conditions": [
            {"type": "Succeeded", "status": "True"}], **ENDED})),
        case("unknown-with-completion-time", _taskrun({"conditions": [
            {"type": "Succeeded", "status": "Unknown", "reason": "Running",
             "message": "running"}], "startTime": "2025-12-31T23:00:00Z", **ENDED})),
        case("failed-without-completion-time", _taskrun(_failed(podName="garbage-pod")),
             _pod("garbage-pod", _terminated("step-build", 1))),
        case("failed-without-pod-name", _taskrun(_failed(
            completionTime="2026-01-01T00:00:00Z"))),
        case("failed-pod-gone", _taskrun(_failed(**DONE))),
        case("failed-unreadable-termination-messages", _taskrun(_failed(**DONE, steps=[
            {"name": "a", "container": "step-a", "terminated": {"exitCode": 1,
                                                                 "message": "not json"}},
            {"name": "b", "container": "step-b", "terminated": {"exitCode": 2,
                                                                 "message": "[1, 2]"}},
            {"name": "c", "container": "step-c", "terminated": {"message": "[]"}},
            {"name": "d", "container": "step-d"}])),
             _pod("garbage-pod", _terminated("step-a", 1), _terminated("step-b", 2))),
        case("failed-error-results-in-two-steps", _taskrun(_failed(**DONE, steps=[
            {"name": "a", "terminated": {"exitCode": 1, "message": json.dumps(
                [{"key": "shp-error-reason", "value": "First"}])}},
            {"name": "b", "terminated": {"exitCode": 1, "message": json.dumps(
                [{"key": "shp-error-reason", "value": "Second"},
                 {"key": "shp-error-message", "value": "the second"}])}}])),
             _pod("garbage-pod", _terminated("step-a", 1), _terminated("step-b", 1))),
        case("failed-padded-error-results", _taskrun(_failed(**DONE, steps=[
            {"name": "a", "terminated": {"exitCode": 1, "message": json.dumps(
                [{"key": "shp-error-reason", "value": "  Padded\n"}])}}])),
             _pod("garbage-pod", _terminated("step-a", 1))),
        case("failed-evicted-without-containers", _taskrun(_failed(**DONE)),
             _pod("garbage-pod", reason="Evicted", message="The node was low on memory.")),
        # The truth soak's containerd restart (RELIABILITY.md): the first step's status lost
        # ("255: Unknown"), every later step run and ended well, the image pushed.
        case("failed-after-the-last-step-ended-well", _taskrun(_failed(
            "StepFailed", '"step-source-default" exited with code 255: Unknown', **DONE,
            steps=[{"name": "source-default", "container": "step-source-default",
                    "terminated": {"exitCode": 255, "reason": "Unknown"}},
                   {"name": "build", "container": "step-build",
                    "terminated": {"exitCode": 0, "reason": "Completed"}},
                   {"name": "image-processing", "container": "step-image-processing",
                    "terminated": {"exitCode": 0, "reason": "Completed", "message": json.dumps(
                        [{"key": "shp-image-digest", "value": "sha256:pushed", "type": 1}])}}],
            results=[{"name": "shp-image-digest", "type": "string", "value": "sha256:pushed"}])),
             _pod("garbage-pod", _terminated("step-source-default", 255, "Unknown"),
                  _terminated("step-build", 0, "Completed"),
                  _terminated("step-image-processing", 0, "Completed"))),
        case("failed-sidecar-only", _taskrun(_failed(**DONE)),
             _pod("garbage-pod", _terminated("step-build", 0, "Completed"),
                  _terminated("sidecar-db", 137, "OOMKilled"))),
        case("timeout-without-spec-timeout", _taskrun(_failed(
            "TaskRunTimeout", "TaskRun garbage-tr failed to finish within 1h0m0s", **DONE),
            timeout=None)),
        case("reason-and-message-over-the-crd-limits", _taskrun(_failed(
            "R" * (REASON_MAX + 10), "M" * (MESSAGE_MAX + 10), **DONE))),
        case("succeeded-array-and-padded-results", _taskrun({**succeeded, "results": [
            {"name": "shp-image-digest", "type": "array", "value": ["sha256:x"]},
            {"name": "shp-image-size", "type": "string", "value": "12abc"},
            {"name": "shp-image-vulnerabilities", "type": "string", "value": "CVE-1:X,CVE-2:h"},
            {"name": "shp-source-default-commit-sha", "type": "string", "value": " abc \n"},
        ]})),
        case("succeeded-padded-digest", _taskrun({**succeeded, "results": [
            {"name": "shp-image-digest", "type": "string", "value": "sha256:abc\n"}]})),
        case("pipelinerun-failed-no-children", {**pipelinerun, "status": _failed(
            completionTime="2026-01-01T00:00:00Z")}, executor="PipelineRun"),
        case("pipelinerun-failed-children-gone", {**pipelinerun, "status": _failed(
            completionTime="2026-01-01T00:00:00Z", **pr_refs)}, executor="PipelineRun"),
        case("pipelinerun-failed-child-pod-gone", {**pipelinerun, "status": _failed(
            completionTime="2026-01-01T00:00:00Z", **pr_refs)}, child, executor="PipelineRun"),
        case("pipelinerun-own-results", {**pipelinerun, "status": {**succeeded, "results": [
            {"name": "shp-image-digest", "value": "sha256:own"}], **pr_refs}},
             child, executor="PipelineRun"),
        case("pipelinerun-timeout-without-timeouts", {**pipelinerun, "spec": {}, "status": (
            _failed("PipelineRunTimeout", "PipelineRun garbage-pr failed to finish", **ENDED))},
             executor="PipelineRun"),
        # Tekton saw the cancel before it read the pod, whose steps had all ended: the
        # image was pushed (outcomes.outcome_from_taskrun).
        case("cancelled-after-the-pod-completed", _taskrun(_failed(
            reasons.TASK_RUN_CANCELLED, "TaskRun \"garbage-tr\" was cancelled", **DONE)),
             _pod("garbage-pod", _terminated("step-build", 0, "Completed"),
                  {"name": "step-image-processing", "state": {"terminated": {
                      "exitCode": 0, "reason": "Completed", "message": json.dumps(
                          [{"key": "shp-image-digest", "value": "sha256:pushed", "type": 1},
                           {"key": "shp-image-size", "value": "42", "type": 1}])}}},
                  phase="Succeeded"),
             canceled=True),
    ]


def build_specs(base: list[JSON]) -> list[JSON]:
    """The newest captured successful TaskRun and PipelineRun, of BuildRuns whose
    status.buildSpec Shipwright writes from the Build as read: an embedded spec, a
    BuildRun overriding its Build's timeout, output, retention and env (other names),
    one setting an env var its Build sets too, and a Build whose durations are not
    spelled as Go writes them."""
    build = fixtures.build(timeout="10m0s", retention={"ttlAfterSucceeded": "1h0m0s"},
                           env=[{"name": "FROM_BUILD", "value": "build"}])
    cases: list[JSON] = []
    for executor in ("TaskRun", "PipelineRun"):
        succeeded = [c for c in base
                     if c["executor"] == executor and c["id"].endswith("/succeed")]
        seed = _newest(succeeded)
        name = seed["run"]["metadata"]["labels"][LABEL_BUILDRUN]
        variants: dict[str, tuple[JSON, JSON]] = {
            "embedded": (build, fixtures.buildrun(name, None, build={"spec": {
                **fixtures.build_spec(), "timeout": "5m0s",
                "env": [{"name": "EMBEDDED", "value": "yes"}]}})),
            "overrides": (build, fixtures.buildrun(
                name, fixtures.BUILD, timeout="1h0m0s",
                output={"image": "registry.example.com/other:1"},
                retention={"ttlAfterSucceeded": "5m0s"},
                env=[{"name": "FROM_BUILDRUN", "value": "buildrun"}])),
            "same-env": (build, fixtures.buildrun(
                name, fixtures.BUILD, env=[{"name": "FROM_BUILD", "value": "buildrun"}])),
            "go-spelling": (fixtures.build(timeout="10m", retention={
                "ttlAfterSucceeded": "90m", "ttlAfterFailed": "1h"}),
                fixtures.buildrun(name, fixtures.BUILD)),
        }
        for variant, (variant_build, buildrun) in variants.items():
            new = copy.deepcopy(seed)
            new.update(id=f"buildspec/{executor}/{variant}", build=variant_build,
                       buildRun=buildrun)
            cases.append(new)
    return cases


def corpus() -> list[JSON]:
    base = captured()
    return base + every_reason(base) + garbage() + build_specs(base)


# --- the two sides

def _prune(value: Any) -> Any:
    """Go's omitempty, and an empty result read as none: None, "", {} and [] dropped."""
    if isinstance(value, dict):
        pruned = {k: _prune(v) for k, v in value.items()}
        return {k: v for k, v in pruned.items() if v not in (None, "", {}, [])} or None
    if isinstance(value, list):
        return [_prune(v) for v in value] or None
    return value


def _condition(status: str, reason: str, message: str) -> JSON:
    return {"status": status, "reason": reason, "message": message}


def build_and_buildrun(case: JSON) -> tuple[JSON, JSON]:
    """The case's Build and BuildRun (fixtures.build() and a BuildRun of it unless the case
    has its own), in the run's namespace, the BuildRun named by the run's label and
    canceled when the case says so."""
    run = case["run"]
    name = ((run.get("metadata") or {}).get("labels") or {}).get(LABEL_BUILDRUN) or "br"
    namespace = (run.get("metadata") or {}).get("namespace") or "default"
    build = copy.deepcopy(case.get("build") or fixtures.build())
    buildrun = copy.deepcopy(case.get("buildRun") or fixtures.buildrun(name, fixtures.BUILD))
    build["metadata"]["namespace"] = buildrun["metadata"]["namespace"] = namespace
    if case["canceled"]:
        buildrun["spec"]["state"] = "BuildRunCanceled"
    return build, buildrun


def _referenced_build(build: JSON, buildrun: JSON) -> JSON | None:
    """The Build the planner reads: None for a BuildRun that embeds its spec."""
    return None if build_name(buildrun) is None else build


def ours(case: JSON) -> JSON:
    """The status our controller writes for the case: row 12's (status_writes.started,
    the snapshot plan.snapshot_of takes), then the change of the row states.decide picks
    for the run as observe.py reads it (its children, the failed or cancelled run's pod,
    the outcome of a finished run), at NOW. Whether a canceled run's pod has completed
    only decides whether the cancel is sent on (row 18), not the status: left False."""
    executor = EXECUTORS[case["executor"]]
    run = case["run"]
    build, buildrun = build_and_buildrun(case)
    objects = {(o["kind"], o["metadata"]["name"]): o for o in case["objects"]}
    children = [objects[("TaskRun", name)] for name in executor.children(run)
                if ("TaskRun", name) in objects]
    pod_name = executor.failed_pod(run, children)
    pod = objects.get(("Pod", pod_name)) if pod_name else None
    running = not run_finished(run)
    outcome = None if running else executor.outcome(run, children, pod, case["canceled"])
    decision = decide(Observation(Phase.RUNNING, canceled=case["canceled"], outcome=outcome,
                                  run_running=running, executor_kind=executor.kind))
    changes = {Action.FINISH: finished(decision, run, NOW),
               Action.PROGRESS: progressed(run, NOW),
               Action.CANCEL: cancel_asked(executor, NOW)}
    snapshot = snapshot_of(buildrun, _referenced_build(build, buildrun))
    status = changes[decision.action](started(executor, run, snapshot, NOW)({}))
    condition = succeeded_condition(status)
    assert condition is not None, status
    return {"condition": _condition(condition["status"], condition["reason"],
                                    condition["message"]),
            **{k: status.get(k) for k in FIELDS[1:]}}


def theirs(answer: JSON) -> JSON:
    status = answer["status"] or {}
    condition = status.get("condition")
    return {
        "condition": None if condition is None else _condition(
            condition["status"], condition["reason"], condition["message"]),
        **{k: _prune(status.get(k)) for k in FIELDS[1:]},
    }


def normalised(side: JSON) -> JSON:
    """Both sides with every field present (None when empty), conditions kept whole."""
    return {k: (side.get(k) if k == "condition" else _prune(side.get(k))) for k in FIELDS}


def request(case: JSON) -> JSON:
    build, buildrun = build_and_buildrun(case)
    return oracle.status_case(case["run"], case["objects"], fixtures.strategy(), build,
                              buildrun, executor=case["executor"], case_id=case["id"])


# --- the differences we make on purpose


@dataclass(frozen=True)
class Difference:
    what: str
    why: str
    # Whether the case is one where we differ; then `holds` says what ours does instead
    # (of the case, ours, theirs).
    applies: Callable[[JSON], bool]
    holds: Callable[[JSON, JSON, JSON], bool]


def _cond(case: JSON) -> JSON:
    return succeeded_condition(case["run"].get("status")) or {}


def _same_but(ours_: JSON, theirs_: JSON, *fields: str) -> bool:
    return all(ours_[k] == theirs_[k] for k in FIELDS if k not in fields)


def _unfinished(case: JSON) -> bool:
    """A run not finished, of a BuildRun not canceled, that Tekton has given no reason
    yet: ours Pending with our words, Shipwright's no condition. Where Tekton has, ours
    keeps its reason and message, as Shipwright does (outcomes.running_reason)."""
    if run_finished(case["run"]) or case["canceled"] or _unknown_but_ended(case):
        return False
    return not _cond(case).get("reason")


def _cancel_pending(case: JSON) -> bool:
    """A run not finished of a BuildRun that asked for a cancel, but where Shipwright
    shows the same: a TaskRun Tekton calls Started or Running (conditions.go)."""
    shipwrights_words = (case["executor"] == "TaskRun"
                         and _cond(case).get("reason") in ("Started", reasons.RUNNING))
    return case["canceled"] and not run_finished(case["run"]) and not shipwrights_words


def _unknown_but_ended(case: JSON) -> bool:
    return bool(_cond(case)) and not run_finished(case["run"]) and (
        run_completion(case["run"]) is not None)


def _last_step_code(case: JSON) -> object:
    steps = (case["run"].get("status") or {}).get("steps") or []
    return ((steps[-1].get("terminated") or {}).get("exitCode")) if steps else None


def _has_whitespace_result(case: JSON) -> bool:
    text = json.dumps(case["run"].get("status") or {})
    return "  Padded" in text or "\\n\"" in text


def _trimmed(value: Any) -> Any:
    """Every string in `value` stripped of surrounding whitespace."""
    if isinstance(value, dict):
        return {k: _trimmed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trimmed(v) for v in value]
    return value.strip() if isinstance(value, str) else value


def _env_overridden(case: JSON) -> bool:
    build, buildrun = build_and_buildrun(case)
    names = {e["name"] for e in build["spec"].get("env") or []}
    return build_name(buildrun) is not None and any(
        e["name"] in names for e in buildrun["spec"].get("env") or [])


def _env_as_overridden(case: JSON, ours_: JSON, theirs_: JSON) -> bool:
    """Theirs is ours with each env var the BuildRun sets too holding the BuildRun's
    entry, in the Build's order."""
    _, buildrun = build_and_buildrun(case)
    buildruns = {e["name"]: e for e in buildrun["spec"].get("env") or []}
    env = [buildruns.get(e["name"], e) for e in ours_["buildSpec"].get("env") or []]
    return bool({**ours_["buildSpec"], "env": env} == theirs_["buildSpec"])


def _durations_not_as_go_writes(case: JSON) -> bool:
    build, buildrun = build_and_buildrun(case)
    spec = build_spec_of(buildrun, _referenced_build(build, buildrun))
    durations = [spec.get("timeout"), *(spec.get("retention") or {}).values()]
    return any(isinstance(d, str) and go_duration(parse_duration(d)) != d for d in durations)


def _go_spelling(spec: JSON | None) -> JSON | None:
    """A build spec with its timeout and retention TTLs as Go writes them."""
    if spec is None:
        return None
    spelled = {**spec}
    if "timeout" in spelled:
        spelled["timeout"] = go_duration(parse_duration(spelled["timeout"]))
    if "retention" in spelled:
        spelled["retention"] = {k: go_duration(parse_duration(v)) if k.startswith("ttl") else v
                                for k, v in spelled["retention"].items()}
    return spelled


DIFFERENCES: dict[str, Difference] = {
    "unfinished": Difference(
        "a run not finished that Tekton has given no reason yet: ours is Unknown/Pending "
        "with our words ('TaskRun NAME has not started yet'), Shipwright's has no condition",
        "the state table's rows 12 and 21 (README 'How a BuildRun moves'): ours has a "
        "condition from the start; once Tekton has a reason, ours is Tekton's reason and "
        "message, as Shipwright's (Started, Pending, ExceededNodeResources, ...)",
        _unfinished,
        lambda _, o, t: (o["condition"]["reason"] == reasons.PENDING
                         and o["condition"]["status"] == "Unknown"
                         and _same_but(o, t, "condition"))),
    "unknown-status-value": Difference(
        "a run whose condition status is none of True, False, Unknown (a status patched "
        "by hand): ours Unknown, Shipwright's that value",
        "the run has not finished (only True or False end it), so ours says it goes on, "
        "with Tekton's reason and message",
        lambda c: (not run_finished(c["run"]) and not c["canceled"] and bool(_cond(c))
                   and _cond(c).get("status") != "Unknown" and not _unfinished(c)
                   and not _unknown_but_ended(c)),
        lambda _, o, t: (o["condition"]["status"] == "Unknown"
                         and {**o["condition"], "status": t["condition"]["status"]}
                         == t["condition"] and _same_but(o, t, "condition"))),
    "cancel-pending": Difference(
        "a run not finished of a BuildRun that asked for a cancel: ours is "
        "Unknown/BuildRunCanceled with Shipwright's words naming the run's kind; "
        "Shipwright shows them only for a TaskRun Tekton calls Started or Running, else "
        "Tekton's condition (a PipelineRun always)",
        "the cancel is asked and pending (row 18), whatever Tekton calls the wait, and it "
        "is said the same for both executors: Shipwright's PipelineRun path has no such "
        "case, so its canceled BuildRun looks like one still running",
        _cancel_pending,
        lambda c, o, t: (o["condition"] == _condition(
            "Unknown", reasons.BUILD_RUN_CANCELED, cancel_requested_message(c["executor"]))
            and _same_but(o, t, "condition"))),
    "unknown-but-ended": Difference(
        "a run Tekton says is going on (Unknown) with a completionTime: ours waits, "
        "without a completionTime",
        "no Tekton writes it (completionTime comes with the verdict); Shipwright copies "
        "any completionTime the run has, which freezes its BuildRun Unknown for good "
        "(its reconcile stops at a completionTime), and its TTL would delete it",
        _unknown_but_ended,
        lambda c, o, t: (o["completionTime"] is None
                         and t["completionTime"] == run_completion(c["run"])
                         and o["condition"]["status"] == "Unknown"
                         and _same_but(o, t, "completionTime"))),
    "ended-without-completion-time": Difference(
        "a run Tekton says finished (True or False) without a completionTime: ours "
        "completes the BuildRun with its own time (when it saw the verdict)",
        "no Tekton writes it (it sets completionTime with the verdict); Shipwright copies "
        "only the run's, so its BuildRun would never complete: no CompletionTime, no "
        "retention TTL, reconciled again on every event",
        lambda c: run_finished(c["run"]) and run_completion(c["run"]) is None,
        lambda _, o, t: (o["completionTime"] == NOW and t["completionTime"] is None
                      and _same_but(o, t, "completionTime"))),
    "cancelled-after-the-build": Difference(
        "a TaskRun Tekton ends TaskRunCancelled for a BuildRun that asked for it, while "
        "its pod shows every step done (phase Succeeded): ours Succeeded with the image "
        "the steps wrote; Shipwright's BuildRunCanceled",
        "the image was pushed: Tekton saw the cancel before it read the pod's end (its "
        "reconciler asks IsCancelled first), so the run says cancelled of a build that "
        "is done; a BuildRun that says canceled would hide an image in the registry",
        lambda c: (c["executor"] == "TaskRun" and c["canceled"]
                   and _cond(c).get("reason") == reasons.TASK_RUN_CANCELLED
                   and any(pod_completed(o) for o in c["objects"] if o["kind"] == "Pod")),
        lambda _, o, t: (o["condition"]["reason"] == reasons.SUCCEEDED
                      and t["condition"]["reason"] == reasons.BUILD_RUN_CANCELED
                      and bool((o["output"] or {}).get("digest")) and t["output"] is None
                      and _same_but(o, t, "condition", "output"))),
    "failed-after-the-build": Difference(
        "a TaskRun Tekton failed after its last step ended well (exit code 0): ours "
        "Succeeded with its image, Tekton's failure in the message; Shipwright's the failure",
        "Tekton starts a step only once the one before it ended well, so every step ran, "
        "the push included: the image is in the registry (a container status lost in a "
        "containerd restart failed such a run in the truth soak, RELIABILITY.md); a "
        "BuildRun that says failed would hide it",
        lambda c: (c["executor"] == "TaskRun" and _cond(c).get("status") == "False"
                   and _last_step_code(c) == 0),
        lambda _, o, t: (o["condition"]["status"] == "True"
                         and o["condition"]["reason"] == reasons.SUCCEEDED
                         and t["condition"]["status"] == "False"
                         and _same_but(o, t, "condition", "failureDetails"))),
    "pipelinerun-cancelled": Difference(
        "a PipelineRun Tekton ends Cancelled for a BuildRun that asked for it: ours "
        "BuildRunCanceled, Shipwright's 'Cancelled'",
        "Shipwright's code looks for PipelineRunCancelled, a reason Tekton v1 does not "
        "write, so its canceled BuildRuns end with Tekton's 'Cancelled'; ours end as its "
        "TaskRun ones do",
        lambda c: (c["executor"] == "PipelineRun" and c["canceled"]
                   and _cond(c).get("status") == "False"
                   and _cond(c).get("reason") == reasons.CANCELLED),
        lambda _, o, t: (o["condition"]["reason"] == reasons.BUILD_RUN_CANCELED
                      and t["condition"]["reason"] == reasons.CANCELLED
                      and _same_but(o, t, "condition"))),
    "timeout-without-spec": Difference(
        "a timed-out run without spec.timeout (timeouts.pipeline): ours keeps Tekton's message",
        "Tekton's webhook always sets it; without one Shipwright quotes the time since the "
        "run was created, which says nothing of the timeout",
        lambda c: (_cond(c).get("reason") in (reasons.TASK_RUN_TIMEOUT,
                                              reasons.PIPELINE_RUN_TIMEOUT)
                   and not ((c["run"].get("spec") or {}).get("timeout")
                            or ((c["run"].get("spec") or {}).get("timeouts") or {}).get(
                                "pipeline"))),
        lambda _, o, t: (o["condition"]["reason"] == t["condition"]["reason"]
                      and _same_but(o, t, "condition"))),
    "crd-limits": Difference(
        "a reason or message longer than the BuildRun CRD allows (256, 32768): cut",
        "the CRD's maxLength would refuse the whole status write",
        lambda c: (len(str(_cond(c).get("reason") or "")) > REASON_MAX
                   or len(str(_cond(c).get("message") or "")) > MESSAGE_MAX),
        lambda _, o, t: (len(o["condition"]["reason"]) <= REASON_MAX
                      and len(o["condition"]["message"]) <= MESSAGE_MAX
                      and _same_but(o, t, "condition"))),
    "trimmed-results": Difference(
        "result values (and a failed step's error reason and message) with surrounding "
        "whitespace: trimmed",
        "a value written with echo ends in a newline; README 'Where we differ on purpose'",
        _has_whitespace_result,
        lambda _, o, t: (all(o[k] == _trimmed(t[k]) for k in ("failureDetails", "output",
                                                              "source"))
                      and _same_but(o, t, "failureDetails", "output", "source"))),
    "build-env-overridden": Difference(
        "a BuildRun setting an env var its Build sets too: ours keeps the Build's value "
        "in status.buildSpec, Shipwright's shows the BuildRun's",
        "status.buildSpec is the Build's spec as read (Shipwright's own rule, "
        "`buildRun.Status.BuildSpec = &build.Spec`); Shipwright's generator then merges "
        "the BuildRun's env into the Build's env list in place (env.MergeEnvVars "
        "overwrites the slice it is given), so its next status write stores the BuildRun's "
        "value: a slip, not a rule to copy",
        _env_overridden,
        lambda c, o, t: _env_as_overridden(c, o, t) and _same_but(o, t, "buildSpec")),
    "go-spelling": Difference(
        "a Build whose durations are not spelled as Go writes them (10m, 90m): "
        "status.buildSpec keeps the Build's spelling, Shipwright's is Go's (10m0s, 1h30m0s)",
        "ours copies the Build as the API server holds it; Shipwright decodes it into Go "
        "types and encodes it again: the same durations to every reader",
        _durations_not_as_go_writes,
        lambda _, o, t: (_go_spelling(o["buildSpec"]) == t["buildSpec"]
                      and o["buildSpec"] != t["buildSpec"]
                      and _same_but(o, t, "buildSpec"))),
}


def difference_of(case: JSON) -> str | None:
    applying = [name for name, d in DIFFERENCES.items() if d.applies(case)]
    assert len(applying) <= 1, (case["id"], applying)
    return applying[0] if applying else None

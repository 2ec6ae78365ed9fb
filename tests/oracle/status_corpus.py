"""The status oracle's corpus, our side of it, and the documented differences.

A case is a TaskRun or PipelineRun as Tekton left it ("run"), the objects a mapping may
read ("objects": its pod, a PipelineRun's TaskRuns and their pods; what is absent is
gone), and whether the BuildRun asked for a cancel. Three sources:

* captured: real runs on the stack, one file per Tekton release (v1.3.4, v1.10.3,
  v1.12.0: status_corpus/tekton-*.json, written by capture_statuses.py);
* every reason Tekton v1.3 to v1.12 can set (controller.buildrun.reasons.TEKTON_REASONS),
  on a captured failed TaskRun and PipelineRun, finished and unfinished;
* garbage: statuses nobody's Tekton writes but a hand-made patch or a bug can, as the
  unit tests of status.py and the hostile corpus (tests/cluster/test_bad_input.py) use
  them, each one Go can still decode (a status Go cannot decode stops Shipwright's
  informer, so there is nothing to compare).

`ours(case)` runs what observe.py runs on a finished run (the executor's children, the
pod it reads, its outcome) or, while unfinished, the condition row 16 writes.
`theirs(answer)` is the same four fields of Shipwright's answer. DIFFERENCES holds each
way they may differ on purpose, with why; README "Status from Tekton" says the same.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.buildrun import reasons
from controller.buildrun.executors import PIPELINERUN, TASKRUN
from controller.buildrun.status import MESSAGE_MAX, REASON_MAX, running_reason
from controller.shipwright.conditions import succeeded_condition
from controller.shipwright.labels import LABEL_BUILDRUN
from devtools.cluster import fixtures
from devtools.shipwright import oracle

JSON = dict[str, Any]
CORPUS = Path(__file__).parent / "status_corpus"
FIELDS = ("condition", "failureDetails", "output", "source")


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


DONE: JSON = {"completionTime": "2026-01-01T00:00:00Z", "podName": "garbage-pod"}


def garbage() -> list[JSON]:
    """Statuses no Tekton writes on its own, each decodable by Go."""
    def case(case_id: str, run: JSON, *objects: JSON, executor: str = "TaskRun",
             canceled: bool = False) -> JSON:
        return {"id": f"garbage/{case_id}", "executor": executor, "canceled": canceled,
                "run": run, "objects": list(objects)}

    succeeded = {"conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded",
                                 "message": "done"}]}
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
            {"type": "Succeeded", "status": "True"}]})),
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
            _failed("PipelineRunTimeout", "PipelineRun garbage-pr failed to finish"))},
             executor="PipelineRun"),
    ]


def corpus() -> list[JSON]:
    base = captured()
    return base + every_reason(base) + garbage()


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


def ours(case: JSON) -> JSON:
    """What our controller writes from the case: observe.py's reads, then the outcome (a
    finished run) or row 16's condition (an unfinished one)."""
    executor = TASKRUN if case["executor"] == "TaskRun" else PIPELINERUN
    run = case["run"]
    objects = {(o["kind"], o["metadata"]["name"]): o for o in case["objects"]}
    children = [objects[("TaskRun", name)] for name in executor.children(run)
                if ("TaskRun", name) in objects]
    pod_name = executor.failed_pod(run, children)
    pod = objects.get(("Pod", pod_name)) if pod_name else None
    outcome = executor.outcome(run, children, pod, case["canceled"])
    if outcome is None:
        return {"condition": _condition("Unknown", *running_reason(run)),
                "failureDetails": None, "output": None, "source": None}
    return {"condition": _condition(outcome.status, outcome.reason, outcome.message),
            "failureDetails": outcome.failure_details, "output": outcome.output,
            "source": outcome.source}


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


def build_and_buildrun(case: JSON) -> tuple[JSON, JSON]:
    """The case's Build and BuildRun (fixtures.build() and a BuildRun of it), in the run's
    namespace, the BuildRun named by the run's label and canceled when the case says so."""
    run = case["run"]
    name = ((run.get("metadata") or {}).get("labels") or {}).get(LABEL_BUILDRUN) or "br"
    namespace = (run.get("metadata") or {}).get("namespace") or "default"
    build = fixtures.build()
    buildrun = fixtures.buildrun(name, fixtures.BUILD)
    build["metadata"]["namespace"] = buildrun["metadata"]["namespace"] = namespace
    if case["canceled"]:
        buildrun["spec"]["state"] = "BuildRunCanceled"
    return build, buildrun


def request(case: JSON) -> JSON:
    build, buildrun = build_and_buildrun(case)
    return oracle.status_case(case["run"], case["objects"], fixtures.strategy(), build,
                              buildrun, executor=case["executor"], case_id=case["id"])


# --- the differences we make on purpose


@dataclass(frozen=True)
class Difference:
    what: str
    why: str
    # Whether the case is one where we differ; then `holds` says what ours does instead.
    applies: Callable[[JSON], bool]
    holds: Callable[[JSON, JSON], bool]


def _cond(case: JSON) -> JSON:
    return succeeded_condition(case["run"].get("status")) or {}


def _same_but(ours_: JSON, theirs_: JSON, *fields: str) -> bool:
    return all(ours_[k] == theirs_[k] for k in FIELDS if k not in fields)


def _unfinished(case: JSON) -> bool:
    condition = _cond(case)
    if condition.get("status") in ("True", "False"):
        return False
    # Equal where Tekton's reason is one of our two and it has words to keep, but for a
    # TaskRun whose BuildRun asked for a cancel (Shipwright's TaskRun path shows that).
    cancel_shown = case["canceled"] and case["executor"] == "TaskRun"
    return not (condition.get("reason") in (reasons.RUNNING, reasons.PENDING)
                and condition.get("message") and not cancel_shown
                and condition.get("status") == "Unknown")


def _has_whitespace_result(case: JSON) -> bool:
    text = json.dumps(case["run"].get("status") or {})
    return "  Padded" in text or "\\n\"" in text


DIFFERENCES: dict[str, Difference] = {
    "unfinished": Difference(
        "a run not finished yet: ours is Unknown with reason Pending or Running and "
        "Tekton's message (or ours when Tekton has none)",
        "the state table's row 16 (README 'How a BuildRun moves'): a BuildRun in progress "
        "is Pending or Running, whatever Tekton calls the wait (Started, "
        "ExceededNodeResources, PullImageFailed, ...; its message says it), and ours has a "
        "condition from the start where Shipwright has none until Tekton's first status. "
        "A cancel it asked for is not shown as Unknown/BuildRunCanceled: ours finishes "
        "the BuildRun at once (row 14)",
        _unfinished,
        lambda o, t: (o["condition"]["status"] == "Unknown"
                      and o["condition"]["reason"] in (reasons.PENDING, reasons.RUNNING))),
    "pipelinerun-cancelled": Difference(
        "a PipelineRun Tekton ends Cancelled for a BuildRun that asked for it: ours "
        "BuildRunCanceled, Shipwright's 'Cancelled'",
        "Shipwright's code looks for PipelineRunCancelled, a reason Tekton v1 does not "
        "write, so its canceled BuildRuns end with Tekton's 'Cancelled'; ours end as its "
        "TaskRun ones do",
        lambda c: (c["executor"] == "PipelineRun" and c["canceled"]
                   and _cond(c).get("status") == "False"
                   and _cond(c).get("reason") == reasons.CANCELLED),
        lambda o, t: (o["condition"]["reason"] == reasons.BUILD_RUN_CANCELED
                      and t["condition"]["reason"] == reasons.CANCELLED)),
    "timeout-without-spec": Difference(
        "a timed-out run without spec.timeout (timeouts.pipeline): ours keeps Tekton's message",
        "Tekton's webhook always sets it; without one Shipwright quotes the time since the "
        "run was created, which says nothing of the timeout",
        lambda c: (_cond(c).get("reason") in (reasons.TASK_RUN_TIMEOUT,
                                              reasons.PIPELINE_RUN_TIMEOUT)
                   and not ((c["run"].get("spec") or {}).get("timeout")
                            or ((c["run"].get("spec") or {}).get("timeouts") or {}).get(
                                "pipeline"))),
        lambda o, t: (o["condition"]["reason"] == t["condition"]["reason"]
                      and _same_but(o, t, "condition"))),
    "crd-limits": Difference(
        "a reason or message longer than the BuildRun CRD allows (256, 32768): cut",
        "the CRD's maxLength would refuse the whole status write",
        lambda c: (len(str(_cond(c).get("reason") or "")) > REASON_MAX
                   or len(str(_cond(c).get("message") or "")) > MESSAGE_MAX),
        lambda o, t: (len(o["condition"]["reason"]) <= REASON_MAX
                      and len(o["condition"]["message"]) <= MESSAGE_MAX
                      and _same_but(o, t, "condition"))),
    "trimmed-results": Difference(
        "result values (and a failed step's error reason and message) with surrounding "
        "whitespace: trimmed",
        "a value written with echo ends in a newline; README 'Where we differ on purpose'",
        _has_whitespace_result,
        lambda o, t: o["condition"] == t["condition"]),
}


def difference_of(case: JSON) -> str | None:
    applying = [name for name, d in DIFFERENCES.items() if d.applies(case)]
    assert len(applying) <= 1, (case["id"], applying)
    return applying[0] if applying else None

"""What the oracle suite shares: Shipwright's samples as cases, our TaskRun or
PipelineRun for a case, and the documented normalisation under which ours must equal
Shipwright's.

Every entry of NORMALISATION (TaskRun) and PIPELINERUN_NORMALISATION is a difference we
make on purpose; docs/taskrun.md ("Where we differ on purpose", "The PipelineRun")
lists the same ones with their reasons.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import yaml

from controller.buildrun import reasons
from controller.buildrun.resources.config import ShipwrightConfig
from controller.buildrun.resources.pipelinerun import generate_pipelinerun
from controller.buildrun.resources.taskrun import generate_taskrun
from controller.buildrun.validation import validate_buildrun
from controller.runtime.errors import UserError
from controller.shipwright.labels import LABEL_BUILDRUN_UID
from devtools.shipwright import oracle
from devtools.shipwright.source import samples_dir

JSON = dict[str, Any]

NAMESPACE = "parity"
CREATED = "2026-01-02T03:04:05Z"

# (what, why): each difference the normalisation hides.
NORMALISATION = [
    ("apiVersion, kind",
     "Shipwright's generator leaves TypeMeta empty; its typed client fills it in on create"),
    ("metadata.name / generateName (ours is Shipwright's generateName and five characters "
     "of [a-z0-9]; compared as that generateName)",
     "ours names the TaskRun as the API server completes Shipwright's generateName, with "
     "the five characters derived from the BuildRun's uid instead of drawn at random, so a "
     "restarted controller adopts the TaskRun it made and, after a rollback, Shipwright "
     "finds the BuildRun of a deleted one by its name"),
    ("metadata.ownerReferences",
     "Shipwright sets them outside GenerateTaskRun (SetControllerReference); ours are in the "
     "generated object, same content"),
    (f"metadata.labels['{LABEL_BUILDRUN_UID}']",
     "an extra label to select a BuildRun's TaskRun by uid"),
    ("order of spec.params after the system parameters",
     "Shipwright's OverrideParams returns a Go map's order (random) when Build and BuildRun "
     "both set values; ours keeps the Build's order"),
    ("order of taskSpec.volumes",
     "Shipwright's volume merge returns a Go map's order (random) when a Build or BuildRun "
     "overrides a volume; ours keeps the strategy's order"),
    ("order of --annotation/--label pairs of image-processing",
     "Shipwright iterates a Go map (random); ours are sorted by key"),
    ("the 5-character suffix of SHP_CONFIGMAP_PARAM_* / SHP_SECRET_PARAM_* variables "
     "(renamed 00001, 00002, ... in order of first appearance)",
     "Shipwright draws it at random; ours is a hash of the ConfigMap/Secret name and key, "
     "so a regenerated TaskRun is identical"),
]

# (what, why): each difference the PipelineRun's normalisation hides, beyond the TaskRun's
# that apply to it (TypeMeta, name, ownerReferences, the uid label, the orders Shipwright
# takes from Go maps).
PIPELINERUN_NORMALISATION = [
    ("configMapValue / secretValue parameter values (the SHP_CONFIGMAP_PARAM_* / "
     "SHP_SECRET_PARAM_* env vars of the build-strategy steps, the values that name them, "
     "an array value left empty)",
     "Shipwright's PipelineRun generator passes only literal values and drops an array "
     "left without any, so the parameter silently takes the strategy's default (or Tekton "
     "fails the run for a missing one); ours are the TaskRun's: each resolved through an "
     "env var when the pod starts"),
]

_ENV_SUFFIX = re.compile(r"SHP_(CONFIGMAP|SECRET)_PARAM_[A-Z0-9]{5}")
# The five characters the API server adds to a generateName (Shipwright's
# VerifyRequestName strips the same).
_SUFFIX = re.compile(r"(?<=-)[a-z0-9]{5}$")


def load_yaml(path: Path) -> list[JSON]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if isinstance(doc, dict)]


def sample_strategies() -> dict[tuple[str, str], JSON]:
    """(kind, name) -> strategy, from every file under samples/v1beta1/buildstrategy."""
    found = {}
    for path in sorted((samples_dir() / "buildstrategy").rglob("*.yaml")):
        for doc in load_yaml(path):
            if doc.get("kind") in ("BuildStrategy", "ClusterBuildStrategy"):
                found[(doc["kind"], doc["metadata"]["name"])] = doc
    return found


def sample_builds() -> list[tuple[str, JSON]]:
    return [(path.stem, doc) for path in sorted((samples_dir() / "build").glob("*.yaml"))
            for doc in load_yaml(path) if doc.get("kind") == "Build"]


def with_meta(obj: JSON, *, name: str | None = None, generation: int = 1,
              uid: str = "00000000-0000-0000-0000-000000000001") -> JSON:
    """`obj` as the API server would hand it over: namespace, uid, generation, creation time."""
    out = copy.deepcopy(obj)
    meta = out.setdefault("metadata", {})
    if name is not None:
        meta["name"] = name
    if out.get("kind") != "ClusterBuildStrategy":
        meta.setdefault("namespace", NAMESPACE)
    meta.setdefault("uid", uid)
    meta.setdefault("generation", generation)
    meta.setdefault("creationTimestamp", CREATED)
    return out


def buildrun_for(build: JSON, name: str = "run-1", **spec: Any) -> JSON:
    return with_meta({"apiVersion": "shipwright.io/v1beta1", "kind": "BuildRun",
                      "metadata": {"name": name},
                      "spec": {"build": {"name": build["metadata"]["name"]}, **spec}},
                     generation=3, uid="11111111-2222-3333-4444-555555555555")


def ours(strategy: JSON, build: JSON, buildrun: JSON, service_account: str,
         env: dict[str, str], executor: str = "TaskRun") -> JSON:
    """Our TaskRun (or PipelineRun), after what the controller refuses before generating."""
    try:
        validate_buildrun(buildrun, build.get("spec") or {}, strategy)
    except UserError as exc:
        # Under the PipelineRun executor Shipwright's multi-arch preflight passes (its
        # generator then builds the one platform the node runs); the executor check is the
        # last validate_buildrun makes, so everything else has passed.
        if executor != "PipelineRun" or exc.reason != reasons.EXECUTOR_NOT_PIPELINE_RUN:
            raise
    generate = generate_pipelinerun if executor == "PipelineRun" else generate_taskrun
    return generate(buildrun, build, strategy, service_account, ShipwrightConfig.from_env(env))


def normalise(taskrun: JSON) -> JSON:
    """`taskrun` with every NORMALISATION difference taken out (never modified in place)."""
    seen: dict[str, str] = {}

    def rename(match: re.Match[str]) -> str:
        return seen.setdefault(match[0], f"SHP_{match[1]}_PARAM_{len(seen) + 1:05d}")

    tr: JSON = json.loads(_ENV_SUFFIX.sub(rename, json.dumps(taskrun)))
    _normalise_common(tr)
    _normalise_task_spec(tr.get("spec", {}).get("taskSpec") or {})
    return tr


def normalise_pipelinerun(pipelinerun: JSON) -> JSON:
    """`pipelinerun` with every difference of NORMALISATION that applies to it and of
    PIPELINERUN_NORMALISATION taken out (never modified in place)."""
    pr: JSON = copy.deepcopy(pipelinerun)
    _normalise_common(pr)
    spec = pr.get("spec") or {}
    values = []
    for param in spec.get("params") or []:
        value = param.get("value")
        if isinstance(value, list):
            value = [v for v in value if not _RESOLVED.search(v)]
            if not value:
                continue
        elif _RESOLVED.search(str(value)):
            continue
        values.append({**param, "value": value})
    spec["params"] = values
    for task in (spec.get("pipelineSpec") or {}).get("tasks") or []:
        task_spec = task.get("taskSpec") or {}
        _normalise_task_spec(task_spec)
        for step in task_spec.get("steps") or []:
            env = [v for v in step.get("env") or [] if not _RESOLVED_ENV.fullmatch(v["name"])]
            if env:
                step["env"] = env
            else:
                step.pop("env", None)
    return pr


# A parameter value resolved from a ConfigMap or Secret, and the env var it comes from.
_RESOLVED = re.compile(r"\$\(SHP_(CONFIGMAP|SECRET)_PARAM_[A-Z0-9]{5}\)")
_RESOLVED_ENV = re.compile(r"SHP_(CONFIGMAP|SECRET)_PARAM_[A-Z0-9]{5}")


def _normalise_common(obj: JSON) -> None:
    obj.pop("apiVersion", None)
    obj.pop("kind", None)
    meta = obj.get("metadata") or {}
    # Ours is generateName completed as the API server would, but deterministically: the
    # part before the five characters must be Shipwright's generateName.
    if "name" in meta and not meta.get("generateName") and _SUFFIX.search(meta["name"]):
        meta["generateName"] = _SUFFIX.sub("", meta.pop("name"))
    meta.pop("ownerReferences", None)
    (meta.get("labels") or {}).pop(LABEL_BUILDRUN_UID, None)
    spec = obj.get("spec") or {}
    spec["params"] = sorted(spec.get("params") or [], key=lambda p: p["name"])


def _normalise_task_spec(task: JSON) -> None:
    task["volumes"] = sorted(task.get("volumes") or [], key=lambda v: v["name"])
    for step in task.get("steps") or []:
        if step.get("name") == "image-processing":
            step["args"] = _sorted_pairs(step.get("args") or [])


def _sorted_pairs(args: list[str]) -> list[str]:
    """The --annotation/--label flag pairs sorted within each flag, in place in the list."""
    out = list(args)
    for flag in ("--annotation", "--label"):
        positions = [i for i in range(len(out) - 1) if out[i] == flag]
        values = sorted(out[i + 1] for i in positions)
        for i, value in zip(positions, values, strict=True):
            out[i + 1] = value
    return out


Case = tuple[str, JSON, JSON, JSON, dict[str, str]]  # id, strategy, build, buildrun, env


def compare(cases: list[Case], service_account: str = "pipeline", executor: str = "TaskRun"
            ) -> list[tuple[str, JSON, JSON | UserError]]:
    """For each case: (id, the oracle's answer, our TaskRun (PipelineRun) or the UserError
    we refused it with). Ours goes to the oracle too, for Tekton's verdict on it."""
    ourselves: list[JSON | UserError] = []
    for _, strategy, build, buildrun, env in cases:
        try:
            ourselves.append(ours(strategy, build, buildrun, service_account, env, executor))
        except UserError as exc:
            ourselves.append(exc)
    answers = oracle.ask([
        oracle.case(strategy, build, buildrun, service_account=service_account, env=env,
                    ours=mine if isinstance(mine, dict) else None, case_id=case_id,
                    executor=executor)
        for (case_id, strategy, build, buildrun, env), mine in zip(cases, ourselves,
                                                                   strict=True)
    ])
    return [(c[0], a, m) for c, a, m in zip(cases, answers, ourselves, strict=True)]


def diff(a: Any, b: Any, path: str = "") -> list[str]:
    """Paths where two JSON values differ (for readable failures)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            out += diff(a.get(key), b.get(key), f"{path}.{key}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in diff(x, y, f"{path}[{i}]")]
    if a == b:
        return []
    return [f"{path}: shipwright={json.dumps(a)[:300]} ours={json.dumps(b)[:300]}"]

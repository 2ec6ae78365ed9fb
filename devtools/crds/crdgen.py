"""Writes manifests/crds/: our CRDs for Shipwright's v1beta1 API (`python -m devtools.crds.crdgen`).

Shipwright's own types (Build, BuildRun, BuildStrategy, ClusterBuildStrategy) are
described here by hand, field by field, from its Go types
(pkg/apis/build/v1beta1 at devtools.shipwright.source.VERSION). Where those types embed
Kubernetes core types (EnvVar, Toleration, VolumeSource, ResourceRequirements,
VolumeMount, SecurityContext) their schemas are read from Kubernetes' published
OpenAPI (api/openapi-spec/v3 of k8s.io/kubernetes at K8S_VERSION, the k8s.io/api
version Shipwright's go.mod pins; `hack/crds/k8s-openapi` puts it in the Go module
cache), so they are exactly Kubernetes' own.

Our additions (CEL rules, length bounds, enums) are marked where they are made;
devtools/crds/crd_differences.py lists every place our schemas differ from Shipwright's
and why, and tests/unit/devtools/test_crd_schema.py holds the two to that list.
tests/unit/devtools/test_crdgen.py checks that manifests/crds/ is this module's output.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from devtools.cluster.stack import HACK, StackError

REPO = Path(__file__).resolve().parents[2]
CRDS_DIR = REPO / "manifests" / "crds"
K8S_VERSION = "v1.36.1"

Schema = dict[str, Any]


@functools.cache
def _k8s_dirs() -> tuple[Path, Path]:
    """(Kubernetes' OpenAPI folder, k8s.io/api's core/v1 source folder) in the Go module cache."""
    proc = subprocess.run([str(HACK / "crds" / "k8s-openapi")], stdout=subprocess.PIPE, text=True)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or len(lines) < 2:
        raise StackError(f"crdgen: hack/crds/k8s-openapi failed with exit code {proc.returncode} "
                         "(its stderr says why)")
    return Path(lines[-2]), Path(lines[-1])


@functools.cache
def _core_definitions() -> dict[str, Schema]:
    doc = json.loads((_k8s_dirs()[0] / "api__v1_openapi.json").read_text())
    definitions: dict[str, Schema] = doc["components"]["schemas"]
    return definitions


_STRUCT = re.compile(r"^type (\w+) struct \{$")
_FIELD = re.compile(r"^\t(\w+)(?:\s+\S+)?\s+`json:\"([^\",]*)")
_ATOMIC = "// +structType=atomic"
_DEFAULT = re.compile(r"^\t// \+(?:kubebuilder:)?default=(.+)$")


@functools.cache
def _go_structs() -> tuple[dict[tuple[str, str], Any], dict[str, list[str]], set[str]]:
    """From k8s.io/api's core/v1/types.go: (struct, JSON field) -> `+default=` value,
    struct -> the structs it inlines, and the structs marked `+structType=atomic`."""
    declared: dict[tuple[str, str], Any] = {}
    inlined: dict[str, list[str]] = {}
    atomic: set[str] = set()
    struct, pending, previous = "", None, ""
    for line in (_k8s_dirs()[1] / "types.go").read_text().splitlines():
        if match := _STRUCT.match(line):
            struct, pending = match[1], None
            if previous == _ATOMIC:
                atomic.add(struct)
        elif line == "}":
            struct = ""
        elif struct and (match := _DEFAULT.match(line)):
            if not match[1].startswith("ref("):
                pending = json.loads(match[1])
        elif struct and (match := _FIELD.match(line)):
            if match[2] == "":  # `json:",inline"`
                inlined.setdefault(struct, []).append(match[1])
            elif pending is not None:
                declared[(struct, match[2])] = pending
            pending = None
        if line.strip():
            previous = line.strip()
    return declared, inlined, atomic


def _with_inlined(struct: str) -> list[str]:
    """The struct and every struct it inlines, transitively."""
    inlined = _go_structs()[1]
    return [struct, *(s for embedded in inlined.get(struct, []) for s in _with_inlined(embedded))]


def atomic_struct(struct: str) -> bool:
    """Whether a core/v1 struct is atomic for server-side apply, itself or through a struct
    it inlines (as controller-gen carries LocalObjectReference's marker into
    ConfigMapVolumeSource; Kubernetes' OpenAPI does not)."""
    return any(s in _go_structs()[2] for s in _with_inlined(struct))


@functools.cache
def explicit_defaults() -> dict[tuple[str, str], Any]:
    """(core/v1 type, JSON field) -> the default its Go source declares with `+default=` or
    `+kubebuilder:default=` (what controller-gen applies), through inlined structs.

    Kubernetes' OpenAPI also gives every required non-pointer field its Go zero value as
    default (a volume's name ""); those are not defaults a CRD should apply. Defaults given
    as `ref(...)` (azureDisk's cachingMode and kind) are left out as controller-gen does."""
    declared, inlined, _ = _go_structs()

    def of(struct: str) -> dict[str, Any]:
        own = {field: value for (name, field), value in declared.items() if name == struct}
        for embedded in inlined.get(struct, []):
            own = {**of(embedded), **own}
        return own

    structs = {name for name, _ in declared} | set(inlined)
    return {(struct, field): value for struct in structs for field, value in of(struct).items()}


# --- Kubernetes' OpenAPI -> structural CRD schema -------------------------------------------

# The grammar of a resource.Quantity (k8s.io/apimachinery/pkg/api/resource/quantity.go):
# <signedNumber><suffix>, suffix a binary SI (Ki..Ei), a decimal SI (n u m "" k M G T P E)
# or a decimal exponent (e|E <signedNumber>).
_SIGN = r"(\+|-)?"
_NUMBER = r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
QUANTITY_PATTERN = f"^{_SIGN}{_NUMBER}(([KMGTPE]i)|[numkMGTPE]|([eE]{_SIGN}{_NUMBER}))?$"

_INT_OR_STRING: Schema = {"anyOf": [{"type": "integer"}, {"type": "string"}],
                          "x-kubernetes-int-or-string": True}
_SPECIAL: dict[str, Schema] = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {**_INT_OR_STRING,
                                                       "pattern": QUANTITY_PATTERN},
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": _INT_OR_STRING,
    # Embedded ObjectMeta (a PVC template's): the API server knows its fields.
    "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"type": "object"},
}
# What a structural CRD schema keeps of an OpenAPI schema; descriptions, patch
# strategies and the like are left out.
_KEPT = ("type", "format", "enum", "required", "x-kubernetes-list-type",
         "x-kubernetes-list-map-keys", "x-kubernetes-map-type")


def _convert(schema: Schema, seen: tuple[str, ...]) -> Schema:
    ref = schema.get("$ref")
    if ref is None and len(schema.get("allOf", [])) == 1:
        ref = schema["allOf"][0].get("$ref")
    if ref is not None:
        return core(ref.rsplit("/", 1)[-1], seen)
    out: Schema = {key: copy.deepcopy(schema[key]) for key in _KEPT if key in schema}
    if "properties" in schema:
        struct = seen[-1].rsplit(".", 1)[-1] if seen else ""
        out["properties"] = {}
        for name, sub in schema["properties"].items():
            out["properties"][name] = _convert(sub, seen)
            default = explicit_defaults().get((struct, name))
            if default is not None:
                out["properties"][name]["default"] = default
        if struct and atomic_struct(struct):
            out["x-kubernetes-map-type"] = "atomic"
    if "items" in schema:
        out["items"] = _convert(schema["items"], seen)
    if isinstance(schema.get("additionalProperties"), dict):
        out["additionalProperties"] = _convert(schema["additionalProperties"], seen)
    if "type" not in out and ("properties" in out or "additionalProperties" in out):
        out["type"] = "object"
    if "type" not in out:
        raise ValueError(f"crdgen: no type for {schema} under {seen}")
    return out


def core(name: str, seen: tuple[str, ...] = ()) -> Schema:
    """The structural schema of a Kubernetes type by its OpenAPI name ("io.k8s.api.core.v1.EnvVar"
    or just "EnvVar" for core/v1), every $ref inlined."""
    if "." not in name:
        name = f"io.k8s.api.core.v1.{name}"
    if name in _SPECIAL:
        return copy.deepcopy(_SPECIAL[name])
    if name in seen:
        raise ValueError(f"crdgen: {name} refers to itself ({' -> '.join(seen)})")
    return _convert(_core_definitions()[name], (*seen, name))


# --- building blocks for Shipwright's types ------------------------------------------------


def string(*, rules: list[Schema] | None = None, **extra: Any) -> Schema:
    out: Schema = {"type": "string", **extra}
    if rules:
        out["x-kubernetes-validations"] = rules
    return out


def boolean() -> Schema:
    return {"type": "boolean"}


def integer(**extra: Any) -> Schema:
    return {"type": "integer", **extra}


def array(items: Schema, **extra: Any) -> Schema:
    return {"type": "array", "items": items, **extra}


def obj(properties: dict[str, Schema], required: tuple[str, ...] = (),
        rules: list[Schema] | None = None) -> Schema:
    """A struct; `rules` are CEL rules (x-kubernetes-validations), all of them ours."""
    out: Schema = {"type": "object", "properties": properties}
    if required:
        out["required"] = sorted(required)
    if rules:
        out["x-kubernetes-validations"] = rules
    return out


def _list_map(*keys: str) -> Schema:
    """A list whose items are keyed (for server-side apply and uniqueness) by these fields."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


def string_map() -> Schema:
    return {"type": "object", "additionalProperties": {"type": "string"}}


def duration() -> Schema:
    """metav1.Duration with Shipwright's `+kubebuilder:validation:Format=duration`; our
    maxLength is an addition (a Go duration is never near that long)."""
    return string(format="duration", maxLength=64)


def name_string() -> Schema:
    """An object name; our maxLength 253 (DNS subdomain) is an addition."""
    return string(maxLength=253)


def time() -> Schema:
    return string(format="date-time")


def volume_source(extra: dict[str, Schema]) -> Schema:
    """corev1.VolumeSource inlined into a struct with a name (BuildVolume, BuildStrategyVolume)."""
    volume = core("Volume")  # corev1.Volume is a name and the inlined VolumeSource
    properties = {**extra, **volume["properties"]}
    return obj(dict(sorted(properties.items())), required=("name",))


# --- Shipwright's types (pkg/apis/build/v1beta1) -------------------------------------------


def object_key_ref() -> Schema:  # parameter.go ObjectKeyRef
    return obj({"name": string(), "key": string(), "format": string()}, required=("key", "name"))


def single_value() -> dict[str, Schema]:  # parameter.go SingleValue
    return {"value": string(maxLength=65536), "configMapValue": object_key_ref(),
            "secretValue": object_key_ref()}


def param_values() -> Schema:  # []ParamValue; maxItems (ours) bounds what resolve_params reads
    return array(obj({"name": name_string(), **single_value(),
                      "values": array(obj(single_value()), maxItems=256)},
                     required=("name",)), maxItems=64)


def image() -> Schema:  # build_types.go Image
    return obj({
        "image": string(maxLength=1024),
        "insecure": boolean(),
        "pushSecret": name_string(),
        "annotations": string_map(),
        "labels": string_map(),
        "vulnerabilityScan": obj({
            "enabled": boolean(),
            "failOnFinding": boolean(),
            "ignore": obj({"id": array(string()),
                           "severity": string(enum=["low", "medium", "high"]),
                           "unfixed": boolean()}),
        }),
        "timestamp": string(rules=_TIMESTAMP_RULES),
        "platforms": array(obj({"os": string(), "arch": string()}, required=("arch", "os")),
                           **_list_map("os", "arch")),
    }, required=("image",))


def step_resources() -> Schema:  # buildstrategy.go []StepResourceOverride
    return array(obj({"name": string(), "resources": core("ResourceRequirements")},
                     required=("name", "resources")))


def source() -> Schema:  # source.go Source
    return obj({
        "type": string(),
        "contextDir": string(maxLength=4096),
        "ociArtifact": obj({"image": string(), "prune": string(), "pullSecret": string()},
                           required=("image",)),
        "git": obj({"url": string(maxLength=4096), "revision": string(maxLength=1024),
                    "cloneSecret": string(), "depth": integer()}, required=("url",)),
        "local": local(),
    }, required=("type",), rules=_source_rules())


def _source_rules() -> list[Schema]:
    """Ours: Shipwright's Build validation (pkg/validate/sources.go validateSourceEntry)
    refuses a source whose type does not match the one source given; here the API server
    does. As there, an unknown type is left alone and an empty one is refused only when a
    source is given."""
    only = {"Git": "git", "OCI": "ociArtifact", "Local": "local"}
    matches = " : ".join(
        f"self.type == '{kind}' ? has(self.{field}) && "
        + " && ".join(f"!has(self.{other})" for other in only.values() if other != field)
        for kind, field in only.items())
    return [
        {"rule": f"{matches} : true",
         "message": "type does not match the source: type Git needs git, OCI needs "
                    "ociArtifact, Local needs local, and no other source"},
        {"rule": "self.type != '' || " + " && ".join(f"!has(self.{f})" for f in only.values()),
         "message": "type definition is missing"},
    ]


def local() -> Schema:  # source.go Local
    return obj({"timeout": string(), "name": string()})


def trigger() -> Schema:  # trigger.go, trigger_when.go, trigger_types.go
    return obj({
        "when": array(obj({
            "name": string(),
            "type": string(),
            "github": obj({"events": array(string(), minItems=1), "branches": array(string())}),
            "image": obj({"names": array(string())}),
            "objectRef": obj({"name": string(), "status": array(string()),
                              "selector": string_map()}),
        }, required=("name", "type"), rules=_TRIGGER_WHEN_RULES)),
        "triggerSecret": string(),
    })


# Ours: what Shipwright's Build validation (pkg/validate/output.go) refuses as
# OutputTimestampNotValid; "a number" is strconv.ParseInt's, up to 19 digits here.
_TIMESTAMP_RULES = [{
    "rule": ("self in ['', 'Zero', 'SourceTimestamp', 'BuildTimestamp'] || "
             "self.matches('^[+-]?[0-9]{1,19}$')"),
    "message": "output timestamp value is invalid, must be Zero, SourceTimestamp, BuildTimestamp, "
               "or number",
}]

# Ours: what Shipwright's Build validation (pkg/validate/trigger.go) refuses, with its words.
_TRIGGER_WHEN_RULES = [
    {"rule": "self.name != ''", "message": "name is not set on when trigger condition"},
    {"rule": "self.type in ['GitHub', 'Image', 'Pipeline']",
     "message": "contains an invalid type: must be GitHub, Image or Pipeline"},
    {"rule": "self.type != 'GitHub' || (has(self.github) && has(self.github.events))",
     "message": "is missing required attribute `.github.events`"},
    {"rule": "self.type != 'Image' || (has(self.image) && has(self.image.names) && "
             "size(self.image.names) > 0)",
     "message": "is missing required attribute `.image.names`"},
    {"rule": "self.type != 'Pipeline' || (has(self.objectRef) && has(self.objectRef.status) && "
             "size(self.objectRef.status) > 0)",
     "message": "is missing required attribute `.objectRef.status`"},
    {"rule": "self.type != 'Pipeline' || !has(self.objectRef) || "
             "((has(self.objectRef.name) && self.objectRef.name != '') != "
             "(has(self.objectRef.selector) && size(self.objectRef.selector) > 0))",
     "message": "needs exactly one of `.objectRef.name` and `.objectRef.selector`"},
]


def env() -> Schema:
    """A Build's or BuildRun's env: corev1.EnvVar items with Shipwright's Build validation
    (pkg/validate/envvars.go) as our CEL rules, in its words."""
    item = core("EnvVar")
    item["x-kubernetes-validations"] = [
        {"rule": "self.name != ''", "message": "name for environment variable must not be blank"},
        {"rule": "!has(self.value) || self.value == '' || !has(self.valueFrom)",
         "message": "only one of value or valueFrom must be specified"},
    ]
    return array(item)


def build_spec(*, embedded: bool = False) -> Schema:  # build_types.go BuildSpec
    """A Build's spec; `embedded` for a BuildRun's spec.build.spec, which has no Build."""
    return obj({
        "source": source(),
        "trigger": trigger(),
        "strategy": obj({
            "name": name_string(),
            # The enum is ours: Shipwright's CRD takes any kind and its Build
            # validation then refuses it (UnknownBuildStrategyKind).
            "kind": string(enum=["BuildStrategy", "ClusterBuildStrategy"]),
            "stepResources": step_resources(),
        }, required=("name",)),
        "paramValues": param_values(),
        "output": image(),
        "timeout": duration(),
        "env": env(),
        "retention": obj({
            "failedLimit": integer(minimum=1, maximum=10000),
            "succeededLimit": integer(minimum=1, maximum=10000),
            "ttlAfterFailed": duration(),
            "ttlAfterSucceeded": duration(),
            "atBuildDeletion": boolean(),
        }, rules=_EMBEDDED_RETENTION_RULES if embedded else None),
        "volumes": array(volume_source({})),
        "nodeSelector": string_map(),
        "tolerations": array(core("Toleration")),
        "schedulerName": string(),
        "runtimeClassName": string(),
    }, required=("output", "strategy"))


# Ours: Shipwright admits these in an embedded spec and then ignores them (its build-limit
# cleanup and owner references work on a Build, and an embedded spec has none); refused
# here rather than admitted and ignored (docs/shipwright-api.md, "Every field, and what
# we do with it").
_EMBEDDED_RETENTION_RULES: list[Schema] = [{
    "rule": "!has(self.failedLimit) && !has(self.succeededLimit) && !has(self.atBuildDeletion)",
    "message": "failedLimit, succeededLimit and atBuildDeletion apply to the BuildRuns of a "
               "Build and an embedded build spec has none: use ttlAfterFailed and "
               "ttlAfterSucceeded",
}]


def build_run_spec() -> Schema:  # buildrun_types.go BuildRunSpec
    return obj({
        "build": obj({"spec": build_spec(embedded=True), "name": name_string()}),
        "source": obj({"type": string(), "local": local()}, required=("type",)),
        "serviceAccount": name_string(),
        "timeout": duration(),
        "paramValues": param_values(),
        "output": image(),
        # The enum is ours: the one state a user may ask for.
        "state": string(enum=["", "BuildRunCanceled"]),
        "env": env(),
        "retention": obj({"ttlAfterFailed": duration(), "ttlAfterSucceeded": duration()}),
        "volumes": array(volume_source({})),
        "stepResources": step_resources(),
        "nodeSelector": string_map(),
        "tolerations": array(core("Toleration")),
        "schedulerName": string(),
        "runtimeClassName": string(),
    }, required=("build",), rules=_spec_immutable_rules())


def spec_field_checks() -> list[tuple[str, str]]:
    """Ours, per field of a BuildRun's spec: (CEL condition that it did not change, the
    message when it did). Every field but `state` and `retention` (see
    _spec_immutable_rules); state may become BuildRunCanceled only."""
    fields = ("build", "source", "serviceAccount", "timeout", "paramValues", "output", "env",
              "volumes", "stepResources", "nodeSelector", "tolerations", "schedulerName",
              "runtimeClassName")
    checks = [(f"has(self.{f}) == has(oldSelf.{f}) && "
               f"(!has(self.{f}) || self.{f} == oldSelf.{f})",
               f"spec.{f} is immutable: create a new BuildRun") for f in fields]
    checks.append((
        "(has(self.state) ? self.state : '') == (has(oldSelf.state) ? oldSelf.state : '')"
        " || (has(self.state) && self.state == 'BuildRunCanceled')",
        "spec.state may only change to BuildRunCanceled"))
    return checks


def _spec_immutable_rules() -> list[Schema]:
    """Ours: a BuildRun's spec is immutable except that spec.state may become BuildRunCanceled
    (Shipwright documents the same; its webhook-less CRD does not enforce it), and
    spec.retention once the BuildRun has finished (_RETENTION_RULE: only the root sees the
    status).

    One rule that first asks whether the spec changed at all: the API server evaluates
    every rule on every write, status updates included. With one rule per field
    (fourteen), CEL took 5.1-6.7 % of its CPU in a burst of finishes and 8.9 % in a burst
    of starts; with this one, 2.4-3.2 % and 3.3-3.5 % (its CPU profile; per write, 0.13-
    0.88 ms less: bench/e2e/status_writes.py, BENCHMARKS.md, issue 34). The
    message expression names the first field that changed in the words its own rule had
    (a list of all of them is beyond the API server's cost budget for a message
    expression)."""
    checks = spec_field_checks()
    immutable = "the spec is immutable: create a new BuildRun"
    return [{
        "rule": "self == oldSelf || (" + " && ".join(f"({c})" for c, _ in checks) + ")",
        "messageExpression": " : ".join(f"!({c}) ? '{m}'" for c, m in checks)
                             + f" : '{immutable}'",
        "message": f"{immutable} (spec.state may only change to BuildRunCanceled)",
    }]


# A BuildRun has finished once its stored status has completionTime (README, "How a
# BuildRun moves": Done). Both rules on the whole BuildRun ask this of `oldSelf` first.
_FINISHED = "has(oldSelf.status) && has(oldSelf.status.completionTime)"

# Ours, on the BuildRun as a whole (a rule under .spec cannot see the status): the retention
# TTLs are frozen with the rest of the spec until the BuildRun has finished; then they may
# be lowered or raised, as Shipwright's TTL cleanup reads them live (raising one keeps a
# failed run to investigate). They change how long the object is kept, never the outcome.
_RETENTION_RULE: Schema = {
    "rule": (f"({_FINISHED}) || "
             "(has(self.spec.retention) == has(oldSelf.spec.retention) && "
             "(!has(self.spec.retention) || self.spec.retention == oldSelf.spec.retention))"),
    "message": ("spec.retention is immutable until the BuildRun has finished "
                "(status.completionTime): then its TTLs may be lowered or raised"),
}

# The frozen-status rule's messages (_frozen_status_rule), the first two in the words of
# the two rules under .status it replaced.
_NEVER_CHANGES = "a BuildRun's outcome never changes"
FROZEN_COMPLETION_TIME = f"status.completionTime is immutable once set: {_NEVER_CHANGES}"
FROZEN_SUCCEEDED = ("the Succeeded condition is immutable once completionTime is set: "
                    f"{_NEVER_CHANGES}")
FROZEN_STATUS = f"the status is immutable once completionTime is set: {_NEVER_CHANGES}"


def _frozen_status_rule() -> Schema:
    """Ours: once completionTime is set the status is frozen whole, so a BuildRun's outcome
    never changes and a finished BuildRun is never made New again (no completionTime, no
    condition), to be run a second time.

    On the BuildRun as a whole: a rule under .status, as this was (one on completionTime,
    one on the Succeeded condition), is a transition rule, which the API server evaluates
    only where the old and the new object both have a status; an update of the status
    subresource without one, or a merge patch {"status": null}, went past it (issue 39).
    Here every write is compared with the BuildRun as stored, whatever its form. What stays
    allowed leaves the status as it is: metadata (labels, annotations, finalizers),
    spec.retention (_RETENTION_RULE), deletion, and a write of the status unchanged (an
    object rewritten as read). The controller never writes a finished BuildRun's status
    (controller/buildrun/status_writes.py refuses it), and nothing else of ours does.

    Cost: the API server evaluates it on every write, every status write included. On an
    unfinished BuildRun, every status write the controller sends, it stops at its first
    operand (two field tests on the stored object); the whole status is compared only on
    a write to a finished BuildRun, which the controller never sends. The message
    expression runs only when the rule fails, and names what changed. Priced with
    bench/e2e/status_writes.py (`--objects 2000 --rounds 10`, progress writes to
    unfinished BuildRuns), as the kube-apiserver CPU per write of our CRD less that of the
    same CRD without rules, the medians of one run: 0.45 and 0.45 ms with the two rules
    under .status this replaced, 0.43 and 0.27 ms with this one (two runs each,
    alternated, 2026-12-06, load 3-4 on two cores; single rounds ranged from -0.46 to
    1.04 ms): no cost the script can tell apart."""
    def succeeded(obj: str) -> str:
        return (f"(has({obj}.status.conditions) ? "
                f"{obj}.status.conditions.filter(c, c.type == 'Succeeded') : [])")

    completion_changed = ("!has(self.status.completionTime) || "
                          "self.status.completionTime != oldSelf.status.completionTime")
    return {
        "rule": f"!({_FINISHED}) || (has(self.status) && self.status == oldSelf.status)",
        "fieldPath": ".status",
        "messageExpression": (f'!has(self.status) ? "{FROZEN_STATUS}" : '
                              f'{completion_changed} ? "{FROZEN_COMPLETION_TIME}" : '
                              f'{succeeded("self")} != {succeeded("oldSelf")} ? '
                              f'"{FROZEN_SUCCEEDED}" : "{FROZEN_STATUS}"'),
        "message": FROZEN_STATUS,
    }


def build_run_status() -> Schema:  # buildrun_types.go BuildRunStatus
    return obj({
        "source": obj({
            "git": obj({"commitSha": string(), "commitAuthor": string(), "branchName": string()}),
            "ociArtifact": obj({"digest": string()}),
            "timestamp": time(),
        }),
        "output": obj({
            "digest": string(maxLength=256),
            "size": integer(format="int64"),
            "vulnerabilities": array(obj({"id": string(), "severity": string()})),
        }),
        # Ours: a map keyed by type (Shipwright's is a plain list), so that a
        # condition has one entry and the frozen-status rule's message can name the
        # Succeeded one (_frozen_status_rule).
        "conditions": array(obj({
            "type": string(maxLength=64),
            "status": string(enum=["True", "False", "Unknown"]),
            "lastTransitionTime": time(),
            "reason": string(maxLength=256),
            "message": string(maxLength=32768),
        }, required=("lastTransitionTime", "message", "reason", "status", "type")),
            maxItems=8, **_list_map("type")),
        "taskRunName": name_string(),
        "executor": obj({"name": string(), "kind": string()}, required=("kind", "name")),
        "startTime": time(),
        "completionTime": time(),
        "buildSpec": build_spec(),
        "failureDetails": obj({
            "reason": string(maxLength=256),
            "message": string(maxLength=32768),
            "location": obj({"pod": name_string(), "container": name_string()}),
        }),
    })


def build_status() -> Schema:  # build_types.go BuildStatus
    return obj({"registered": string(), "reason": string(), "message": string()})


def strategy_spec() -> Schema:  # buildstrategy.go BuildStrategySpec
    """The maxItems and maxLength bounds are ours (devtools/crds/crd_differences.py)."""
    text = string(maxLength=65536)
    step = obj({
        "name": string(maxLength=63),
        "image": string(maxLength=1024),
        "command": array(text, maxItems=256),
        "args": array(text, maxItems=256),
        "workingDir": string(maxLength=4096),
        "env": array(core("EnvVar")),
        "resources": core("ResourceRequirements"),
        "volumeMounts": array(core("VolumeMount")),
        "imagePullPolicy": string(),
        "securityContext": core("SecurityContext"),
    }, required=("name",))
    return obj({
        "steps": array(step, maxItems=64, **_list_map("name")),
        "parameters": array(obj({
            "name": name_string(),
            "description": string(maxLength=4096),
            "type": string(enum=["string", "array"]),
            "default": text,
            "defaults": array(text, maxItems=256),
        }, required=("description", "name")), maxItems=64),
        "securityContext": obj({"runAsUser": integer(format="int64"),
                                "runAsGroup": integer(format="int64")},
                               required=("runAsGroup", "runAsUser")),
        "volumes": array(volume_source({"overridable": boolean(), "description": string()})),
    }, required=("steps",))


# --- the CRDs ------------------------------------------------------------------------------


def _root(spec: Schema, status: Schema, required: tuple[str, ...] = (),
          rules: list[Schema] | None = None) -> Schema:
    return obj({"apiVersion": string(), "kind": string(), "metadata": {"type": "object"},
                "spec": spec, "status": status}, required=required, rules=rules)


def _column(name: str, type_: str, path: str, description: str) -> Schema:
    return {"name": name, "type": type_, "jsonPath": path, "description": description}


def _crd(kind: str, plural: str, scope: str, short: list[str], schema: Schema,
         columns: list[Schema]) -> Schema:
    names: Schema = {"kind": kind, "listKind": f"{kind}List", "plural": plural,
                     "singular": kind.lower()}
    if short:
        names["shortNames"] = short
    version: Schema = {"name": "v1beta1", "served": True, "storage": True,
                       "schema": {"openAPIV3Schema": schema}, "subresources": {"status": {}}}
    if columns:
        version["additionalPrinterColumns"] = columns
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.shipwright.io"},
        "spec": {"group": "shipwright.io", "names": names, "scope": scope, "versions": [version]},
    }


def crds() -> dict[str, Schema]:
    """File name -> CRD, for all four kinds."""
    strategy = _root(strategy_spec(), {"type": "object"})
    return {
        "shipwright.io_builds.yaml": _crd(
            "Build", "builds", "Namespaced", [], _root(build_spec(), build_status(), ("spec",)), [
                _column("Registered", "string", ".status.registered",
                        "Whether the Build is registered"),
                _column("Reason", "string", ".status.reason",
                        "Why the Build is or is not registered"),
                _column("BuildStrategyKind", "string", ".spec.strategy.kind",
                        "Kind of the strategy the Build uses"),
                _column("BuildStrategyName", "string", ".spec.strategy.name",
                        "Name of the strategy the Build uses"),
                _column("CreationTime", "date", ".metadata.creationTimestamp",
                        "When the Build was created"),
            ]),
        "shipwright.io_buildruns.yaml": _crd(
            "BuildRun", "buildruns", "Namespaced", ["br", "brs"],
            _root(build_run_spec(), build_run_status(), ("spec",),
                  [_RETENTION_RULE, _frozen_status_rule()]), [
                _column("Succeeded", "string", '.status.conditions[?(@.type=="Succeeded")].status',
                        "Status of the Succeeded condition"),
                _column("Reason", "string", '.status.conditions[?(@.type=="Succeeded")].reason',
                        "Reason of the Succeeded condition"),
                _column("StartTime", "date", ".status.startTime", "When the BuildRun started"),
                _column("CompletionTime", "date", ".status.completionTime",
                        "When the BuildRun finished"),
            ]),
        "shipwright.io_buildstrategies.yaml": _crd(
            "BuildStrategy", "buildstrategies", "Namespaced", ["bs", "bss"], strategy, []),
        "shipwright.io_clusterbuildstrategies.yaml": _crd(
            "ClusterBuildStrategy", "clusterbuildstrategies", "Cluster", ["cbs", "cbss"],
            strategy, []),
    }


HEADER = """\
# Generated by `python -m devtools.crds.crdgen` (devtools/crds/crdgen.py): edit that, not this.
# Shipwright's v1beta1 {kind}, with our validation added (devtools/crds/crd_differences.py).
"""


def render(crd: Schema) -> str:
    body = yaml.safe_dump(crd, sort_keys=False, width=100, default_flow_style=False)
    return HEADER.format(kind=crd["spec"]["names"]["kind"]) + body


def main() -> int:
    for name, crd in crds().items():
        (CRDS_DIR / name).write_text(render(crd))
        print(f"wrote {CRDS_DIR / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

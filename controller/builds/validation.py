"""Whether a Build is registered: Shipwright v0.20's Build validations, as pure functions.

The reconciler looks up what needs the API server (which referenced Secrets are
missing, the referenced strategy) into `Lookups`; `validate` decides. The checks
run in the order of Shipwright's `validationTypes` (pkg/reconciler/build/build.go)
and the first one that fails gives the Build's reason and message. Inside one
check, Shipwright overwrites the status for every failure it finds, so the *last*
failure of that check is the one reported; this module keeps that, and says where.

Differences, each on purpose:
- Go iterates maps in random order; where that decides which failure is reported
  (nodeSelector entries) the keys are taken sorted, so the answer is stable.
- Shipwright's `source` check returns an error without setting a reason, so it
  never shows on a Build; it is not repeated here.
- `build.shipwright.io/verify.repository: "true"` makes Shipwright list the Git
  remote's refs with go-git; the reconciler asks the same smart-HTTP endpoint
  (`repository_probe` says which, `Lookups.repository_error` carries the answer) and
  takes any 2xx as reachable, without decoding the refs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from controller.builds import reasons
from controller.runtime.errors import UserError
from controller.runtime.name_rules import (
    dns1123_subdomain_errors,
    label_value_errors,
    qualified_name_errors,
)
from controller.runtime.shapes import at, mapping, text
from controller.runtime.text import go_quote, truncate
from controller.shipwright.forbidden_env import (
    NO_FORBIDDEN_ENV,
    ForbiddenEnvNames,
    forbidden_message,
)
from controller.shipwright.params import validate_params
from controller.shipwright.resources import BUILDSTRATEGIES, CLUSTERBUILDSTRATEGIES

JSON = dict[str, Any]

# spec.strategy.kind: the strategy resources' kinds (unset means a BuildStrategy).
NAMESPACED_STRATEGY = BUILDSTRATEGIES.kind
CLUSTER_STRATEGY = CLUSTERBUILDSTRATEGIES.kind

ANNOTATION_VERIFY_REPOSITORY = "build.shipwright.io/verify.repository"

# Bound on a status message: user strings (names, keys) are quoted into it.
MESSAGE_MAX = 1024

_PLATFORM_VALUE = re.compile("[a-z0-9]+")
# go-git v5.19 (internal/url): a URL with a scheme, and the scp-like user@host:path form.
_URL_SCHEME = re.compile(r"[^:]+://")
_SCP_LIKE = re.compile(r"(?:[^@]+@)?[^:\s]+:(?:[0-9]{1,5}:)?[^\\].*\Z")
_GO_INT = re.compile("[+-]?[0-9]+")


@dataclass(frozen=True)
class Verdict:
    """A Build's registration: Succeeded, or the first failed check's reason and message."""

    reason: str
    message: str

    @property
    def registered(self) -> bool:
        return self.reason == reasons.SUCCEEDED

    def status(self) -> JSON:
        """The Build's `status`, in Shipwright's shape."""
        return {
            "registered": reasons.REGISTERED_TRUE if self.registered else reasons.REGISTERED_FALSE,
            "reason": self.reason,
            "message": self.message,
        }


REGISTERED = Verdict(reasons.SUCCEEDED, reasons.ALL_VALIDATIONS_SUCCEEDED)


@dataclass(frozen=True)
class StrategyRef:
    kind: str  # NAMESPACED_STRATEGY, CLUSTER_STRATEGY, or what the user wrote
    name: str

    @property
    def known(self) -> bool:
        return self.kind in (NAMESPACED_STRATEGY, CLUSTER_STRATEGY)


@dataclass(frozen=True)
class Lookups:
    """What the reconciler read from the API server for one Build, and the one setting
    a check reads (the process's, read at start)."""

    missing_secrets: frozenset[str] = frozenset()
    strategy: JSON | None = None  # the referenced strategy; None: not found (or kind unknown)
    repository_error: str | None = None  # why the verified Git remote is unreachable
    # FORBIDDEN_ENV_VAR_NAMES (Shipwright main's blocklist); none unless it is set.
    forbidden_env: ForbiddenEnvNames = NO_FORBIDDEN_ENV


def _spec(build: JSON) -> JSON:
    return mapping(build.get("spec"))


def strategy_ref(build: JSON) -> StrategyRef:
    """spec.strategy; a missing kind means a namespaced BuildStrategy, as in Shipwright."""
    strategy = _spec(build).get("strategy") or {}
    return StrategyRef(str(strategy.get("kind") or NAMESPACED_STRATEGY),
                       str(strategy.get("name") or ""))


def source_credentials(build: JSON) -> str | None:
    """The source's Secret: the OCI artifact's pullSecret, else Git's cloneSecret
    (Shipwright's Build.GetSourceCredentials)."""
    source = mapping(_spec(build).get("source"))
    if source.get("type") == "OCI":
        return text(at(source, "ociArtifact", "pullSecret")) or None
    return text(at(source, "git", "cloneSecret")) or None


def secret_refs(build: JSON) -> dict[str, str]:
    """Each Secret the Build names, with the reason reported if it is missing. A Secret
    named twice is reported as the source's, as in Shipwright (the later map write wins)."""
    refs: dict[str, str] = {}
    push = text(at(_spec(build), "output", "pushSecret"))
    if push:
        refs[push] = reasons.SPEC_OUTPUT_SECRET_REF_NOT_FOUND
    source = source_credentials(build)
    if source:
        refs[source] = reasons.SPEC_SOURCE_SECRET_REF_NOT_FOUND
    return refs


def validate(build: JSON, lookups: Lookups) -> Verdict:
    """The Build's registration verdict; the first failing check decides."""
    for check in _CHECKS:
        verdict = check(build, lookups)
        if verdict is not None:
            return Verdict(verdict.reason, truncate(verdict.message, MESSAGE_MAX))
    return REGISTERED


# -- the checks, in Shipwright's order ------------------------------------------------

Check = Callable[[JSON, Lookups], Verdict | None]


def _verify_annotation(build: JSON) -> str | None:
    """The verify.repository annotation of a Build with a public Git source (the only
    kind Shipwright checks); None for any other Build."""
    source = _spec(build).get("source") or {}
    git = source.get("git")
    if source.get("type") != "Git" or git is None or git.get("cloneSecret"):
        return None
    value: str = ((build.get("metadata") or {}).get("annotations") or {}).get(
        ANNOTATION_VERIFY_REPOSITORY, "")
    return value


_NEEDS_CREDENTIALS = "the source url requires authentication"


def repository_probe(build: JSON) -> tuple[str | None, str | None]:
    """(URL to GET, failure known without asking) for a Build whose Git remote is to be
    verified; (None, None) when nothing is to be checked. As Shipwright's
    git.ValidateGitURLExists splits go-git's endpoint protocols: http(s) is asked at
    `<url>/info/refs?service=git-upload-pack`, a local path or file:// is refused,
    ssh (ssh://, and user@host:path, which go-git reads as ssh) needs credentials (its
    constant for "ssh" is named gitProtocol), anything else (git://) is not checked."""
    if _verify_annotation(build) != "true":
        return None, None
    url = str(((_spec(build).get("source") or {}).get("git") or {}).get("url") or "")
    if _URL_SCHEME.match(url):
        scheme = url.split("://", 1)[0]
        if scheme in ("http", "https"):
            return url + "/info/refs?service=git-upload-pack", None
        if scheme == "file":
            return None, "invalid source url"
        if scheme == "ssh":
            return None, _NEEDS_CREDENTIALS
        return None, None
    if _SCP_LIKE.match(url) and "/" not in url.split(":", 1)[0]:
        return None, _NEEDS_CREDENTIALS  # ssh
    return None, "invalid source url"  # go-git reads it as a local path


def check_source_url(build: JSON, lookups: Lookups) -> Verdict | None:
    value = _verify_annotation(build)
    if value in (None, "", "false"):
        return None
    if value == "true":
        if lookups.repository_error is None:
            return None
        return Verdict(reasons.REMOTE_REPOSITORY_UNREACHABLE, lookups.repository_error)
    return Verdict(reasons.REMOTE_REPOSITORY_UNREACHABLE,
                   f"the annotation {ANNOTATION_VERIFY_REPOSITORY} was not properly defined, "
                   "supported values are true or false")


def check_secrets(build: JSON, lookups: Lookups) -> Verdict | None:
    refs = secret_refs(build)
    missing = sorted(name for name in refs if name in lookups.missing_secrets)
    if not missing:
        return None
    if len(missing) > 1:
        return Verdict(reasons.MULTIPLE_SECRET_REF_NOT_FOUND,
                       f"missing secrets are {','.join(missing)}")
    return Verdict(refs[missing[0]], f"referenced secret {missing[0]} not found")


def check_strategy(build: JSON, lookups: Lookups) -> Verdict | None:
    ref = strategy_ref(build)
    namespace = (build.get("metadata") or {}).get("namespace", "")
    if not ref.known:
        return Verdict(reasons.UNKNOWN_BUILD_STRATEGY_KIND,
                       f"unknown strategy kind {ref.kind} used, must be one of "
                       f"{NAMESPACED_STRATEGY}, or {CLUSTER_STRATEGY}")
    strategy = lookups.strategy
    if strategy is None:
        if ref.kind == CLUSTER_STRATEGY:
            return Verdict(reasons.CLUSTER_BUILD_STRATEGY_NOT_FOUND,
                           f"clusterBuildStrategy {ref.name} does not exist")
        return Verdict(reasons.BUILD_STRATEGY_NOT_FOUND,
                       f"buildStrategy {ref.name} does not exist in namespace {namespace}")
    strategy_spec = strategy.get("spec") or {}
    # Shipwright runs all three and each failure overwrites the status: the last one wins.
    found = [
        _check_params(build, strategy_spec),
        _check_volumes(build, strategy_spec),
        _check_step_resources(build, strategy_spec),
    ]
    return next((v for v in reversed(found) if v is not None), None)


def _check_params(build: JSON, strategy_spec: JSON) -> Verdict | None:
    """A Build may leave required parameters to its BuildRuns (Shipwright validates a
    Build's values with ignoreMissingParameters); every other rule applies."""
    try:
        validate_params(_spec(build).get("paramValues") or [], [],
                        strategy_spec.get("parameters") or [], ignore_missing=True)
    except UserError as exc:
        return Verdict(exc.reason, exc.message)
    return None


def _check_volumes(build: JSON, strategy_spec: JSON) -> Verdict | None:
    return volumes_verdict(_spec(build).get("volumes") or [], strategy_spec)


def volumes_verdict(volumes: list[JSON], strategy_spec: JSON) -> Verdict | None:
    """Shipwright's validateVolumes, shared by BuildVolumes and BuildRunVolumes: each
    volume must be one the strategy declares overridable."""
    declared = {v.get("name"): v for v in strategy_spec.get("volumes") or []}
    for volume in volumes:
        name = volume.get("name") or ""
        if name not in declared:
            return Verdict(reasons.UNDEFINED_VOLUME,
                           f"Volume {go_quote(name)} is not defined in the Strategy")
        if not declared[name].get("overridable"):
            return Verdict(reasons.VOLUME_NOT_OVERRIDABLE,
                           f"Volume {go_quote(name)} is not overridable in the Strategy")
    return None


def _check_step_resources(build: JSON, strategy_spec: JSON) -> Verdict | None:
    return step_resources_verdict(
        (_spec(build).get("strategy") or {}).get("stepResources") or [], strategy_spec)


def step_resources_verdict(overrides: list[JSON], strategy_spec: JSON) -> Verdict | None:
    """Shipwright's validateStepResources, shared by BuildStepResources and
    BuildRunStepResources: each override must name a step of the strategy."""
    steps = {s.get("name") for s in strategy_spec.get("steps") or []}
    for override in overrides:
        name = override.get("name") or ""
        if name not in steps:
            return Verdict(reasons.UNDEFINED_STEP_RESOURCE,
                           f"stepResources references step {go_quote(name)} which does not "
                           "exist in the build strategy")
    return None


def check_output(build: JSON, _: Lookups) -> Verdict | None:
    spec = _spec(build)
    output = spec.get("output") or {}
    found: Verdict | None = None
    timestamp = output.get("timestamp")
    if timestamp in (None, "", "Zero", "BuildTimestamp"):
        pass
    elif timestamp == "SourceTimestamp":
        source = spec.get("source") or {}
        if all(source.get(k) is None for k in ("git", "ociArtifact", "local")):
            found = Verdict(reasons.OUTPUT_TIMESTAMP_NOT_SUPPORTED,
                            "cannot use SourceTimestamp output image setting with an empty "
                            "build source")
    elif not _is_go_int64(str(timestamp)):
        found = Verdict(reasons.OUTPUT_TIMESTAMP_NOT_VALID,
                        "output timestamp value is invalid, must be Zero, SourceTimestamp, "
                        "BuildTimestamp, or number")
    platforms = output.get("platforms") or []
    if platforms:
        # Checked after the timestamp, so a platform failure overwrites a timestamp one.
        found = platforms_verdict(platforms, spec.get("nodeSelector") or {}) or found
    return found


def _is_go_int64(text: str) -> bool:
    """strconv.ParseInt(text, 10, 64) succeeds."""
    return bool(_GO_INT.fullmatch(text)) and -(2**63) <= int(text) < 2**63


def platforms_verdict(platforms: list[JSON], node_selector: JSON) -> Verdict | None:
    """Non-empty spec.output.platforms against themselves (ValidatePlatforms), then the
    nodeSelector they go with (ValidateOutputNodeSelector), as Shipwright checks both for
    a Build and, before its executor check, for a BuildRun (ValidateMultiArchPreflight)."""
    return _check_platforms(platforms) or _check_platform_node_selector(node_selector)


def _check_platforms(platforms: list[JSON]) -> Verdict | None:
    seen: set[str] = set()
    for i, platform in enumerate(platforms):
        os_, arch = platform.get("os") or "", platform.get("arch") or ""
        if not os_ or not arch:
            return Verdict(reasons.INVALID_PLATFORM,
                           f"spec.output.platforms[{i}] must specify both os and arch")
        for field, value, label in (("os", os_, "kubernetes.io/os"),
                                    ("arch", arch, "kubernetes.io/arch")):
            if len(value) > 64 or not _PLATFORM_VALUE.fullmatch(value):
                return Verdict(reasons.INVALID_PLATFORM,
                               f"spec.output.platforms[{i}].{field} {go_quote(value)}: invalid; "
                               f"use the value your Nodes have for label {go_quote(label)}")
        key = f"{os_}/{arch}"
        if key in seen:
            return Verdict(reasons.INVALID_PLATFORM,
                           f"spec.output.platforms[{i}] is a duplicate of {key}")
        seen.add(key)
    return None


def _check_platform_node_selector(node_selector: JSON) -> Verdict | None:
    for label in ("kubernetes.io/os", "kubernetes.io/arch"):
        if label in node_selector:
            return Verdict(reasons.NODE_SELECTOR_PLATFORM_CONFLICT,
                           f"nodeSelector must not contain {go_quote(label)} when "
                           "spec.output.platforms is set; the build controller manages os/arch "
                           "scheduling")
    return None


def check_build_name(build: JSON, _: Lookups) -> Verdict | None:
    errors = label_value_errors((build.get("metadata") or {}).get("name") or "")
    return Verdict(reasons.BUILD_NAME_INVALID, ", ".join(errors)) if errors else None


def check_env(build: JSON, lookups: Lookups) -> Verdict | None:
    found = None  # every failure overwrites the last, as in Shipwright
    for var in _spec(build).get("env") or []:
        if not var.get("name"):
            found = Verdict(reasons.SPEC_ENV_NAME_CAN_NOT_BE_BLANK,
                            "name for environment variable must not be blank")
        # Shipwright main's check, between the two (pkg/validate/envvars.go, #2275).
        if lookups.forbidden_env.forbids(str(var.get("name") or "")):
            found = Verdict(reasons.SPEC_ENV_NAME_FORBIDDEN,
                            forbidden_message(str(var.get("name") or "")))
        if var.get("value") and var.get("valueFrom") is not None:
            found = Verdict(reasons.SPEC_ENV_ONLY_ONE_OF_VALUE_OR_VALUE_FROM_MUST_BE_SPECIFIED,
                            "only one of value or valueFrom must be specified")
    return found


def check_triggers(build: JSON, _: Lookups) -> Verdict | None:
    found = None  # every failure overwrites the last, as in Shipwright
    for when in (_spec(build).get("trigger") or {}).get("when") or []:
        for verdict in _trigger_failures(when):
            found = verdict
    return found


def _trigger_failures(when: JSON) -> list[Verdict]:
    name = when.get("name") or ""
    q = go_quote(name)
    failures = []
    if not name:
        failures.append(Verdict(reasons.TRIGGER_NAME_CAN_NOT_BE_BLANK,
                                "name is not set on when trigger condition"))
    kind = when.get("type") or ""
    if kind == "GitHub":
        github = when.get("github")
        if github is None:
            failures.append(Verdict(reasons.TRIGGER_INVALID_GITHUB_WEBHOOK,
                                    f"{q} is missing required attribute `.github`"))
        elif not github.get("events"):
            failures.append(Verdict(reasons.TRIGGER_INVALID_GITHUB_WEBHOOK,
                                    f"{q} is missing required attribute `.github.events`"))
    elif kind == "Image":
        image = when.get("image")
        if image is None:
            failures.append(Verdict(reasons.TRIGGER_INVALID_IMAGE,
                                    f"{q} is missing required attribute `.image`"))
        elif not image.get("names"):
            failures.append(Verdict(reasons.TRIGGER_INVALID_IMAGE,
                                    f"{q} is missing required attribute `.image.names`"))
    elif kind == "Pipeline":
        ref = when.get("objectRef")
        if ref is None:
            failures.append(Verdict(reasons.TRIGGER_INVALID_PIPELINE,
                                    f"{q} is missing required attribute `.objectRef`"))
        else:
            if not ref.get("status"):
                failures.append(Verdict(reasons.TRIGGER_INVALID_PIPELINE,
                                        f"{q} is missing required attribute `.objectRef.status`"))
            if not ref.get("name") and not ref.get("selector"):
                failures.append(Verdict(
                    reasons.TRIGGER_INVALID_PIPELINE,
                    f"{q} is missing required attributes `.objectRef.name` or "
                    "`.objectRef.selector`"))
            if ref.get("name") and ref.get("selector"):
                failures.append(Verdict(
                    reasons.TRIGGER_INVALID_PIPELINE,
                    f"{q} contains `.objectRef.name` and `.objectRef.selector`, must be only one"))
    else:
        failures.append(Verdict(reasons.TRIGGER_INVALID_TYPE,
                                f"{q} contains an invalid type {go_quote(kind)}"))
    return failures


# Each check_X below is Shipwright's Build check of spec.X, and calls the X_verdict that
# Shipwright's BuildRunX function is: its Build check is that function on the Build's
# field (pkg/validate/nodeselector.go, tolerations.go, scheduler_name.go,
# runtime_class_name.go), so a BuildRun's own field gets the same reason and words.


def check_node_selector(build: JSON, _: Lookups) -> Verdict | None:
    return node_selector_verdict(_spec(build).get("nodeSelector") or {})


def node_selector_verdict(selector: JSON) -> Verdict | None:
    """BuildRunNodeSelector: keys are qualified names, values label values."""
    for key in sorted(selector):
        errors = qualified_name_errors(key)
        if errors:
            return Verdict(reasons.NODE_SELECTOR_NOT_VALID,
                           f"Node selector key not valid: {', '.join(errors)}")
        errors = label_value_errors(str(selector[key]))
        if errors:
            return Verdict(reasons.NODE_SELECTOR_NOT_VALID,
                           f"Node selector value not valid: {', '.join(errors)}")
    return None


def check_tolerations(build: JSON, _: Lookups) -> Verdict | None:
    return tolerations_verdict(_spec(build).get("tolerations") or [])


def tolerations_verdict(tolerations: list[JSON]) -> Verdict | None:
    """BuildRunTolerations: key, operator (Exists or Equal; unset is refused), value,
    effect (NoSchedule or unset) and no tolerationSeconds, in that order."""
    for toleration in tolerations:
        errors = qualified_name_errors(toleration.get("key") or "")
        if errors:
            return _toleration(f"Toleration key not valid: {', '.join(errors)}")
        if toleration.get("operator") not in ("Exists", "Equal"):
            return _toleration("Toleration operator not valid. Must be one of: 'Exists', 'Equal'")
        errors = label_value_errors(toleration.get("value") or "")
        if errors:
            return _toleration(f"Toleration value not valid: {', '.join(errors)}")
        if toleration.get("effect") not in (None, "", "NoSchedule"):
            return _toleration("Only the 'NoSchedule' toleration effect is supported.")
        if toleration.get("tolerationSeconds") is not None:
            return _toleration("Specifying TolerationSeconds is not supported.")
    return None


def _toleration(message: str) -> Verdict:
    return Verdict(reasons.TOLERATION_NOT_VALID, message)


def check_scheduler_name(build: JSON, _: Lookups) -> Verdict | None:
    return scheduler_name_verdict(_spec(build).get("schedulerName"))


def scheduler_name_verdict(name: str | None) -> Verdict | None:
    """BuildRunSchedulerName: a qualified name when set (an empty one is refused)."""
    errors = qualified_name_errors(name) if name is not None else []
    return Verdict(reasons.SCHEDULER_NAME_NOT_VALID,
                   f"Scheduler name not valid: {', '.join(errors)}") if errors else None


def check_runtime_class_name(build: JSON, _: Lookups) -> Verdict | None:
    return runtime_class_name_verdict(_spec(build).get("runtimeClassName"))


def runtime_class_name_verdict(name: str | None) -> Verdict | None:
    """BuildRunRuntimeClassName: a DNS-1123 subdomain when set (an empty one is refused)."""
    errors = dns1123_subdomain_errors(name) if name is not None else []
    return Verdict(reasons.RUNTIME_CLASS_NAME_NOT_VALID,
                   f"RuntimeClassName not valid: {', '.join(errors)}") if errors else None


_CHECKS: tuple[Check, ...] = (
    check_source_url,
    check_secrets,
    check_strategy,
    check_output,
    check_build_name,
    check_env,
    check_triggers,
    check_node_selector,
    check_tolerations,
    check_scheduler_name,
    check_runtime_class_name,
)


# -- ownership: Shipwright's `ownerreferences` step (pkg/validate/ownerreferences.go) --


def owns_its_buildruns(build: JSON) -> bool:
    """`spec.retention.atBuildDeletion: true`: the Build is to own its BuildRuns."""
    return ((_spec(build).get("retention") or {}).get("atBuildDeletion")) is True


def owner_references(build: JSON, buildrun: JSON) -> list[JSON] | None:
    """The ownerReferences a BuildRun of `build` should have, or None when it has them.

    `spec.retention.atBuildDeletion: true` makes the Build an owner of its BuildRuns, so
    the garbage collector deletes them with it; turning it off removes that owner. The
    reference has the shape the BuildRun controller gives it when it starts a BuildRun.
    """
    meta = build.get("metadata") or {}
    name = meta.get("name")
    refs: list[JSON] = list((buildrun.get("metadata") or {}).get("ownerReferences") or [])
    others = [r for r in refs if not (r.get("kind") == "Build" and r.get("name") == name)]
    if owns_its_buildruns(build):
        if len(others) < len(refs):
            return None
        return [*others, {"apiVersion": build.get("apiVersion", "shipwright.io/v1beta1"),
                          "kind": "Build", "name": name, "uid": meta.get("uid")}]
    return others if len(others) < len(refs) else None

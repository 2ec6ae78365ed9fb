"""Every deliberate difference between our CRDs (manifests/crds/) and Shipwright's
(deploy/crds/ at devtools.shipwright.source.VERSION), with the reason for it.

tests/unit/devtools/test_crd_schema.py compares the two field path by field path and fails on
any difference not listed here, and on any entry here that no longer matches a
difference. docs/shipwright-api.md's "Shipwright's API" shows this list as a table.

A path is a field path in the schema: `.spec.paramValues[].value`, `[]` for the items
of an array, `{}` for the values of a map; `*` matches anything (including dots).
`what` is the schema keyword that differs ("maxLength", "enum", ...), "field" for a
field only one side has, "description" for the text, or "crd:<name>" for the CRD's
own settings (served versions, short names, printer column descriptions).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Difference:
    kinds: tuple[str, ...]  # the CRD kinds it applies to
    path: str
    what: str
    reason: str

    def matches(self, kind: str, path: str, what: str) -> bool:
        return (kind in self.kinds and what == self.what
                and _glob(self.path).fullmatch(path) is not None)


def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")))


ALL = ("Build", "BuildRun", "BuildStrategy", "ClusterBuildStrategy")
STRATEGIES = ("BuildStrategy", "ClusterBuildStrategy")

BOUNDED = ("a bound on what users write, so that a hostile or mistaken object cannot make "
           "the controller quote megabytes into messages or build huge TaskRuns; Kubernetes' "
           "own limits (names 253, labels 63) or far above any real value")


def _bounded(kinds: tuple[str, ...], *paths: str, what: str = "maxLength") -> list[Difference]:
    return [Difference(kinds, path, what, BOUNDED) for path in paths]


DIFFERENCES: list[Difference] = [
    Difference(ALL, "*", "description",
               "field descriptions are left out: Shipwright's text is theirs and these CRDs "
               "are written by us (`kubectl explain` lists fields and types only)"),
    Difference(ALL, "", "crd:versions",
               "only v1beta1 is served: v1alpha1 needs Shipwright's conversion webhook, which "
               "this controller does not run"),
    Difference(ALL, "", "crd:conversion",
               "no conversion webhook (one version only)"),
    Difference(ALL, "", "crd:printer-column-descriptions",
               "printer columns have the same names, types and JSON paths; their descriptions "
               "are our words"),
    # Our CEL rules.
    Difference(("BuildRun",), ".spec", "x-kubernetes-validations",
               "a BuildRun is one try: its spec is immutable once created, except that "
               "spec.state may be set to BuildRunCanceled and spec.retention changed once it "
               "finished (the rule on the BuildRun below); Shipwright's CRD lets a user edit "
               "the spec, and its BuildRun controller reconciles no update but the cancel "
               "(the update predicate in pkg/reconciler/buildrun/controller.go)"),
    Difference(("BuildRun",), "", "x-kubernetes-validations",
               "spec.retention is frozen with the rest of the spec until status.completionTime "
               "is set; then its TTLs may be lowered or raised, and the TTL is read from the "
               "live spec first, as Shipwright's TTL cleanup reads it (raising one keeps a "
               "failed run to investigate; lowering one deletes it sooner). Shipwright's CRD "
               "lets it change at any time; a TTL set while the BuildRun runs is refused here, "
               "since the spec of a running BuildRun is the try it makes"),
    Difference(("BuildRun",), "", "x-kubernetes-validations",
               "a BuildRun's outcome is frozen once status.completionTime is set: every write "
               "that would change or remove its status, or any field of it, is refused, "
               "whatever its form (an update or a patch of the status subresource, a "
               "server-side apply by any field manager), so neither a user nor a buggy "
               "controller can change the outcome or make a finished BuildRun New again, to "
               "be run a second time; its metadata and retention TTLs may still change and "
               "it may be deleted. On the whole object because a rule under .status is not "
               "evaluated when a write removes the status"),
    Difference(("Build", "BuildRun"), "*.source", "x-kubernetes-validations",
               "a source's type must match the one source given (Git with git, OCI with "
               "ociArtifact, Local with local): Shipwright's Build validation refuses a "
               "mismatch after admission (pkg/validate/sources.go), the API server does here"),
    Difference(("Build", "BuildRun"), "*.env[]", "x-kubernetes-validations",
               "an env var needs a name and not both value and valueFrom: Shipwright's Build "
               "validation refuses these after admission (pkg/validate/envvars.go), the API "
               "server does here, with the same words"),
    Difference(("Build", "BuildRun"), "*.output.timestamp", "x-kubernetes-validations",
               "Zero, SourceTimestamp, BuildTimestamp or a number (OutputTimestampNotValid in "
               "Shipwright's pkg/validate/output.go); a number is up to 19 digits here, where "
               "Shipwright's ParseInt also refuses those beyond int64"),
    Difference(("Build", "BuildRun"), "*.trigger.when[]", "x-kubernetes-validations",
               "a trigger has a name, a type GitHub, Image or Pipeline and that type's fields, "
               "as Shipwright's Build validation requires (pkg/validate/trigger.go)"),
    Difference(("BuildRun",), ".spec.build.spec.retention", "x-kubernetes-validations",
               "failedLimit, succeededLimit and atBuildDeletion are refused in an embedded "
               "build spec: they act on the BuildRuns of a Build, an embedded spec has no "
               "Build, and Shipwright admits them there and then ignores them"),
    Difference(("BuildRun",), ".status.conditions", "x-kubernetes-list-type",
               "conditions are a map keyed by type (one entry per type), so the frozen-outcome "
               "rule's message can name the Succeeded one; Shipwright's controller keeps one "
               "entry per type too"),
    Difference(("BuildRun",), ".status.conditions", "x-kubernetes-list-map-keys",
               "as above: the map's key is type"),
    Difference(("BuildRun",), ".status.conditions", "maxItems",
               "a bound on a status list only controllers write"),
    # Our enums.
    Difference(("BuildRun",), ".spec.state", "enum",
               "BuildRunCanceled is the one state a user may ask for; Shipwright's CRD takes "
               "any string and its controller acts only on BuildRunCanceled (IsCanceled)"),
    Difference(("Build",), ".spec.strategy.kind", "enum",
               "BuildStrategy or ClusterBuildStrategy: Shipwright's CRD takes any kind and its "
               "Build validation then refuses an unknown one (UnknownBuildStrategyKind, "
               "pkg/validate/strategies.go); here the API server refuses it"),
    Difference(("BuildRun",), "*.strategy.kind", "enum",
               "as for Build's spec.strategy.kind, in an embedded build spec"),
    Difference(("BuildRun",), ".status.conditions[].status", "enum",
               "a condition's status is True, False or Unknown (Kubernetes' convention)"),
    Difference(STRATEGIES, ".spec.parameters[].type", "enum",
               "a parameter is a string or an array (ParameterType's two values)"),
    # Our bounds.
    *_bounded(ALL, "*.name", "*.serviceAccount", "*.pushSecret", "*.taskRunName",
              "*.pod", "*.container", "*.image", "*.url", "*.revision", "*.contextDir",
              "*.value", "*.timeout", "*.ttlAfterFailed", "*.ttlAfterSucceeded",
              "*.digest", "*.reason", "*.message", "*.type", "*.command[]", "*.args[]",
              "*.workingDir", "*.description", "*.default", "*.defaults[]"),
    *_bounded(ALL, "*.paramValues", "*.values", "*.steps", "*.command", "*.args",
              "*.parameters", "*.defaults", what="maxItems"),
]


def markdown_table() -> str:
    """DIFFERENCES as docs/shipwright-api.md's table: entries that differ only in path
    share a row."""
    rows: dict[tuple[tuple[str, ...], str, str], list[str]] = {}
    for d in DIFFERENCES:
        rows.setdefault((d.kinds, d.what, d.reason), []).append(d.path)
    lines = ["| kinds | where | what | why |", "|-------|-------|------|-----|"]
    for (kinds, what, reason), paths in rows.items():
        shown_kinds = "all four" if kinds == ALL else ", ".join(kinds)
        root = "the CRD" if what.startswith("crd:") else "the whole object"
        where = ", ".join(f"`{p}`" if p else root for p in paths)
        lines.append(f"| {shown_kinds} | {where} | `{what}` | {reason} |")
    return "\n".join(lines) + "\n"

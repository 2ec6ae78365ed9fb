"""Our CRDs (manifests/crds/) against Shipwright's (deploy/crds/ in its module), field path by
field path: every field Shipwright has we have, with the same type, shape, enum, default,
format, bounds and list/map semantics, except the deliberate differences listed in
devtools/crds/crd_differences.py. No API server is needed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.crds import crd_differences
from devtools.crds.crd_differences import DIFFERENCES, Difference
from devtools.shipwright import source as shipwright
from tests.doctext import section

REPO = Path(__file__).resolve().parents[3]
OURS = REPO / "manifests" / "crds"
FILES = ("shipwright.io_builds.yaml", "shipwright.io_buildruns.yaml",
         "shipwright.io_buildstrategies.yaml", "shipwright.io_clusterbuildstrategies.yaml")

# Schema keywords compared at every path. "shape" stands for how a node has children:
# properties (a struct), items (a list), additionalProperties (a map) or none.
KEYWORDS = ("type", "format", "enum", "default", "required", "minimum", "maximum", "minItems",
            "maxItems", "minLength", "maxLength", "pattern", "nullable", "anyOf",
            "x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields",
            "x-kubernetes-embedded-resource", "x-kubernetes-list-type",
            "x-kubernetes-list-map-keys", "x-kubernetes-map-type", "x-kubernetes-validations")

Found = tuple[str, str, str]  # (path, what, detail)


def load(path: Path) -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load(path.read_text())
    return crd


def v1beta1(crd: dict[str, Any]) -> dict[str, Any]:
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta1"]
    return version  # type: ignore[no-any-return]


def flatten(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, node) for every node of a schema, children after their parent."""
    yield path, schema
    for name, sub in (schema.get("properties") or {}).items():
        yield from flatten(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from flatten(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from flatten(schema["additionalProperties"], f"{path}{{}}")


def shape(node: dict[str, Any]) -> str:
    return ("struct" if "properties" in node else "list" if "items" in node
            else "map" if "additionalProperties" in node else "leaf")


def compare_schemas(theirs: dict[str, Any], ours: dict[str, Any]) -> list[Found]:
    """Every difference between two structural schemas, as (path, what, detail)."""
    a, b = dict(flatten(theirs)), dict(flatten(ours))
    found: list[Found] = []
    for path in sorted(a.keys() | b.keys()):
        if path not in b:
            found.append((path, "field", "Shipwright's, missing in ours"))
            continue
        if path not in a:
            found.append((path, "field", "ours, not in Shipwright's"))
            continue
        x, y = a[path], b[path]
        if shape(x) != shape(y):
            found.append((path, "shape", f"Shipwright's {shape(x)}, ours {shape(y)}"))
        if ("description" in x) != ("description" in y):
            found.append((path, "description", "only one side describes it"))
        for key in KEYWORDS:
            left, right = x.get(key), y.get(key)
            if key == "required":
                left, right = sorted(left or []), sorted(right or [])
            if left != right:
                found.append((path, key, f"Shipwright's {left!r}, ours {right!r}"))
    return found


def printer_columns(version: dict[str, Any]) -> list[tuple[str, str, str]]:
    columns = version.get("additionalPrinterColumns", [])
    return [(c["name"], c["type"], c["jsonPath"]) for c in columns]


def compare_crds(theirs: dict[str, Any], ours: dict[str, Any]) -> list[Found]:
    """Differences of the CRDs' own settings, then of their v1beta1 schemas."""
    found: list[Found] = []
    for key in ("group", "scope", "names"):
        if theirs["spec"].get(key) != ours["spec"].get(key):
            found.append(("", f"crd:{key}",
                          f"{theirs['spec'].get(key)} != {ours['spec'].get(key)}"))
    served = [v["name"] for v in theirs["spec"]["versions"] if v.get("served")]
    ours_served = [v["name"] for v in ours["spec"]["versions"] if v.get("served")]
    if served != ours_served:
        found.append(("", "crd:versions", f"Shipwright serves {served}, we serve {ours_served}"))
    if theirs["spec"].get("conversion") != ours["spec"].get("conversion"):
        found.append(("", "crd:conversion", "the conversion strategies differ"))
    x, y = v1beta1(theirs), v1beta1(ours)
    for key in ("storage", "subresources"):
        if x.get(key) != y.get(key):
            found.append(("", f"crd:{key}", f"{x.get(key)} != {y.get(key)}"))
    columns, ours_columns = printer_columns(x), printer_columns(y)
    if columns != ours_columns:
        found.append(("", "crd:printer-columns", f"{columns} != {ours_columns}"))
    elif x.get("additionalPrinterColumns") != y.get("additionalPrinterColumns"):
        found.append(("", "crd:printer-column-descriptions", "the columns' descriptions differ"))
    found += compare_schemas(x["schema"]["openAPIV3Schema"], y["schema"]["openAPIV3Schema"])
    return found


def unlisted(kind: str, found: list[Found]) -> list[Found]:
    return [f for f in found if not any(d.matches(kind, f[0], f[1]) for d in DIFFERENCES)]


@pytest.fixture(scope="module")
def pairs() -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Kind -> (Shipwright's CRD, ours)."""
    out = {}
    for name in FILES:
        theirs, ours = load(shipwright.crds_dir() / name), load(OURS / name)
        out[theirs["spec"]["names"]["kind"]] = (theirs, ours)
    return out


@pytest.mark.parametrize("name", FILES)
def test_we_have_a_crd_for_every_one_of_shipwrights(name: str) -> None:
    assert (shipwright.crds_dir() / name).is_file()
    assert (OURS / name).is_file(), f"manifests/crds/{name} is missing"


@pytest.mark.parametrize("kind", ["Build", "BuildRun", "BuildStrategy", "ClusterBuildStrategy"])
def test_our_schema_differs_from_shipwrights_only_as_listed(
    pairs: dict[str, tuple[dict[str, Any], dict[str, Any]]], kind: str,
) -> None:
    theirs, ours = pairs[kind]
    left = unlisted(kind, compare_crds(theirs, ours))
    shown = "\n".join(f"  {path or '(crd)'} {what}: {detail}" for path, what, detail in left[:60])
    assert not left, (f"{len(left)} differences from Shipwright's {kind} CRD are not listed in "
                      f"devtools/crds/crd_differences.py:\n{shown}")


def test_every_listed_difference_is_still_a_difference(
    pairs: dict[str, tuple[dict[str, Any], dict[str, Any]]],
) -> None:
    found = {kind: compare_crds(*pair) for kind, pair in pairs.items()}
    stale = [d for d in DIFFERENCES
             if not any(d.matches(kind, path, what)
                        for kind, items in found.items() for path, what, _ in items)]
    assert not stale, f"these listed differences match nothing any more: {stale}"


@pytest.mark.parametrize("kind", ["BuildStrategy", "ClusterBuildStrategy"])
def test_a_strategys_status_has_no_fields_as_in_shipwright(
    pairs: dict[str, tuple[dict[str, Any], dict[str, Any]]], kind: str,
) -> None:
    for crd in pairs[kind]:
        status = v1beta1(crd)["schema"]["openAPIV3Schema"]["properties"]["status"]
        assert status["type"] == "object" and not status.get("properties"), status


def test_every_difference_says_why() -> None:
    assert all(len(d.reason.split()) >= 5 for d in DIFFERENCES)


# The comparison itself, on small schemas, so that it cannot pass by seeing nothing.

def _schema(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def test_compare_finds_a_missing_field_a_new_field_and_a_changed_type() -> None:
    theirs = _schema(a={"type": "string"}, b={"type": "array", "items": {"type": "string"}})
    ours = _schema(b={"type": "array", "items": {"type": "object", "properties": {}}},
                   c={"type": "integer"})
    found = compare_schemas(theirs, ours)
    assert (".a", "field", "Shipwright's, missing in ours") in found
    assert (".c", "field", "ours, not in Shipwright's") in found
    assert (".b[]", "type", "Shipwright's 'string', ours 'object'") in found
    assert (".b[]", "shape", "Shipwright's leaf, ours struct") in found


def test_compare_finds_changed_enum_default_required_and_list_semantics() -> None:
    theirs = _schema(a={"type": "object", "required": ["x", "y"], "properties": {
        "x": {"type": "string", "default": "X"}, "y": {"type": "string"}}},
        l={"type": "array", "x-kubernetes-list-type": "atomic", "items": {"type": "string"}})
    ours = _schema(a={"type": "object", "required": ["y"], "properties": {
        "x": {"type": "string", "enum": ["X"]}, "y": {"type": "string"}}},
        l={"type": "array", "items": {"type": "string"}})
    whats = {(path, what) for path, what, _ in compare_schemas(theirs, ours)}
    assert whats == {(".a", "required"), (".a.x", "default"), (".a.x", "enum"),
                     (".l", "x-kubernetes-list-type")}


def test_a_listed_difference_matches_by_kind_path_glob_and_keyword() -> None:
    d = Difference(("Build",), "*.name", "maxLength", "a reason of five words")
    assert d.matches("Build", ".spec.volumes[].name", "maxLength")
    assert not d.matches("BuildRun", ".spec.volumes[].name", "maxLength")
    assert not d.matches("Build", ".spec.volumes[].name", "enum")
    assert not d.matches("Build", ".spec.volumes[].names", "maxLength")


def test_the_docs_show_the_list_of_differences() -> None:
    shown = section("docs/shipwright-api.md", "Shipwright's API")
    assert crd_differences.markdown_table() in shown, (
        "docs/shipwright-api.md's \"Shipwright's API\" table differs from "
        "devtools/crds/crd_differences.py: paste markdown_table()'s output")

"""No Shipwright field admitted and then ignored: every field path of Shipwright's v1beta1
CRDs (from the pinned module) is either refused by our CRD or covered by a row of
devtools/crds/fields.py, whose tests show what we do with it. No API server is needed; the
behaviour itself is shown by the tests each row names (several run on the real cluster)."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.crds import fields
from devtools.crds.fields import EMBEDDED, FIELDS, ORACLE, Field, covering, is_at_or_below
from devtools.shipwright import source as shipwright
from tests.doctext import section
from tests.unit.devtools.test_crd_schema import FILES, OURS, REPO, flatten, load, v1beta1

JSON = dict[str, Any]
Schemas = dict[str, JSON]  # kind -> the v1beta1 openAPIV3Schema


def _schemas(folder: Path) -> Schemas:
    out = {}
    for name in FILES:
        crd = load(folder / name)
        out[crd["spec"]["names"]["kind"]] = v1beta1(crd)["schema"]["openAPIV3Schema"]
    return out


@pytest.fixture(scope="module")
def theirs() -> Schemas:
    return _schemas(shipwright.crds_dir())


@pytest.fixture(scope="module")
def ours() -> Schemas:
    return _schemas(OURS)


def paths(schema: JSON) -> list[str]:
    return [path for path, _ in flatten(schema) if path]


def _is_container(path: str, all_paths: list[str]) -> bool:
    return any(p != path and is_at_or_below(p, path) for p in all_paths)


def uncovered(rows: list[Field], theirs: Schemas, ours: Schemas) -> list[str]:
    """'Kind path' for every path of Shipwright's schemas that our CRD admits and no row
    covers. A path our schema lacks is refused (strict field validation) or pruned; a
    struct, list or map with fields below it is covered when they are."""
    out = []
    for kind, schema in theirs.items():
        admitted, every = set(paths(ours[kind])), paths(schema)
        out += [f"{kind} {path}" for path in every
                if path in admitted and covering(rows, kind, path) is None
                and not _is_container(path, every)]
    return out


def test_every_field_shipwright_has_is_refused_or_has_a_row(
    theirs: Schemas, ours: Schemas
) -> None:
    left = uncovered(FIELDS, theirs, ours)
    assert not left, (f"{len(left)} of Shipwright's fields are admitted and no row of "
                      "devtools/crds/fields.py says what we do with them:\n  "
                      + "\n  ".join(left[:80]))


def test_the_sweep_sees_a_field_without_a_row(theirs: Schemas, ours: Schemas) -> None:
    """The sweep cannot pass by seeing nothing: without the trigger rows, exactly the
    trigger fields are reported, and the embedded spec's too (they fall back to them)."""
    rows = [f for f in FIELDS if not f.path.startswith(".spec.trigger")]
    left = uncovered(rows, theirs, ours)
    assert left and all(".trigger" in item for item in left), left
    assert "Build .spec.trigger.when[].github.events[]" in left
    assert "BuildRun .spec.build.spec.trigger.triggerSecret" not in left  # its own row


def test_every_row_covers_a_field_of_shipwrights(theirs: Schemas) -> None:
    stale = [f"{kinds} {f.path}" for f in FIELDS for kinds in f.kinds
             if not any(f.covers(p) for p in paths(theirs[kinds]))]
    assert not stale, f"rows for fields Shipwright does not have: {stale}"


def test_a_buildrun_embedded_spec_falls_back_to_the_builds_rows() -> None:
    row = covering(FIELDS, "BuildRun", EMBEDDED + ".source.git.cloneSecret")
    assert row is not None and row.path == ".spec.source.git.cloneSecret"
    row = covering(FIELDS, "BuildRun", EMBEDDED + ".retention.failedLimit")
    assert row is not None and row.path == EMBEDDED + ".retention.failedLimit"
    row = covering(FIELDS, "BuildRun", EMBEDDED)
    assert row is not None and row.path == EMBEDDED


def test_every_row_says_what_and_names_a_test() -> None:
    assert all(len(f.does.split()) >= 3 and f.shown_by() for f in FIELDS)
    assert len({(f.kinds, f.path) for f in FIELDS}) == len(FIELDS), "a row twice"


# The tests a row names: they exist, and each mentions the row's field (in its own body or
# decorators, or in a module-level table it uses), so that a row cannot point at an
# unrelated test.

@functools.cache
def _test_source(node_id: str) -> str | None:
    """The source of a test function and of the module-level assignments it reads."""
    file, name = node_id.split("::")
    module = (REPO / file).read_text()
    tree = ast.parse(module)
    tables = {target.id: node for node in tree.body if isinstance(node, ast.Assign | ast.AnnAssign)
              for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
              if isinstance(target, ast.Name)}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            parts = [ast.get_source_segment(module, node) or "",
                     *(ast.get_source_segment(module, d) or "" for d in node.decorator_list),
                     *(ast.get_source_segment(module, tables[u]) or ""
                       for u in sorted(used & tables.keys()))]
            return "\n".join(parts)
    return None


def leaf(path: str) -> str:
    return re.sub(r"[\[\]{}]", "", path.rsplit(".", 1)[-1])


def test_every_named_test_exists_and_mentions_its_field() -> None:
    wrong = []
    for f in FIELDS:
        for node_id in f.tests:
            source = _test_source(node_id)
            if source is None:
                wrong.append(f"{f.path}: {node_id} does not exist")
            elif not re.search(rf"\b{re.escape(leaf(f.path))}\b", source):
                wrong.append(f"{f.path}: {node_id} never mentions {leaf(f.path)!r}")
    assert _test_source(ORACLE) is not None
    assert not wrong, "\n".join(wrong)


# TaskRun rows: the oracle comparison (Shipwright's generator against ours) has a case
# that sets the field, for each kind the row names.

def set_paths(obj: Any, schema: JSON, path: str = "") -> Iterator[str]:
    """The schema paths `obj` gives a value, walking it along `schema`."""
    if path:
        yield path
    if isinstance(obj, dict):
        if "properties" in schema:
            for key, value in obj.items():
                if key in schema["properties"]:
                    yield from set_paths(value, schema["properties"][key], f"{path}.{key}")
        elif isinstance(schema.get("additionalProperties"), dict):
            for value in obj.values():
                yield from set_paths(value, schema["additionalProperties"], f"{path}{{}}")
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for item in obj:
            yield from set_paths(item, schema["items"], f"{path}[]")


@pytest.fixture(scope="module")
def oracle_sets(theirs: Schemas) -> dict[str, set[str]]:
    """Kind -> every path some object of the oracle's cases sets (no oracle run needed:
    these are its inputs)."""
    from tests.oracle.test_parity import FIELD_CASES, sample_cases

    out: dict[str, set[str]] = {kind: set() for kind in theirs}
    for _, strategy, build, buildrun, _ in sample_cases() + FIELD_CASES:
        for obj in (strategy, build, buildrun):
            kind = obj.get("kind") or "Build"
            out[kind] |= set(set_paths(obj, theirs[kind]))
    # An embedded spec is handed to the generator as a Build's spec.
    out["Build"] |= {".spec" + p[len(EMBEDDED):] for p in out["BuildRun"]
                     if p.startswith(EMBEDDED + ".")}
    return out


def test_every_taskrun_row_is_set_by_an_oracle_case(oracle_sets: dict[str, set[str]]) -> None:
    unset = [f"{kind} {f.path}" for f in FIELDS if f.oracle for kind in f.kinds
             if not any(f.covers(p) for p in oracle_sets[kind])]
    assert not unset, ("TaskRun rows no oracle case sets (add a case to "
                       f"tests/oracle/test_parity.py): {unset}")


def test_set_paths_walks_structs_lists_and_maps() -> None:
    schema = {"properties": {"a": {"items": {"properties": {"b": {}}}},
                             "m": {"additionalProperties": {}}}}
    assert sorted(set_paths({"a": [{"b": 1, "x": 2}], "m": {"k": "v"}}, schema)) == [
        ".a", ".a[]", ".a[].b", ".m", ".m{}"]


def test_the_docs_show_the_field_table() -> None:
    shown = section("docs/shipwright-api.md", "Every field, and what we do with it")
    assert fields.markdown_table() in shown, (
        "docs/shipwright-api.md's \"Every field, and what we do with it\" differs from "
        "devtools/crds/fields.py: paste markdown_table()'s output")

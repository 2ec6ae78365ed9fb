"""Reading an API object's fields as the types the reader expects, whatever JSON they hold.

The API server holds a field to its type only where a schema types it: metadata always,
our CRDs' fields, but not what a CRD leaves open. Tekton's TaskRun and PipelineRun keep
their status schemaless, so any JSON lands there, and `(obj.get("status") or {}).get(...)`
meets a string, a number or a list where it expected an object (issue 39: a TaskRun whose
status.conditions was a string). The functions that read a watched object as it arrives
(informers' transforms, freeze rules, indexers, handlers; tests/unit/test_informer_path.py)
read its fields through these, so a field of the wrong type reads as absent.
"""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]


def mapping(value: object) -> JSON:
    """`value` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def items(value: object) -> list[Any]:
    """`value` when it is a JSON array, else an empty one."""
    return value if isinstance(value, list) else []


def objects(value: object) -> list[JSON]:
    """The JSON objects in `value` when it is an array (a list of conditions, references),
    skipping anything else in it; [] when it is no array."""
    return [item for item in items(value) if isinstance(item, dict)]


def text(value: object) -> str:
    """`value` when it is a string, else ""."""
    return value if isinstance(value, str) else ""


def at(obj: object, *path: str) -> Any:
    """The value at `path` under `obj` (None where an object on the way is missing or not
    an object): at(taskrun, "status", "podName")."""
    for key in path:
        obj = mapping(obj).get(key)
    return obj

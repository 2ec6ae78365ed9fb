"""Shipwright itself, as the reference for "drop-in": its source at the pinned version.

`hack/shipwright/source` (run by `make shipwright`) puts github.com/shipwright-io/build
into the Go module cache; tests read its CRDs (`deploy/crds/`), samples
(`samples/v1beta1/`) and docs from there. Nothing of it is copied into this repo.
"""

from __future__ import annotations

import functools
from pathlib import Path

from devtools import hack
from devtools.hack import StackError

VERSION = "v0.20.13"


@functools.cache
def source_dir() -> Path:
    """The folder of github.com/shipwright-io/build@VERSION in the Go module cache;
    StackError (one line) when it cannot be had."""
    folder = Path(hack.script_output("shipwright", "source")[-1])
    if VERSION not in folder.name:
        raise StackError(f"shipwright: {folder} is not {VERSION}: "
                         "hack/shipwright/source and devtools/shipwright/source.py disagree")
    return folder


def crds_dir() -> Path:
    return source_dir() / "deploy" / "crds"


def samples_dir() -> Path:
    return source_dir() / "samples" / "v1beta1"

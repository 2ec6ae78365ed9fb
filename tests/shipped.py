"""What manifests/ ships, read as a user applies it: the resources kustomization.yaml
lists, in its order. A manifest on disk that it does not list (an opt-in one, such as
rbac/pod_logs.yaml, listed commented out) is applied only by whoever turns its feature
on, so the tests that stand for a default install read only what is listed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
MANIFESTS = REPO / "manifests"

Obj = dict[str, Any]


def kustomization() -> Obj:
    data: Obj = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    return data


def load(path: Path) -> list[Obj]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def listed(folder: str) -> list[Obj]:
    """The objects of the resources kustomization.yaml lists under `folder`/ (e.g.
    "rbac"), in its order."""
    return [o for r in kustomization()["resources"] if r.startswith(f"{folder}/")
            for o in load(MANIFESTS / r)]

"""Golden files and schema validation of rendered manifests: the one set-up every builder's tests share.

A golden file is what a pure builder renders, kept in the repository and reviewed like code. After
an intended change, regenerate them with ``SLIPWAY_UPDATE_GOLDEN=1 .venv/bin/python -m pytest <tests>``
and review the diff.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

#: Regenerate golden files instead of comparing with them.
UPDATE = os.environ.get("SLIPWAY_UPDATE_GOLDEN") == "1"
#: The oldest Kubernetes Slipway supports, and the newest schema kubernetes-validate ships.
K8S_VERSIONS = ("1.31.0", kubernetes_validate.latest_version())


def assert_golden(path: Path, rendered: str) -> None:
    """``rendered`` is the text of the golden file ``path`` (written first under ``SLIPWAY_UPDATE_GOLDEN=1``)."""
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(rendered)
    assert path.exists(), f"missing {path}: run with SLIPWAY_UPDATE_GOLDEN=1 to create it"
    assert rendered == path.read_text(), f"{path.stem} differs from {path.name} (SLIPWAY_UPDATE_GOLDEN=1 regenerates)"


def assert_golden_manifests(directory: Path, variant: str, objects: list[dict[str, Any]]) -> None:
    """The objects of one builder variant, as YAML documents, are ``directory/<variant>.yaml``."""
    assert_golden(directory / f"{variant}.yaml", yaml.safe_dump_all(objects, sort_keys=False, width=200))


def all_objects(variants: dict[str, Callable[[], list[dict[str, Any]]]]) -> list[tuple[str, dict[str, Any]]]:
    """Every object every variant builds, labelled ``<variant>:<kind>`` (the parametrize ids of the checks)."""
    return [(f"{variant}:{obj['kind']}", obj) for variant, build in variants.items() for obj in build()]

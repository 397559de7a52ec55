"""Strict validation of rendered custom resources against their CRD's openAPIV3Schema.

An API server *prunes* fields a structural CRD schema does not declare, silently: a typo
in a PyTorchJob or ScaledObject field would be dropped instead of rejected. So the schema is
tightened before validating: every object schema with ``properties`` gets
``additionalProperties: false`` unless it says ``x-kubernetes-preserve-unknown-fields``,
and Kubernetes' ``x-kubernetes-int-or-string`` becomes an explicit ``anyOf``. Subtrees the
extract script pruned (``x-slipway-pruned``, the PyTorchJob's and the ClusterTrainingRuntime's pod
templates) accept any object; the tests validate those separately with kubernetes-validate. The CRDs' CEL
rules (``x-kubernetes-validations``) are not run: the tests check the ones Slipway's objects could break by hand.
Bounds an API server enforces that the schema only states in a description (:data:`DESCRIBED_BOUNDS`: the
HPA's stabilization windows, validated when KEDA creates its HPA) are added to it, so a rendered object
outside them fails here, not on the cluster.

The schemas are data fixtures under ``tests/cluster/schemas/``, produced by
``scripts/extract_crd_schemas.py`` from the upstream CRDs.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

SCHEMAS = Path(__file__).parent / "schemas"
PRUNED = "x-slipway-pruned"
#: Properties whose bounds the CRD states only in words, by name: Kubernetes' HPA validation refuses a
#: ``behavior`` stabilization window outside 0..3600 s ("less than or equal to 3600 (one hour)").
DESCRIBED_BOUNDS: dict[str, dict[str, int]] = {"stabilizationWindowSeconds": {"minimum": 0, "maximum": 3600}}


def strict(schema: Any) -> Any:
    """A copy of an OpenAPI v3 (structural) schema that rejects unknown fields."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if schema.get(PRUNED):
        return {"type": "object"}
    # "properties" maps names to schemas (not a schema itself): it is walked once, below. Walking it here too
    # doubled the work at every level of nesting (41 s for the TrainJob's schema, 0.1 s once).
    out = {
        key: strict(value) if key not in ("enum", "required", "default", "example", "properties") else value
        for key, value in schema.items()
    }
    if "properties" in schema:
        out["properties"] = {name: {**strict(sub), **DESCRIBED_BOUNDS.get(name, {})}
                             for name, sub in schema["properties"].items()}
        if "additionalProperties" not in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


@cache
def fixture(name: str) -> dict[str, Any]:
    """The extracted fixture ``name`` (its ``openAPIV3Schema`` with the CRD's CEL rules, which tests check by hand)."""
    return json.loads((SCHEMAS / f"{name}.json").read_text())


@cache
def validator(name: str) -> jsonschema.Draft7Validator:
    schema = strict(fixture(name)["openAPIV3Schema"])
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def errors(name: str, obj: dict[str, Any]) -> list[str]:
    """Every violation, as "path: message" (empty when the object is valid)."""
    found = validator(name).iter_errors(obj)
    return sorted(f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in found)

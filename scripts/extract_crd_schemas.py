"""Extract the openAPIV3Schema of the CRDs Slipway renders into compact test fixtures.

The test suite may not read files outside the repository, so this development script copies
the data it needs from the upstream CRDs in ``../shared/crds`` (training-operator v1.9
PyTorchJob, KEDA 2.x ScaledObject and TriggerAuthentication, Gateway API v1 HTTPRoute — deploy/gateway.yaml's —
Kubeflow Trainer v2.3 TrainJob and ClusterTrainingRuntime — deploy/training-runtimes/ — and Cluster Autoscaler
1.36's ProvisioningRequest, an atomic pool's: cluster/manifests/provisioning.py)
into ``tests/cluster/schemas/*.json``:

* the served/storage version's ``openAPIV3Schema``, verbatim (its CEL ``x-kubernetes-validations``
  included, as data: the strict walker does not run CEL, so tests check the rules Slipway can break by hand), except
* the embedded full pod templates (:data:`POD_TEMPLATES`: the PyTorchJob's ``pytorchReplicaSpecs.*.template``,
  ~95% of the 600 KB file; the ClusterTrainingRuntime's JobSet ``replicatedJobs[].template.spec.template``),
  replaced by a marker: tests validate those as core ``PodTemplate`` objects with kubernetes-validate, which
  knows the real PodTemplateSpec schema for the cluster version.

The TrainJob's ``runtimePatches`` keep their pod template: it is no PodTemplateSpec but Trainer's own
restricted patch type (a few pod fields, four container fields), which only this schema describes.

Run from the repository root: ``.venv/bin/python scripts/extract_crd_schemas.py``
(``--crds DIR`` to read another directory). Re-run after updating the upstream CRDs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "cluster" / "schemas"
#: fixture name -> (CRD file, version)
CRDS = {
    "pytorchjob": ("kubeflow.org_pytorchjobs.yaml", "v1"),
    "scaledobject": ("keda.sh_scaledobjects.yaml", "v1alpha1"),
    "triggerauthentication": ("keda.sh_triggerauthentications.yaml", "v1alpha1"),
    "httproute": ("gateway.networking.k8s.io_httproutes.yaml", "v1"),
    "trainjob": ("trainer.kubeflow.org_trainjobs.yaml", "v1alpha1"),
    "clustertrainingruntime": ("trainer.kubeflow.org_clustertrainingruntimes.yaml", "v1alpha1"),
    "provisioningrequest": ("autoscaling.x-k8s.io_provisioningrequests.yaml", "v1"),
}
#: fixture name -> where its full PodTemplateSpec sits: the property names from the root schema, through
#: ``properties`` (and ``additionalProperties``/``items`` where the path says so).
POD_TEMPLATES = {
    "pytorchjob": ("spec", "pytorchReplicaSpecs", "additionalProperties", "template"),
    "clustertrainingruntime": ("spec", "template", "spec", "replicatedJobs", "items", "template", "spec", "template"),
}
#: Marks a subtree removed from the fixture; the tests' strict walker accepts any object there.
PRUNED = "x-slipway-pruned"


def version_schema(crd: dict[str, Any], version: str) -> dict[str, Any]:
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            return entry["schema"]["openAPIV3Schema"]
    raise SystemExit(f"{crd['metadata']['name']} has no version {version}")


def prune_pod_template(schema: dict[str, Any], path: tuple[str, ...]) -> None:
    """Replace the subschema at ``path`` (:data:`POD_TEMPLATES`) by the :data:`PRUNED` marker."""
    parent = schema
    for step in path[:-1]:
        parent = parent[step] if step in ("additionalProperties", "items") else parent["properties"][step]
    template = parent["properties"][path[-1]]
    parent["properties"][path[-1]] = {
        "type": "object",
        "description": template.get("description", "")[:200],
        PRUNED: "core PodTemplateSpec: validated with kubernetes-validate",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--crds", type=Path, default=ROOT.parent / "shared" / "crds")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (filename, version) in CRDS.items():
        crd = yaml.safe_load((args.crds / filename).read_text())
        schema = version_schema(crd, version)
        if name in POD_TEMPLATES:
            prune_pod_template(schema, POD_TEMPLATES[name])
        fixture = {
            "source": f"{filename} ({crd['metadata']['name']}, version {version})",
            "group": crd["spec"]["group"],
            "kind": crd["spec"]["names"]["kind"],
            "version": version,
            "openAPIV3Schema": schema,
        }
        path = OUT / f"{name}.json"
        path.write_text(json.dumps(fixture, indent=1, sort_keys=True) + "\n")
        print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()

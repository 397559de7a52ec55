"""The checkpoint contract in a run's pods (docs/api.md "The checkpoint contract (runs)"): every pod of every kind.

Golden files and schema validation of these variants are in test_manifests.py (VARIANTS); here
the contract's rules are checked on every pod of a Job and of every PyTorchJob replica.
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from jobs.checkpoint_contract import NOTICE_ANNOTATION
from jobs.manifests import build_training
from tests.cluster import samples
from tests.golden import K8S_VERSIONS

CONTRACT = {"SLIPWAY_CHECKPOINT_DIR", "SLIPWAY_ATTEMPT", "SLIPWAY_RESUME_FROM", "SLIPWAY_RUN_TOKEN"}


def _pods(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    pods = []
    for obj in objects:
        if obj["kind"] == "Job":
            pods.append(obj["spec"]["template"]["spec"])
        elif obj["kind"] == "PyTorchJob":
            pods.extend(r["template"]["spec"] for r in obj["spec"]["pytorchReplicaSpecs"].values())
    return pods


KINDS = {
    "job": {"workers": 1},
    "pytorchjob": {"workers": 3},  # a Master and a Worker replica spec
}


@pytest.mark.parametrize("shape", sorted(KINDS))
def test_every_pod_gets_the_contract(shape: str) -> None:
    ckpt = samples.checkpoint(attempt=3, resume_from="/slipway/checkpoints/step-900.pt", grace_seconds=240)
    objects = build_training(samples.training(checkpoint=ckpt, **KINDS[shape]), samples.CONFIG)
    pods = _pods(objects)
    assert len(pods) == (1 if shape == "job" else 2)
    for pod in pods:
        assert pod["terminationGracePeriodSeconds"] == 240
        container = pod["containers"][0]
        env = {e["name"]: e for e in container["env"]}
        assert env["SLIPWAY_CHECKPOINT_DIR"]["value"] == "/slipway/checkpoints"
        assert env["SLIPWAY_ATTEMPT"]["value"] == "3"
        assert env["SLIPWAY_RESUME_FROM"]["value"] == "/slipway/checkpoints/step-900.pt"
        # The token comes from the run's env Secret, never as a value.
        assert env["SLIPWAY_RUN_TOKEN"] == {
            "name": "SLIPWAY_RUN_TOKEN", "valueFrom": {"secretKeyRef": {"name": "run-42-env", "key": "SLIPWAY_RUN_TOKEN"}}}
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert volumes[mounts["/slipway/checkpoints"]]["persistentVolumeClaim"] == {"claimName": "run-42-checkpoints"}
        notice = volumes[mounts["/etc/slipway"]]["downwardAPI"]["items"]
        assert notice == [{"path": "notice", "fieldRef": {"fieldPath": f"metadata.annotations['{NOTICE_ANNOTATION}']"}}]
        # The user's volumes are still there.
        assert {"/data", "/ckpt"} <= set(mounts)


@pytest.mark.parametrize("shape", sorted(KINDS))
def test_the_first_attempt_resumes_from_nothing(shape: str) -> None:
    objects = build_training(samples.training(checkpoint=samples.checkpoint(), **KINDS[shape]), samples.CONFIG)
    for pod in _pods(objects):
        env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        assert env["SLIPWAY_ATTEMPT"] == "1" and env["SLIPWAY_RESUME_FROM"] == ""


@pytest.mark.parametrize("shape", sorted(KINDS))
def test_runs_without_the_contract_get_none_of_it(shape: str) -> None:
    objects = build_training(samples.training(**KINDS[shape]), samples.CONFIG)
    assert [o["kind"] for o in objects] == ["Job" if shape == "job" else "PyTorchJob"]
    for pod in _pods(objects):
        assert "terminationGracePeriodSeconds" not in pod
        assert not CONTRACT & {e["name"] for e in pod["containers"][0].get("env", [])}
        assert not any("downwardAPI" in v for v in pod["volumes"])
        assert "/slipway/checkpoints" not in {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}


def test_slipway_provides_a_claim_after_the_run_object() -> None:
    job_objects = build_training(samples.training(checkpoint=samples.checkpoint(storage="20Gi")), samples.CONFIG)
    assert [o["kind"] for o in job_objects] == ["Job", "PersistentVolumeClaim"]
    claim = job_objects[1]
    assert claim["metadata"]["name"] == "run-42-checkpoints"
    assert claim["metadata"]["labels"]["slipway.dev/workload"] == "run-42"
    assert claim["spec"] == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "20Gi"}}}
    # Several nodes mount a PyTorchJob's claim.
    distributed = build_training(samples.training(workers=2, checkpoint=samples.checkpoint(storage_class="nfs")),
                                 samples.CONFIG)
    assert distributed[1]["spec"]["accessModes"] == ["ReadWriteMany"]
    assert distributed[1]["spec"]["storageClassName"] == "nfs"


def test_a_claim_of_the_team_is_mounted_and_none_is_made() -> None:
    ckpt = samples.checkpoint(claim="team-checkpoints", provided=False)
    objects = build_training(samples.training(workers=2, checkpoint=ckpt), samples.CONFIG)
    assert [o["kind"] for o in objects] == ["PyTorchJob"]
    for pod in _pods(objects):
        claims = {v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
        assert "team-checkpoints" in claims and "run-42-checkpoints" not in claims


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_contracts_job_and_claim_are_valid_in_strict_mode(version: str) -> None:
    ckpt = samples.checkpoint(attempt=2, resume_from="s3://bucket/run-42/step-10")
    for obj in build_training(samples.training(checkpoint=ckpt), samples.CONFIG):
        kubernetes_validate.validate(obj, version, strict=True)

"""The checkpoint contract in a run's pods (docs/api.md "The checkpoint contract (runs)", docs/design.md "Sharing, preemption, clusters").

A run that opted in gets, in every pod of its Job or of every PyTorchJob replica:

* ``SLIPWAY_CHECKPOINT_DIR``: where its checkpoint volume is mounted (a claim that outlives the
  attempt: the team's own, or ``<object name>-checkpoints``, which :func:`build_checkpoint_claim`
  makes and the run's kind deletes only when the run ends for good);
* ``SLIPWAY_ATTEMPT`` and ``SLIPWAY_RESUME_FROM`` (the last reported checkpoint, "" at first);
* ``SLIPWAY_RUN_TOKEN`` from the run's env Secret (never a value in the manifest), and
  ``SLIPWAY_CHECKPOINT_URL``, where to report a checkpoint with it (when configured);
* ``/etc/slipway/notice``: the pod annotation ``slipway.dev/notice`` through the downward API,
  which holds the deadline once the run is about to be preempted (empty until then);
* ``terminationGracePeriodSeconds``: the contract's grace, the time to save after SIGTERM.

Pure functions, like every builder: the same spec renders the same objects.
"""

from __future__ import annotations

from cluster.manifests.common import Manifest, metadata
from cluster.manifests.secrets import secret_env_refs
from jobs.specs import CheckpointSpec, TrainingSpec

CHECKPOINT_DIR_ENV = "SLIPWAY_CHECKPOINT_DIR"
ATTEMPT_ENV = "SLIPWAY_ATTEMPT"
RESUME_FROM_ENV = "SLIPWAY_RESUME_FROM"
#: The run token's variable, and its key in the run's env Secret.
RUN_TOKEN_ENV = "SLIPWAY_RUN_TOKEN"
#: Where to POST a checkpoint with the token (set when Slipway knows its address for pods).
REPORT_URL_ENV = "SLIPWAY_CHECKPOINT_URL"
#: The variables the contract sets: a run with the contract may not set them itself.
CONTRACT_ENV = (CHECKPOINT_DIR_ENV, ATTEMPT_ENV, RESUME_FROM_ENV, RUN_TOKEN_ENV, REPORT_URL_ENV)
#: The pod annotation a preemption's notice is written to, and where the pod reads it.
NOTICE_ANNOTATION = "slipway.dev/notice"
NOTICE_DIR = "/etc/slipway"
NOTICE_FILE = "notice"
#: Where the checkpoint volume is mounted (SLIPWAY_CHECKPOINT_DIR).
CHECKPOINT_DIR = "/slipway/checkpoints"
CHECKPOINT_VOLUME = "slipway-checkpoints"
NOTICE_VOLUME = "slipway-notice"


def provided_claim_name(object_name: str) -> str:
    """The claim Slipway provides a run without a ``volume`` of its own (``run-42-checkpoints``)."""
    return f"{object_name}-checkpoints"


def contract_env(object_name: str, ckpt: CheckpointSpec) -> list[Manifest]:
    """The contract's env entries: after the user's, whose names cannot collide (validation refuses them)."""
    env = [
        {"name": CHECKPOINT_DIR_ENV, "value": ckpt.mount_path},
        {"name": ATTEMPT_ENV, "value": str(ckpt.attempt)},
        {"name": RESUME_FROM_ENV, "value": ckpt.resume_from},
        *secret_env_refs(object_name, (RUN_TOKEN_ENV,)),
    ]
    if ckpt.report_url:
        env.append({"name": REPORT_URL_ENV, "value": ckpt.report_url})
    return env


def contract_volumes(ckpt: CheckpointSpec) -> tuple[list[Manifest], list[Manifest]]:
    """(pod volumes, container mounts) of the checkpoint claim and the notice file."""
    volumes = [
        {"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": ckpt.claim}},
        {"name": NOTICE_VOLUME, "downwardAPI": {"items": [
            {"path": NOTICE_FILE, "fieldRef": {"fieldPath": f"metadata.annotations['{NOTICE_ANNOTATION}']"}},
        ]}},
    ]
    mounts = [
        {"name": CHECKPOINT_VOLUME, "mountPath": ckpt.mount_path},
        {"name": NOTICE_VOLUME, "mountPath": NOTICE_DIR, "readOnly": True},
    ]
    return volumes, mounts


def build_checkpoint_claim(spec: TrainingSpec) -> Manifest | None:
    """The claim Slipway provides for the run's checkpoints, or None (no contract, or the team's own claim).

    ReadWriteMany when several nodes mount it (a PyTorchJob), else ReadWriteOnce.
    """
    ckpt = spec.checkpoint
    if ckpt is None or not ckpt.provided:
        return None
    claim_spec: Manifest = {
        "accessModes": ["ReadWriteMany" if spec.workers > 1 else "ReadWriteOnce"],
        "resources": {"requests": {"storage": ckpt.storage}},
    }
    if ckpt.storage_class:
        claim_spec["storageClassName"] = ckpt.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(ckpt.claim, spec.namespace, spec.team, spec.object_name),
        "spec": claim_spec,
    }

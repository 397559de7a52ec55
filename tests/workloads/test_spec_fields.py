"""Every field of a kind's cluster spec is set from its model (issue 22, bug 1).

An endpoint's ``max_replicas`` once never reached its ``EndpointSpec``: the builder left it at
the dataclass default (1), so the ScaledObject's annotation of the user's maximum always said
"1" and the sandbox scaled its demand curve wrong. These tests build each kind's spec from a
workload whose every field differs from the spec's defaults, and require every spec field to
differ from its default too: a field added to a spec and forgotten in the builder fails here.
"""

from __future__ import annotations

import dataclasses

import pytest

from inference.kind import endpoint_spec
from inference.models import InferenceEndpoint
from inference.specs import EndpointSpec
from jobs.kind import training_spec
from jobs.models import TrainingRun
from jobs.specs import TrainingSpec
from quotas.demo import seed_flavors
from tests.factories import make_team, make_user

pytestmark = pytest.mark.django_db


def unset_fields(spec) -> list[str]:
    """The fields of ``spec`` still at their dataclass default."""
    return [field.name for field in dataclasses.fields(spec)
            if field.default is not dataclasses.MISSING and getattr(spec, field.name) == field.default]


def test_it_sets_every_training_spec_field_from_the_run(settings):
    settings.SLIPWAY_POD_API_URL = "http://slipway-web.slipway-system.svc"
    flavor = next(f for f in seed_flavors() if f.name == "a100-80gb")
    run = TrainingRun(pk=41, team=make_team("ml"), created_by=make_user(), name="llama", image="registry.example.com/t:1",
                      command=["python", "train.py"], args=["--lr", "3e-4"], env={"SEED": "1"}, flavor=flavor,
                      gpus_per_worker=2, workers=3, framework="jax", cpu=12, memory_gb=96, shm_gb=16, max_retries=5,
                      max_runtime_minutes=90, spot=True,
                      volumes=[{"claim": "data", "mount_path": "/data", "read_only": True}],
                      checkpoint={"grace_seconds": 90, "volume": "team-ckpts"}, attempt=3, earlier_run_seconds=600,
                      checkpoint_storage="20Gi", checkpoint_storage_class="nfs-rwx",
                      last_checkpoint_path="/slipway/checkpoints/s9.pt")
    run.stored_secret_names = ("HF_TOKEN",)
    spec = training_spec(run)
    assert isinstance(spec, TrainingSpec)
    assert unset_fields(spec) == []
    assert unset_fields(spec.checkpoint) == ["mount_path"]  # the contract's one fixed place
    assert spec.checkpoint.report_url == "http://slipway-web.slipway-system.svc/api/v1/runs/41/checkpoints/"
    # Its earlier attempts ran 10 of its 90 minutes: this one's deadline is what they left.
    assert (spec.workers, spec.gpus_per_worker, spec.active_deadline_seconds) == (3, 2, 80 * 60)
    # Not placed yet, a framework only Trainer v2 runs is a TrainJob on the runtime deploy/ ships for it.
    assert (spec.framework, spec.training_api, spec.runtime) == ("jax", "trainjob", "slipway-jax")


def test_it_sets_every_endpoint_spec_field_from_the_endpoint():
    flavor = next(f for f in seed_flavors() if f.name == "a100-80gb")
    endpoint = InferenceEndpoint(
        pk=7, team=make_team("ml"), created_by=make_user(), name="chat", image="registry.example.com/vllm:0.6",
        command=["python", "-m", "vllm"], args=["--port", "9000"], env={"MODEL": "llama"}, flavor=flavor,
        port=9000, gpus_per_replica=2, min_replicas=2, max_replicas=6, replica_ceiling=4,
        autoscale={"metric": "prometheus", "target": 12.5, "query": "sum(rate(http_requests_total[1m]))"},
        scale_down_delay_seconds=120, readiness_path="/ready", startup_timeout_seconds=900, spot=True)
    endpoint.stored_secret_names, endpoint.stored_secret_digest = ("HF_TOKEN",), "d" * 64
    spec = endpoint_spec(endpoint, max_surge=1)
    assert isinstance(spec, EndpointSpec)
    # ``engine`` belongs to the queue_length metric alone: it is checked with that metric below. ``revision`` and
    # ``canary`` come from the endpoint's revisions, none for this unsaved one (tests/inference/test_revisions.py
    # and test_canary_sandbox.py render them).
    assert unset_fields(spec) == ["engine", "revision", "canary"]
    assert (spec.max_replicas, spec.replica_ceiling, spec.min_replicas) == (6, 4, 2)

    endpoint.autoscale = {"metric": "queue_length", "target": 4, "engine": "vllm"}
    assert endpoint_spec(endpoint, max_surge=1).engine == "vllm"

"""The sandbox's image registry: an image it does not hold fails as on a real node — ErrImagePull,
then ImagePullBackOff —, a malformed reference is InvalidImageName, and both reach the portal's
words through the same status mapping (``jobs.status``, on ``cluster.status``) as a real cluster's pods."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from inference.demo import DEMO_ENDPOINTS
from jobs.demo import DEMO_LATER, DEMO_RUNS
from jobs.demo import IMAGE as DEMO_IMAGE
from jobs.forms import NewRunForm
from jobs.status import TrainingPhase, training_status
from sandbox.inventory import InventoryError, inventory, parse_registry
from sandbox.registry import ERR_IMAGE_PULL, INVALID_IMAGE_NAME, pull_error
from tests.sandbox.helpers import at, observed, ref, team_objects, training
from workloads.registry import resource_kinds

CATALOG = {"registry.example.com/ml/train": frozenset({"1.0"})}
LIMIT = 30
DEMO_RUNS_BY_NAME = {f["name"]: f for _, _, f in DEMO_RUNS}


@pytest.mark.parametrize(("image", "verdict"), [
    ("registry.example.com/ml/train:1.0", ""),
    ("registry.example.com/ml/train@sha256:" + "0" * 64, ""),
    ("registry.example.com/ml/train:1.O", ERR_IMAGE_PULL),  # a tag it does not hold
    ("registry.example.com/ml/trian:1.0", ERR_IMAGE_PULL),  # a repository it does not hold
    ("registry.example.com/ml/train", ERR_IMAGE_PULL),  # latest, which it does not hold
    ("ghcr.io/org/train:1.0", ""),  # another registry: beyond what the sandbox knows
    ("registry.example.com/ML/train:1.0", INVALID_IMAGE_NAME),
    ("train 1.0", INVALID_IMAGE_NAME),
])
def test_it_judges_a_pull_by_what_the_registry_holds(image, verdict):
    assert pull_error(image, CATALOG) == verdict
    assert pull_error(image, {}) == ("" if verdict != INVALID_IMAGE_NAME else verdict)


@pytest.mark.parametrize("section", [["x"], {"registry.example.com/ml/train:1.0": ["1.0"]},
                                     {"registry.example.com/ml/train": []}, {"Not A Repo": ["1"]}])
def test_it_refuses_a_malformed_registry_section(section):
    with pytest.raises(InventoryError, match="registry"):
        parse_registry(section)


@pytest.fixture
def with_registry(settings, tmp_path):
    """The suite's inventory plus a registry holding registry.example.com/ml/train:1.0."""
    path = tmp_path / "inventory.yaml"
    path.write_text(Path(settings.SLIPWAY_SANDBOX_INVENTORY).read_text()
                    + '\nregistry:\n  registry.example.com/ml/train: ["1.0"]\n')
    settings.SLIPWAY_SANDBOX_INVENTORY = str(path)


def _waiting(backend, name):
    (pod,) = observed(backend, name).pods
    return pod["status"]["containerStatuses"][0]["state"].get("waiting") or {}


def test_an_image_the_registry_lacks_fails_the_run_within_the_pull_limit(backend, with_registry):
    image = "registry.example.com/ml/train:1.O"
    backend.apply(team_objects() + training("run-1", image=image, duration="5m"), resource_kinds(), now=at(0))
    backend.tick(at(0))
    backend.tick(at(12))
    assert _waiting(backend, "run-1") == {
        "reason": "ErrImagePull",
        "message": f'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": not found'}
    backend.tick(at(25))
    assert _waiting(backend, "run-1")["reason"] == "ImagePullBackOff"
    within = training_status(observed(backend, "run-1"), at(LIMIT), LIMIT)
    assert within.state == TrainingPhase.PENDING
    past = training_status(observed(backend, "run-1"), at(LIMIT + 1), LIMIT)
    assert past.state == TrainingPhase.FAILED and past.abandoned
    assert past.reason == (f'ImagePullBackOff: image "{image}" not found (or its registry refused the pull) — '
                           "check the image name and tag")
    assert past.finished_at - at(0) < timedelta(minutes=1)


def test_a_malformed_reference_is_invalid_image_name_and_fails_on_sight(backend):
    image = "registry.example.com/ML/train:1.0"  # upper case: the portal's form refuses it, a manifest may not
    backend.apply(team_objects() + training("run-1", image=image), resource_kinds(), now=at(0))
    backend.tick(at(0))
    backend.tick(at(1))
    waiting = _waiting(backend, "run-1")
    assert waiting["reason"] == "InvalidImageName" and "invalid reference format" in waiting["message"]
    assert [e.reason for e in backend.events(ref("run-1"))][-2:] == ["InspectFailed", "Failed"]
    status = training_status(observed(backend, "run-1"), at(1), LIMIT)
    assert (status.state, status.abandoned) == (TrainingPhase.FAILED, True)
    assert status.reason == f'InvalidImageName: "{image}" is not a valid image reference — check the image name and tag'


def test_a_held_image_pulls_and_runs(backend, with_registry):
    backend.apply(team_objects() + training("run-1"), resource_kinds(), now=at(0))
    backend.tick(at(0))
    backend.tick(at(11))
    assert training_status(observed(backend, "run-1"), at(11), LIMIT).state == TrainingPhase.RUNNING


def test_the_shipped_registry_holds_every_demo_image_but_the_typo(settings):
    settings.SLIPWAY_SANDBOX_INVENTORY = str(settings.BASE_DIR / "sandbox" / "inventory.yaml")
    catalog = inventory().registry
    fields = [f for _, _, f in DEMO_RUNS] + [f for *_, f in DEMO_LATER] + [f for _, _, f in DEMO_ENDPOINTS]
    verdicts = {f["name"]: pull_error(f.get("image", DEMO_IMAGE), catalog) for f in fields}
    # The demo's "image that cannot be pulled" is a tag the registry lacks, not a simulation knob.
    assert verdicts.pop("vit-typo-image") == ERR_IMAGE_PULL
    assert "SLIPWAY_SIM_OUTCOME" not in dict(DEMO_RUNS_BY_NAME["vit-typo-image"].get("env") or {})
    assert set(verdicts.values()) == {""}
    # What the run form suggests (or fills in) pulls too: the tour keeps it.
    field = NewRunForm().fields["image"]
    assert field.initial, "the tour's \"keep the image\" step needs a filled field"
    for suggested in filter(None, (field.widget.attrs.get("placeholder"), field.initial)):
        assert pull_error(suggested, catalog) == "", suggested

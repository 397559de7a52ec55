"""``manage.py demo_serving``: the demo endpoint's key (for ``make run``'s load generator) and its canary that the
rule rolls back (docs/serving.md "In the demo")."""

from __future__ import annotations

import stat
from io import StringIO

import pytest
from django.core.management import call_command

from inference.constants import RevisionState
from inference.demo import DEMO_CANARY_ENV, DEMO_KEY_NAME
from inference.models import ApiKey, EndpointRevision, InferenceEndpoint
from teams.models import hash_token

pytestmark = pytest.mark.django_db


def demo_serving(key_file) -> str:
    out = StringIO()
    call_command("demo_serving", "--key-file", str(key_file), stdout=out)
    return out.getvalue()


@pytest.fixture
def demo_endpoint():
    call_command("seed_demo", "--force", stdout=StringIO())
    return InferenceEndpoint.objects.get(team__slug="ml-research", name="llama-chat")


def test_it_writes_a_usable_key_of_the_demo_endpoint_readable_by_its_owner_alone(demo_endpoint, tmp_path):
    key_file = tmp_path / "var" / "demo-gateway-key"
    out = demo_serving(key_file)
    raw = key_file.read_text().strip()
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = ApiKey.objects.usable().get(digest=hash_token(raw))
    assert (key.team_id, key.endpoint_id, key.name) == (demo_endpoint.team_id, demo_endpoint.pk, DEMO_KEY_NAME)
    assert str(key_file) in out and raw not in out


def test_it_starts_one_bad_canary_and_reruns_change_nothing(demo_endpoint, tmp_path):
    key_file = tmp_path / "key"
    demo_serving(key_file)
    canary = EndpointRevision.objects.get(endpoint=demo_endpoint, number=2)
    assert canary.state == RevisionState.CANARY and canary.weight == 25
    assert canary.spec["env"]["SLIPWAY_SIM_ERROR_RATE"] == DEMO_CANARY_ENV["SLIPWAY_SIM_ERROR_RATE"]
    first = key_file.read_text()

    demo_serving(key_file)  # make run again: the same key, no third revision
    assert key_file.read_text() == first
    assert EndpointRevision.objects.filter(endpoint=demo_endpoint).count() == 2
    assert ApiKey.objects.filter(team=demo_endpoint.team, name=DEMO_KEY_NAME).count() == 1


def test_a_lost_key_file_gets_a_new_key_and_the_old_one_is_revoked(demo_endpoint, tmp_path):
    key_file = tmp_path / "key"
    demo_serving(key_file)
    old = key_file.read_text().strip()
    key_file.unlink()
    demo_serving(key_file)
    new = key_file.read_text().strip()
    assert new != old
    assert not ApiKey.objects.usable().filter(digest=hash_token(old)).exists()
    assert ApiKey.objects.usable().filter(digest=hash_token(new)).exists()


def test_without_the_demo_endpoint_it_says_so_and_writes_nothing(tmp_path):
    out = demo_serving(tmp_path / "key")
    assert "No demo serving" in out and not (tmp_path / "key").exists()

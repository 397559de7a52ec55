"""Secret env values at rest: encrypted under SLIPWAY_SECRET_KEYS, migrated, rotated, refused without a key.

"The database holds no plain value" is checked on the raw column with SQL, as a database dump
or a backup would show it, not through the model.
"""

from __future__ import annotations

import base64
import io

import pytest
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import override_settings

from portal.env import derived_fernet_key
from tests.db_template import database_at
from tests.factories import secret_values
from tests.inference.conftest import endpoint_payload
from workloads import crypto
from workloads.checks import check_secret_keys
from workloads.secrets import reseal_all
from workloads.tasks import apply_workload

VALUE = "hf_AT-REST-s3cret-7777"
OLD_KEY, NEW_KEY = Fernet.generate_key().decode(), Fernet.generate_key().decode()


def raw_rows() -> list[tuple]:
    """Every column of every stored secret env, as SQL reads it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM workloads_secretenv")
        return cursor.fetchall()


def assert_no_plain_value(rows: list[tuple], value: str = VALUE) -> None:
    dump = repr(rows)
    assert value not in dump and base64.b64encode(value.encode()).decode() not in dump


@pytest.mark.django_db
def test_the_database_holds_no_plain_value_and_the_secret_gets_it_unchanged(api, ep_quota, published, fake_backend):
    response = api.post("/api/v1/endpoints/", endpoint_payload(team="ml-research", secret_env={"HF_TOKEN": VALUE}),
                        format="json")
    assert response.status_code == 201, response.json()
    rows = raw_rows()
    assert len(rows) == 1 and "HF_TOKEN" in repr(rows)  # the names stay readable (masking needs them)
    assert_no_plain_value(rows)

    assert apply_workload("ep", response.json()["id"]) == "applied"
    assert fake_backend.secret_values_seen == {base64.b64encode(VALUE.encode()).decode()}


@pytest.mark.django_db
def test_rotation_re_encrypts_under_the_first_key_and_the_old_key_can_go(api, ep_quota, published):
    with override_settings(SLIPWAY_SECRET_KEYS=[OLD_KEY]):
        response = api.post("/api/v1/endpoints/",
                            endpoint_payload(team="ml-research", secret_env={"HF_TOKEN": VALUE}), format="json")
        ref = f"ep:{response.json()['id']}"
        before = raw_rows()
    with override_settings(SLIPWAY_SECRET_KEYS=[NEW_KEY]), pytest.raises(crypto.InvalidToken):
        secret_values(ref)  # without the old key the value is unreadable: rotation must keep it until resealed
    with override_settings(SLIPWAY_SECRET_KEYS=[NEW_KEY, OLD_KEY]):
        assert secret_values(ref) == {"HF_TOKEN": VALUE}  # every key decrypts
        out = io.StringIO()
        call_command("reseal_secret_env", stdout=out)
        assert "Re-encrypted the secret env of 1 workload under" in out.getvalue()
    after = raw_rows()
    assert after != before
    assert_no_plain_value(after)
    with override_settings(SLIPWAY_SECRET_KEYS=[NEW_KEY]):
        assert secret_values(ref) == {"HF_TOKEN": VALUE}
        assert reseal_all() == 1  # running it again is harmless


@pytest.mark.django_db(transaction=True)
def test_the_migration_encrypts_existing_values_and_its_reverse_decrypts_them():
    before, after = [("workloads", "0001_initial")], [("workloads", "0002_secretenv_sealed")]
    with database_at(before) as executor:
        old_apps = executor.loader.project_state(before).apps
        team = old_apps.get_model("portal", "Team").objects.create(slug="vision", name="Vision")  # teams' app then
        old_secret_env = old_apps.get_model("workloads", "SecretEnv")
        old_secret_env.objects.create(ref="ep:1", team_id=team.pk, names=["HF_TOKEN"], values={"HF_TOKEN": VALUE})
        old_secret_env.objects.create(ref="run:2", team_id=team.pk, names=["HF_TOKEN"], values={})  # ended
        assert VALUE in repr(raw_rows())  # the counter-check: before, the value is plain

        executor.migrate(after)
        assert_no_plain_value(raw_rows())
        sealed = executor.loader.project_state(after).apps.get_model("workloads", "SecretEnv")  # its table then
        assert {ref: crypto.unseal(value) for ref, value in sealed.objects.values_list("ref", "sealed")} == {
            "ep:1": {"HF_TOKEN": VALUE}, "run:2": {}}

        executor = MigrationExecutor(connection)
        executor.migrate(before)
        back = executor.loader.project_state(before).apps.get_model("workloads", "SecretEnv")
        assert dict(back.objects.values_list("ref", "values")) == {"ep:1": {"HF_TOKEN": VALUE}, "run:2": {}}


def test_without_a_key_or_with_a_malformed_one_the_portal_refuses_to_start():
    with override_settings(SLIPWAY_SECRET_KEYS=[]):
        errors = check_secret_keys(None)
        assert [e.id for e in errors] == ["slipway.E001"] and "SLIPWAY_SECRET_KEYS is not set" in errors[0].msg
        with pytest.raises(ImproperlyConfigured):
            crypto.seal({"HF_TOKEN": VALUE})
    with override_settings(SLIPWAY_SECRET_KEYS=[NEW_KEY, "not-a-fernet-key"]):
        errors = check_secret_keys(None)
        assert [e.msg for e in errors] == ["Key 2 of SLIPWAY_SECRET_KEYS is not a Fernet key (32 url-safe "
                                           "base64-encoded bytes, as Fernet.generate_key() makes)."]
    with override_settings(SLIPWAY_SECRET_KEYS=[NEW_KEY]):
        assert check_secret_keys(None) == []


def test_the_demo_key_is_derived_from_secret_key_and_usable():
    key = derived_fernet_key("django-insecure-local-development-key-change-me")
    assert crypto.key_problems([key]) == [] and key != derived_fernet_key("another-secret-key")

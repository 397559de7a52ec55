"""API tokens: creation, hashed storage, bearer authentication, revocation, the CLI command."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.test import APIClient

from teams.models import ApiToken, AuditEvent
from teams.services import authenticate_token, create_api_token, revoke_api_token

TEAMS_URL = "/api/v1/teams/"


def bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def test_it_creates_a_token_with_at_least_128_random_bits(member):
    _token, raw = create_api_token(member, "ci")
    secret = raw.removeprefix(ApiToken.PREFIX)
    assert raw.startswith("slp_")
    assert len(secret) * 6 >= 128  # urlsafe base64: 6 bits per character
    assert raw != create_api_token(member, "ci")[1]


def test_it_stores_only_the_hash_and_a_short_prefix(member):
    token, raw = create_api_token(member, "ci")
    token.refresh_from_db()
    assert token.key_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in {token.key_hash, token.key_prefix, token.name}
    assert raw.startswith(token.key_prefix) and len(token.key_prefix) <= 10
    assert not ApiToken.objects.filter(key_hash=raw).exists()


def test_it_audits_token_creation_and_revocation(member):
    token, _raw = create_api_token(member, "ci", expires_days=5)
    revoke_api_token(member, token)
    revoke_api_token(member, token)  # idempotent: audited once
    actions = list(AuditEvent.objects.filter(actor=member).order_by("created_at").values_list("action", flat=True))
    assert actions == [AuditEvent.Action.TOKEN_CREATED, AuditEvent.Action.TOKEN_REVOKED]


def test_it_authenticates_a_valid_token_and_records_its_use(member):
    token, raw = create_api_token(member, "ci")
    assert token.last_used_at is None
    response = bearer(raw).get(TEAMS_URL)
    assert response.status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_it_writes_last_use_at_most_once_a_minute(member, django_assert_num_queries):
    token, raw = create_api_token(member, "ci")
    authenticate_token(raw)
    first = ApiToken.objects.get(pk=token.pk).last_used_at
    with django_assert_num_queries(1):  # the lookup only, no UPDATE
        authenticate_token(raw)
    assert ApiToken.objects.get(pk=token.pk).last_used_at == first


def test_it_rejects_an_expired_token(member):
    token, raw = create_api_token(member, "ci", expires_days=1)
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = bearer(raw).get(TEAMS_URL)
    assert response.status_code == 401
    assert response.json() == {"errors": {"detail": ["Invalid, expired or revoked token."]}}


def test_it_accepts_a_token_before_it_expires(member):
    _token, raw = create_api_token(member, "ci", expires_days=1)
    assert bearer(raw).get(TEAMS_URL).status_code == 200


def test_it_rejects_a_revoked_token(member):
    token, raw = create_api_token(member, "ci")
    revoke_api_token(member, token)
    assert bearer(raw).get(TEAMS_URL).status_code == 401


def test_it_rejects_an_unknown_token(member):
    response = bearer("slp_" + "A" * 43).get(TEAMS_URL)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"


def test_it_rejects_the_token_of_a_deactivated_user(member):
    _token, raw = create_api_token(member, "ci")
    member.is_active = False
    member.save()
    assert bearer(raw).get(TEAMS_URL).status_code == 401


@pytest.mark.parametrize("header", ["Bearer", "Bearer two parts", "bearer"])
def test_it_rejects_a_malformed_authorization_header(member, header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get(TEAMS_URL)
    assert response.status_code == 401
    assert "errors" in response.json()


def test_it_answers_401_without_credentials(db):
    response = APIClient().get(TEAMS_URL)
    assert response.status_code == 401
    assert response.json() == {"errors": {"detail": ["Authentication credentials were not provided."]}}


def test_it_does_not_accept_the_hash_as_a_token(member):
    token, _raw = create_api_token(member, "ci")
    assert bearer(token.key_hash).get(TEAMS_URL).status_code == 401


# -- manage.py create_api_token ----------------------------------------------------------


def run_command(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("create_api_token", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_it_prints_a_working_token_once_from_the_command(member):
    out, err = run_command("mia", "--name", "ci-pipeline")
    raw = out.strip()
    assert raw.startswith("slp_") and "\n" not in raw
    assert raw not in err  # stderr carries the notes, never the token
    token = ApiToken.objects.get(user=member)
    assert token.name == "ci-pipeline" and token.expires_at is None
    assert bearer(raw).get(TEAMS_URL).status_code == 200


def test_it_sets_the_expiry_from_the_command(member):
    run_command("mia", "--expires-days", "30")
    token = ApiToken.objects.get(user=member)
    assert token.name == "cli"
    assert timedelta(days=29, hours=23) < token.expires_at - timezone.now() <= timedelta(days=30)


def test_it_refuses_an_unknown_user_with_a_clear_error(db):
    with pytest.raises(CommandError, match="No user named 'ghost'"):
        run_command("ghost")
    assert not ApiToken.objects.exists()


@pytest.mark.parametrize(("days", "message"), [
    ("abc", "whole number"), ("1.5", "whole number"), ("0", "between 1 and 3650"), ("-3", "between 1 and 3650"),
    ("99999", "between 1 and 3650"),
])
def test_it_refuses_a_bad_expiry_with_a_clear_error(member, days, message):
    with pytest.raises(CommandError, match=message):
        run_command("mia", "--expires-days", days)
    assert not ApiToken.objects.exists()


def test_it_refuses_an_inactive_user(member):
    member.is_active = False
    member.save()
    with pytest.raises(CommandError, match="inactive"):
        run_command("mia")


def test_it_reports_errors_without_a_traceback(tmp_path):
    # Run like an operator would: a CommandError becomes one line on stderr and exit code 1.
    result = subprocess.run([sys.executable, "manage.py", "create_api_token", "ghost", "--expires-days", "x"],
                            capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[2],
                            env={"PATH": "/usr/bin:/bin", "SLIPWAY_VAR_DIR": str(tmp_path)})
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "--expires-days must be a whole number" in result.stderr

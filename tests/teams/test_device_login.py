"""``slipway login`` in a browser, server side (teams.device): RFC 8628's two endpoints and the portal's device page.

The command line's part and the whole flow over HTTP are in tests/cli/test_login.py.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.test import Client as PageClient
from django.utils import timezone
from rest_framework.test import APIClient

from teams import device
from teams.models import ApiToken, AuditEvent, DeviceLogin
from tests.factories import make_user

START, TOKEN = "/api/v1/auth/device/", "/api/v1/auth/token/"


@pytest.fixture(autouse=True)
def _empty_cache(db):  # without Redis the cache is the database's (the SQLite pass)
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def anonymous(db) -> APIClient:
    return APIClient()


@pytest.fixture
def signed_in(member) -> PageClient:
    """The member's own session in the portal, where they approve or deny a code (Django's client, no chromium)."""
    page = PageClient()
    page.force_login(member)
    return page


def start(anonymous, host: str = "laptop") -> dict:
    response = anonymous.post(START, {"client_name": host}, format="json")
    assert response.status_code == 200, response.json()
    return response.json()


def poll(anonymous, grant: dict) -> tuple[int, dict]:
    """One poll, as if the interval had passed since the last (the stored time moved back, no sleeping)."""
    DeviceLogin.objects.exclude(last_polled_at=None).update(last_polled_at=timezone.now() - timedelta(minutes=1))
    response = anonymous.post(TOKEN, {"grant_type": device.GRANT_TYPE, "device_code": grant["device_code"]},
                              format="json")
    return response.status_code, response.json()


def approve(signed_in, grant: dict, name: str = "", expires_days: str = "") -> object:
    return signed_in.post("/device/", {"code": grant["user_code"], "name": name or "slipway CLI on laptop",
                                       "expires_days": expires_days, "decision": "approve"})


# -- the grant ----------------------------------------------------------------------------------


def test_a_login_answers_rfc_8628s_fields_and_stores_only_digests(anonymous, settings):
    grant = start(anonymous)
    assert set(grant) == {"device_code", "user_code", "verification_uri", "verification_uri_complete",
                          "expires_in", "interval"}
    assert grant["verification_uri"] == "http://testserver/device/"
    assert grant["verification_uri_complete"] == f"http://testserver/device/?code={grant['user_code']}"
    assert grant["expires_in"] == settings.SLIPWAY_DEVICE_LOGIN_TTL_SECONDS
    assert grant["interval"] == settings.SLIPWAY_DEVICE_LOGIN_INTERVAL_SECONDS
    code = grant["user_code"]
    assert len(code) == 9 and code[4] == "-" and set(code.replace("-", "")) <= set(device.USER_CODE_ALPHABET)
    row = DeviceLogin.objects.get()
    stored = " ".join(str(value) for value in row.__dict__.values())
    assert grant["device_code"] not in stored and code not in stored and code.replace("-", "") not in stored
    assert row.client_name == "laptop" and row.requested_ip == "127.0.0.1"


def test_the_poll_is_pending_then_slowed_down_then_gets_one_token(anonymous, signed_in, member):
    grant = start(anonymous)
    status, body = poll(anonymous, grant)
    assert status == 400 and body["error"] == "authorization_pending"
    assert body["errors"] == {"detail": [body["error_description"]]}
    # Sooner than the interval: slow_down, and the interval grows by 5 s.
    early = anonymous.post(TOKEN, {"grant_type": device.GRANT_TYPE, "device_code": grant["device_code"]}, format="json")
    assert early.status_code == 400 and early.json()["error"] == "slow_down"
    assert DeviceLogin.objects.get().interval == grant["interval"] + device.SLOW_DOWN_STEP

    assert approve(signed_in, grant, name="slipway CLI on laptop", expires_days="30").status_code == 200
    status, body = poll(anonymous, grant)
    assert status == 200, body
    assert body["token_type"] == "Bearer" and 29 * 86400 < body["expires_in"] <= 30 * 86400
    token = ApiToken.objects.get(user=member)
    assert token.name == "slipway CLI on laptop" and token.key_prefix == body["access_token"][:10]
    signed_in = APIClient()
    signed_in.credentials(HTTP_AUTHORIZATION=f"Bearer {body['access_token']}")
    assert [t["slug"] for t in signed_in.get("/api/v1/teams/").json()["results"]] == ["ml-research"]
    # Once only.
    assert poll(anonymous, grant)[1]["error"] == "invalid_grant"
    assert ApiToken.objects.count() == 1
    assert DeviceLogin.objects.get().state == DeviceLogin.State.REDEEMED


def test_denied_expired_unknown_and_malformed_polls(anonymous, signed_in):
    denied = start(anonymous)
    response = signed_in.post("/device/", {"code": denied["user_code"], "name": "", "decision": "deny"})
    assert response.status_code == 200 and "Denied" in response.content.decode()
    assert poll(anonymous, denied)[1]["error"] == "access_denied"

    expired = start(anonymous)
    DeviceLogin.objects.filter(state=DeviceLogin.State.PENDING).update(expires_at=timezone.now())
    assert poll(anonymous, expired)[1]["error"] == "expired_token"
    late = signed_in.get("/device/", {"code": expired["user_code"]})
    assert late.status_code == 400 and "No sign-in is waiting for this code" in late.content.decode()

    assert poll(anonymous, {"device_code": "nope"})[1]["error"] == "invalid_grant"
    wrong_grant = anonymous.post(TOKEN, {"grant_type": "password", "device_code": "x"}, format="json")
    assert wrong_grant.status_code == 400 and wrong_grant.json()["error"] == "unsupported_grant_type"
    missing = anonymous.post(TOKEN, {"grant_type": device.GRANT_TYPE}, format="json")
    assert missing.status_code == 400 and missing.json()["error"] == "invalid_request"
    form = anonymous.post(TOKEN, f"grant_type={device.GRANT_TYPE}&device_code=x",
                          content_type="application/x-www-form-urlencoded")
    assert form.status_code == 415  # JSON bodies, as everywhere in the API
    for body in ({"client_name": "x" * 65}, {"client_name": {}}, ["laptop"]):
        refused = anonymous.post(START, body, format="json")
        assert refused.status_code == 400 and refused.json()["error"] == "invalid_request", body
    not_a_string = anonymous.post(TOKEN, {"grant_type": device.GRANT_TYPE, "device_code": 7}, format="json")
    assert not_a_string.status_code == 400 and not_a_string.json()["error"] == "invalid_request"
    assert not ApiToken.objects.exists()


def test_an_address_may_hold_a_bounded_number_of_waiting_logins(anonymous):
    for _ in range(device.MAX_PER_ADDRESS):
        start(anonymous)
    refused = anonymous.post(START, {}, format="json")
    assert refused.status_code == 429 and refused.json()["error"] == "slow_down"
    DeviceLogin.objects.update(state=DeviceLogin.State.DENIED)  # decided: no longer waiting
    assert anonymous.post(START, {}, format="json").status_code == 200


def test_a_neighbour_holds_an_address_up_for_the_short_window_not_a_codes_life(anonymous):
    """Security review 4 #8: twenty posts once locked an office's address for the codes' 10 minutes."""
    for _ in range(device.MAX_PER_ADDRESS):
        start(anonymous)
    assert anonymous.post(START, {}, format="json").status_code == 429
    # Still pending and alive (their codes live 10 minutes), but older than the window: the address may go on.
    DeviceLogin.objects.update(created_at=timezone.now() - device.ADDRESS_WINDOW - timedelta(seconds=1))
    assert DeviceLogin.objects.filter(state=DeviceLogin.State.PENDING, expires_at__gt=timezone.now()).count() == 20
    assert anonymous.post(START, {}, format="json").status_code == 200


def test_a_device_token_expires_by_default_and_says_where_it_came_from(anonymous, signed_in, member, settings):
    settings.SLIPWAY_DEVICE_LOGIN_INTERVAL_SECONDS = 0
    grant = start(anonymous)
    assert approve(signed_in, grant, name="slipway CLI on laptop").status_code == 200  # no expiry chosen
    status, body = poll(anonymous, grant)
    assert status == 200
    token = ApiToken.objects.get(user=member)
    assert token.origin == ApiToken.Origin.DEVICE
    days = (token.expires_at - token.created_at).total_seconds() / 86400
    assert settings.SLIPWAY_DEVICE_TOKEN_DAYS - 0.01 < days <= settings.SLIPWAY_DEVICE_TOKEN_DAYS
    assert 89 * 86400 < body["expires_in"] <= 90 * 86400
    page = signed_in.get("/tokens/").content.decode()
    assert "slipway login (browser)" in page


# -- the portal's page --------------------------------------------------------------------------


def test_the_page_needs_a_signed_in_person_and_never_decides_on_get(anonymous, signed_in, member):
    grant = start(anonymous, host="build-box")
    outside = PageClient().get("/device/", {"code": grant["user_code"]})
    assert outside.status_code == 302 and outside["Location"].startswith("/login/?next=/device/")
    page = signed_in.get("/device/", {"code": grant["user_code"].lower().replace("-", " ")})  # as typed
    assert page.status_code == 200
    text = page.content.decode()
    assert grant["user_code"] in text and "build-box" in text and 'value="slipway CLI on build-box"' in text
    assert "no-store" in page["Cache-Control"]
    assert DeviceLogin.objects.get().state == DeviceLogin.State.PENDING
    assert signed_in.get("/device/").status_code == 200  # the empty form asks for the code

    refused = signed_in.post("/device/", {"code": grant["user_code"], "name": "", "decision": "approve"})
    assert refused.status_code == 400 and "This field is required" in refused.content.decode()
    done = approve(signed_in, grant, name="ci box")
    assert done.status_code == 200 and "Approved" in done.content.decode()
    row = DeviceLogin.objects.get()
    assert (row.state, row.user, row.token_name, row.token_expires_days) == ("approved", member, "ci box", None)
    event = AuditEvent.objects.get(action=AuditEvent.Action.DEVICE_LOGIN)
    assert event.actor == member and event.details["decision"] == "approved"
    again = approve(signed_in, grant)
    assert again.status_code == 400 and "No sign-in is waiting" in again.content.decode()


def test_unknown_codes_are_counted_and_then_refused(anonymous, member, signed_in):
    grant = start(anonymous)
    for _ in range(device.MAX_WRONG_CODES):
        assert signed_in.get("/device/", {"code": "BBBB-BBBB"}).status_code == 400
    locked = signed_in.get("/device/", {"code": grant["user_code"]})
    assert locked.status_code == 429 and "Too many unknown codes" in locked.content.decode()
    # Someone else is not locked by it.
    other = PageClient()
    other.force_login(make_user("nadia"))
    assert other.get("/device/", {"code": grant["user_code"]}).status_code == 200

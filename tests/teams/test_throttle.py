"""The sign-in throttle (portal/throttle.py): every password door, its keying, and a cache outage."""

from __future__ import annotations

import logging
import socket

import pytest
from django.contrib.auth import authenticate
from django.core.cache import cache
from django.test import Client, RequestFactory

from portal.env import redis_cache
from teams import throttle
from teams.models import AuditEvent

pytestmark = pytest.mark.django_db

PASSWORD = "pw-Slipway-123"  # tests.factories.make_user's default
A, B = "192.0.2.10", "198.51.100.20"


@pytest.fixture(autouse=True)
def _empty_cache():
    cache.clear()
    yield
    cache.clear()


def _fail(door: str, username: str, ip: str, times: int, **extra) -> None:
    client = Client()
    for _ in range(times):
        response = client.post(door, {"username": username, "password": "wrong"}, REMOTE_ADDR=ip, **extra)
        assert response.status_code == 200, response.status_code


def _sign_in(door: str, username: str, ip: str, **extra) -> tuple[Client, object]:
    client = Client()
    response = client.post(door, {"username": username, "password": PASSWORD}, REMOTE_ADDR=ip, **extra)
    return client, response


# -- 1. every door ----------------------------------------------------------------------------


@pytest.mark.parametrize(("door", "user_fixture", "username"), [
    ("/login/", "member", "mia"),
    ("/admin/login/", "staff", "sam"),
])
def test_each_door_refuses_even_the_right_password_while_locked(request, door, user_fixture, username):
    request.getfixturevalue(user_fixture)
    _fail(door, username, A, throttle.MAX_FAILURES)
    client, response = _sign_in(door, username, A)
    assert response.status_code == 429
    assert "Too many failed sign-ins; try again in 1 minute." in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_the_doors_share_one_count(staff):
    _fail("/login/", "sam", A, throttle.MAX_FAILURES - 2)
    _fail("/admin/login/", "sam", A, 2)
    for door in ("/login/", "/admin/login/"):
        client, response = _sign_in(door, "sam", A)
        assert response.status_code == 429 and "_auth_user_id" not in client.session


def test_any_other_authenticate_caller_is_refused_too(member):
    """A future door that calls authenticate() passes the backend, which is the wall."""
    _fail("/login/", "mia", A, throttle.MAX_FAILURES)
    request = RequestFactory().post("/anything/", REMOTE_ADDR=A)
    assert authenticate(request, username="mia", password=PASSWORD) is None
    # The refusal is audited as a failed sign-in, like a wrong password.
    assert AuditEvent.objects.filter(action=AuditEvent.Action.LOGIN_FAILED, actor_name="mia").count() == 6
    assert authenticate(RequestFactory().post("/anything/", REMOTE_ADDR=B), username="mia", password=PASSWORD) == member


# -- 3. keying: (username, address) with backoff, and per address ---------------------------


def test_failures_from_one_address_do_not_lock_the_user_elsewhere(member):
    _fail("/login/", "mia", A, throttle.MAX_FAILURES)
    client, response = _sign_in("/login/", "mia", B)
    assert response.status_code == 302 and client.session["_auth_user_id"] == str(member.pk)


def test_the_lock_grows_with_each_failure_and_is_capped():
    waits = []
    for _ in range(throttle.MAX_FAILURES + 8):
        throttle.note_failure("mia", A)
        waits.append(throttle.wait_seconds("mia", A))
    assert waits[:throttle.MAX_FAILURES - 1] == [0] * (throttle.MAX_FAILURES - 1)
    locked = waits[throttle.MAX_FAILURES - 1:]
    assert [round(wait / 60) for wait in locked[:4]] == [1, 2, 4, 8]
    assert max(locked) == locked[-1] == throttle.MAX_DELAY.total_seconds()


def test_the_right_password_resets_the_count(member):
    _fail("/login/", "mia", A, throttle.MAX_FAILURES - 1)
    assert _sign_in("/login/", "mia", A)[1].status_code == 302
    _fail("/login/", "mia", A, throttle.MAX_FAILURES - 1)  # counted from zero again: not locked
    assert _sign_in("/login/", "mia", A)[1].status_code == 302


def test_one_address_trying_many_usernames_is_locked_for_all_of_them(member):
    for i in range(throttle.ADDRESS_MAX_FAILURES):
        _fail("/login/", f"guess{i}", A, 1)
    client, response = _sign_in("/login/", "mia", A)
    assert response.status_code == 429 and "_auth_user_id" not in client.session
    assert _sign_in("/login/", "mia", B)[1].status_code == 302  # another address is unaffected


def test_forged_forwarded_for_does_not_escape_the_lock_without_a_trusted_proxy(member, settings):
    settings.SLIPWAY_TRUSTED_PROXIES = 0
    for i in range(throttle.MAX_FAILURES):
        _fail("/login/", "mia", A, 1, HTTP_X_FORWARDED_FOR=f"203.0.113.{i}")
    assert _sign_in("/login/", "mia", A, HTTP_X_FORWARDED_FOR="203.0.113.99")[1].status_code == 429


def test_forwarded_for_is_honoured_only_from_a_listed_proxy(member, settings):
    settings.SLIPWAY_TRUSTED_PROXIES = ("10.0.0.0/24",)
    # Through the proxy: clients are told apart by X-Forwarded-For.
    _fail("/login/", "mia", "10.0.0.7", throttle.MAX_FAILURES, HTTP_X_FORWARDED_FOR=f"6.6.6.6, {A}")
    assert _sign_in("/login/", "mia", "10.0.0.7", HTTP_X_FORWARDED_FOR=A)[1].status_code == 429
    assert _sign_in("/login/", "mia", "10.0.0.7", HTTP_X_FORWARDED_FOR=B)[1].status_code == 302
    # Straight to the pod, past the proxy: the header is the caller's word and is ignored.
    for i in range(throttle.MAX_FAILURES):
        _fail("/login/", "mia", "10.9.9.9", 1, HTTP_X_FORWARDED_FOR=f"203.0.113.{i}")
    assert _sign_in("/login/", "mia", "10.9.9.9", HTTP_X_FORWARDED_FOR="203.0.113.99")[1].status_code == 429


# -- 2. the cache is down ----------------------------------------------------------------------


@pytest.fixture
def cache_down(settings):
    """The default cache pointed at Redis on a port where nothing listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the with-block ends
    working = settings.CACHES
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                   "LOCATION": f"redis://127.0.0.1:{port}/0"}}
    with pytest.raises(Exception, match=r"(?i)connect"):
        cache.get("anything")
    yield
    settings.CACHES = working  # before _empty_cache clears it


@pytest.fixture
def cache_silent(settings):
    """The default cache, configured as production configures Redis, at a server that accepts and never answers.

    A Redis behind a dropping firewall or a hung host: without bounded waits every sign-in
    would hang (pytest's timeout would end this test) instead of falling back to the audit log.
    """
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)  # the kernel completes the handshakes; nobody reads or answers
        working = settings.CACHES
        settings.CACHES = {"default": redis_cache(f"redis://127.0.0.1:{listener.getsockname()[1]}/0")}
        yield
        settings.CACHES = working


def test_sign_in_works_while_the_cache_hangs(cache_silent, member, caplog):
    caplog.set_level(logging.WARNING, logger="teams.throttle")
    client, response = _sign_in("/login/", "mia", A)
    assert response.status_code == 302 and client.session["_auth_user_id"] == str(member.pk)
    assert "cache unreachable" in caplog.text


@pytest.mark.parametrize("door", ["/login/", "/admin/login/"])
def test_sign_in_works_while_the_cache_is_down(cache_down, staff, door, caplog):
    caplog.set_level(logging.WARNING, logger="teams.throttle")
    wrong = Client().post(door, {"username": "sam", "password": "wrong"}, REMOTE_ADDR=A)
    assert wrong.status_code == 200
    assert "correct username and password" in wrong.content.decode()
    client, right = _sign_in(door, "sam", A)
    assert right.status_code == 302 and client.session["_auth_user_id"] == str(staff.pk)
    assert "cache unreachable" in caplog.text


def test_while_the_cache_is_down_the_audit_log_still_throttles(cache_down, member):
    _fail("/login/", "mia", A, throttle.MAX_FAILURES)
    client, response = _sign_in("/login/", "mia", A)
    assert response.status_code == 429 and "_auth_user_id" not in client.session
    assert _sign_in("/login/", "mia", B)[1].status_code == 302  # keyed by (username, address) here too


def test_while_the_cache_is_down_an_address_trying_many_usernames_is_locked(cache_down, member):
    for i in range(throttle.ADDRESS_MAX_FAILURES):
        _fail("/login/", f"guess{i}", A, 1)
    assert _sign_in("/login/", "mia", A)[1].status_code == 429
    assert _sign_in("/login/", "mia", B)[1].status_code == 302


def test_while_the_cache_is_down_a_sign_in_resets_the_pair(cache_down, member):
    _fail("/login/", "mia", A, throttle.MAX_FAILURES - 1)
    assert _sign_in("/login/", "mia", A)[1].status_code == 302
    _fail("/login/", "mia", A, throttle.MAX_FAILURES - 1)
    assert _sign_in("/login/", "mia", A)[1].status_code == 302

"""Delivering to a real HTTP receiver on 127.0.0.1: the signature, the retry after a 500, the claim.

The receiver (conftest.Receiver) checks each request's signature the way docs/notifications.md
says, with the secret shown when the webhook was created.
"""

from __future__ import annotations

import io
import socket
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from cryptography.fernet import Fernet
from django.core import mail
from django.core.management import call_command
from django.utils import timezone

from notifications import delivery, events
from notifications.constants import DeliveryStatus
from notifications.models import Delivery, Webhook
from notifications.services import create_webhook, set_email_kinds
from tests.notifications.conftest import Receiver
from tests.threads import in_thread

pytestmark = pytest.mark.django_db


def one_delivery(team, kind="run_failed", key="run_failed:run:7") -> Delivery:
    key = events.record(kind, team, key, "Run bert (#7) of team ml-research failed",
                        "Run bert (#7) of team ml-research failed: OOMKilled", ref="run:7",
                        reason="OOMKilled")
    [pk] = delivery.fan_out(key)
    return Delivery.objects.get(pk=pk)


@pytest.fixture
def hooked(team, team_admin, receiver):
    _hook, receiver.secret = create_webhook(team_admin, team, receiver.url, ["run_failed"])
    return receiver


def test_the_receiver_gets_a_signed_json_body_with_a_slack_text(team, hooked):
    row = one_delivery(team)
    assert delivery.attempt(row.pk).result == "sent"
    [got] = hooked.got
    assert got.verified and got.delivery == str(row.event_id)
    assert got.body["text"] == "Run bert (#7) of team ml-research failed: OOMKilled"  # what Slack shows
    assert (got.body["type"], got.body["team"], got.body["ref"]) == ("run_failed", "ml-research", "run:7")
    row.refresh_from_db()
    assert (row.status, row.attempts, row.response_code, row.last_error) == (DeliveryStatus.SENT, 1, 200, "")


def test_a_wrong_secret_does_not_verify(team, hooked):
    hooked.secret = "whsec_not-the-one"
    delivery.attempt(one_delivery(team).pk)
    assert [got.verified for got in hooked.got] == [False]


def test_it_retries_after_a_500_with_backoff_then_never_sends_again(team, hooked, settings):
    settings.SLIPWAY_WEBHOOK_BACKOFF_SECONDS = 30
    hooked.statuses = [500]
    row = one_delivery(team)
    first = delivery.attempt(row.pk)
    assert (first.result, first.delay) == ("retry", 30)
    row.refresh_from_db()
    assert (row.status, row.attempts, row.response_code, row.last_error) == (DeliveryStatus.PENDING, 1, 500, "HTTP 500")
    assert delivery.attempt(row.pk).result == "skipped"  # not due before its backoff
    later = row.next_attempt_at
    assert delivery.attempt(row.pk, now=later).result == "sent"
    assert delivery.attempt(row.pk, now=later + timedelta(hours=1)).result == "skipped"  # sent: never again
    assert [(got.delivery, got.verified) for got in hooked.got] == [(str(row.event_id), True)] * 2
    row.refresh_from_db()
    assert (row.status, row.attempts, row.response_code) == (DeliveryStatus.SENT, 2, 200)


def test_the_backoff_doubles_and_the_last_attempt_fails_for_good(team, hooked, settings):
    settings.SLIPWAY_WEBHOOK_BACKOFF_SECONDS, settings.SLIPWAY_WEBHOOK_MAX_ATTEMPTS = 10, 3
    hooked.statuses = [503, 503, 503]
    row = one_delivery(team)
    outcomes, now = [], timezone.now()
    for _ in range(3):
        outcome = delivery.attempt(row.pk, now=now)
        outcomes.append((outcome.result, outcome.delay))
        row.refresh_from_db()
        now = row.next_attempt_at
    assert outcomes == [("retry", 10), ("retry", 20), ("failed", 0)]
    assert (row.status, row.attempts, row.last_error) == (DeliveryStatus.FAILED, 3, "HTTP 503")


def test_a_target_that_is_internal_when_sent_is_not_posted_to(team, hooked, settings):
    row = one_delivery(team)
    settings.SLIPWAY_WEBHOOK_ALLOW_LOOPBACK = False  # as in production: 127.0.0.1 is internal
    assert delivery.attempt(row.pk).result == "retry"
    row.refresh_from_db()
    assert row.last_error == "not sent: 127.0.0.1 resolves to an internal address"  # which one: not said
    assert hooked.got == []


def test_the_secret_is_stored_encrypted(team, hooked):
    stored = Webhook.objects.get().sealed_secret
    assert hooked.secret.startswith("whsec_") and hooked.secret not in stored
    assert delivery.webhook_secret(Webhook.objects.get()) == hooked.secret


def test_it_emails_a_subscriber_through_the_mail_backend(team, member):
    set_email_kinds(member, team, ["run_failed"])
    row = one_delivery(team)
    assert delivery.attempt(row.pk).result == "sent"
    [message] = mail.outbox
    assert (message.subject, message.to) == ("[Slipway] Run bert (#7) of team ml-research failed", ["mia@example.com"])
    assert message.body == "Run bert (#7) of team ml-research failed: OOMKilled\n"


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_two_workers_on_one_delivery_send_it_once(team, hooked):
    """The second attempt arrives while the first is still inside its POST: it finds the delivery claimed."""
    row = one_delivery(team)
    hooked.hold = True
    errors: list[Exception] = []
    results: list[str] = []
    first = in_thread(lambda: results.append(delivery.attempt(row.pk).result), errors)
    assert hooked.holding.wait(10)
    assert delivery.attempt(row.pk).result == "skipped"
    hooked.release.set()
    first.join(10)
    assert errors == [] and results == ["sent"]
    assert len(hooked.got) == 1



def test_a_key_rotation_reseals_the_webhook_secrets(team, team_admin, settings):
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.SLIPWAY_SECRET_KEYS = [old]
    _hook, secret = create_webhook(team_admin, team, "https://hooks.example.com/x", ["run_failed"])
    settings.SLIPWAY_SECRET_KEYS = [new, old]
    out = io.StringIO()
    call_command("reseal_webhook_secrets", stdout=out)
    assert "Re-encrypted the secret of 1 webhook under" in out.getvalue()
    settings.SLIPWAY_SECRET_KEYS = [new]  # the old key can go
    assert delivery.webhook_secret(Webhook.objects.get()) == secret


class Rebinding:
    """A resolver that answers ``first`` to its first question and ``then`` to every later one: the
    DNS rebinding of security review 4 (a public answer to the check, an internal one to the connect)."""

    def __init__(self, first: str, then: str, name: str = "hooks.example.com"):
        self.answers, self.asked, self.name, self.real = [first, then], 0, name, socket.getaddrinfo

    def __call__(self, host, port, *args, **kwargs):
        if host != self.name:  # an address literal (the pinned connect) resolves as it always does
            return self.real(host, port, *args, **kwargs)
        answer = self.answers[min(self.asked, 1)]
        self.asked += 1
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answer, port))]


def named_hook(team, team_admin, receiver, name: str = "hooks.example.com") -> Receiver:
    """The receiver's webhook saved under a public-looking name instead of 127.0.0.1."""
    url = receiver.url.replace("127.0.0.1", name)
    _hook, receiver.secret = create_webhook(team_admin, team, url, ["run_failed"])
    return receiver


def test_it_resolves_once_and_connects_to_the_address_it_judged(team, team_admin, receiver, monkeypatch):
    # The check's answer is 127.0.0.1 (where the receiver listens; loopback is let through in these
    # tests), every later answer 127.0.0.2, where nothing listens: a second resolution fails the POST.
    resolver = Rebinding("127.0.0.1", "127.0.0.2")
    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    hooked = named_hook(team, team_admin, receiver)
    row = one_delivery(team)
    assert delivery.attempt(row.pk).result == "sent", Delivery.objects.get(pk=row.pk).last_error
    assert resolver.asked == 1
    assert [got.verified for got in hooked.got] == [True]
    assert hooked.host_headers == [f"hooks.example.com:{urlsplit(receiver.url).port}"]  # the name, not the address


def test_a_name_that_answers_an_internal_address_is_refused_without_naming_it(team, team_admin, receiver, monkeypatch):
    monkeypatch.setattr(socket, "getaddrinfo", Rebinding("169.254.169.254", "169.254.169.254"))
    named_hook(team, team_admin, receiver)
    row = one_delivery(team)
    assert delivery.attempt(row.pk).result == "retry"
    row.refresh_from_db()
    assert row.last_error == "not sent: hooks.example.com resolves to an internal address"
    assert "169.254" not in row.last_error and receiver.got == []

"""Delivering to a real HTTP receiver on 127.0.0.1: the signature, the retry after a 500, the claim.

The receiver (conftest.Receiver) checks each request's signature the way docs/notifications.md
says, with the secret shown when the webhook was created.
"""

from __future__ import annotations

import contextlib
import io
import logging
import socket
import threading
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from celery.exceptions import Retry
from cryptography.fernet import Fernet, InvalidToken
from django.core import mail
from django.core.management import call_command
from django.utils import timezone

from notifications import delivery, events, tasks
from notifications.constants import DeliveryStatus
from notifications.models import Delivery, MailServer, Webhook
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


def test_an_attempt_that_never_finishes_is_tried_no_more_than_its_attempts(team, hooked, settings, monkeypatch):
    """An error escaping an attempt (here the webhook's secret no key opens) leaves the delivery ``sending``; the sweep
    tries it again when the lease runs out, each try counting, and the last one's end fails it for good — it was
    claimed again on every sweep without end, its attempts counted past the limit."""
    settings.SLIPWAY_WEBHOOK_MAX_ATTEMPTS = 2
    row = one_delivery(team)

    def unopened(webhook):
        raise InvalidToken

    monkeypatch.setattr(delivery, "webhook_secret", unopened)
    now = timezone.now()
    for _ in range(2):
        with pytest.raises(InvalidToken):
            delivery.attempt(row.pk, now=now)
        row.refresh_from_db()
        assert row.status == DeliveryStatus.SENDING
        now = row.claimed_until + timedelta(seconds=1)
        assert delivery.overdue(now)[1] == [row.pk]  # the sweep re-drives it
    assert delivery.attempt(row.pk, now=now).result == "failed"
    row.refresh_from_db()
    assert (row.status, row.attempts, row.last_error) == (DeliveryStatus.FAILED, 2, delivery.UNFINISHED)
    assert delivery.overdue(now + timedelta(hours=1))[1] == [] and hooked.got == []


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


def test_a_title_with_a_line_break_is_mailed_on_one_line_and_holds_back_no_other_email(team, member, other_team,
                                                                                         outsider):
    """A title is made of names people typed: a reservation's (a CharField, which keeps a line break inside it) went
    into the subject as it was. Django refuses a header with a line break (BadHeaderError), which was taken for the
    mail server failing: every e-mail of every team was held back behind that one delivery's backoff."""
    set_email_kinds(member, team, ["reservation"])
    set_email_kinds(outsider, other_team, ["run_failed"])
    key = events.record("reservation", team, "reservation:reservation:9:booked",
                        "Reservation eval\nrun of team ml-research booked", "Reservation eval run booked.")
    [pk] = delivery.fan_out(key)
    assert delivery.attempt(pk).result == "sent"
    assert [m.subject for m in mail.outbox] == ["[Slipway] Reservation eval run of team ml-research booked"]
    assert MailServer.objects.get().backoff_until is None
    other = events.record("run_failed", other_team, "run_failed:run:8", "Run x (#8) of team vision failed", "Run x.")
    [pk] = delivery.fan_out(other)
    assert delivery.attempt(pk).result == "sent"  # another team's e-mail is not held back


def test_a_mail_server_that_never_answers_fails_the_attempt_after_the_timeout(team, member, settings):
    """An SMTP server that takes the connection and never greets: the attempt fails after ``EMAIL_TIMEOUT`` (the
    project sets one; Django's default is none) and is retried with the backoff, and the claim outlasts the wait.
    Without a timeout the attempt would wait for the greeting for good: here the server hangs up after 5 s, and the
    attempt ends then with another error."""
    set_email_kinds(member, team, ["run_failed"])
    settings.EMAIL_TIMEOUT, settings.SLIPWAY_WEBHOOK_TIMEOUT_SECONDS = 0.3, 0.1
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", listener.getsockname()[1]
        row = one_delivery(team)
        hang_up = threading.Timer(5, lambda: listener.accept()[0].close())
        hang_up.start()
        try:
            outcome = delivery.attempt(row.pk)
        finally:
            hang_up.cancel()
            hang_up.join()
    assert outcome.result == "retry" and outcome.delay == settings.SLIPWAY_WEBHOOK_BACKOFF_SECONDS
    row.refresh_from_db()
    assert (row.status, row.attempts) == (DeliveryStatus.PENDING, 1)
    assert row.last_error == "the mail server did not answer in time"
    settings.EMAIL_TIMEOUT = 60  # a slow relay's: the claim lasts longer than three of its waits
    assert delivery.lease() > timedelta(seconds=180)


def test_a_team_reads_what_kind_of_mail_failure_it_was_and_the_servers_words_go_to_the_log(
        client, team, member, team_admin, settings, caplog):
    """The delivery log is the team admins' (docs/notifications.md); the mail server is the platform's: its reply to
    the platform's login (an account, a host) is logged for operators, and the row says the login was refused."""
    from tests.notifications import mailbackends

    set_email_kinds(member, team, ["run_failed"])
    settings.EMAIL_BACKEND = "tests.notifications.mailbackends.Locked"
    row = one_delivery(team)
    with caplog.at_level(logging.WARNING, logger="notifications.delivery"):
        assert delivery.attempt(row.pk).result == "retry"
    row.refresh_from_db()
    assert row.last_error == "the mail server refused the login"
    assert mailbackends.Locked.REPLY.decode() in caplog.text and f"delivery {row.pk} " in caplog.text
    client.force_login(team_admin)
    html = client.get(f"/teams/{team.slug}/").content.decode()
    assert "the mail server refused the login" in html and "relay-bot" not in html and "535" not in html


def emails(team, n: int, first: int = 0) -> list[Delivery]:
    """``n`` new events (runs ``first``, ``first`` + 1, …), each an e-mail to the team's subscribers: their deliveries."""
    keys = [events.record("run_failed", team, f"run_failed:run:{i}", "Run bert failed", "Run bert failed: OOMKilled",
                          ref=f"run:{i}", reason="OOMKilled") for i in range(first, first + n)]
    return list(Delivery.objects.filter(pk__in=[pk for key in keys for pk in delivery.fan_out(key)]).order_by("pk"))


def test_a_mail_server_that_never_answers_is_connected_to_once_per_turn(team, member, settings):
    """Every e-mail goes through one server: one that takes the connection and never greets would hold a
    notification thread per e-mail and attempt. As a failing webhook, it is tried by one e-mail at a time: five
    due together cost one wait, not five; the listener's backlog counts the connections made."""
    set_email_kinds(member, team, ["run_failed"])
    settings.EMAIL_TIMEOUT = 0.2
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", listener.getsockname()[1]
        rows = emails(team, 5)
        results, connections = two_rounds(listener, rows, MailServer)
    assert MailServer.objects.get().address.endswith(f"127.0.0.1:{settings.EMAIL_PORT}")
    assert results == ["retry"] * 10
    assert connections == 2  # one per turn: at first, and when the backoff was over
    errors = list(Delivery.objects.order_by("pk").values_list("last_error", flat=True))
    assert errors == ["the mail server did not answer in time"] + [delivery.MAIL_BACKING_OFF] * 4


def test_a_mail_server_that_answers_again_sends_every_email_and_a_refused_address_holds_none_back(
        team, member, viewer, settings):
    """The server down: the first e-mail fails and the server backs off, the others wait unsent; up again at the
    backoff's end, the e-mail whose turn it is goes and the rest follow. A recipient the server refuses is the
    address's failure, not the server's: it backs nothing off."""
    from tests.notifications import mailbackends

    set_email_kinds(member, team, ["run_failed"])
    settings.EMAIL_BACKEND = "tests.notifications.mailbackends.Flaky"
    mailbackends.Flaky.down, mailbackends.Flaky.calls, mailbackends.Flaky.sent = True, 0, []
    first, second = emails(team, 2)
    assert [delivery.attempt(row.pk).result for row in (first, second)] == ["retry", "retry"]
    assert mailbackends.Flaky.calls == 1  # the second was not tried
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.last_error == "the mail server did not answer" and second.last_error == delivery.MAIL_BACKING_OFF
    assert MailServer.objects.get().backoff_until == first.next_attempt_at
    mailbackends.Flaky.down = False
    later = max(first.next_attempt_at, second.next_attempt_at)
    assert [delivery.attempt(row.pk, now=later).result for row in (second, first)] == ["sent", "sent"]
    assert mailbackends.Flaky.sent == [["mia@example.com"]] * 2 and MailServer.objects.get().backoff_until is None

    # Another server (the settings name its backend): a refused address fails its own delivery only.
    set_email_kinds(viewer, team, ["run_failed"])
    settings.EMAIL_BACKEND = "tests.notifications.mailbackends.Picky"
    mailbackends.Picky.sent = []
    refused, taken = sorted(emails(team, 1, first=2), key=lambda row: row.target != mailbackends.REFUSED)
    assert [delivery.attempt(row.pk).result for row in (refused, taken)] == ["retry", "sent"]
    refused.refresh_from_db()
    assert refused.last_error == "the mail server refused the recipient's address"
    assert mailbackends.Picky.sent == [["mia@example.com"]]
    assert MailServer.objects.get(address__startswith="tests.notifications.mailbackends.Picky").backoff_until is None


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_two_workers_on_one_delivery_send_it_once(team, hooked):
    """The second attempt arrives while the first is still inside its POST: it finds the delivery claimed."""
    row = one_delivery(team)
    assert while_inside_a_post(hooked, row, lambda: delivery.attempt(row.pk).result) == ("sent", "skipped")
    assert len(hooked.got) == 1


def while_inside_a_post(hooked: Receiver, row: Delivery, meanwhile):
    """``(the result of an attempt at row, what meanwhile() returned while that attempt was inside its POST)``."""
    hooked.hold = True
    errors: list[Exception] = []
    results: list[str] = []
    first = in_thread(lambda: results.append(delivery.attempt(row.pk).result), errors)
    assert hooked.holding.wait(10)
    returned = meanwhile()
    hooked.release.set()
    first.join(10)
    assert errors == [] and len(results) == 1
    return results[0], returned



def test_a_failing_webhook_is_tried_by_one_delivery_at_a_time_until_it_answers(team, hooked, settings):
    """After a failed attempt the webhook backs off until that delivery's next attempt: the others due meanwhile are
    not sent (each such attempt counts, with its backoff, as a failed one); then one takes the turn, and an answer
    lets every delivery through again."""
    settings.SLIPWAY_WEBHOOK_BACKOFF_SECONDS = 30
    hooked.statuses = [500]
    first, second, third = (one_delivery(team, key=f"run_failed:run:{n}") for n in range(3))
    assert delivery.attempt(first.pk).result == "retry"
    outcomes = [delivery.attempt(row.pk) for row in (second, third)]
    assert [(o.result, o.delay) for o in outcomes] == [("retry", 30)] * 2
    assert len(hooked.got) == 1  # one POST: the others were not sent
    for row in (first, second, third):
        row.refresh_from_db()
    assert [(r.attempts, r.last_error) for r in (first, second, third)] == [
        (1, "HTTP 500"), (1, delivery.BACKING_OFF), (1, delivery.BACKING_OFF)]
    assert Webhook.objects.get().backoff_until == first.next_attempt_at

    # All due again, the backoff over: the first to try takes the turn (here the second); its answer resumes the webhook.
    later = max(row.next_attempt_at for row in (first, second, third))
    assert delivery.attempt(second.pk, now=later).result == "sent"
    assert Webhook.objects.get().backoff_until is None
    assert [delivery.attempt(row.pk, now=later).result for row in (first, third)] == ["sent", "sent"]
    assert [got.delivery for got in hooked.got] == [str(first.event_id), str(second.event_id), str(first.event_id),
                                                    str(third.event_id)]


def two_rounds(listener: socket.socket, rows: list[Delivery], gate) -> tuple[list[str], int]:
    """Every delivery of ``rows`` attempted now, and again once all are due and the backoff of their ``gate`` (the
    Webhook or MailServer model, one row) is over: the results, and how many connections the listener, which never
    answers, took (counted on its backlog)."""
    now = timezone.now()
    first = [delivery.attempt(row.pk, now=now).result for row in rows]
    later = max(Delivery.objects.values_list("next_attempt_at", flat=True))  # all due, the backoff over
    assert later >= gate.objects.get().backoff_until
    again = [delivery.attempt(row.pk, now=later).result for row in rows]
    listener.setblocking(False)
    connections = 0
    with contextlib.suppress(BlockingIOError):
        while True:
            listener.accept()[0].close()
            connections += 1
    return first + again, connections


def test_a_webhook_that_never_answers_is_connected_to_once_per_turn(team, team_admin, settings):
    """The case the backoff is for: a receiver that takes the connection and never answers holds a notification
    thread for the whole timeout per attempt. Five deliveries due together cost one such wait, not five; the
    listener's backlog counts the connections made."""
    settings.SLIPWAY_WEBHOOK_TIMEOUT_SECONDS = 0.2
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        create_webhook(team_admin, team, f"http://127.0.0.1:{listener.getsockname()[1]}/hook", ["run_failed"])
        rows = [one_delivery(team, key=f"run_failed:run:{n}") for n in range(5)]
        results, connections = two_rounds(listener, rows, Webhook)
    assert results == ["retry"] * 10
    assert connections == 2  # one per turn: at first, and when the backoff was over
    errors = list(Delivery.objects.order_by("pk").values_list("last_error", flat=True))
    assert errors[0].startswith("ReadTimeout") and errors[1:] == [delivery.BACKING_OFF] * 4


def drip_an_answer(listener: socket.socket, stop: threading.Event, dripped: list[int], size: int) -> None:
    """A receiver that answers 200 at once, then sends its ``size``-byte body a byte every 50 ms (each byte well within
    the read timeout), counting the bytes it got out before the client went away."""
    conn, _ = listener.accept()
    with conn:
        request = b""
        while b"\r\n\r\n" not in request:
            request += conn.recv(65536)
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n".encode())
        try:
            while dripped[0] < size and not stop.wait(0.05):
                conn.sendall(b"x")
                dripped[0] += 1
        except OSError:  # the client closed the connection
            pass


def test_a_receiver_dripping_its_answers_body_holds_no_thread_past_its_status(team, team_admin, settings):
    """The answer is the status: the body is never read. Read to its end, a receiver sending a byte every few seconds
    (each read within the timeout, which is per read) held a notification thread for as long as it liked — past the
    claim's lease, after which another worker sent the delivery again — and one sending gigabytes filled its memory."""
    settings.SLIPWAY_WEBHOOK_TIMEOUT_SECONDS = 1
    stop, dripped, size = threading.Event(), [0], 200  # 10 s of body, read to its end
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        create_webhook(team_admin, team, f"http://127.0.0.1:{listener.getsockname()[1]}/hook", ["run_failed"])
        row = one_delivery(team)
        receiver = threading.Thread(target=drip_an_answer, args=(listener, stop, dripped, size))
        receiver.start()
        try:
            outcome = delivery.attempt(row.pk)
        finally:
            stop.set()
            receiver.join()
    assert outcome.result == "sent"
    row.refresh_from_db()
    assert (row.status, row.response_code, row.attempts) == (DeliveryStatus.SENT, 200, 1)
    assert dripped[0] < 20  # the client went away at the status, not after the body's 200 bytes


def test_a_target_has_at_most_its_sends_in_flight_and_the_others_wait_unattempted(team, hooked, settings):
    """Before a receiver's first failure is recorded nothing backs it off: the limit of sends in flight per target
    keeps a burst to one that went dead from taking every notification thread. Two sends in flight (as workers
    mid-POST leave them): a third delivery is not attempted, not counted, and tried again in a moment; a send in
    flight whose worker was killed stops counting when its claim runs out."""
    settings.SLIPWAY_NOTIFY_MAX_IN_FLIGHT = 2
    rows = [one_delivery(team, key=f"run_failed:run:{n}") for n in range(4)]
    now = timezone.now()
    flying = Delivery.objects.filter(pk__in=[rows[0].pk, rows[1].pk])
    flying.update(status=DeliveryStatus.SENDING, attempts=1, claimed_until=now + delivery.lease(),
                  sending_until=now + delivery.lease())
    outcome = delivery.attempt(rows[2].pk, now=now)
    assert (outcome.result, outcome.delay) == ("deferred", delivery.DEFER_SECONDS) and hooked.got == []
    with pytest.raises(Retry):  # the task publishes itself again, as for a failed attempt
        tasks.deliver(rows[3].pk)
    assert Delivery.objects.get(pk=rows[3].pk).attempts == 0 and hooked.got == []
    held = Delivery.objects.get(pk=rows[2].pk)
    assert (held.status, held.attempts, held.last_error, held.sending_until) == (DeliveryStatus.PENDING, 0, "", None)
    assert held.next_attempt_at == now + timedelta(seconds=delivery.DEFER_SECONDS)
    # One place frees (the first's worker records its answer): the third goes.
    Delivery.objects.filter(pk=rows[0].pk).update(status=DeliveryStatus.SENT, sending_until=None, claimed_until=None)
    assert delivery.attempt(rows[2].pk, now=held.next_attempt_at).result == "sent" and len(hooked.got) == 1
    assert Delivery.objects.get(pk=rows[2].pk).sending_until is None  # out of flight with its answer
    # The second's worker was killed mid-send: once its claim runs out it is neither in flight nor lost.
    expired = now + delivery.lease() + timedelta(seconds=1)
    assert delivery.attempt(rows[1].pk, now=expired).result == "sent" and len(hooked.got) == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_a_second_worker_finds_the_only_place_in_flight_taken(team, team_admin, hooked, settings):
    """Two workers, one place (the limit at 1): the second's delivery to the webhook, due while the first is inside
    its POST, is deferred; one to another target is not held back."""
    settings.SLIPWAY_NOTIFY_MAX_IN_FLIGHT = 1
    create_webhook(team_admin, team, hooked.url + "?second", ["run_succeeded"])  # the same receiver, another webhook
    one, two = (one_delivery(team, key=f"run_failed:run:{n}") for n in range(2))
    elsewhere = one_delivery(team, kind="run_succeeded", key="run_succeeded:run:9")

    def meanwhile():
        return delivery.attempt(two.pk).result, delivery.attempt(elsewhere.pk).result

    assert while_inside_a_post(hooked, one, meanwhile) == ("sent", ("deferred", "sent"))
    assert Delivery.objects.get(pk=two.pk).attempts == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_while_one_delivery_tries_a_failing_webhook_the_others_wait(team, hooked):
    """The turn is taken by a conditional update: a second worker, its delivery due while the first is still inside
    its POST, finds it taken and does not send."""
    one, other = (one_delivery(team, key=f"run_failed:run:{n}") for n in range(2))
    Webhook.objects.update(backoff_until=timezone.now() - timedelta(seconds=1))  # failing, its backoff over
    assert while_inside_a_post(hooked, one, lambda: delivery.attempt(other.pk).result) == ("sent", "retry")
    assert len(hooked.got) == 1
    assert Webhook.objects.get().backoff_until is None
    other.refresh_from_db()
    assert other.last_error == delivery.BACKING_OFF


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

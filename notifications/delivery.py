"""Delivering events: fan one out to its subscribers, then send each delivery, once, with retries.

Exactly once, as far as a network allows: an event fans out to one :class:`Delivery` per target
(unique per event and target, so a replayed fan-out adds none), and a delivery is *claimed*
(``pending`` → ``sending`` with a lease, a conditional update) before it is sent, so two
workers, or a task redelivered while the first still runs, never both send it. Once a send
succeeded (a 2xx, or the mail backend took the message) the row says ``sent`` and nothing
sends it again. A worker killed *during* a send leaves the claim to run out; the delivery is
then sent again with the same ``X-Slipway-Delivery`` id (the event's), which is how a receiver
tells a repeat of a request it may have already processed (docs/notifications.md).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import smtplib
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q, QuerySet
from django.utils import timezone

from notifications import vocabulary
from notifications.constants import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    MAX_BACKOFF_SECONDS,
    SIGNATURE_HEADER,
    STAFF_KINDS,
    TIMESTAMP_HEADER,
    Channel,
    DeliveryStatus,
)
from notifications.models import Delivery, EmailSubscription, Event, MailServer, Webhook
from notifications.targets import pinned_url, resolve
from workloads import crypto

logger = logging.getLogger(__name__)

User = get_user_model()


def body(event: Event) -> bytes:
    """The JSON a webhook gets: the same bytes on every attempt. ``text`` is what Slack shows."""
    return json.dumps({
        "id": event.pk, "type": event.event_kind, "team": event.team.slug, "ref": event.ref, "title": event.title,
        "text": event.text, "occurred_at": event.created_at.isoformat(), "details": event.details,
    }, sort_keys=True, separators=(",", ":")).encode()


def signature(secret: str, timestamp: str, raw_body: bytes) -> str:
    """``sha256=`` and the hex HMAC-SHA256, keyed with the webhook's secret, of ``<timestamp>.<body>``."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + raw_body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def webhook_secret(webhook: Webhook) -> str:
    return crypto.unseal(webhook.sealed_secret)["secret"]


def backoff(attempts: int) -> float:
    """Seconds before attempt ``attempts + 1``: the base, doubled after every failed attempt."""
    return min(settings.SLIPWAY_WEBHOOK_BACKOFF_SECONDS * 2 ** max(attempts - 1, 0), MAX_BACKOFF_SECONDS)


def lease() -> timedelta:
    """How long a claimed delivery is its worker's: longer than a send can take (connect, write, read), a webhook's
    or an e-mail's. (An SMTP exchange is more steps than three, each with ``EMAIL_TIMEOUT``: a server answering each
    just in time could outlast the lease, and the delivery then be sent again, as after a worker killed mid-send.)"""
    return timedelta(seconds=3 * max(settings.SLIPWAY_WEBHOOK_TIMEOUT_SECONDS, settings.EMAIL_TIMEOUT or 0) + 5)


def fan_out(key: str, now: datetime | None = None) -> list[int]:
    """Write the deliveries of event ``key`` (once) and return the ids of those still to send.

    Targets: the team's webhooks listing the event's kind, and the team's members subscribed by
    e-mail to it (members now: someone who left the team is not told) — and, for the kinds about
    someone's own work stopped under them (:func:`notifications.vocabulary.owner_kinds`), its owner,
    subscribed or not; platform staff alone for the kinds that are theirs
    (:data:`~notifications.constants.STAFF_KINDS`). None when the event does not exist (its
    transaction rolled back).
    """
    now = now or timezone.now()
    with transaction.atomic():
        event = Event.objects.select_for_update().select_related("team").filter(key=key).first()
        if event is None:
            return []
        if event.fanned_out_at is None:
            rows = _staff_rows(event, now) if event.event_kind in STAFF_KINDS else _team_rows(event, now)
            Delivery.objects.bulk_create(rows, ignore_conflicts=True)
            Event.objects.filter(pk=event.pk).update(fanned_out_at=now)
        return list(event.deliveries.filter(status=DeliveryStatus.PENDING).values_list("pk", flat=True))


def _team_rows(event: Event, now: datetime) -> list[Delivery]:
    """The deliveries of a team's event: its webhooks listing the kind, its members subscribed to it."""
    rows = [Delivery(event=event, team=event.team, channel=Channel.WEBHOOK, webhook=hook,
                     target_key=f"webhook:{hook.pk}", target=hook.url, next_attempt_at=now)
            for hook in Webhook.objects.filter(team=event.team) if event.event_kind in hook.event_kinds]
    subscribers = (EmailSubscription.objects.filter(team=event.team, event_kind=event.event_kind, user__is_active=True,
                                                   user__memberships__team=event.team)
                   .exclude(user__email="").select_related("user"))
    users = {sub.user_id: sub.user for sub in subscribers}
    if event.event_kind in vocabulary.owner_kinds() and event.details.get("owner"):
        # The owner is told of their own work stopped under them, subscribed or not (still a member).
        owner = (User.objects.filter(pk=event.details["owner"], is_active=True, memberships__team=event.team)
                 .exclude(email="").first())
        if owner is not None:
            users.setdefault(owner.pk, owner)
    return rows + [Delivery(event=event, team=event.team, channel=Channel.EMAIL, user=user,
                            target_key=f"user:{user.pk}", target=user.email, next_attempt_at=now)
                   for user in users.values()]


def _staff_rows(event: Event, now: datetime) -> list[Delivery]:
    """The deliveries of an event for platform staff (:data:`STAFF_KINDS`): an e-mail to every active
    staff account with an address. The team's webhooks and subscribers get none."""
    staff = User.objects.filter(is_active=True, is_staff=True).exclude(email="").order_by("pk")
    return [Delivery(event=event, team=event.team, channel=Channel.EMAIL, user=user, target_key=f"user:{user.pk}",
                     target=user.email, next_attempt_at=now) for user in staff]


@dataclass(frozen=True)
class Outcome:
    """What one attempt did: ``sent``, ``retry`` (after ``delay`` seconds), ``failed`` (for good), ``skipped``, or
    ``deferred`` (not attempted: its target had all the sends in flight it may; again after ``delay`` seconds)."""

    result: str
    delay: float = 0.0


def _claim(pk: int, now: datetime) -> bool:
    """Take delivery ``pk`` for one attempt: pending and due, or sending with a lease run out — while it has attempts
    left (a claim counts one: its attempt may have been sent before its worker stopped)."""
    due = Q(status=DeliveryStatus.PENDING, next_attempt_at__lte=now) | Q(status=DeliveryStatus.SENDING,
                                                                         claimed_until__lt=now)
    return bool(Delivery.objects.filter(due, pk=pk, attempts__lt=settings.SLIPWAY_WEBHOOK_MAX_ATTEMPTS).update(
        status=DeliveryStatus.SENDING, attempts=F("attempts") + 1, claimed_until=now + lease()))


#: The words of a delivery whose last attempt never recorded what happened.
UNFINISHED = "its last attempt did not finish (its worker stopped, or an error stopped it)"


def _give_up(pk: int, now: datetime) -> bool:
    """Fail delivery ``pk`` for good when its last attempt's lease ran out unrecorded; whether it did.

    A worker killed mid-send, or an error escaping an attempt (a secret that no key opens), leaves the delivery
    ``sending``; the sweep finds it when its lease runs out and it is tried again. Every try counts, so the last one
    ends it here: claimed again without end, it was re-sent on every sweep (an error after the send) or counted past
    its ``SLIPWAY_WEBHOOK_MAX_ATTEMPTS`` for ever."""
    return bool(Delivery.objects.filter(
        pk=pk, status=DeliveryStatus.SENDING, claimed_until__lt=now, attempts__gte=settings.SLIPWAY_WEBHOOK_MAX_ATTEMPTS,
    ).update(status=DeliveryStatus.FAILED, last_error=UNFINISHED, claimed_until=None, sending_until=None))


def _send_webhook(delivery: Delivery) -> tuple[int | None, str]:
    """POST the event to the webhook: (status code, error words; "" when it was a 2xx)."""
    webhook = delivery.webhook
    if webhook is None:
        return None, "the webhook was deleted"
    target = resolve(webhook.url)
    if target.problem:
        return None, f"not sent: {target.problem}"
    raw = body(delivery.event)
    timestamp = str(int(time.time()))
    headers = {"Content-Type": "application/json", "User-Agent": "Slipway-Webhook/1",
               SIGNATURE_HEADER: signature(webhook_secret(webhook), timestamp, raw), TIMESTAMP_HEADER: timestamp,
               DELIVERY_HEADER: str(delivery.event_id), EVENT_HEADER: delivery.event.event_kind}
    try:
        # To the address judged, not the name again (DNS rebinding); Host and the TLS server name
        # (SNI, and the certificate's check) stay the webhook's host. A redirect is never followed.
        # The status is the answer: the body is never read (closed unread). The timeout is per read, so a
        # receiver sending its body a byte at a time held the thread for as long as it liked, past the claim's
        # lease (and the delivery was sent again), and one sending gigabytes filled the worker's memory.
        with httpx.Client(timeout=settings.SLIPWAY_WEBHOOK_TIMEOUT_SECONDS, follow_redirects=False) as client:
            request = client.build_request("POST", pinned_url(webhook.url, target), content=raw,
                                           headers={**headers, "Host": urlsplit(webhook.url).netloc},
                                           extensions={"sni_hostname": target.host})
            response = client.send(request, stream=True)
            response.close()
    except httpx.HTTPError as exc:
        return None, f"{exc.__class__.__name__}: {exc}"
    if 200 <= response.status_code < 300:
        return response.status_code, ""
    return response.status_code, f"HTTP {response.status_code}"


def _send_email(delivery: Delivery) -> tuple[int | None, str, bool]:
    """Mail the event: (None, error words, whether a failure is the server's). A refused recipient is the address's
    (the server answered); anything else — refused or timed-out connections, a server hanging up, a refused sender
    or login — is the server's, or its settings', and would fail every e-mail alike."""
    event = delivery.event
    # The subject is a header, on one line: a title carries names people typed (a reservation's may hold a line
    # break), and Django refuses a header with one (BadHeaderError) — taken below for the server's failure, it held
    # back every e-mail.
    subject = " ".join(f"[Slipway] {event.title}".split())
    try:
        send_mail(subject, f"{event.text}\n", None, [delivery.target])
    except Exception as exc:  # SMTP and other backends raise many classes: retried, the row says which class
        # The server's own words (an SMTP reply to the platform's login or sender, its host) are the operators',
        # logged here; the row is the team's delivery log and says what kind of failure it was.
        logger.warning("e-mail delivery %s failed: %s: %s", delivery.pk, exc.__class__.__name__, exc)
        return None, mail_failure(exc), not isinstance(exc, smtplib.SMTPRecipientsRefused)
    return None, "", False


#: What a team admin reads of a failed e-mail (the Team page's delivery log), by the class of its error, the first
#: that matches; the order puts each class before its bases (the SMTP errors are OSErrors). A timeout comes first and
#: is looked for in the error's causes too: smtplib raises a server that never greeted as SMTPServerDisconnected
#: ("Connection unexpectedly closed: timed out") from the socket's TimeoutError.
MAIL_FAILURES: tuple[tuple[type[BaseException], str], ...] = (
    (TimeoutError, "the mail server did not answer in time"),
    (smtplib.SMTPAuthenticationError, "the mail server refused the login"),
    (smtplib.SMTPSenderRefused, "the mail server refused the sender"),
    (smtplib.SMTPRecipientsRefused, "the mail server refused the recipient's address"),
    (smtplib.SMTPDataError, "the mail server refused the message"),
    (smtplib.SMTPServerDisconnected, "the mail server hung up"),
    (smtplib.SMTPConnectError, "the mail server refused the connection"),
    (smtplib.SMTPException, "the mail server refused the e-mail"),
    (OSError, "the mail server did not answer"),
)


def mail_failure(exc: BaseException) -> str:
    """The words of a failed e-mail for the team: its class of failure, never the server's reply (logged instead)."""
    chain = []
    while exc is not None and exc not in chain:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return next((words for kind, words in MAIL_FAILURES if any(isinstance(error, kind) for error in chain)),
                "the e-mail could not be sent (the platform's log has why)")


def mail_server() -> MailServer:
    """The row of the mail server the settings name now: a change of backend, host or port starts with no backoff."""
    address = f"{settings.EMAIL_BACKEND} {settings.EMAIL_HOST}:{settings.EMAIL_PORT}"
    return MailServer.objects.get_or_create(address=address)[0]


@dataclass(frozen=True)
class Gate:
    """What a delivery goes through — its webhook, or the mail server: the row keeping the backoff (a queryset of that
    one row) with the backoff it had when read, which deliveries go through it, and the words of an attempt held back."""

    rows: QuerySet
    backoff_until: datetime | None
    through: Q
    backing_off: str


def _gate(delivery: Delivery) -> Gate | None:
    """The gate of an attempt at ``delivery`` (None for a deleted webhook: nothing to send to)."""
    if delivery.channel == Channel.EMAIL:
        server = mail_server()
        return Gate(MailServer.objects.filter(pk=server.pk), server.backoff_until, Q(channel=Channel.EMAIL),
                    MAIL_BACKING_OFF)
    if delivery.webhook is None:
        return None
    return Gate(Webhook.objects.filter(pk=delivery.webhook_id), delivery.webhook.backoff_until,
                Q(webhook_id=delivery.webhook_id), BACKING_OFF)


#: Seconds a delivery held back by the limit of sends in flight waits before it tries again (not an attempt). Short,
#: since a target that answers frees its places in well under a second (30 deliveries to one such webhook: all sent
#: in 4.5 s, against 2.0 s without the limit; docs/notifications.md).
DEFER_SECONDS = 1


def _enter(gate: Gate, pk: int, now: datetime) -> bool:
    """Whether delivery ``pk`` may start its send: fewer than ``SLIPWAY_NOTIFY_MAX_IN_FLIGHT`` sends through its gate
    are in flight, and then it is one of them (its ``sending_until``) until it records what happened.

    A backoff starts with a failure; a receiver that goes dead is not known to be before its first send times out, and
    until then every delivery to it would start a send and hold a notification thread for the whole timeout — the
    pool's threads, in a burst (an event to thirty subscribers through a mail server that stalls). The limit bounds
    that to a few threads per target. The gate's row is locked while counting, so two workers never both take the
    last place (on SQLite the transaction is the database's one writer)."""
    with transaction.atomic():
        list(gate.rows.select_for_update())
        if Delivery.objects.filter(gate.through, sending_until__gt=now).count() >= settings.SLIPWAY_NOTIFY_MAX_IN_FLIGHT:
            return False
        Delivery.objects.filter(pk=pk).update(sending_until=now + lease())
    return True


def _take_turn(gate: Gate | None, now: datetime) -> bool:
    """Whether a delivery through ``gate`` (a webhook, or the mail server) may be sent now.

    Always while it answers (no backoff). While it is failing, each attempt would likely fail the same way, and one
    to a receiver that never answers holds a notification thread for the whole timeout: only once its backoff is over,
    and then one delivery at a time — the one whose conditional update takes the turn, for a lease, from the others
    (the circuit breaker of webhook services, half-open)."""
    if gate is None or gate.backoff_until is None:
        return True
    return bool(gate.rows.filter(backoff_until__lte=now).update(backoff_until=now + lease()))


def _note_answer(gate: QuerySet, failed: bool, done: datetime, attempts: int) -> None:
    """After a send through ``gate``: an answer ends its backoff; a failure sets it to this delivery's next attempt."""
    if not failed:
        gate.filter(backoff_until__isnull=False).update(backoff_until=None)
    else:
        gate.update(backoff_until=done + timedelta(seconds=backoff(attempts)))


#: The words of an attempt not sent because another delivery is trying the failing webhook (or will, at its time).
BACKING_OFF = "not sent: the webhook's last attempt failed, and it is tried by one delivery at a time until it answers"
#: The same for e-mail, when the mail server failed.
MAIL_BACKING_OFF = ("not sent: the mail server's last attempt failed, and it is tried by one e-mail at a time until it "
                    "answers")


def attempt(pk: int, now: datetime | None = None) -> Outcome:
    """One attempt at delivery ``pk`` (steps below); safe to call twice, and from two workers at once."""
    now = now or timezone.now()
    # 1. Claim it, or leave it to whoever has it (or to its next attempt's time).
    if not _claim(pk, now):
        return Outcome("failed" if _give_up(pk, now) else "skipped")
    delivery = Delivery.objects.select_related("event__team", "webhook").get(pk=pk)
    # 2. Send, outside any transaction: the claim is what keeps a second worker off it. Through a failing webhook or
    #    mail server only when it is this delivery's turn (_take_turn): otherwise the attempt counts as a failed one,
    #    unsent, and the delivery keeps its own backoff and last attempt, as if it had been sent and failed like the
    #    one before.
    #    At most SLIPWAY_NOTIFY_MAX_IN_FLIGHT sends through one gate at once (_enter): one held back is not attempted,
    #    and is tried again in a moment.
    gate = _gate(delivery)
    if gate is not None and not _enter(gate, pk, now):
        Delivery.objects.filter(pk=pk, status=DeliveryStatus.SENDING, attempts=delivery.attempts).update(
            status=DeliveryStatus.PENDING, attempts=F("attempts") - 1, claimed_until=None,
            next_attempt_at=now + timedelta(seconds=DEFER_SECONDS))
        return Outcome("deferred", DEFER_SECONDS)
    tried = _take_turn(gate, now)
    if not tried:
        code, error, theirs = None, gate.backing_off, False
    elif delivery.channel == Channel.EMAIL:
        code, error, theirs = _send_email(delivery)
    else:
        code, error = _send_webhook(delivery)
        theirs = bool(error)
    done = timezone.now()
    if tried and gate is not None:
        _note_answer(gate.rows, theirs, done, delivery.attempts)
    mine = Delivery.objects.filter(pk=pk, status=DeliveryStatus.SENDING, attempts=delivery.attempts)
    # 3. Record what happened: sent, or pending again after a backoff, or failed after the last attempt.
    if not error:
        mine.update(status=DeliveryStatus.SENT, sent_at=done, response_code=code, last_error="", claimed_until=None,
                    sending_until=None)
        return Outcome("sent")
    gone = delivery.channel == Channel.WEBHOOK and delivery.webhook_id is None
    if gone or delivery.attempts >= settings.SLIPWAY_WEBHOOK_MAX_ATTEMPTS:
        mine.update(status=DeliveryStatus.FAILED, response_code=code, last_error=error[:300], claimed_until=None,
                    sending_until=None)
        return Outcome("failed")
    delay = backoff(delivery.attempts)
    mine.update(status=DeliveryStatus.PENDING, response_code=code, last_error=error[:300], claimed_until=None,
                sending_until=None, next_attempt_at=done + timedelta(seconds=delay))
    return Outcome("retry", delay)


def overdue(now: datetime) -> tuple[list[str], list[int]]:
    """What the sweep re-drives: events never fanned out and deliveries due but not sent.

    A fan-out or a delivery task lost with the broker, or a worker killed mid-send (its claim
    ran out), is found here; allowing one sweep period for the normal path to go first.
    """
    grace = now - timedelta(seconds=settings.SLIPWAY_NOTIFY_SWEEP_SECONDS)
    events = list(Event.objects.filter(fanned_out_at__isnull=True, created_at__lte=grace)
                  .values_list("key", flat=True)[:500])
    deliveries = list(Delivery.objects.filter(
        Q(status=DeliveryStatus.PENDING, next_attempt_at__lte=grace)
        | Q(status=DeliveryStatus.SENDING, claimed_until__lt=now)).values_list("pk", flat=True)[:500])
    return events, deliveries


#: Events deleted by one :func:`prune` call at most (a short transaction; the next call takes the rest).
PRUNE_BATCH = 5000


def prune(now: datetime, batch: int = PRUNE_BATCH) -> int:
    """Delete events older than ``SLIPWAY_NOTIFY_KEEP_DAYS`` (0: keep them all), with their deliveries.

    Only events that are done: fanned out, and no delivery still to be sent or being sent — an old
    event a broker outage held back is delivered first. The delivery log shows the latest 25, so it
    loses nothing a team looks at. At most ``batch`` events a call; returns how many went.
    """
    days = settings.SLIPWAY_NOTIFY_KEEP_DAYS
    if days <= 0:
        return 0
    busy = Delivery.objects.filter(event=OuterRef("pk"), status__in=(DeliveryStatus.PENDING, DeliveryStatus.SENDING))
    done = (Event.objects.filter(created_at__lt=now - timedelta(days=days), fanned_out_at__isnull=False)
            .exclude(Exists(busy)).values_list("pk", flat=True)[:batch])
    _deleted, per_model = Event.objects.filter(pk__in=list(done)).delete()
    return per_model.get(Event._meta.label, 0)

"""Events, who subscribes to them, and the delivery of each event to each subscriber.

An :class:`Event` is written once per thing that happened, under a unique ``key`` derived from
the happening (a run's end, a preemption row, a budget month), in the transaction that made it
happen; a :class:`Delivery` is written once per (event, target). Both keys make every step
replay-safe: a second write of either is a no-op.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from notifications import vocabulary
from notifications.constants import MAX_URL_LENGTH, Channel, DeliveryStatus


class Event(models.Model):
    """One thing that happened to a team, as subscribers are told about it."""

    key = models.CharField(max_length=200, unique=True, help_text="What happened, once: e.g. run_failed:run-42.")
    event_kind = models.CharField(max_length=32, help_text="What happened (notifications.vocabulary.event_kinds).")
    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="+")
    ref = models.CharField(max_length=100, blank=True, help_text="The workload it is about, if any.")
    title = models.CharField(max_length=200)
    text = models.TextField(help_text="One line for people (the e-mail body, the webhook's Slack-compatible text).")
    details = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    #: When its deliveries were written (None: not yet; the sweep task catches a lost fan-out).
    fanned_out_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["fanned_out_at", "created_at"], name="notif_event_fanout_idx")]

    def __str__(self) -> str:
        return self.key


class EmailSubscription(models.Model):
    """A user's wish to get e-mail about one kind of event of one team."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="+")
    event_kind = models.CharField(max_length=32, help_text="What it is about (notifications.vocabulary.event_kinds).")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "team", "event_kind"], name="uniq_email_subscription")]

    def __str__(self) -> str:
        return f"{self.user_id} {self.team_id} {self.event_kind}"


class Webhook(models.Model):
    """A team's URL that gets a signed JSON POST for the kinds of event it lists."""

    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="+")
    url = models.URLField(max_length=MAX_URL_LENGTH)
    event_kinds = models.JSONField(default=list, help_text="The event kinds it is sent (EventKind values).")
    #: The signing secret, encrypted at rest (workloads.crypto); shown once, when created.
    sealed_secret = models.TextField()
    secret_prefix = models.CharField(max_length=8, help_text="The secret's first characters, to tell webhooks apart.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    #: Set while the webhook is failing (its last attempt failed): no delivery to it is sent before this time, and
    #: then one at a time (notifications.delivery.attempt). None while it answers.
    backoff_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "pk"]

    def __str__(self) -> str:
        return self.url

    def kind_labels(self) -> list[str]:
        labels = vocabulary.event_kinds()
        return [labels[kind] for kind in self.event_kinds if kind in labels]


class MailServer(models.Model):
    """The mail server e-mails go through, as the settings name it now (its backend, host and port), and its backoff.

    One row per address, made by the first e-mail sent through it: every e-mail delivery goes to the same server, so
    one that is down or never answers is tried, as a failing webhook is, by one delivery at a time until it answers
    (notifications.delivery.attempt)."""

    address = models.CharField(max_length=300, unique=True)
    #: As a webhook's: set while the server is failing (its last attempt failed, not for a refused recipient), None
    #: while it answers.
    backoff_until = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.address


class Delivery(models.Model):
    """One event to one target (a webhook or a subscriber's address): the delivery log's row."""

    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="deliveries")
    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="+")
    channel = models.CharField(max_length=16, choices=Channel.choices)
    webhook = models.ForeignKey(Webhook, null=True, blank=True, on_delete=models.SET_NULL, related_name="deliveries")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="+")
    #: "webhook:<pk>" or "user:<pk>": with the event, unique, so an event reaches a target once.
    target_key = models.CharField(max_length=40)
    #: The URL or e-mail address as it was when the event fanned out (kept if the target goes).
    target = models.CharField(max_length=MAX_URL_LENGTH)
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    claimed_until = models.DateTimeField(null=True, blank=True)
    #: Set while its send is in flight, to the claim's end at most: what the limit of sends in flight to one target
    #: counts (notifications.delivery.attempt). A worker killed mid-send leaves it to run out.
    sending_until = models.DateTimeField(null=True, blank=True)
    response_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "delivery"
        verbose_name_plural = "deliveries"
        constraints = [models.UniqueConstraint(fields=["event", "target_key"], name="uniq_delivery_target")]
        indexes = [models.Index(fields=["team", "-created_at"], name="notif_delivery_log_idx"),
                   models.Index(fields=["status", "next_attempt_at"], name="notif_delivery_due_idx"),
                   models.Index(fields=["sending_until"], condition=models.Q(sending_until__isnull=False),
                                name="notif_delivery_in_flight_idx")]
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.event.key} → {self.target} ({self.status})"

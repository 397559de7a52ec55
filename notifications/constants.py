"""The vocabulary of notifications: kinds of event, channels, delivery states, headers, bounds.

An event kind (docs/glossary.md "event kind") is what a notification is about; it is neither a
workload kind nor a cluster's Kubernetes event.
"""

from __future__ import annotations

from django.db import models


class EventKind(models.TextChoices):
    """What a subscription is to. One event of one kind is delivered once to each subscriber.

    Only the event kinds about no one workload kind belong here. A workload kind declares its own
    (``Announces.events``), and only there. The vocabulary is
    :func:`notifications.vocabulary.event_kinds`.
    """

    PREEMPTED = "preempted", "Work preempted"
    BUDGET_ALERT = "budget_alert", "Budget alert"
    QUEUE_WAITING = "queue_waiting", "Waiting for quota too long"
    # Alerts on a workload's GPUs (workloads.telemetry.alert_rules): one event per episode.
    GPU_IDLE = "gpu_idle", "GPUs idle (alert)"
    GPU_MEMORY = "gpu_memory", "GPU memory nearly full (OOM risk)"
    GPU_HOT = "gpu_hot", "GPU too hot (platform staff)"
    # A team's reservations (docs/reservations.md): a booking made, approved, declined or cancelled; a window
    # about to start (15 minutes before) and started.
    RESERVATION = "reservation", "Reservation booked, approved, declined or cancelled"
    RESERVATION_WINDOW = "reservation_window", "Reservation windows: starting, still unused 30 minutes in, ended"
    # A team's sweeps (docs/sweeps.md): one ended, with its best trial and the money spent and saved by pruning.
    SWEEP_FINISHED = "sweep_finished", "Sweep finished: its best trial and its money"


#: Kinds told to platform staff, never to the team: every active staff account with an e-mail address
#: gets them (no subscription, no team webhook). A hot GPU is the hardware's problem, not the work's.
STAFF_KINDS = frozenset({EventKind.GPU_HOT})


class Channel(models.TextChoices):
    EMAIL = "email", "E-mail"
    WEBHOOK = "webhook", "Webhook"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"  #: not sent yet, or to be tried again at ``next_attempt_at``
    SENDING = "sending", "Sending"  #: a worker holds it until ``claimed_until``
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed"  #: every attempt failed


#: Headers of a webhook request (docs/notifications.md says how to verify them).
SIGNATURE_HEADER = "X-Slipway-Signature"
TIMESTAMP_HEADER = "X-Slipway-Timestamp"
DELIVERY_HEADER = "X-Slipway-Delivery"  #: the event's id: the same on every retry, for receivers to dedupe on
EVENT_HEADER = "X-Slipway-Event"

MAX_WEBHOOKS_PER_TEAM = 10
MAX_URL_LENGTH = 500
#: Deliveries shown in a team's log.
DELIVERY_LOG_SIZE = 25
#: Longest backoff between two attempts, whatever the base.
MAX_BACKOFF_SECONDS = 3600

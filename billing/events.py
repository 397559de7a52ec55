"""Signals the billing app sends, for the apps above it to act on (docs/architecture.md "Upward: signals").

``budget_alert`` is sent by :func:`billing.services.enforce_budgets` *inside* the transaction that audits a
team's first crossing of its budget's alert threshold in a month, with ``sender=AuditEvent,
audit_event=<that event>``: the audit row is what says "alerted already", so what a receiver writes
(the alert's notification) commits with it, once.
"""

from django.dispatch import Signal

budget_alert = Signal()

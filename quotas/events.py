"""Signals the quotas app sends, for the apps above it to act on (docs/architecture.md "Upward: signals").

``workload_admitted`` is sent by :func:`quotas.admission.admit_waiting` for every queued
workload it admits, *inside* the admitting transaction, with ``sender=None, ref=..., team=...``.
The owner of the workload (its kind) moves its row to "admitted" in the handler, so
the state change and the hold commit (or roll back) together. quotas never imports
those apps: they connect to this signal instead.

``budget_alert`` is sent by :func:`quotas.services.enforce_budgets` *inside* the transaction that audits a
team's first crossing of its budget's alert threshold in a month, with ``sender=AuditEvent,
audit_event=<that event>``: the audit row is what says "alerted already", so what a receiver writes
(the alert's notification) commits with it, once.
"""

from django.dispatch import Signal

workload_admitted = Signal()
budget_alert = Signal()

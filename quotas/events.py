"""Signals the quotas app sends, for the apps above it to act on (docs/architecture.md "Upward: signals").

``workload_admitted`` is sent by :func:`quotas.admission.admit_waiting` for every queued
workload it admits, *inside* the admitting transaction, with ``sender=None, ref=..., team=...``.
The owner of the workload (its kind) moves its row to "admitted" in the handler, so
the state change and the hold commit (or roll back) together. quotas never imports
those apps: they connect to this signal instead.

Billing's signal (``budget_alert``) is :mod:`billing.events`'s.
"""

from django.dispatch import Signal

workload_admitted = Signal()

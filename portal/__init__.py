"""Slipway's project package: settings, the Celery app, URLs, WSGI, error handlers — wiring only.

It is not a Django app: teams and membership live in ``teams`` (whose app label is still
"portal", so existing databases and admin URLs carry on), shared plumbing in ``core``, the
pages that span kinds in ``front``.
"""

from portal.celery import app as celery_app

__all__ = ["celery_app"]

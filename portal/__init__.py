"""Slipway's project package: settings, Celery app, URLs, teams, membership, API tokens, audit."""

from portal.celery import app as celery_app

__all__ = ["celery_app"]

"""Kubernetes probes: ``/healthz`` (the process answers) and ``/readyz`` (it can do work).

Readiness needs the database and the Celery broker; when either is unreachable the pod
answers 503 so the Service stops sending it traffic, while liveness stays green (restarting
a web pod does not bring a database back).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from kombu import Connection

logger = logging.getLogger(__name__)


def check_database() -> str | None:
    """None when the database answers, else the error in words."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # any driver error means "not ready"
        return f"database unreachable: {exc.__class__.__name__}"
    return None


def check_broker() -> str | None:
    """None when the Celery broker accepts a connection, else the error in words."""
    try:
        with Connection(settings.CELERY_BROKER_URL, connect_timeout=2,
                        transport_options=settings.CELERY_BROKER_TRANSPORT_OPTIONS) as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
            if conn.transport_cls == "redis" or settings.CELERY_BROKER_URL.startswith("redis"):
                conn.default_channel.client.ping()
    except Exception as exc:  # kombu raises many classes for "cannot connect"
        return f"broker unreachable: {exc.__class__.__name__}"
    return None


@never_cache
@require_GET
def healthz(request):
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
def readyz(request):
    problems = [p for p in (check_database(), check_broker()) if p]
    if problems:
        logger.warning("not ready: %s", "; ".join(problems))
        return JsonResponse({"status": "unavailable", "problems": problems}, status=503)
    return JsonResponse({"status": "ok"})

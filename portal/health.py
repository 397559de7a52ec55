"""Kubernetes probes: ``/healthz`` (the process answers) and ``/readyz`` (it can do work).

Readiness needs the database and the Celery broker; when either is unreachable the pod
answers 503 so the Service stops sending it traffic, while liveness stays green (restarting
a web pod does not bring a database back).

:class:`ProbeMiddleware` answers both paths before the rest of the middleware stack: the
kubelet (and Docker's HEALTHCHECK) send the pod IP or ``localhost`` as Host and use plain
HTTP, so ``ALLOWED_HOSTS`` and ``SECURE_SSL_REDIRECT`` would otherwise turn every probe
into a 400 or a 301 and the pod would never become ready. Prometheus scrapes ``/metrics``
(:mod:`portal.metrics`) the same way, so it is answered here too.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from kombu import Connection

from portal.metrics import metrics

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
    if settings.CELERY_BROKER_URL.startswith("filesystem://"):
        # The filesystem transport "connects" to anything; what matters is that the
        # shared queue folder exists and this process may write messages into it.
        folder = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("data_folder_in", "")
        if not (folder and os.path.isdir(folder) and os.access(folder, os.W_OK)):
            return "broker unreachable: queue folder missing or not writable"
    return None


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    problems = [p for p in (check_database(), check_broker()) if p]
    if problems:
        logger.warning("not ready: %s", "; ".join(problems))
        return JsonResponse({"status": "unavailable", "problems": problems}, status=503)
    return JsonResponse({"status": "ok"})


class ProbeMiddleware:
    """Serve ``/healthz``, ``/readyz`` and ``/metrics`` ahead of host validation, TLS redirect and sessions."""

    probes: dict[str, Callable[[HttpRequest], HttpResponse]] = {"/healthz": healthz, "/readyz": readyz,
                                                                "/metrics": metrics}

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        probe = self.probes.get(request.path_info)
        if probe is not None:
            return probe(request)
        return self.get_response(request)

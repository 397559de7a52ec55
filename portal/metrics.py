"""``/metrics``: Slipway's figures for Prometheus (README "Monitoring Slipway").

Served by :class:`portal.health.ProbeMiddleware` ahead of host validation and the TLS redirect,
as the probes are: Prometheus scrapes each pod by its IP, over plain HTTP. Who may read it is
:func:`core.metrics.scrape_allowed`'s rule (a bearer token, or an allowed network); anyone else
gets a 403. Never cached; not part of the REST API, so not in its OpenAPI schema.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from core.metrics import CONTENT_TYPE, exposition, scrape_allowed
from quotas.metrics import QuotaCollector


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    if not scrape_allowed(request.META.get("REMOTE_ADDR"), request.META.get("HTTP_AUTHORIZATION")):
        return HttpResponse("forbidden\n", status=403, content_type="text/plain")
    return HttpResponse(exposition([QuotaCollector()]), content_type=CONTENT_TYPE)

"""``GET /api/v1/``: the API root, a link to every top-level collection.

Someone who starts at the base path (the README names it, ``curl …/api/v1/``) finds where to go
instead of a 404, as DRF's browsable root would show it. The links are the router's own list
routes (:func:`collections`), so a viewset registered in ``portal/api_urls.py`` appears here
without a second list to keep; the few collections outside the router are named there too.

Credentials as everywhere in the API (docs/api.md, "Auth and errors"): without them a 401. The
staff-only collections (cohorts, clusters) are listed for everyone, as the public schema lists
them; they answer 404 to anyone but platform staff.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse
from rest_framework.routers import BaseRouter
from rest_framework.views import APIView


def collections(router: BaseRouter, **more: str) -> dict[str, str]:
    """``{prefix: URL name of its list route}`` for each registered prefix that has one, then ``more``.

    A prefix registered twice (``teams``: the list, and one team's sharing settings) keeps the
    registration that lists.
    """
    found: dict[str, str] = {}
    for prefix, viewset, basename in router.registry:
        if hasattr(viewset, "list"):
            found.setdefault(prefix, f"{basename}-list")
    return {**found, **more}


def api_root_view(links: dict[str, str]):
    """The view answering ``links`` (name → URL name) as absolute URLs, its OpenAPI answer naming each one
    (the schema test and the API fuzzer hold the answer to it)."""
    answer = inline_serializer("ApiRoot", {name: serializers.URLField() for name in links})

    class ApiRootView(APIView):
        @extend_schema(operation_id="api_root", responses=answer, summary="Links to the API's collections")
        def get(self, request: Request) -> Response:
            """The absolute URL of every top-level collection, by name."""
            return Response({name: reverse(route, request=request) for name, route in links.items()})

    return ApiRootView.as_view()

"""``GET /api/v1/``: the API root links to every top-level collection (docs/api.md, its opening)."""

from __future__ import annotations

import pytest
from rest_framework import mixins, viewsets
from rest_framework.routers import DefaultRouter
from rest_framework.test import APIClient

from portal.api_root import collections

pytestmark = pytest.mark.django_db

COLLECTIONS = {"teams", "cohorts", "clusters", "flavors", "runs", "endpoints", "workspaces", "reservations", "sweeps", "usage"}


def test_it_links_a_signed_in_caller_to_every_collection(api):
    response = api.get("/api/v1/")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    links = response.json()
    assert set(links) == COLLECTIONS | {"schema", "docs"}
    assert links["runs"] == "http://testserver/api/v1/runs/" and links["schema"] == "http://testserver/api/schema/"


def test_every_link_answers(api_client_for, member, staff, quota):
    """A member reaches every collection but the staff-only ones, which answer 404 to them and 200 to staff."""
    links = api_client_for(member).get("/api/v1/").json()
    as_member, as_staff = api_client_for(member), api_client_for(staff)
    for name, url in links.items():
        status = as_member.get(url).status_code
        if name in ("cohorts", "clusters"):
            assert status == 404, name
            assert as_staff.get(url).status_code == 200, name
        else:
            assert status == 200, name


def test_a_browser_session_gets_it_too(client, member):
    client.force_login(member)
    assert client.get("/api/v1/").json()["endpoints"] == "http://testserver/api/v1/endpoints/"


def test_without_credentials_it_is_a_401_like_every_other_endpoint():
    response = APIClient().get("/api/v1/")
    assert response.status_code == 401 and response["WWW-Authenticate"] == "Bearer"
    assert response.json() == {"errors": {"detail": ["Authentication credentials were not provided."]}}
    assert APIClient().get("/api/v1/runs/").status_code == 401


def test_it_only_reads(api):
    assert api.post("/api/v1/", {}, format="json").status_code == 405


class Lists(mixins.ListModelMixin, viewsets.GenericViewSet):
    pass


class DetailOnly(viewsets.GenericViewSet):
    def retrieve(self, request, pk=None):
        raise NotImplementedError


def test_a_registered_collection_is_linked_without_a_second_list_to_keep():
    router = DefaultRouter()
    router.register("widgets", Lists, basename="widget")
    router.register("widgets", DetailOnly, basename="widget-extra")  # a prefix registered twice keeps the list
    router.register("gadgets", DetailOnly, basename="gadget")  # nothing to list: not linked
    assert collections(router, usage="usage-report") == {"widgets": "widget-list", "usage": "usage-report"}

"""The REST API's frame: ``/api/v1/teams/``, pagination, the OpenAPI schema and docs, the error shape."""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from django.urls import include, path
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.test import APIClient

from core.exceptions import Conflict, api_exception_handler
from teams.models import Membership, Role
from teams.permissions import get_for_user
from tests.factories import add_member, make_team, make_user

TEAMS_URL = "/api/v1/teams/"


# -- GET /api/v1/teams/ -------------------------------------------------------------------


def test_it_lists_only_the_callers_teams_with_their_role(api_client_for, team, other_team, member, viewer, outsider):
    add_member(other_team, member, Role.VIEWER)
    make_team("hidden", "Hidden")  # nobody's team: never listed
    response = api_client_for(member).get(TEAMS_URL)
    assert response.status_code == 200
    assert response.json()["results"] == [
        {"slug": "ml-research", "name": "ML Research", "role": "member", "namespace": "team-ml-research",
         "members_may_cancel_teammates_work": True},
        {"slug": "vision", "name": "Vision", "role": "viewer", "namespace": "team-vision",
         "members_may_cancel_teammates_work": True},
    ]


def test_it_shows_an_outsider_only_their_own_team(api_client_for, team, member, outsider):
    results = api_client_for(outsider).get(TEAMS_URL).json()["results"]
    assert [(t["slug"], t["role"]) for t in results] == [("vision", "member")]


def test_it_lists_no_teams_for_a_user_without_membership(api_client_for, team, member, staff):
    # Staff status is for the admin console; it does not make the API show other teams.
    body = api_client_for(staff).get(TEAMS_URL).json()
    assert body == {"count": 0, "next": None, "previous": None, "results": []}


def test_it_accepts_a_browser_session(client, member):
    client.force_login(member)
    assert client.get(TEAMS_URL).json()["count"] == 1


def test_it_paginates_with_a_bounded_page_size(api_client_for, db):
    user = make_user("pat")
    for i in range(5):
        add_member(make_team(f"team-{i}"), user, Role.VIEWER)
    body = api_client_for(user).get(TEAMS_URL, {"page_size": 2}).json()
    assert body["count"] == 5 and len(body["results"]) == 2
    assert "page=2" in body["next"] and body["previous"] is None
    assert len(api_client_for(user).get(TEAMS_URL, {"page_size": 10_000}).json()["results"]) == 5


@pytest.mark.parametrize("size", ["null", "0", "-1", "ten", "2.5", "\u00b2", ""])
def test_it_answers_400_for_a_page_size_that_is_not_a_whole_number_from_1(api_client_for, db, size):
    # DRF served the default page for these: the schema says an integer from 1, so does the server.
    user = make_user("pat")
    add_member(make_team("team-0"), user, Role.VIEWER)
    response = api_client_for(user).get(TEAMS_URL, {"page_size": size})
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["page_size"]


@pytest.mark.parametrize("page", ["", "last", "0", "ten", "2"])
def test_it_answers_404_for_a_page_that_is_not_one_of_the_lists(api_client_for, db, page):
    user = make_user("pat")
    add_member(make_team("team-0"), user, Role.VIEWER)
    response = api_client_for(user).get(TEAMS_URL, {"page": page})
    assert response.status_code == 404
    assert "detail" in response.json()["errors"]


@pytest.mark.parametrize("size", [3, 12])
def test_it_lists_teams_in_a_constant_number_of_queries(api_client_for, django_assert_num_queries, db, size):
    user = make_user("pat")
    for i in range(size):
        add_member(make_team(f"team-{i}"), user, Role.MEMBER)
    client = api_client_for(user)
    # token lookup, last-used update, count, page
    with django_assert_num_queries(4):
        assert client.get(TEAMS_URL).status_code == 200


def test_it_refuses_writes_to_the_team_list(api):
    response = api.post(TEAMS_URL, {"slug": "x"}, format="json")
    assert response.status_code == 405
    assert response.json() == {"errors": {"detail": ['Method "POST" not allowed.']}}


# -- schema and docs ----------------------------------------------------------------------


def test_it_serves_an_openapi_3_schema(api):
    response = api.get("/api/schema/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    assert "/api/v1/teams/" in schema["paths"]
    assert schema["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http", "scheme": "bearer", "description": "A personal API token from the portal."}


def test_it_serves_api_docs_without_any_external_url(client, member):
    client.force_login(member)
    response = client.get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "swagger-ui" in html.lower()
    urls = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", html) + re.findall(r"https?://[^\s\"'<>)]+", html)
    assert urls, "the docs page should reference its assets"
    external = [u for u in urls if re.match(r"^(https?:)?//", u) and "localhost" not in u and "testserver" not in u]
    assert external == []


# -- the error shape (docs/api.md "Auth and errors") ------------------------------------------


class _WidgetSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=5)
    size = serializers.IntegerField(min_value=1)

    def validate(self, attrs):
        if attrs["name"] == "bad":
            raise serializers.ValidationError("name and size do not go together")
        return attrs


@api_view(["POST"])
def _widgets(request):
    serializer = _WidgetSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    return Response(serializer.validated_data, status=201)


@api_view(["GET"])
def _membership(request, pk: int):
    # The real access helper: another team's object is a 404, a too-low role a 403.
    obj = get_for_user(Membership.objects.all(), request.user, role=request.query_params.get("role", "viewer"), pk=pk)
    return Response({"id": obj.pk})


urlpatterns = [
    path("widgets/", _widgets),
    path("memberships/<int:pk>/", _membership),
    path("api/v1/", include("portal.api_urls")),
]
errors_urls = pytest.mark.urls(__name__)


@errors_urls
def test_it_answers_400_with_field_errors(api):
    response = api.post("/widgets/", {"name": "toolong", "size": 0}, format="json")
    assert response.status_code == 400
    assert response.json() == {"errors": {
        "name": ["Ensure this field has no more than 5 characters."],
        "size": ["Ensure this value is greater than or equal to 1."],
    }}


@errors_urls
def test_it_answers_400_with_required_and_non_field_errors(api):
    assert api.post("/widgets/", {}, format="json").json() == {"errors": {
        "name": ["This field is required."], "size": ["This field is required."]}}
    response = api.post("/widgets/", {"name": "bad", "size": 2}, format="json")
    assert response.status_code == 400
    assert response.json() == {"errors": {"non_field_errors": ["name and size do not go together"]}}


@errors_urls
def test_it_answers_400_for_malformed_json(api):
    response = api.post("/widgets/", "{not json", content_type="application/json")
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert list(errors) == ["non_field_errors"] and errors["non_field_errors"][0].startswith("JSON parse error")


@errors_urls
def test_it_answers_404_for_another_teams_object(api_client_for, member, outsider):
    theirs = Membership.objects.get(user=outsider)
    response = api_client_for(member).get(f"/memberships/{theirs.pk}/")
    assert response.status_code == 404
    assert response.json() == {"errors": {"detail": ["Not found."]}}
    # Identical to an id that does not exist at all: existence is not revealed.
    assert api_client_for(member).get("/memberships/999999/").json() == response.json()


@errors_urls
def test_it_answers_403_for_a_role_too_low(api_client_for, viewer):
    mine = Membership.objects.get(user=viewer)
    response = api_client_for(viewer).get(f"/memberships/{mine.pk}/", {"role": "member"})
    assert response.status_code == 403
    assert response.json() == {"errors": {"detail": ["This needs the member role in team ml-research."]}}
    assert api_client_for(viewer).get(f"/memberships/{mine.pk}/").status_code == 200


@errors_urls
def test_it_answers_401_in_the_same_shape(db):
    response = APIClient().post("/widgets/", {"name": "a", "size": 1}, format="json")
    assert response.status_code == 401
    assert response.json() == {"errors": {"detail": ["Authentication credentials were not provided."]}}


def test_it_maps_each_exception_to_the_error_shape():
    cases = [
        (ValidationError({"team": ["Unknown team."], "spec": {"gpus": ["Too many."]}}), 400,
         {"team": ["Unknown team."], "spec": {"gpus": ["Too many."]}}),
        (ValidationError(["one", "two"]), 400, {"non_field_errors": ["one", "two"]}),
        (DjangoValidationError({"name": ["Taken."]}), 400, {"name": ["Taken."]}),
        (DjangoValidationError("Plain message."), 400, {"non_field_errors": ["Plain message."]}),
        (Http404("No such team."), 404, {"detail": ["No such team."]}),
        (PermissionDenied("Needs admin."), 403, {"detail": ["Needs admin."]}),
        (Conflict("Run already finished."), 409, {"detail": ["Run already finished."]}),
    ]
    for exc, status, errors in cases:
        response = api_exception_handler(exc, {})
        assert (response.status_code, response.data) == (status, {"errors": errors}), exc


def test_it_leaves_real_bugs_to_django():
    assert api_exception_handler(ZeroDivisionError(), {}) is None

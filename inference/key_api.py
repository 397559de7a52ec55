"""REST API of API keys (docs/api.md "API keys"): an endpoint's keys under ``/api/v1/endpoints/{id}/keys/`` and a
team's under ``/api/v1/teams/{slug}/keys/``; and their usage in money (``…/keys/usage/``, JSON or CSV).

Thin: the access helper (the endpoint's or the team's: 404 outside the team, 403 for a too-low role), then one
service call (:mod:`inference.keys`) or the report (:mod:`inference.key_costs`). The raw key is in the answer to
its creation only.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from core.exceptions import conflict_response
from core.pagination import StandardPagination
from inference import key_costs, keys
from inference.models import ApiKey
from inference.services import get_endpoint_for_user
from quotas.api import csv_download
from quotas.serializers import UsageQuerySerializer
from teams.models import Role
from teams.permissions import require_team


class ApiKeySerializer(serializers.ModelSerializer):
    """A key as the API shows it: never its secret (nor its digest)."""

    team = serializers.CharField(source="team.slug")
    endpoint = serializers.IntegerField(source="endpoint_id", allow_null=True,
                                        help_text="The endpoint it is valid for; null: every endpoint of the team.")
    endpoint_name = serializers.CharField(source="endpoint.name", allow_null=True, default=None)
    created_by = serializers.CharField(source="created_by.username", allow_null=True, default=None)
    disabled = serializers.SerializerMethodField()
    state = serializers.SerializerMethodField()
    prefix = serializers.CharField(help_text="The key's first characters, shown to tell keys apart.")

    class Meta:
        model = ApiKey
        fields = ["id", "name", "prefix", "endpoint", "endpoint_name", "team", "created_by", "created_at",
                  "updated_at", "expires_at", "disabled", "disabled_at", "revoked_at", "last_used_at", "state",
                  "requests_per_minute", "tokens_per_minute"]
        read_only_fields = fields

    def get_disabled(self, key: ApiKey) -> bool:
        return key.disabled_at is not None

    def get_state(self, key: ApiKey) -> str:
        return keys.key_state(key)


class NewApiKeySerializer(ApiKeySerializer):
    """The answer to a key's creation: the key itself (``key``), in this answer only."""

    key = serializers.CharField(help_text="The key: send it as Authorization: Bearer <key>. Shown only here.")

    class Meta(ApiKeySerializer.Meta):
        fields = [*ApiKeySerializer.Meta.fields[:3], "key", *ApiKeySerializer.Meta.fields[3:]]
        read_only_fields = fields


class ApiKeyPageSerializer(serializers.Serializer):
    """A page of keys (paginated like every list of the API)."""

    count = serializers.IntegerField()
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = ApiKeySerializer(many=True)


class ApiKeyCreateSerializer(serializers.Serializer):
    """What creates a key (the type checks; the service checks the rest: docs/api.md "API keys")."""

    name = serializers.CharField(max_length=keys.NAME_MAX_LENGTH, help_text="Unique among the team's live keys.")
    expires_at = serializers.DateTimeField(required=False, allow_null=True, help_text="In the future; none: never.")
    requests_per_minute = serializers.IntegerField(min_value=1, max_value=keys.MAX_LIMIT, required=False,
                                                   allow_null=True, help_text="None: no limit (429 past it).")
    tokens_per_minute = serializers.IntegerField(min_value=1, max_value=keys.MAX_LIMIT, required=False,
                                                 allow_null=True, help_text="Input + output tokens; none: no limit.")


class KeyUsageQuerySerializer(UsageQuerySerializer):
    """``since``/``until`` as the usage report reads them (a date is its whole day; default: this month to now)."""

    team = None
    group_by = None


class KeyLineSerializer(serializers.Serializer):
    key_id = serializers.IntegerField(allow_null=True, help_text="null: the endpoint's unattributed (idle) cost.")
    name = serializers.CharField()
    prefix = serializers.CharField()
    endpoint_id = serializers.IntegerField(allow_null=True)
    endpoint_name = serializers.CharField()
    hour = serializers.DateTimeField(allow_null=True, help_text="The ledger hour; null on the totals.")
    requests = serializers.IntegerField()
    requests_2xx = serializers.IntegerField()
    requests_4xx = serializers.IntegerField()
    requests_5xx = serializers.IntegerField()
    errors = serializers.IntegerField()
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    tokens = serializers.IntegerField()
    cost = serializers.DecimalField(max_digits=14, decimal_places=2)


class KeyUsageSerializer(serializers.Serializer):
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    currency = serializers.CharField()
    ledger_cost = serializers.DecimalField(max_digits=14, decimal_places=2,
                                           help_text="The ledger's cost in the period (each hour to the cent): "
                                                     "the keys' costs and the idle line sum to it exactly.")
    totals = KeyLineSerializer(many=True)
    hours = KeyLineSerializer(many=True)


class CsvRenderer(BaseRenderer):
    """Lets ``Accept: text/csv`` through content negotiation; the view builds the CSV itself."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return data if isinstance(data, (str, bytes)) else str(data)


def _create(request, team, endpoint) -> Response:
    body = ApiKeyCreateSerializer(data=request.data)
    body.is_valid(raise_exception=True)
    data = body.validated_data
    key, raw = keys.create_key(request.user, team, endpoint, data["name"], data.get("expires_at"),
                               data.get("requests_per_minute"), data.get("tokens_per_minute"))
    key.key = raw  # on this answer's object only: never saved
    return Response(NewApiKeySerializer(key).data, status=status.HTTP_201_CREATED)


def _list(view: APIView, request, queryset) -> Response:
    paginator = StandardPagination()
    page = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response(ApiKeySerializer(page, many=True).data)


def _usage(request, report_of, filename: str) -> Response:
    query = KeyUsageQuerySerializer(data=request.query_params.dict())
    query.is_valid(raise_exception=True)
    params = query.validated_data
    report = report_of(params["since"], params["until"])
    if params["format"] == "csv" or request.accepted_renderer.format == "csv":
        return csv_download(key_costs.csv_rows(report), key_costs.CSV_COLUMNS, filename)
    data = {"since": report.since, "until": report.until, "currency": report.currency,
            "ledger_cost": report.ledger_cost, "totals": [line.as_dict() for line in report.totals],
            "hours": [line.as_dict() for line in report.hours]}
    return Response(KeyUsageSerializer(data).data)


# -- an endpoint's keys ----------------------------------------------------------------------------------


class EndpointKeysView(APIView):
    """The keys valid for an endpoint (its own and its team's), newest first; POST creates one for it."""

    @extend_schema(responses=ApiKeyPageSerializer, operation_id="endpoints_keys_list")
    def get(self, request, pk: int):
        endpoint = get_endpoint_for_user(request.user, pk, staff_reads=True)
        return _list(self, request, keys.keys_of_endpoint(endpoint))

    @extend_schema(request=ApiKeyCreateSerializer, responses={201: NewApiKeySerializer})
    def post(self, request, pk: int):
        endpoint = get_endpoint_for_user(request.user, pk, Role.MEMBER)
        return _create(request, endpoint.team, endpoint)


class EndpointKeyDetailView(APIView):
    """One key valid for the endpoint; DELETE revokes it (for good: 204, also when it was revoked already)."""

    @extend_schema(responses=ApiKeySerializer)
    def get(self, request, pk: int, key_pk: int):
        endpoint = get_endpoint_for_user(request.user, pk, staff_reads=True)
        return Response(ApiKeySerializer(keys.get_key(request.user, key_pk, endpoint=endpoint)).data)

    @extend_schema(request=None, responses={204: None})
    def delete(self, request, pk: int, key_pk: int):
        endpoint = get_endpoint_for_user(request.user, pk)
        keys.revoke_key(request.user, keys.get_key(request.user, key_pk, endpoint=endpoint))
        return Response(status=status.HTTP_204_NO_CONTENT)


class _KeyMove(APIView):
    move = staticmethod(keys.disable_key)

    def _key(self, request, **kwargs) -> ApiKey:
        raise NotImplementedError

    @extend_schema(request=None, responses={200: ApiKeySerializer})
    def post(self, request, **kwargs):
        key = self._key(request, **kwargs)
        try:
            key = self.move(request.user, key)
        except keys.KeyConflict as exc:
            return conflict_response(str(exc))
        return Response(ApiKeySerializer(key).data)


class _EndpointKeyMove(_KeyMove):
    def _key(self, request, pk: int, key_pk: int) -> ApiKey:
        return keys.get_key(request.user, key_pk, endpoint=get_endpoint_for_user(request.user, pk))


class EndpointKeyDisableView(_EndpointKeyMove):
    """Disable the key: the gateways refuse it within seconds; enable takes it back."""

    move = staticmethod(keys.disable_key)


class EndpointKeyEnableView(_EndpointKeyMove):
    """Enable a disabled key again (a revoked one: 409)."""

    move = staticmethod(keys.enable_key)


class EndpointKeyUsageView(APIView):
    """Usage and cost per key of the endpoint, per ledger hour and in total (``?format=csv`` or
    ``Accept: text/csv``: the hours as CSV). The costs sum exactly to the endpoint's ledger cost."""

    renderer_classes = [JSONRenderer, CsvRenderer]

    @extend_schema(parameters=[KeyUsageQuerySerializer],
                   responses={(200, "application/json"): KeyUsageSerializer, (200, "text/csv"): OpenApiTypes.STR})
    def get(self, request, pk: int):
        endpoint = get_endpoint_for_user(request.user, pk, staff_reads=True)
        return _usage(request, lambda since, until: key_costs.endpoint_key_usage(endpoint, since, until),
                      f"key-usage-{endpoint.team.slug}-{endpoint.name}.csv")


# -- a team's keys ----------------------------------------------------------------------------------------


class TeamKeysView(APIView):
    """Every key of the team (team keys and its endpoints'), newest first; POST creates a team key, valid for
    every endpoint of the team."""

    @extend_schema(responses=ApiKeyPageSerializer, operation_id="teams_keys_list")
    def get(self, request, slug: str):
        return _list(self, request, keys.keys_of_team(keys.team_for_keys(request.user, slug)))

    @extend_schema(request=ApiKeyCreateSerializer, responses={201: NewApiKeySerializer})
    def post(self, request, slug: str):
        return _create(request, require_team(request.user, slug, Role.MEMBER).team, None)


class TeamKeyDetailView(APIView):
    """One key of the team; DELETE revokes it (204)."""

    @extend_schema(responses=ApiKeySerializer)
    def get(self, request, slug: str, key_pk: int):
        team = keys.team_for_keys(request.user, slug)
        return Response(ApiKeySerializer(keys.get_key(request.user, key_pk, team=team)).data)

    @extend_schema(request=None, responses={204: None})
    def delete(self, request, slug: str, key_pk: int):
        team = require_team(request.user, slug).team
        keys.revoke_key(request.user, keys.get_key(request.user, key_pk, team=team))
        return Response(status=status.HTTP_204_NO_CONTENT)


class _TeamKeyMove(_KeyMove):
    def _key(self, request, slug: str, key_pk: int) -> ApiKey:
        return keys.get_key(request.user, key_pk, team=require_team(request.user, slug).team)


class TeamKeyDisableView(_TeamKeyMove):
    """Disable the key (as under its endpoint)."""

    move = staticmethod(keys.disable_key)


class TeamKeyEnableView(_TeamKeyMove):
    """Enable the key again (as under its endpoint)."""

    move = staticmethod(keys.enable_key)


class TeamKeyUsageView(APIView):
    """Usage and cost per key over all the team's endpoints, per endpoint and ledger hour, and per key in total."""

    renderer_classes = [JSONRenderer, CsvRenderer]

    @extend_schema(parameters=[KeyUsageQuerySerializer],
                   responses={(200, "application/json"): KeyUsageSerializer, (200, "text/csv"): OpenApiTypes.STR})
    def get(self, request, slug: str):
        team = keys.team_for_keys(request.user, slug)
        return _usage(request, lambda since, until: key_costs.team_key_usage(team, since, until),
                      f"key-usage-{team.slug}.csv")

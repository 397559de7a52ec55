"""REST API pieces every workload kind shares: list, retrieve, create (and its dry run), reading actions, queue
positions, the team of a POST.

A kind's viewset subclasses :class:`WorkloadViewSet`, which gives it ``get_object`` (the kind's access helper),
``create`` with its dry-run branch (the kind's ``submit`` and ``preview``) and :class:`WorkloadReadActions`
(``logs/``, ``logs/download/``, ``events/``, ``manifest/``, ``telemetry/``), so runs and endpoints answer alike (docs/api.md:
"``/manifest/``, ``/logs/``, ``/events/`` — as for runs"). It adds its schema (:func:`create_schema`) and its
own actions.
"""

from __future__ import annotations

from datetime import datetime

import yaml
from django.conf import settings
from django.db.models import CharField, OuterRef, QuerySet, Value
from django.db.models.functions import Cast, Concat
from django.http import Http404, HttpResponse
from django.utils import timezone
from drf_spectacular.plumbing import build_array_type, build_basic_type
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.permissions import SAFE_METHODS
from rest_framework.response import Response

from billing.models import PreemptionEvent
from billing.pricing import PriceBook
from billing.segments import borrowed_units, borrowed_units_of, lent_of, window_ref_of, windows_of
from core.filters import flag, one_of
from core.text import whole_number
from fleet.models import Cluster
from quotas.queue import queue_positions
from teams.idempotency import idempotent, is_dry_run
from teams.models import Role, Team
from teams.permissions import require_team
from workloads import attempts, secrets
from workloads import services as workloads
from workloads.estimates.forecast import StartEstimate, estimated_starts
from workloads.identity import REF_SEPARATOR, WorkloadId
from workloads.idle import IdleFigures, idle_figures
from workloads.models import quote_rows
from workloads.registry import WorkloadKind, kind_for, kind_of
from workloads.telemetry import api as telemetry_api
from workloads.telemetry import series as telemetry_series
from workloads.validation import MAX_RESERVATION_ID
from workloads.views import log_download


class LogSourceSerializer(serializers.Serializer):
    name = serializers.CharField(help_text='the pod\'s name; "<pod>:previous" for a restarted replica\'s earlier attempt')
    label = serializers.CharField(help_text='"master-0", "worker-1", "attempt 2 (running)", '
                                            '"master-0, attempt 1 (Error (exit 1))"')


class LogsSerializer(serializers.Serializer):
    lines = serializers.ListField(child=serializers.CharField())
    pod = serializers.CharField(allow_null=True, help_text="the pod these lines are from")
    pods = LogSourceSerializer(many=True, help_text="every pod of the workload with a log (?pod= picks one)")
    attempt = serializers.IntegerField(help_text="the attempt these lines are from (?attempt= picks one)")
    saved_at = serializers.DateTimeField(allow_null=True, help_text="an earlier attempt's: when its logs were saved, "
                                                                    "as its pods stopped; null: read from the cluster")


class EventSerializer(serializers.Serializer):
    type = serializers.CharField()
    reason = serializers.CharField()
    message = serializers.CharField()
    object = serializers.CharField()
    time = serializers.CharField()
    count = serializers.IntegerField()


class PreemptionSerializer(serializers.Serializer):
    """One row of a workload's preemption log (docs/api.md "Borrowing and preemption on workloads")."""

    at = serializers.DateTimeField()
    by_team = serializers.CharField(source="by_team.slug", allow_null=True, default=None,
                                    help_text="The slug of the team that took its quota back.")
    cause = serializers.ChoiceField(choices=PreemptionEvent.Cause.choices,
                                    help_text="reclaim: a lender took its quota back; spot: the provider took the node.")
    units = serializers.IntegerField()
    reason = serializers.CharField()
    grace_seconds = serializers.IntegerField()
    lost_gpu_hours = serializers.DecimalField(max_digits=20, decimal_places=4)
    lost_cost = serializers.DecimalField(max_digits=20, decimal_places=4)


class AttemptSerializer(serializers.Serializer):
    """One earlier attempt of a workload queued again (``attempts/``): where it ran and why, its times, its end."""

    number = serializers.IntegerField()
    cluster = serializers.CharField(source="cluster.name", allow_null=True, default=None,
                                    help_text="The cluster it was placed on (null: placed nowhere).")
    placement_reason = serializers.CharField()
    placed_at = serializers.DateTimeField(allow_null=True)
    admitted_at = serializers.DateTimeField(allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True, help_text="When its pods started (null: they never did).")
    stopped_at = serializers.DateTimeField(allow_null=True, help_text="When it was told to stop (the preemption's notice).")
    ended_at = serializers.DateTimeField(help_text="When it was queued again, its pods gone.")
    ended = serializers.CharField(source="ended_words", help_text='"preempted", "interrupted" (its spot node reclaimed) or "cluster lost".')
    end_reason = serializers.CharField()
    last_checkpoint = serializers.JSONField(source="checkpoint", allow_null=True,
                                            help_text='{"at", "step", "path"} of the last checkpoint it reported, or null.')
    logs_saved_at = serializers.DateTimeField(allow_null=True,
                                              help_text="When its logs were last saved (logs/?attempt=<number>); "
                                                        "null: none could be.")


def _queued(workload) -> bool:
    return workload.state == kind_of(workload).lifecycle.queued


def queue_context(workloads_page) -> dict:
    """Serializer context for ``workloads_page``: queue positions and start estimates, idle GPU figures, its GPUs now.

    A few queries per team with queued work on the page, one for the idle figures of work that
    was ever billed, one for the names of secret env, one for the GPUs' newest telemetry. Every row is quoted here from one
    :class:`~billing.pricing.PriceBook` (two queries for the page, none for rows quoted already, such
    as a workload just submitted): a kind's cost fields (an endpoint's cost per hour and its range)
    come before ``price_per_hour`` and would otherwise each read the clusters and prices again.
    """
    quote_rows(workloads_page)
    teams = {w.team_id: w.team for w in workloads_page if _queued(w)}
    positions: dict[str, int] = {}
    estimates: dict[str, StartEstimate] = {}
    for team in teams.values():
        positions.update(queue_positions(team))
        estimates.update(estimated_starts(team))
    # Borrowed units: list rows carry them (WorkloadViewSet.get_queryset); others are read here.
    unread = [w.ref for w in workloads_page if not hasattr(w, "borrowed_held") and w.state in w.HOLDING_STATES]
    # The window it runs in: work just admitted into one knows its borrowed units (admission wrote them), not which
    # window (one query then; work admitted onto the quota knows it is in none, :func:`workloads.services.admit_new`).
    windows_unread = [w.ref for w in workloads_page if not hasattr(w, "window_held") and w.state in w.HOLDING_STATES]
    return {"queue_positions": positions, "start_estimates": estimates,
            "borrowed": borrowed_units(unread),
            "windows": windows_of(windows_unread),
            "idle": idle_figures(workloads_page, timezone.now()),
            "gpu_now": telemetry_series.now_figures(workloads_page, timezone.now()),
            "secret_env": secrets.names_by_ref(workloads_page)}


class QueuedFields(serializers.Serializer):
    """A queued workload's place and start estimate (from :func:`queue_context`; docs/api.md "Start estimates"):
    its ``queue_position``, ``estimated_start_at`` in a range (``estimated_start_earliest``,
    ``estimated_start_latest``: the bound) and ``start_estimate``, the page's words for them."""

    queue_position = serializers.SerializerMethodField()
    estimated_start_at = serializers.SerializerMethodField(
        help_text="When queued: the expected start, from the typical ends of the work ahead; null when nothing "
                  "ahead has a known end.")
    estimated_start_earliest = serializers.SerializerMethodField(
        help_text="When queued: the range's low end, every run ahead ending as soon as one in ten does; null when "
                  "not known sooner than estimated_start_at.")
    estimated_start_latest = serializers.SerializerMethodField(
        help_text="When queued: the bound, every run ahead ending at its runtime limit (unless work that goes "
                  "first arrives); null when something ahead has no limit.")
    start_estimate = serializers.SerializerMethodField(
        help_text='When queued: the estimate in the page\'s words ("starts in 3–30 min, when a ends, by 04:52 UTC at '
                  'the latest", or why it is unknown); "" otherwise.')

    def get_queue_position(self, workload) -> int | None:
        if not _queued(workload):
            return None
        return self.context.get("queue_positions", {}).get(workload.ref)

    def _estimate(self, workload) -> StartEstimate | None:
        return self.context.get("start_estimates", {}).get(workload.ref) if _queued(workload) else None

    def get_estimated_start_at(self, workload) -> datetime | None:
        estimate = self._estimate(workload)
        return estimate.at if estimate is not None else None

    def get_estimated_start_earliest(self, workload) -> datetime | None:
        estimate = self._estimate(workload)
        return estimate.earliest if estimate is not None else None

    def get_estimated_start_latest(self, workload) -> datetime | None:
        estimate = self._estimate(workload)
        return estimate.latest if estimate is not None else None

    def get_start_estimate(self, workload) -> str:
        estimate = self._estimate(workload)
        return estimate.words() if estimate is not None else ""


def deprecated_names(since: str, **old_names: str):
    """Class decorator of a read serializer: keep each ``old=new`` field one release under its old name.

    The old field is a copy of ``new`` (the same value, the same type and format), read-only,
    described as deprecated and marked ``deprecated: true`` in the OpenAPI schema, for automation
    that reads it; ``since`` is the month of the rename. Every such field is listed in docs/api.md
    "Deprecated" (a test holds the two together); the one name of each concept is in
    docs/glossary.md. The serializer's ``Meta.fields`` lists both names.
    """
    def decorate(serializer: type) -> type:
        for old, new in old_names.items():
            field = serializer._declared_fields[new]
            kwargs = {**field._kwargs, "source": field._kwargs.get("source", new), "read_only": True,
                      "help_text": f"Deprecated: the same as {new} (its name until {since}); removed in the next release."}
            serializer._declared_fields[old] = type(field)(*field._args, **kwargs)
        return extend_schema_serializer(deprecate_fields=[*old_names])(serializer)
    return decorate


#: What a workload's ``price_per_hour`` means (docs/api.md "Prices"), in its schema's words.
PRICE_PER_HOUR_HELP = ("What one unit-hour costs it: once billing began, its charged rate (the price its billing "
                       "segment opened at, never re-read from today's prices; kept after it ends); placed and not "
                       "billed yet, its cluster's price; before, the price on the cluster placement would choose now.")


class PriceField(serializers.DecimalField):
    """The one price of a workload's unit-hour (:meth:`workloads.models.Workload.price_quote`), times
    ``units`` (an attribute naming how many units; none: one). A list's rows share one
    :class:`~billing.pricing.PriceBook` (the serializer's context), so the clusters are read once."""

    def __init__(self, units: str = "", **kwargs) -> None:
        self.units = units
        kwargs.setdefault("max_digits", 14)
        kwargs.setdefault("decimal_places", 4)
        super().__init__(read_only=True, source="*", **kwargs)

    def get_attribute(self, workload):
        quote = workload.price_quote(self.context.setdefault("price_book", PriceBook()))
        return quote.per_hour(getattr(workload, self.units)) if self.units else quote.price


class PlacementFields(serializers.Serializer):
    """``cluster`` and ``placement_reason``: where the workload was placed and why (docs/api.md "Clusters"),
    ``price_per_hour``: the price it shows (:meth:`workloads.models.Workload.price_quote`: once billing
    began, its charged rate; placed, its cluster's; before, the price on the cluster placement would
    choose now), and ``currency``: the currency of every amount of the answer."""

    cluster = serializers.SerializerMethodField(help_text="The cluster it was placed on; null until it is placed.")
    price_per_hour = PriceField(help_text=PRICE_PER_HOUR_HELP)
    currency = serializers.SerializerMethodField(help_text="The currency of every amount in this answer (costs, prices).")
    placement_reason = serializers.CharField(read_only=True)
    cluster_selector = serializers.DictField(child=serializers.CharField(), read_only=True)

    def get_currency(self, workload) -> str:
        return settings.SLIPWAY_CURRENCY

    def get_cluster(self, workload) -> str | None:
        if workload.cluster_id is None:
            return None
        # One query for a whole page: the clusters are few.
        names = self.context.setdefault("cluster_names", dict(Cluster.objects.values_list("pk", "name")))
        return names.get(workload.cluster_id)


class StateSetFields(serializers.Serializer):
    """``is_final`` and ``holds_quota``: which of the glossary's sets of states (docs/glossary.md "States") the
    workload's state is in, so that clients (the CLI) need no list of any kind's states of their own."""

    is_final = serializers.BooleanField(read_only=True, help_text="Its state is final: it will never change again.")
    holds_quota = serializers.SerializerMethodField(
        help_text="Admitted and not ended: it holds its units of the team's quota (and costs while it runs).")

    def get_holds_quota(self, workload) -> bool:
        return workload.state in workload.HOLDING_STATES

    def get_fields(self) -> dict:
        """``state`` as one of its kind's words (the schema's enum): the one table's column has no choices."""
        fields = super().get_fields()
        model = getattr(getattr(self, "Meta", None), "model", None)
        if "state" in fields and model is not None and model.STATES is not None:
            fields["state"] = serializers.ChoiceField(choices=model.state_choices(), read_only=True)
        return fields


class BorrowedFields(serializers.Serializer):
    """``borrowed_units``, ``reservation`` and ``preemptible``: read from the workload's quota hold (:func:`queue_context`);
    beside them ``for_reservation``, the reservation the work names (its own column)."""

    borrowed_units = serializers.SerializerMethodField(
        help_text="How many of its units are borrowed from the team's cohort (0 when not holding quota).")
    reservation = serializers.SerializerMethodField(
        help_text="The id of its team's reservation it was admitted into (its units on top of the quota); null: none.")
    preemptible = serializers.SerializerMethodField(
        help_text="Holds borrowed units, or runs on another team's idle reserved units: either may be taken back.")
    for_reservation = serializers.IntegerField(
        read_only=True, allow_null=True,
        help_text="The id of its team's reservation it names (docs/reservations.md \"Open or targeted\"): it goes "
                  "into that reservation's windows first and waits for them; null: none.")

    def get_borrowed_units(self, workload) -> int:
        if hasattr(workload, "borrowed_held"):
            return workload.borrowed_held
        return self.context.get("borrowed", {}).get(workload.ref, 0)

    def _window(self, workload) -> tuple[str | None, bool]:
        if hasattr(workload, "window_held"):
            return workload.window_held, workload.lent_held
        return self.context.get("windows", {}).get(workload.ref, (None, False))

    def get_reservation(self, workload) -> int | None:
        ref = self._window(workload)[0]
        identity = WorkloadId.from_ref(ref) if ref else None
        return identity.pk if identity is not None else None

    def get_preemptible(self, workload) -> bool:
        return self.get_borrowed_units(workload) > 0 or self._window(workload)[1]


def for_reservation_input() -> serializers.IntegerField:
    """The ``for_reservation`` of a create request, for the OpenAPI schema (every kind takes it alike)."""
    return serializers.IntegerField(
        min_value=1, max_value=MAX_RESERVATION_ID, required=False, allow_null=True, default=None,
        help_text="The id of a reservation of the team's that the work is for (docs/reservations.md \"Open or "
                  "targeted\"): it goes into that reservation's windows first and waits for them. Refused (400) "
                  "when the team has no such booking not over, of this flavor, holding its units, or the work is "
                  "spot; null: none.")


def secret_env_input(more: str = "") -> serializers.DictField:
    """The ``secret_env`` of a request, for the OpenAPI schema: write-only, never in a response (``more``: what
    this request does with it beyond that)."""
    return serializers.DictField(
        child=serializers.CharField(), required=False, write_only=True,
        help_text="Like env, but the values go to a Kubernetes Secret of the team's namespace, referenced from the "
                  "pods; responses, pages and the manifest show the names only (\"••••••\")." + more)


class SecretEnvField(serializers.Serializer):
    """``secret_env`` as responses show it: each name with the mask, never a value (from :func:`queue_context`)."""

    secret_env = serializers.SerializerMethodField(
        help_text="Names of the secret env variables, each shown as \"••••••\": values are never returned.")

    def get_secret_env(self, workload) -> dict[str, str]:
        return secrets.masked(self.context.get("secret_env", {}).get(workload.ref, []))


class _IdleAmount(serializers.DecimalField):
    """One amount of the workload's :class:`IdleFigures` (``idle_gpu_hours`` → ``gpu_hours``)."""

    def get_attribute(self, instance):
        figures = self.context.get("idle", {}).get(instance.ref, IdleFigures())
        return getattr(figures, self.field_name.removeprefix("idle_"))


class IdleFields(serializers.Serializer):
    """Allocated GPU time measured idle, its cost, and since when it is flagged (from :func:`queue_context`)."""

    idle_gpu_hours = _IdleAmount(max_digits=14, decimal_places=4, read_only=True,
                                 help_text="GPU-hours whose measured utilization stayed under the idle threshold.")
    idle_cost = _IdleAmount(max_digits=14, decimal_places=4, read_only=True, help_text="What the idle GPU-hours cost.")
    idle_since = serializers.SerializerMethodField(
        help_text="When the GPUs have been idle without a break for the platform's idle window: since when; else null.")

    def get_idle_since(self, workload) -> datetime | None:
        return self.context.get("idle", {}).get(workload.ref, IdleFigures()).since


def pk_of(raw) -> int:
    """The object id of a URL, or 404. Ids are 64-bit: one of more than 19 digits is no object (``/runs/0042/`` is
    run 42, however many zeros pad it)."""
    pk = whole_number(raw)
    if pk is None:
        raise Http404
    return pk


def team_slug_of_post(request) -> tuple[str, dict]:
    """The team slug a POST body names in ``team``, and the other fields (400 as docs/api.md says).

    Access is not checked here: the kind's service checks it (404 for outsiders, 403 below
    member) in the same query that loads the team, so a submission reads the membership once.
    """
    data = request.data if isinstance(request.data, dict) else None
    if data is None:
        raise ValidationError({"non_field_errors": ["Expected a JSON object."]})
    slug = data.get("team")
    if not slug or not isinstance(slug, str):
        raise ValidationError({"team": ["This field is required."]})
    if "\x00" in slug:  # PostgreSQL text cannot hold it: never let it reach the lookup
        raise ValidationError({"team": ["Must not contain NUL characters."]})
    return slug, {k: v for k, v in data.items() if k != "team"}


MAX_TAIL = 5000
#: ``?tail=`` as the server reads it, for the OpenAPI schema.
TAIL_SCHEMA = {"type": "integer", "minimum": 1, "maximum": MAX_TAIL, "default": 200}


def _tail(request) -> int:
    tail = whole_number(request.query_params.get("tail", "200"))
    if tail is None or not 1 <= tail <= MAX_TAIL:
        raise ValidationError({"tail": [f"Must be a whole number between 1 and {MAX_TAIL}."]})
    return tail


ATTEMPT_PARAMETER = OpenApiParameter(
    "attempt", {"type": "integer", "minimum": 1},
    description="An attempt of a workload queued again (1 to its ``attempt``; default: the current one): an earlier "
                "attempt's logs are those saved as its pods stopped.")


def _attempt(request, workload) -> int | None:
    """``?attempt=``: a 400 field error when it is no attempt number, 404 for an attempt the workload never had."""
    try:
        return attempts.attempt_of(request.query_params.get("attempt"), workload.attempt)
    except ValueError as exc:
        raise ValidationError({"attempt": [str(exc)]}) from exc
    except attempts.UnknownAttempt as exc:
        raise Http404(str(exc)) from exc


#: ``?format=yaml`` of ``manifest/``: one YAML document, a Kubernetes ``List`` of the objects, which
#: YAML readers take whole and ``kubectl apply -f`` applies (a stream of documents is neither).
MANIFEST_YAML_SCHEMA = {
    "type": "object", "required": ["apiVersion", "kind", "items"],
    "properties": {"apiVersion": {"type": "string", "enum": ["v1"]}, "kind": {"type": "string", "enum": ["List"]},
                   "items": build_array_type(build_basic_type(OpenApiTypes.OBJECT))},
}


class WorkloadReadActions:
    """``logs/``, ``logs/download/``, ``events/``, ``preemptions/``, ``attempts/``, ``telemetry/`` and ``manifest/`` of
    one workload, for any kind's viewset."""

    @extend_schema(parameters=[OpenApiParameter("tail", TAIL_SCHEMA, description="How many of the last lines."),
                               OpenApiParameter("pod", str), ATTEMPT_PARAMETER], responses=LogsSerializer)
    @action(detail=True, methods=["get"])
    def logs(self, request, pk=None):
        workload = self.get_object()
        tail, attempt = _tail(request), _attempt(request, workload)
        try:
            found = workloads.logs(workload, request.query_params.get("pod", ""), tail, attempt)
        except workloads.UnknownPod as exc:
            raise Http404("No such pod.") from exc
        return Response({"lines": found.lines, "pod": found.shown.key if found.shown else None,
                         "pods": [{"name": s.key, "label": s.label} for s in found.sources],
                         "attempt": found.attempt or workload.attempt, "saved_at": found.saved_at})

    @extend_schema(parameters=[OpenApiParameter("pod", str, description="A pod of ``logs/``'s ``pods`` (default: "
                                                                     "the one ``logs/`` shows first)"),
                               ATTEMPT_PARAMETER],
                   responses={(200, "text/plain"): OpenApiTypes.STR})
    @action(detail=True, methods=["get"], url_path="logs/download", url_name="logs-download", pagination_class=None)
    def logs_download(self, request, pk=None):
        """The pod's whole log as a text file (``Content-Disposition: attachment``), as the page's download."""
        workload = self.get_object()
        _attempt(request, workload)  # the API's 400 and 404 words, before the page's helper reads it again
        return log_download(request, workload)

    @extend_schema(responses=EventSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None)
    def events(self, request, pk=None):
        workload = self.get_object()
        return Response([EventSerializer(e).data for e in workloads.events(workload)])

    @extend_schema(responses=AttemptSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None)
    def attempts(self, request, pk=None):
        """Its earlier attempts, oldest first (a workload queued again after a preemption or a lost cluster):
        each one's cluster and placement reason, times, end and last checkpoint; [] on a first attempt."""
        return Response(AttemptSerializer(attempts.earlier(self.get_object()), many=True).data)

    @extend_schema(responses=PreemptionSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None)
    def preemptions(self, request, pk=None):
        """Its preemption log, newest first: who took back which units, and the work it cost."""
        return Response(PreemptionSerializer(workloads.preemptions(self.get_object()), many=True).data)

    @extend_schema(parameters=telemetry_api.PARAMETERS, responses=telemetry_api.TelemetrySerializer)
    @action(detail=True, methods=["get"], pagination_class=None)
    def telemetry(self, request, pk=None):
        """Its GPU telemetry as its page's charts draw it (docs/metrics.md "GPU telemetry"): per chart, a line
        per GPU, downsampled (LTTB) to ``step`` or the chart's width."""
        workload = self.get_object()
        since, step = telemetry_api.telemetry_query(request)
        return Response(telemetry_series.series(workload, since, step))

    @extend_schema(parameters=[OpenApiParameter("format", str, enum=["json", "yaml"])],
                   responses={(200, "application/json"): build_array_type(build_basic_type(OpenApiTypes.OBJECT)),
                              (200, "application/yaml"): MANIFEST_YAML_SCHEMA})
    @action(detail=True, methods=["get"], pagination_class=None)
    def manifest(self, request, pk=None):
        workload = self.get_object()
        objects = workloads.manifests(workload)
        fmt = request.query_params.get("format", "json")
        if fmt == "yaml":
            body = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}, sort_keys=False)
            return HttpResponse(body, content_type="application/yaml; charset=utf-8")
        if fmt != "json":
            raise ValidationError({"format": ["Must be json or yaml."]})
        return Response(objects)


@extend_schema_serializer(deprecate_fields=["estimated_total"])
class PreviewSerializer(serializers.Serializer):
    """A dry run's answer (``POST …?dry_run=1``): the preview of the submission — what submitting would
    do now; nothing is written (:class:`workloads.estimates.preview.Preview`, docs/glossary.md "preview")."""

    outcome = serializers.ChoiceField(choices=["admit", "queue", "reject", "invalid"])
    message = serializers.CharField()
    cost_per_hour = serializers.DecimalField(max_digits=14, decimal_places=4, allow_null=True)
    estimated_total_cost = serializers.DecimalField(
        max_digits=14, decimal_places=4, allow_null=True,
        help_text="At most this in all, with a known end (a run's runtime limit); null for work without one.")
    estimated_total = serializers.DecimalField(
        max_digits=14, decimal_places=4, allow_null=True,
        help_text="Deprecated (until 2026-11 it meant two things): a run's is estimated_total_cost, an endpoint's or "
                  "workspace's committed_cost; removed in the next release.")
    share_of_budget_left = serializers.DecimalField(max_digits=10, decimal_places=4, allow_null=True)
    queue_position = serializers.IntegerField(allow_null=True)
    estimated_start_at = serializers.DateTimeField(allow_null=True)
    estimated_start_earliest = serializers.DateTimeField(
        allow_null=True, help_text="The range's low end (docs/api.md \"Start estimates\"); null: not known sooner.")
    estimated_start_latest = serializers.DateTimeField(
        allow_null=True, help_text="The bound: everything ahead ends at its runtime limit; null: no bound.")
    start = serializers.CharField(allow_blank=True, help_text="The start estimate in the page's words.")
    committed_cost = serializers.DecimalField(
        max_digits=14, decimal_places=4, allow_null=True,
        help_text="What the budget counts for it this month: its estimate, at most its cost until the month's end; "
                  "without a runtime limit, its cost until the month's end.")
    borrows = serializers.IntegerField(help_text="Units it would borrow from the team's cohort now.")
    preemptible = serializers.BooleanField(help_text="Admitted with borrowed units: reclaim may take them back.")
    price_per_hour = serializers.DecimalField(
        max_digits=14, decimal_places=4, allow_null=True,
        help_text="One unit-hour's price (billing.pricing): on the cluster placement would choose now; "
                  "with no such cluster, the dearest of the clusters that offer the flavor.")
    cluster = serializers.CharField(allow_null=True, help_text="The cluster it would be placed on now (null: none can take it now).")
    currency = serializers.CharField(help_text="The currency of every amount in this answer.")
    warnings = serializers.ListField(
        child=serializers.CharField(),
        help_text="Where the choice contradicts the flavor advice (docs/flavors.md): a pod needing more GPU memory "
                  "than a unit has, training on a time-sliced GPU. Said, never refused.")


DRY_RUN_PARAMETER = OpenApiParameter("dry_run", bool, description="Only preview: cost, budget share, outcome, start; nothing is written.")


def create_schema(request: type, created: type, preview: type = PreviewSerializer):
    """The OpenAPI schema of a kind's ``create``: its request body, 201 with ``created``, a dry run's 200 with ``preview``."""
    return extend_schema(request=request, responses={201: created, 200: preview},
                         parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER), DRY_RUN_PARAMETER])


class WorkloadViewSet(WorkloadReadActions, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """List, retrieve and create of one kind (``model``): the caller's teams only, filtered, with queue context.

    Filters: ``team`` (slug), ``state`` (400 for a state the kind does not have), ``created_by``, ``name``.
    ``all_teams=true``: every team's, for platform staff only (403 for anyone else, so a script
    that needs every team's work learns that it does not get it). A kind's viewset adds its
    serializers, its schema and its own actions.
    """

    model: type
    #: What a dry run of ``create`` answers with (the kind's preview as a dict).
    preview_serializer: type = PreviewSerializer

    @property
    def kind(self) -> WorkloadKind:
        return kind_for(self.model.KIND_PREFIX)

    def get_object(self, role: str = Role.VIEWER):
        """The workload of the URL through the kind's access helper (404 outsiders, 403 below ``role``)."""
        return self.kind.get_for_user(self.request.user, pk_of(self.kwargs["pk"]), role, staff_reads=self.staff_reads())

    @idempotent
    def create(self, request, *args, **kwargs):
        # Submit one (201, as written); with ``?dry_run=1`` only preview it (200, nothing written).
        slug, fields = team_slug_of_post(request)
        if is_dry_run(request):
            team = require_team(request.user, slug, Role.MEMBER).team
            return Response(self.preview_serializer(self.kind.preview(team, fields).as_dict()).data)
        # The service checks access and returns the workload as written (team, flavor, author
        # and admission outcome included): no read-back.
        workload = self.kind.submit(request.user, slug, fields)
        return Response(self.serialize(workload), status=status.HTTP_201_CREATED)

    def staff_reads(self) -> bool:
        """A read (GET): platform staff may read any team's workload by id; every action still needs a membership."""
        return self.request.method in SAFE_METHODS

    def get_queryset(self) -> QuerySet:
        ref = Concat(Value(f"{self.model.KIND_PREFIX}{REF_SEPARATOR}"), Cast(OuterRef("pk"), CharField()))
        params = self.request.query_params
        all_teams = self._all_teams()
        everyone = self.model.objects.all() if all_teams else self.model.objects.for_user(self.request.user)
        qs = everyone.for_list().annotate(borrowed_held=borrowed_units_of(ref), window_held=window_ref_of(ref),
                                          lent_held=lent_of(ref))
        if params.get("team"):
            # A team the caller is not in answers 404, as a ``team`` field does (docs/api.md), never an
            # empty list that reads as "it has none" (security review 5 #9c); staff with all_teams name any team.
            if all_teams and not Team.objects.filter(slug=params["team"]).exists():
                raise Http404("No such team.")
            if not all_teams:
                require_team(self.request.user, params["team"])
            qs = qs.filter(team__slug=params["team"])
        state = one_of(params, "state", [*(value for value, _label in self.model.state_choices()), *STATE_SETS])
        if state is not None:
            qs = _with_state(qs, state)
        if params.get("created_by"):
            qs = qs.filter(created_by__username=params["created_by"])
        if params.get("name"):  # exact: the CLI's `describe NAME` looks a name up in the caller's teams
            qs = qs.filter(name=params["name"])
        return qs

    def _all_teams(self) -> bool:
        """``?all_teams=``: true for every team's workloads (staff reads, as :meth:`staff_reads`), else the caller's."""
        if not flag(self.request.query_params, "all_teams"):
            return False
        if not (self.staff_reads() and self.request.user.is_staff):
            raise PermissionDenied("Only platform staff list every team's work (all_teams).")
        return True

    def kind_context(self, workloads) -> dict:
        """Serializer context of the kind's own for ``workloads`` (a page, or one), a query or so for all."""
        return {}

    def serialize(self, workload) -> dict:
        context = {**self.get_serializer_context(), **queue_context([workload]), **self.kind_context([workload])}
        return self.get_serializer_class()(workload, context=context).data

    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.get_queryset())
        context = {**self.get_serializer_context(), **queue_context(page), **self.kind_context(page)}
        return self.get_paginated_response(self.get_serializer_class()(page, many=True, context=context).data)

    def retrieve(self, request, *args, **kwargs):
        return Response(self.serialize(self.get_object()))


#: The ``state`` filter's names of sets of states (docs/glossary.md "States"), each a queryset method: one
#: word for every kind, so a script asks for "what holds quota" without knowing any kind's states.
STATE_SETS = {"active": "active", "holding": "holding_quota", "unfinished": "unfinished"}


def _with_state(qs: QuerySet, value: str) -> QuerySet:
    """``qs`` filtered by ``?state=`` (checked by :func:`core.filters.one_of`): one of the kind's states, or the name
    of a set of them (:data:`STATE_SETS`)."""
    if value in STATE_SETS:
        return getattr(qs, STATE_SETS[value])()
    return qs.filter(state=value)


def list_parameters(states: list[str]) -> list[OpenApiParameter]:
    """The list filters of a kind's viewset, for its OpenAPI schema."""
    return [OpenApiParameter("team", str, description="Team slug"),
            OpenApiParameter("state", str, enum=[*states, *STATE_SETS],
                             description="A state, or a set of them: active (queued or holding quota), holding "
                                         "(holding quota), unfinished (not final)."),
            OpenApiParameter("created_by", str, description="Username"),
            OpenApiParameter("name", str, description="The workload's name, exactly (ended work may share it)."),
            OpenApiParameter("all_teams", bool, description="Every team's, not only the caller's teams': platform "
                                                            "staff only (403 for anyone else).")]

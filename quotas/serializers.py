"""Serializers of the quotas API: flavors, a team's usage, the cost report's query, and quota as
code (cohorts, a team's quotas and sharing settings)."""

from __future__ import annotations

from datetime import UTC, date, datetime, time
from decimal import ROUND_DOWN, Decimal

from django.conf import settings
from django.utils import timezone
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.settings import api_settings

from billing.ledger import month_start
from billing.pricing import PriceBook, Quote
from cluster.pools import DEFAULT_UNNEEDED_MINUTES, MODES
from cluster.specs import ISOLATION
from cluster.training import TRAINING_APIS
from core.formatting import MONEY_ROUNDING
from fleet.constants import Sharing
from fleet.models import FLAVOR_NAME, MAX_NODES, GpuFlavor, NodePool, unknown_flavor
from quotas.models import Cohort
from teams.models import Team
from teams.serializers import TeamSerializer

GROUP_BY = ("day", "flavor", "user", "workload", "kind")


#: Prices as the API writes them: four decimals, a string (as a DecimalField writes a model's price).
_amount = serializers.DecimalField(max_digits=12, decimal_places=4).to_representation


#: What a flavor's ``price_per_hour`` means — one definition (docs/api.md "Prices"), the same as a dry run's.
FLAVOR_PRICE_HELP = (
    "What one unit-hour of the flavor costs on-demand work submitted now: the price on the cluster placement would "
    "choose now for one unit (named in `cluster`); when no cluster can take it now, the highest of `price_range`. "
    "A dry run's price_per_hour and the portal's flavor page say the same. It is therefore the low end of the "
    "range while the cheapest cluster has room, and higher when it has none. Work already placed shows its own "
    "price_per_hour (its charged rate once billing began).")


class PriceRangeSerializer(serializers.Serializer):
    min = serializers.DecimalField(max_digits=12, decimal_places=4)
    max = serializers.DecimalField(max_digits=12, decimal_places=4)


class FlavorSerializer(serializers.ModelSerializer):
    """A flavor with the one price (:mod:`billing.pricing`): ``price_per_hour`` and
    ``spot_price_per_hour`` are what a unit-hour of one-unit work costs on the cluster placement
    would choose now (``cluster``); ``price_range`` spans the clusters that offer it.

    How a unit shares its GPU (issue 37): ``sharing`` and ``replicas``, ``isolation``, the memory one
    unit may use (``memory_per_unit_gb``; ``memory_shared``: with the other pods on the GPU), ``training``
    (whether runs may use it). Each is the model's one property (:class:`fleet.models.GpuFlavor`)."""

    mig_profile = serializers.SerializerMethodField()
    gpu_fraction = serializers.FloatField(help_text="Share of a physical GPU one unit is (1/replicas when shared).")
    gpu_memory_gb = serializers.IntegerField(
        help_text="The memory of the GPU model (of a time-sliced or MPS flavor: of the whole physical GPU).")
    sharing = serializers.ChoiceField(choices=Sharing.choices, read_only=True,
                                      help_text="none (a whole GPU), mig, time-slicing or mps.")
    replicas = serializers.IntegerField(read_only=True, help_text="Units one physical GPU is cut into (1 unless "
                                                                  "time-sliced or MPS).")
    isolation = serializers.ChoiceField(
        choices=sorted(set(ISOLATION.values())), read_only=True,
        help_text="What is isolated between pods on one GPU: exclusive (a whole GPU), hardware (MIG), partial "
                  "(MPS: memory limited per pod, faults shared) or none (time-sliced).")
    memory_per_unit_gb = serializers.DecimalField(
        max_digits=7, decimal_places=1, read_only=True,
        help_text="GPU memory one unit may use: a MIG slice's or whole GPU's own, an MPS unit's limit (the GPU's / "
                  "replicas), a time-sliced unit the whole GPU's — shared.")
    memory_shared = serializers.BooleanField(source="memory_is_shared", read_only=True,
                                             help_text="The unit's memory is shared with the other pods on the GPU "
                                                       "(time-sliced): no limit per pod.")
    memory_isolated = serializers.SerializerMethodField(
        help_text="Each pod's GPU memory is its own or limited (whole GPU, MIG, MPS); false when time-sliced.")
    training = serializers.BooleanField(read_only=True, help_text="Whether training runs may use it (shared flavors: "
                                                                  "one worker, one unit per pod).")
    one_team_per_gpu = serializers.SerializerMethodField(
        help_text="MPS: pods of different teams are never placed on one node's MPS GPUs.")
    price_per_hour = serializers.SerializerMethodField(help_text=FLAVOR_PRICE_HELP)
    spot_price_per_hour = serializers.SerializerMethodField()
    price_range = serializers.SerializerMethodField(
        help_text="The lowest and highest on-demand price of a unit-hour across the clusters that offer the flavor.")
    cluster = serializers.SerializerMethodField(
        help_text="The cluster price_per_hour is that of: where one on-demand unit would be placed now (null: none can take it now).")
    currency = serializers.SerializerMethodField()

    class Meta:
        model = GpuFlavor
        fields = ["name", "resource_name", "gpu_model", "mig_profile", "gpu_memory_gb", "gpu_fraction",
                  "max_units_per_node", "price_per_hour", "spot_price_per_hour", "price_range", "cluster",
                  "currency", "description", "sharing", "replicas", "isolation", "memory_per_unit_gb",
                  "memory_shared", "memory_isolated", "training", "one_team_per_gpu"]

    def _quote(self, flavor: GpuFlavor, spot: bool = False) -> Quote:
        return self.context.setdefault("price_book", PriceBook()).quote(flavor, spot)

    def get_mig_profile(self, flavor: GpuFlavor) -> str | None:
        return flavor.mig_profile or None

    def get_memory_isolated(self, flavor: GpuFlavor) -> bool:
        return not flavor.memory_is_shared

    def get_one_team_per_gpu(self, flavor: GpuFlavor) -> bool:
        return flavor.to_spec().one_team_per_gpu  # the one rule: set, and MPS

    @extend_schema_field(serializers.DecimalField(max_digits=12, decimal_places=4, help_text=FLAVOR_PRICE_HELP))
    def get_price_per_hour(self, flavor: GpuFlavor) -> str:
        return _amount(self._quote(flavor).price)

    @extend_schema_field(serializers.DecimalField(
        max_digits=12, decimal_places=4, help_text="The same for spot work (on the cluster spot work would go to now)."))
    def get_spot_price_per_hour(self, flavor: GpuFlavor) -> str:
        return _amount(self._quote(flavor, True).price)

    @extend_schema_field(PriceRangeSerializer)
    def get_price_range(self, flavor: GpuFlavor) -> dict:
        quote = self._quote(flavor)
        return {"min": _amount(quote.low), "max": _amount(quote.high)}

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_cluster(self, flavor: GpuFlavor) -> str | None:
        """The cluster one-unit on-demand work would go to now (null when none can take it now)."""
        return self._quote(flavor).cluster or None

    def get_currency(self, flavor: GpuFlavor) -> str:
        return settings.SLIPWAY_CURRENCY


class QuotaUsageSerializer(serializers.Serializer):
    flavor = serializers.CharField()
    limit = serializers.IntegerField()
    in_use = serializers.IntegerField()
    queued = serializers.IntegerField()
    free = serializers.IntegerField()
    borrowed = serializers.IntegerField(help_text="Units in use above the limit, lent by the team's cohort.")
    borrowable = serializers.IntegerField(help_text="What the team's cohort could lend it now (0 outside a cohort).")


class BudgetSerializer(serializers.Serializer):
    monthly_limit = serializers.DecimalField(max_digits=12, decimal_places=2, rounding=MONEY_ROUNDING, allow_null=True)
    spent_month = serializers.DecimalField(max_digits=12, decimal_places=2, rounding=MONEY_ROUNDING)
    currency = serializers.CharField()
    alert_threshold_pct = serializers.IntegerField(allow_null=True)
    alert = serializers.BooleanField(help_text="The month's spend crossed the alert threshold.")
    committed = serializers.DecimalField(max_digits=12, decimal_places=2, rounding=MONEY_ROUNDING,
                                         help_text="Estimated cost still to come this month from admitted work: "
                                                   "to its runtime limit, or without one to the month's end.")
    burn_per_hour = serializers.DecimalField(max_digits=12, decimal_places=4, help_text="At what runs now.")
    projected_month_end = serializers.DecimalField(max_digits=14, decimal_places=2, rounding=MONEY_ROUNDING)
    runs_out_at = serializers.DateTimeField(allow_null=True)


class TeamUsageSerializer(serializers.Serializer):
    quotas = QuotaUsageSerializer(many=True)
    budget = BudgetSerializer()


class UsageRowSerializer(serializers.Serializer):
    group = serializers.CharField(help_text=(
        "The day, flavor name, username, team slug, workload ref (run:13) or workload kind (the refs' prefix: run)."))
    # By workload only (absent otherwise): what the workload is.
    name = serializers.CharField(required=False, help_text="By workload: its name.")
    kind = serializers.CharField(required=False, help_text="By workload: its kind's noun (run, endpoint, workspace).")
    team = serializers.CharField(required=False, help_text="By workload: its team's slug.")
    user = serializers.CharField(required=False, help_text="By workload: who started it.")
    flavor = serializers.CharField(required=False, help_text="By workload: its GPU flavor.")
    label = serializers.CharField(required=False, help_text=(
        'By workload: what people call it, as every message says it: "run bert (#13) of team nlp".'))
    gpu_hours = serializers.DecimalField(
        max_digits=14, decimal_places=4,
        help_text="Physical GPU-hours (units × gpu_fraction × hours): the same figure as physical_gpu_hours, its "
                  "first name.")
    unit_hours = serializers.DecimalField(
        max_digits=14, decimal_places=4,
        help_text="Unit-hours: the flavor's units held × hours, what prices are per (a time-sliced ×4 unit for an "
                  "hour is 1 unit-hour and 0.25 physical GPU-hours).")
    physical_gpu_hours = serializers.DecimalField(
        max_digits=14, decimal_places=4,
        help_text="Physical GPU-hours: units × gpu_fraction × hours, comparable across whole, MIG and shared flavors.")
    # Money in cents, rounded as everywhere people read it (core.formatting).
    cost = serializers.DecimalField(max_digits=12, decimal_places=2, rounding=MONEY_ROUNDING)
    idle_gpu_hours = serializers.DecimalField(
        max_digits=14, decimal_places=4, help_text="The part of gpu_hours whose GPU utilization stayed under the idle threshold.")
    idle_cost = serializers.DecimalField(max_digits=12, decimal_places=2, rounding=MONEY_ROUNDING,
                                        help_text="What the idle GPU-hours cost.")
    borrowed_gpu_hours = serializers.DecimalField(
        max_digits=14, decimal_places=4,
        help_text="The part of gpu_hours that ran on units borrowed from the team's cohort.")
    preempted_gpu_hours = serializers.DecimalField(
        max_digits=14, decimal_places=4,
        help_text="GPU-hours of work lost to preemption in the period (since the last checkpoint or the start).")
    preempted_cost = serializers.DecimalField(max_digits=12, decimal_places=2, rounding=MONEY_ROUNDING,
                                             help_text="What the work lost to preemption had cost.")
    currency = serializers.CharField()


class UsageReportPageSerializer(serializers.Serializer):
    """A page of the cost report (the schema of ``GET /usage/``'s JSON body)."""

    count = serializers.IntegerField()
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = UsageRowSerializer(many=True)


#: Outside these years a bound is moved to the nearer one (no usage lies there): far enough from
#: the calendar's ends that "to the end of the day" and time zones still fit in a datetime
#: (9999-12-31 + 1 day overflows, and so does 0001-01-01T00:00+05:00 in UTC).
MIN_YEAR, MAX_YEAR = 1970, 9998


def _moment(value, end: bool) -> datetime:
    """A date means its whole day: ``since`` from its midnight, ``until`` to the next midnight."""
    if isinstance(value, datetime):
        # In UTC: Python accepts offsets up to ±23:59, PostgreSQL only up to ±15:59.
        return value.astimezone(UTC) if timezone.is_aware(value) else timezone.make_aware(value)
    moment = timezone.make_aware(datetime.combine(value, time.min))
    return moment + timezone.timedelta(days=1) if end else moment


#: What ``since`` and ``until`` accept, for the OpenAPI schema: an RFC 3339 full-date or date-time.
DATE_OR_DATE_TIME = {"anyOf": [{"type": "string", "format": "date"}, {"type": "string", "format": "date-time"}]}


@extend_schema_field(DATE_OR_DATE_TIME)
class DateOrDateTimeField(serializers.Field):
    """An ISO date (``2026-05-01``) or date-time (``2026-05-01T12:00:00Z``, RFC 3339's lower-case too)."""

    def to_internal_value(self, data):
        text = str(data)
        # RFC 3339 allows "t" and "z" in lower case; Python's parser only the upper.
        text = text[:10] + text[10:].upper() if len(text) > 10 else text
        try:
            value = datetime.fromisoformat(text) if "T" in text or " " in text else date.fromisoformat(text)
        except ValueError:
            raise serializers.ValidationError("Use an ISO date (2026-05-01) or date-time.") from None
        if value.year < MIN_YEAR:
            return date(MIN_YEAR, 1, 1)
        if value.year > MAX_YEAR:
            return date(MAX_YEAR, 12, 31)
        return value


class UsageQuerySerializer(serializers.Serializer):
    team = serializers.SlugField(required=False)
    since = DateOrDateTimeField(required=False)
    until = DateOrDateTimeField(required=False)
    group_by = serializers.ChoiceField(choices=GROUP_BY, default="day")
    # Read by the view itself: the project turns DRF's URL format override off.
    format = serializers.ChoiceField(choices=("json", "csv"), default="json")

    def validate(self, attrs):
        return _period(attrs)


def _period(attrs: dict) -> dict:
    """``since`` and ``until`` as moments (default: this month so far); a 400 unless ``until`` is after ``since``."""
    attrs["since"] = _moment(attrs["since"], end=False) if "since" in attrs else month_start()
    attrs["until"] = _moment(attrs["until"], end=True) if "until" in attrs else timezone.now()
    if attrs["until"] <= attrs["since"]:
        raise serializers.ValidationError({"until": ["Must be after since."]})
    return attrs


class IdlePoolsQuerySerializer(serializers.Serializer):
    """The period of ``GET /usage/idle-pools/``: as the usage report's (default: this month so far)."""

    since = DateOrDateTimeField(required=False)
    until = DateOrDateTimeField(required=False)

    def validate(self, attrs):
        return _period(attrs)


class PoolIdleSerializer(serializers.Serializer):
    cluster = serializers.CharField()
    flavor = serializers.CharField()
    unit_hours = serializers.DecimalField(max_digits=14, decimal_places=4,
                                          help_text="Free units of its ready nodes × hours.")
    gpu_hours = serializers.DecimalField(max_digits=14, decimal_places=4,
                                         help_text="Physical GPU-hours: unit_hours × the flavor's gpu_fraction.")
    cost = serializers.DecimalField(max_digits=12, decimal_places=2, rounding=MONEY_ROUNDING,
                                    help_text="unit_hours at the cluster's price of the flavor.")


class IdlePoolsSerializer(serializers.Serializer):
    """Idle pool capacity over a period (billing.pool_idle.IdlePools): per elastic pool, the costliest first."""

    pools = PoolIdleSerializer(many=True, source="rows")
    gpu_hours = serializers.DecimalField(max_digits=14, decimal_places=4)
    cost = serializers.DecimalField(max_digits=12, decimal_places=2, rounding=MONEY_ROUNDING)
    currency = serializers.CharField()


# -- quota as code (docs/api.md "Quota as code") ------------------------------------------------------------
#
# The body fields are strict about JSON types: a whole number is a JSON integer, a flag a JSON
# boolean, a weight a JSON number ("3", 1 or "2.5" are 400s, not read as something else), as the
# schema says.

#: The largest value a positive integer column holds (PostgreSQL's integer): larger is a 400, not a 500.
MAX_INTEGER = 2**31 - 1


class StrictBodySerializer(serializers.Serializer):
    """A body every key of which is one of its fields: another (a misspelt ``borowing_limit``) is a 400, under
    ``non_field_errors`` as the API's other bodies answer one ("Unknown field(s): …", docs/api.md).

    DRF leaves unknown keys out, and these bodies are whole (a PUT) or partial (a PATCH): a misspelt field
    silently took its default (a cohort's ``min_runtime_minute`` reset its ``min_runtime_minutes`` to 10, a
    quota's ``borowing_limit`` made its borrowing unlimited) or changed nothing, and answered 200. Reported with
    the other fields' errors, all at once.
    """

    def to_internal_value(self, data):
        unknown = sorted(str(key)[:100] for key in data if key not in self.fields) if isinstance(data, dict) else []
        words = [f"Unknown field(s): {', '.join(unknown)[:200]}; this body takes {', '.join(self.fields)}."]
        errors = {api_settings.NON_FIELD_ERRORS_KEY: words} if unknown else {}
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if errors and isinstance(exc.detail, dict):
                detail = dict(exc.detail)
                detail[api_settings.NON_FIELD_ERRORS_KEY] = [*words, *detail.get(api_settings.NON_FIELD_ERRORS_KEY, [])]
                raise serializers.ValidationError(detail) from exc
            raise
        if errors:
            raise serializers.ValidationError(errors)
        return value


class StrictBodySchema(OpenApiSerializerExtension):
    """Such a body in the schema: no properties but its own (``additionalProperties: false``), as it is checked."""

    target_class = StrictBodySerializer
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        return {**auto_schema._map_basic_serializer(self.target, direction), "additionalProperties": False}


class WholeNumberField(serializers.IntegerField):
    def __init__(self, **kwargs):
        kwargs.setdefault("min_value", 0)
        kwargs.setdefault("max_value", MAX_INTEGER)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class FlagField(serializers.BooleanField):
    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class WeightField(serializers.DecimalField):
    """A JSON number from 0 to under 100,000 (``TeamSharing.fair_weight``), shown as a number.

    Kept to three decimals, the rest cut (a JSON number such as 2.0000000001 is a valid weight
    to the schema, which has no way to say "three decimals" of a binary float). A weight above 0
    is at least 0.001: cut to three decimals, 1.5e-7 became 0, which means "borrows last".
    """

    LIMIT = 100_000
    default_error_messages = {"too_small": "A weight above 0 is at least 0.001 (0: the team borrows last)."}

    def __init__(self, **kwargs):
        # No max_value: max_digits alone makes the schema say "under 100,000" (exclusive).
        super().__init__(max_digits=8, decimal_places=3, min_value=Decimal(0), coerce_to_string=False, **kwargs)

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        if isinstance(data, float) and 0 <= data < self.LIMIT:  # NaN and the infinities are not
            cut = Decimal(repr(data)).quantize(Decimal("0.001"), rounding=ROUND_DOWN)
            if data > 0 and cut == 0:
                self.fail("too_small")
            data = cut
        return super().to_internal_value(data)


class NameField(serializers.CharField):
    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class CohortSerializer(serializers.ModelSerializer):
    """A cohort as the API shows it: its teams by slug."""

    teams = serializers.SerializerMethodField()

    class Meta:
        model = Cohort
        fields = ["name", "teams", "reclaim", "min_runtime_minutes", "preemption_delay_seconds"]

    def get_teams(self, cohort: Cohort) -> list[str]:
        # From the prefetched members (one query for a whole page).
        return sorted(sharing.team.slug for sharing in cohort.members.all())


class CohortInputSerializer(StrictBodySerializer):
    """The body of ``PUT /cohorts/{name}/``: the whole cohort (a field left out takes its default)."""

    name = NameField(max_length=63, validators=[FLAVOR_NAME], required=False,
                     help_text="The name in the URL (may be left out; another name is a 400).")
    teams = serializers.ListField(child=NameField(max_length=40), default=list, max_length=1000,
                                  help_text="Its members' slugs, exactly: a team listed here leaves its former "
                                            "cohort; a member left out leaves this one.")
    reclaim = serializers.ChoiceField(choices=Cohort.Reclaim.choices, default=Cohort.Reclaim.ANY)
    min_runtime_minutes = WholeNumberField(default=10, help_text="Borrowed work younger than this is not reclaimed.")
    preemption_delay_seconds = WholeNumberField(
        default=30, help_text="How long a team waits for capacity that frees itself before reclaiming.")

    def validate_teams(self, slugs: list[str]) -> list[Team]:
        unique = list(dict.fromkeys(slugs))
        teams = {team.slug: team for team in Team.objects.filter(slug__in=unique)}
        unknown = [slug for slug in unique if slug not in teams]
        if unknown:
            raise serializers.ValidationError([f"Unknown team {slug!r}." for slug in unknown])
        return [teams[slug] for slug in unique]


class QuotaRowSerializer(serializers.Serializer):
    flavor = serializers.CharField()
    limit = serializers.IntegerField(allow_null=True, help_text="Its nominal quota (null: no quota for the flavor).")
    borrowing_limit = serializers.IntegerField(
        allow_null=True, help_text="In a cohort: units it may hold above limit (null: as many as the cohort lends).")
    lending_limit = serializers.IntegerField(
        allow_null=True, help_text="In a cohort: units of its unused quota others may borrow (null: all of it).")
    in_use = serializers.IntegerField()
    borrowed = serializers.IntegerField(help_text="Units in use above the limit, lent by the team's cohort.")
    queued = serializers.IntegerField()


class QuotaInputSerializer(StrictBodySerializer):
    """The body of ``PUT /teams/{slug}/quotas/{flavor}/``: the whole quota (limit null removes it)."""

    limit = WholeNumberField(allow_null=True, help_text="Units the team may use at once; null removes the quota.")
    borrowing_limit = WholeNumberField(allow_null=True, default=None,
                                       help_text="Units it may borrow above limit in its cohort (null: any).")
    lending_limit = WholeNumberField(allow_null=True, default=None,
                                     help_text="Units of its unused quota its cohort may borrow (null: all of it; "
                                               "more than limit is the same).")

    def validate(self, attrs):
        """A quota removed keeps no limits: ``{"limit": null, "borrowing_limit": 3}`` dropped the 3 and answered 200.

        A team without a quota of a flavor borrows as much as its cohort lends; "no quota of its own, at
        most 3 borrowed" is ``limit`` 0 with ``borrowing_limit`` 3, which the error says.
        """
        if attrs["limit"] is None:
            errors = {name: [f"A quota removed (limit null) keeps no {name}: to keep it, give a limit "
                             f"(0: nothing of the team's own)."]
                      for name in ("borrowing_limit", "lending_limit") if attrs.get(name) is not None}
            if errors:
                raise serializers.ValidationError(errors)
        return attrs


class TeamDetailSerializer(TeamSerializer):
    """``GET /teams/{slug}/``: the team as listed, with its place in quota sharing."""

    role = serializers.SerializerMethodField(help_text="The caller's role (null: platform staff outside the team).")
    fair_weight = WeightField(source="sharing_row.fair_weight", read_only=True,
                              help_text="Fair-share weight (0: borrows last).")
    within_team_preemption = serializers.BooleanField(
        source="sharing_row.within_team_preemption", read_only=True,
        help_text="A high-priority run may preempt the team's own low-priority work when it is full.")
    cohort = serializers.CharField(source="sharing_row.cohort.name", read_only=True, allow_null=True,
                                   help_text="Its cohort's name (null: none).")

    class Meta(TeamSerializer.Meta):
        fields = [*TeamSerializer.Meta.fields, "fair_weight", "within_team_preemption", "cohort"]

    def get_role(self, team) -> str | None:
        return team.caller_role


class TeamSharingInputSerializer(StrictBodySerializer):
    """The body of ``PATCH /teams/{slug}/`` (platform staff): either setting, or both."""

    fair_weight = WeightField(required=False, help_text="Fair-share weight, 0 or more (0: borrows last).")
    within_team_preemption = FlagField(required=False)


class ClusterFlavorSerializer(serializers.Serializer):
    """What one cluster offers of one flavor, as its nodes last reported."""

    flavor = serializers.CharField()
    capacity = serializers.IntegerField(help_text="Units its nodes offer (allocatable), with those its elastic pools "
                                                  "may still add (what their max allows).")
    free = serializers.IntegerField(help_text="Units of its ready nodes not requested by running pods.")
    price_per_hour = serializers.DecimalField(max_digits=12, decimal_places=4)


class TrainingRuntimeSerializer(serializers.Serializer):
    """A ClusterTrainingRuntime a Trainer v2 cluster offers."""

    name = serializers.CharField()
    framework = serializers.CharField(help_text="pytorch, deepspeed, jax, mpi, xgboost …; empty: it names none.")


class ProvisioningSecondsSerializer(serializers.Serializer):
    median = serializers.IntegerField(help_text="Seconds a node of the pool takes to provision, median.")
    tail = serializers.IntegerField(help_text="The same, 90th percentile.")
    observed = serializers.IntegerField(help_text="Provisioning times observed (fewer than 3: the defaults above).")


class PoolSerializer(serializers.Serializer):
    """An elastic pool as ``GET /clusters/`` shows it (:func:`fleet.pools.answer`; docs/api.md "Clusters")."""

    flavor = serializers.CharField()
    min = serializers.IntegerField(help_text="Nodes it keeps even when idle.")
    max = serializers.IntegerField(help_text="The most nodes it may have (what quota follows).")
    mode = serializers.ChoiceField(choices=MODES, help_text="atomic: a workload's nodes all at once (a "
                                   "ProvisioningRequest) or none; any: node by node.")
    nodes_ready = serializers.IntegerField(help_text="Its nodes that run pods now, as last read.")
    nodes_provisioning = serializers.IntegerField(help_text="Its nodes being provisioned (up, not Ready yet).")
    unneeded_minutes = serializers.IntegerField(help_text="Minutes a node stands idle before the pool removes it.")
    autoscaler_limit = serializers.IntegerField(
        allow_null=True, help_text="Units the autoscaler's own pool may hold (Karpenter NodePool limits); null: none "
                                   "found. A pool never offers more whole nodes than it allows.")
    provisioning_seconds = ProvisioningSecondsSerializer(help_text="What start estimates take a node to need.")


class ClusterSerializer(serializers.Serializer):
    """A cluster as the staff API shows it (docs/api.md "Clusters")."""

    name = serializers.CharField()
    state = serializers.ChoiceField(choices=["ready", "degraded", "lost", "draining"])
    last_seen = serializers.DateTimeField(allow_null=True)
    region = serializers.CharField()
    labels = serializers.DictField(child=serializers.CharField())
    last_error = serializers.CharField(help_text="Why its last observation failed; empty when it answered.")
    flavors = ClusterFlavorSerializer(many=True)
    # Its training API (docs/training.md).
    training_api = serializers.ChoiceField(
        choices=TRAINING_APIS, help_text="The training API it is taken to have: the override, else what discovery "
                                         "found (pytorchjob before its first discovery).")
    training_api_discovered = serializers.ChoiceField(choices=TRAINING_APIS, allow_null=True,
                                                      help_text="What API discovery found; null: not checked yet.")
    training_api_override = serializers.ChoiceField(choices=TRAINING_APIS, allow_null=True,
                                                    help_text="Staff's override of discovery; null: none.")
    frameworks = serializers.ListField(child=serializers.CharField(),
                                       help_text="The frameworks it offers: its runtimes' on Trainer v2, pytorch on v1.")
    training_runtimes = TrainingRuntimeSerializer(many=True, help_text="Its ClusterTrainingRuntimes (Trainer v2).")
    training_checked_at = serializers.DateTimeField(allow_null=True, help_text="When discovery last asked it.")
    training_error = serializers.CharField(help_text="Why the last discovery failed (what it found before is kept).")
    pools = PoolSerializer(many=True, help_text="Its elastic node pools (docs/pools.md); empty: a fixed inventory.")


class PoolInputSerializer(StrictBodySerializer):
    """One pool in ``PATCH /clusters/{name}/``'s ``pools``: create or change the cluster's pool of ``flavor``, or
    remove it (``remove``: its nodes are a fixed inventory again). A flavor no node of the cluster offers yet is
    accepted: a pool may start at 0 nodes (its autoscaler builds the first one for the first workload)."""

    flavor = NameField(max_length=100, help_text="The flavor whose nodes the pool adds and removes.")
    min = WholeNumberField(required=False, max_value=MAX_NODES,
                           help_text="Nodes it keeps even when idle; at most max (a new pool: 0).")
    max = WholeNumberField(required=False, min_value=1, max_value=MAX_NODES,
                           help_text="The most nodes it may have (what quota follows); required unless remove.")
    mode = serializers.ChoiceField(choices=MODES, required=False,
                                   help_text="atomic (a new pool's) or any.")
    unneeded_minutes = WholeNumberField(required=False, min_value=1, max_value=24 * 60, help_text=(
        f"Minutes a node stands idle before the pool removes it, 1 to 1440 (a new pool: {DEFAULT_UNNEEDED_MINUTES})."))
    remove = FlagField(required=False, default=False, help_text="true: remove the pool (no other field but flavor).")

    def validate_flavor(self, name: str) -> GpuFlavor:
        flavor = GpuFlavor.objects.filter(name=name).first()
        if flavor is None:
            raise serializers.ValidationError(unknown_flavor(name))
        return flavor

    def validate(self, attrs: dict) -> dict:
        given = {name for name in ("min", "max", "mode", "unneeded_minutes") if name in attrs}
        if attrs.get("remove"):
            if given:
                raise serializers.ValidationError(
                    {"remove": [f"A pool that is removed takes no {', '.join(sorted(given))}."]})
            return attrs
        if "max" not in attrs:
            raise serializers.ValidationError({"max": ["Required: the most nodes the pool may have."]})
        # A min not given is the pool's own (a new pool's: 0): a lower max must not leave it above.
        cluster = self.context.get("cluster")
        pool = NodePool.objects.filter(cluster=cluster, flavor=attrs["flavor"]).first() if cluster else None
        least = attrs.get("min", pool.min_nodes if pool else 0)
        if least > attrs["max"]:
            words = "The minimum" if "min" in attrs else "The pool's minimum"
            raise serializers.ValidationError(
                {"min": [f"{words} ({least}) is more than the maximum ({attrs['max']})."]})
        return attrs


class ClusterInputSerializer(StrictBodySerializer):
    """The body of ``PATCH /clusters/{name}/``: drain it or make it ready again, override its training API, change
    its elastic pools; any of them."""

    state = serializers.ChoiceField(choices=["draining", "ready"], required=False,
                                    help_text="draining: no new placements, running work finishes; ready: placeable.")
    training_api_override = serializers.ChoiceField(
        choices=TRAINING_APIS, required=False, allow_null=True,
        help_text="Take it to have this training API whatever discovery finds; null: discovery's again.")
    pools = PoolInputSerializer(many=True, required=False, help_text=(
        "Pools to create, change or remove, each by its flavor; pools not named are left as they are."))

    def validate_pools(self, items: list[dict]) -> list[dict]:
        seen: set[str] = set()
        for index, item in enumerate(items):
            if item["flavor"].name in seen:
                raise serializers.ValidationError({index: {"flavor": [
                    f"{item['flavor'].name} is named twice; name each pool once."]}})
            seen.add(item["flavor"].name)
        return items

    def to_internal_value(self, data):
        """Errors of a pool under ``pools[i].<field>`` (as the metrics API names a point's), not nested."""
        try:
            return super().to_internal_value(data)
        except serializers.ValidationError as exc:
            raise serializers.ValidationError(flat_errors(exc.detail)) from exc


def flat_errors(detail, prefix: str = "") -> dict:
    """``{"pools": {1: {"min": [...]}}}`` (a list serializer's errors, by index) as ``{"pools[1].min": [...]}``;
    other fields' errors as they are."""
    if not isinstance(detail, dict):
        return {prefix: detail}
    flat: dict = {}
    for key, value in detail.items():
        if isinstance(key, int):
            name = f"{prefix}[{key}]"
        elif prefix:  # a nested object's own errors are its field's
            name = prefix if key == api_settings.NON_FIELD_ERRORS_KEY else f"{prefix}.{key}"
        else:
            name = str(key)
        flat.update(flat_errors(value, name))
    return flat

"""Inference endpoints: a workload kind (see :mod:`workloads`; the words as docs/glossary.md defines them),
and their scaling log.

An endpoint's quota has two parts. Its **minimum** (``min_replicas``, at least one replica's
units so a scaled-to-zero endpoint can wake without waiting) is reserved at admission and
guaranteed. Above it, **burst** replicas up to ``max_replicas`` are granted while it runs,
one at a time, from the team's free quota and budget, and reclaimed when demand falls or
queued work of the team needs them. ``replica_ceiling`` is what is granted now: the
ScaledObject's ``maxReplicaCount``, which Slipway owns.

Two histories sit beside an endpoint. The **scaling log** (:class:`ScalingEvent`) holds
Slipway's decisions about the ceiling (admitted, burst granted, capped, reclaimed, released,
sizes changed). The **replica samples** (:class:`ReplicaSample`) hold what was observed —
ready, desired and the ceiling — one row each time one of them changes, so an endpoint that
stays as it is writes nothing; the replicas chart is drawn from them.
"""

from __future__ import annotations

from decimal import Decimal
from urllib.parse import quote

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.urls import reverse

from inference.constants import (
    ACTIVE_STATES,
    CANDIDATE_HOLDING_STATES,
    FINAL_STATES,
    HOLDING_STATES,
    REF_PREFIX,
    EndpointState,
    RevisionState,
    Rollout,
    ScalingDecision,
)
from inference.specs import (
    DEFAULT_PORT,
    DEFAULT_READINESS_PATH,
    DEFAULT_SCALE_DOWN_DELAY_SECONDS,
    DEFAULT_STARTUP_TIMEOUT_SECONDS,
)
from sandbox.engine import served_model
from workloads.models import Workload, detail_link


def external_url(team_slug: str, name: str, gateway: str = "") -> str:
    """An endpoint's external URL: ``{SLIPWAY_GATEWAY_URL}/{team}/{endpoint}`` (the one rule; the gateway
    routes the same path, and passes whatever follows it to the engine untouched), or under another
    ``gateway`` base. Team slugs and endpoint names are DNS labels; quoting keeps the URL well formed
    whatever a row holds."""
    base = (gateway or settings.SLIPWAY_GATEWAY_URL).rstrip("/")
    return f"{base}/{quote(team_slug, safe='')}/{quote(name, safe='')}"


class InferenceEndpoint(Workload):
    KIND_PREFIX = REF_PREFIX
    FINAL_STATES = FINAL_STATES
    HOLDING_STATES = HOLDING_STATES
    ACTIVE_STATES = ACTIVE_STATES
    STATES = EndpointState
    INITIAL_STATE = EndpointState.QUEUED

    id = models.BigAutoField(primary_key=True)  # the number its refs and API ids carry
    workload = detail_link()

    # What was submitted (docs/api.md field names), beyond the shared name, flavor and spot.
    image = models.CharField(max_length=300)
    command = models.JSONField(default=list, blank=True)
    args = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    port = models.PositiveIntegerField(default=DEFAULT_PORT)
    gpus_per_replica = models.PositiveIntegerField(default=1)
    min_replicas = models.PositiveIntegerField(default=1)
    max_replicas = models.PositiveIntegerField(default=1)
    autoscale = models.JSONField(default=dict, blank=True, help_text='{"metric", "target", "engine", "query"}')
    scale_down_delay_seconds = models.PositiveIntegerField(default=DEFAULT_SCALE_DOWN_DELAY_SECONDS)
    readiness_path = models.CharField(max_length=200, default=DEFAULT_READINESS_PATH)
    startup_timeout_seconds = models.PositiveIntegerField(default=DEFAULT_STARTUP_TIMEOUT_SECONDS)

    # What the cluster shows (updated by the reconciler) and what Slipway granted.
    replicas = models.PositiveIntegerField(default=0, help_text="Ready replicas.")
    desired_replicas = models.PositiveIntegerField(default=0, help_text="What the autoscaler wants.")
    replica_ceiling = models.PositiveIntegerField(default=0, help_text="Granted maximum: the minimum plus burst.")
    #: Since when the autoscaler has wanted fewer replicas than the ceiling (scale-down delay).
    demand_below_ceiling_since = models.DateTimeField(null=True, blank=True)


    def get_absolute_url(self) -> str:
        return reverse("inference:endpoint-detail", args=[self.pk])

    @property
    def base_replicas(self) -> int:
        """Replicas whose units are guaranteed: the minimum, and at least one to wake from zero."""
        return max(self.min_replicas, 1)

    @property
    def placement_shape(self) -> tuple[int, int]:
        """Its guaranteed replicas (at least one, to wake from zero), as admission reserves them."""
        return self.base_replicas * self.gpus_per_replica, self.gpus_per_replica

    @property
    def ceiling(self) -> int:
        """The granted maximum of replicas: the ceiling once burst moved it, else the guaranteed base.

        The one rule: the page, the ScaledObject's ``maxReplicaCount``, burst scaling and the
        "burst now" words all read it (``replica_ceiling`` is 0 until the first move).
        """
        return self.replica_ceiling or self.base_replicas

    @property
    def ceiling_units(self) -> int:
        """GPU units of the granted ceiling: the most the endpoint is billed for at any moment."""
        return self.ceiling * self.gpus_per_replica

    def relock(self) -> bool:
        """Take the endpoint's sizes, ceiling and scale-down clock and delay again from its row, locked; False once it
        holds no quota.

        The caller holds the team's admission lock, under which a PATCH moves the sizes and the ceiling and an
        end releases the hold. The reconcile cycle read its copy before it asked the cluster, so a move of
        units decided on that copy could put the ceiling below a minimum raised meanwhile, above a maximum
        lowered meanwhile, or resize a hold the endpoint's end released: each such move reads the row again
        first and is decided on it (an ended endpoint has nothing left to move). The state is only read:
        the copy's state is what the cycle's own conditional moves are made on.
        """
        row = (type(self).objects.select_for_update().filter(pk=self.pk)
               .values_list("state", "min_replicas", "max_replicas", "replica_ceiling", "demand_below_ceiling_since",
                            "scale_down_delay_seconds").first())
        if row is None:
            return False
        (state, self.min_replicas, self.max_replicas, self.replica_ceiling, self.demand_below_ceiling_since,
         self.scale_down_delay_seconds) = row
        return state in self.HOLDING_STATES

    @property
    def url(self) -> str:
        """Its external URL, through the gateway: what callers use (API ``url``, the page, the CLI)."""
        return external_url(self.team.slug, self.name)

    @property
    def internal_url(self) -> str:
        """The in-cluster address of the endpoint's Service (API ``internal_url``): the gateway's upstream,
        which only the gateway's pods may reach on a real cluster (the team's endpoint NetworkPolicy)."""
        return f"http://{self.object_name}.{self.namespace}.svc.cluster.local"

    @property
    def served_model(self) -> str:
        """The model name its engine serves, what a request's ``model`` must say: the engine plan's rule
        (:func:`sandbox.engine.served_model`: ``SLIPWAY_SIM_MODEL``, else ``--served-model-name`` or
        ``--model`` in its args, else its name), so that the page's snippets and the engine agree."""
        return served_model({k: str(v) for k, v in (self.env or {}).items()}, [str(a) for a in self.args or []],
                            self.name)

    @property
    def cost_per_hour_now(self) -> Decimal:
        """What it costs per hour at the units running now: ready replicas and those still loading
        (both hold their GPUs). The API's ``cost_per_hour_now`` (docs/glossary.md "cost per hour")."""
        return self.cost_per_hour_at(self.open_units)

    @property
    def cost_per_hour_range(self) -> tuple[Decimal, Decimal]:
        """What it costs per hour at its minimum and at its maximum."""
        return (self.cost_per_hour_at(self.min_replicas * self.gpus_per_replica),
                self.cost_per_hour_at(self.max_replicas * self.gpus_per_replica))


class ScalingEvent(models.Model):
    """One scaling decision of an endpoint (docs/api.md ``scaling/``), newest first."""

    endpoint = models.ForeignKey(InferenceEndpoint, on_delete=models.CASCADE, related_name="scaling_events")
    at = models.DateTimeField(db_index=True)
    replicas = models.PositiveIntegerField()
    desired_replicas = models.PositiveIntegerField()
    replica_ceiling = models.PositiveIntegerField()
    metric_value = models.FloatField(null=True, blank=True)
    decision = models.CharField(max_length=20, choices=ScalingDecision.choices)
    reason = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-at", "-pk"]
        indexes = [models.Index(fields=["endpoint", "-at"])]

    def __str__(self) -> str:
        return f"{self.endpoint.ref} {self.at:%Y-%m-%d %H:%M:%S} {self.decision}"


class ReplicaSample(models.Model):
    """The replica counts of an endpoint from a moment on, until the next sample (docs/api.md ``replicas/``).

    Written when an observation (or a move of the ceiling) changes any of the three, never
    for an endpoint that stays as it is. Newest first.
    """

    endpoint = models.ForeignKey(InferenceEndpoint, on_delete=models.CASCADE, related_name="replica_samples")
    at = models.DateTimeField()
    ready = models.PositiveIntegerField()
    desired = models.PositiveIntegerField()
    ceiling = models.PositiveIntegerField()

    class Meta:
        ordering = ["-at", "-pk"]
        indexes = [models.Index(fields=["endpoint", "-at"])]

    def __str__(self) -> str:
        return f"{self.endpoint.ref} {self.at:%Y-%m-%d %H:%M:%S} {self.ready}/{self.desired}/{self.ceiling}"


# -- serving: what the gateway (``gateway/``) reads and writes; docs/serving.md ------------------------------
class EndpointRevisionQuerySet(models.QuerySet):
    def holding(self) -> EndpointRevisionQuerySet:
        """Revisions whose candidate objects are to be on the cluster: holding replicas in a holding state."""
        return self.filter(state__in=CANDIDATE_HOLDING_STATES, replicas__gt=0)


class EndpointRevision(models.Model):
    """One revision of an endpoint's serving spec: image, command, args, env (and so its model).

    Revision 1 is the spec the endpoint was created with; a change of any of those fields makes N+1
    (``inference.revisions``). ``weight`` is the percent of the endpoint's requests the gateway sends to
    it; the live revisions' weights sum to 100. ``verdict`` keeps the figures that promoted or rolled it
    back.
    """

    endpoint = models.ForeignKey(InferenceEndpoint, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    #: The serving fields of this revision: {"image", "command", "args", "env"}.
    spec = models.JSONField(default=dict)
    state = models.CharField(max_length=16, choices=RevisionState.choices, default=RevisionState.STABLE)
    rollout = models.CharField(max_length=10, choices=Rollout.choices, default=Rollout.REPLACE)
    weight = models.PositiveSmallIntegerField(default=100, help_text="Percent of the requests it serves.")
    #: Promote on its own after this many good windows (0: by hand only).
    auto_promote_windows = models.PositiveSmallIntegerField(default=0)
    good_windows = models.PositiveSmallIntegerField(default=0)
    bad_windows = models.PositiveSmallIntegerField(default=0)
    verdict = models.JSONField(default=dict, blank=True)
    #: A candidate's replicas whose units its endpoint's quota hold counts (0: not admitted yet, or released).
    replicas = models.PositiveSmallIntegerField(default=0)
    #: Why a candidate does not run yet (the quota's words), "" when nothing holds it back.
    reason = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")
    ended_at = models.DateTimeField(null=True, blank=True)

    objects = EndpointRevisionQuerySet.as_manager()

    class Meta:
        ordering = ["endpoint", "-number"]
        constraints = [models.UniqueConstraint(fields=["endpoint", "number"], name="uniq_endpoint_revision")]

    def __str__(self) -> str:
        return f"{self.endpoint.ref} r{self.number} {self.state} {self.weight}%"


class ApiKeyQuerySet(models.QuerySet):
    def usable(self, now=None) -> ApiKeyQuerySet:
        """Not revoked, not disabled, not expired."""
        from django.utils import timezone

        now = now or timezone.now()
        return self.filter(revoked_at__isnull=True, disabled_at__isnull=True).filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=now))


class ApiKey(models.Model):
    """A key clients send to the gateway (``Authorization: Bearer <key>``), for one endpoint or, with no
    endpoint, for every endpoint of its team.

    Shown once; stored as its SHA-256 digest (a key carries ≥ 190 random bits: no salt or KDF needed, as for
    API tokens). ``prefix`` is its first characters, shown to tell keys apart. ``updated_at`` moves with every
    change, so gateways refresh their cache by it (revocation reaches every replica within seconds).
    """

    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="api_keys")
    endpoint = models.ForeignKey(InferenceEndpoint, on_delete=models.CASCADE, null=True, blank=True,
                                 related_name="api_keys", help_text="Empty: valid for every endpoint of the team.")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, db_index=True)
    digest = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField(db_index=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    disabled_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    #: Per-key limits (None: no limit): requests and tokens (prompt + completion) per minute.
    requests_per_minute = models.PositiveIntegerField(null=True, blank=True)
    tokens_per_minute = models.PositiveIntegerField(null=True, blank=True)

    objects = ApiKeyQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["team", "endpoint"])]
        verbose_name = "API key"
        verbose_name_plural = "API keys"

    def __str__(self) -> str:
        return f"{self.prefix}… {self.name}"


class KeyUsage(models.Model):
    """One key's requests to one endpoint in one hour, as the gateways counted them (their increments add up).

    The hour's share of the endpoint's cost is not stored: it is computed from these rows and the ledger
    (``inference.key_costs``), so it always sums to the ledger's figure.
    """

    key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, related_name="usage")
    endpoint = models.ForeignKey(InferenceEndpoint, on_delete=models.CASCADE, related_name="key_usage")
    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="+")
    hour = models.DateTimeField()
    requests_2xx = models.PositiveBigIntegerField(default=0)
    requests_4xx = models.PositiveBigIntegerField(default=0)
    requests_5xx = models.PositiveBigIntegerField(default=0)
    #: Requests that got no answer from a replica (timeout, connection lost mid-stream), also in 5xx.
    errors = models.PositiveBigIntegerField(default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["key", "endpoint", "hour"], name="uniq_key_usage_hour")]
        indexes = [models.Index(fields=["endpoint", "hour"]), models.Index(fields=["team", "hour"])]

    def __str__(self) -> str:
        return f"key {self.key_id} on {self.endpoint_id} {self.hour:%Y-%m-%d %H}:00"


class TrafficWindow(models.Model):
    """An endpoint revision's requests over ``step`` seconds from ``start``, as the gateways measured them.

    Gateways add their counts every few seconds (one row per window, increments add up across replicas).
    Latencies are histograms over :data:`inference.histogram.BOUNDS_MS` (lists of counts), so the windows of
    several gateways and several windows merge exactly and p50/p95/p99 are read from the merge.
    """

    endpoint = models.ForeignKey(InferenceEndpoint, on_delete=models.CASCADE, related_name="traffic")
    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="+")
    revision = models.PositiveIntegerField()
    start = models.DateTimeField()
    step = models.PositiveIntegerField()
    requests = models.PositiveBigIntegerField(default=0)
    status_2xx = models.PositiveBigIntegerField(default=0)
    status_4xx = models.PositiveBigIntegerField(default=0)
    status_5xx = models.PositiveBigIntegerField(default=0)
    streams = models.PositiveBigIntegerField(default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    #: Seconds of generation summed over requests (tokens/s = output_tokens / this).
    busy_seconds = models.FloatField(default=0)
    latency = models.JSONField(default=list, help_text="Counts per inference.histogram bucket (whole request).")
    ttft = models.JSONField(default=list, help_text="Counts per bucket: time to first byte of streamed answers.")
    #: The most requests in flight at once seen by one gateway in the window.
    in_flight_max = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["endpoint", "revision", "step", "start"],
                                               name="uniq_traffic_window")]
        indexes = [models.Index(fields=["team", "endpoint", "start"])]

    def __str__(self) -> str:
        return f"traffic of {self.endpoint_id} r{self.revision} {self.start:%Y-%m-%d %H:%M:%S} ({self.step} s)"


class GatewayLoad(models.Model):
    """What one gateway process sees of one endpoint now: requests held (waiting for a replica), in flight,
    and its requests a second. Written every second or two; a row older than a few seconds is a gateway that
    went away. KEDA's stand-in in the sandbox (and the wake from zero) sums the fresh rows."""

    endpoint = models.ForeignKey(InferenceEndpoint, on_delete=models.CASCADE, related_name="gateway_load")
    gateway = models.CharField(max_length=64, help_text="The gateway process: host and pid.")
    held = models.PositiveIntegerField(default=0)
    in_flight = models.PositiveIntegerField(default=0)
    requests_per_second = models.FloatField(default=0)
    updated_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["endpoint", "gateway"], name="uniq_gateway_load")]

    def __str__(self) -> str:
        return f"{self.gateway} on {self.endpoint_id}: {self.held} held, {self.in_flight} in flight"


class ColdStart(models.Model):
    """One replica's way from nothing to its first answer: the instants of
    :data:`inference.constants.COLD_START_STAGES` it reached (``stages``: {stage: ISO instant}).

    ``from_zero`` when it woke a scaled-to-zero endpoint (then ``first_byte`` is the first answer the
    gateway sent after the wake).
    """

    endpoint = models.ForeignKey(InferenceEndpoint, on_delete=models.CASCADE, related_name="cold_starts")
    revision = models.PositiveIntegerField(default=1)
    pod = models.CharField(max_length=253)
    from_zero = models.BooleanField(default=False)
    started_at = models.DateTimeField()
    stages = models.JSONField(default=dict)
    complete = models.BooleanField(default=False)

    class Meta:
        ordering = ["-started_at", "-pk"]
        constraints = [models.UniqueConstraint(fields=["endpoint", "pod"], name="uniq_cold_start_pod")]

    def __str__(self) -> str:
        return f"cold start of {self.pod} at {self.started_at:%Y-%m-%d %H:%M:%S}"
